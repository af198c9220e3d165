"""`python -m experiments.ane_engineering.validate`: apply the gates to exported body or embedding packages.

Every evaluated argmax (decision and action) must match the FP32 golden outputs; calibrated and action probability
errors must be <= 0.02; all outputs finite; token usage unchanged; N repeated calls give identical public outputs.
Option-logit and action-logit errors are reported too. Questions too long for a bucket are listed as skipped and
unvalidated. With several packages, each bucket is validated and decisions must agree across buckets.
Embedding-kind packages are judged by the embedding gates instead (core/gates.py: no similarity between two texts
moves by more than 0.01, similarity ranking of the texts unchanged, repeated calls identical; the worst-case cosine
and max-abs bounds are reported, and gate uncompressed packages); their golden file comes from
`golden --task embeddings`. `--fixture FILE` validates on your own questions or texts: the golden must have been
made from that file (`golden --fixture FILE`).
Neural Engine headroom: with a mil backend, every op's largest |output| on the golden questions must stay at least
2x below the cliff that op faces (core/gates.py HEADROOM_MIN; the cliffs of --ane-family, pre-a16 by default: run/mil/
ane_cliffs.json), or validation fails naming the op. `--backend mil-ane` also runs with those cliffs applied, so a
cliff that fires turns into the non-finite or probability gates, and each such question records the op where it fired.
On failure the JSON says `passed: false` with the reasons and the exit status is 1 (2: refused to run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from .checkpoint import load_checkpoint
from .checkpoint.source import add_source_argument, local_source_directory
from .core import gates
from .core.arguments import integer
from .core.cli import UsageError, atomic_file, run_main
from .core.limits import MAX_CALLS, MAX_DIMENSION
from .core.staging import check_output
from .package.inputs.questions import FIXTURE_PATH, load_questions
from .run.backends import BACKEND_CHOICES, BackendError, add_ane_family_argument, backend_name
from .validation.golden import golden_path_for, load_golden


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.validate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", action="append", required=True, type=Path,
                        help="probe output directory of a body or embedding package (repeat for several buckets)")
    parser.add_argument("--length", type=integer("--length", 1, MAX_DIMENSION), action="append",
                        help="bucket(s) to validate (default: every package's length); each must have a package")
    add_source_argument(parser)
    parser.add_argument("--golden", type=Path,
                        help="golden file (default: the committed one for builtin:tiny; required for other sources)")
    parser.add_argument("--repeats", type=integer("--repeats", 0, MAX_CALLS, "each repeat is a full call"),
                        default=gates.DEFAULT_REPEATS,
                        help="repeated calls that must give identical public outputs (default "
                             f"{gates.DEFAULT_REPEATS})")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto", help="what runs the package")
    add_ane_family_argument(parser)
    parser.add_argument("--adapter", type=Path, help="LoRA adapter (safetensors) for packages exported with "
                        "--lora-rank; the golden must then be made with it merged (golden --adapter)")
    parser.add_argument("--output", required=True, type=Path, help="new JSON file (refused if it exists)")
    parser.add_argument("--fixture", type=Path,
                        help="the question file (body packages) or text file (embedding packages, sentences.json "
                             "format) the golden was made from with `golden --fixture`: validate on your own held-out "
                             "set (default: the committed fixture); a golden made from another is refused")
    return parser


def main(argv=None) -> int:
    from .run.agent import ANEAgent
    from .validation.gate_run import validate

    args = build_parser().parse_args(argv)
    try:
        args.backend = backend_name(args.backend, args.ane_family)
    except BackendError as error:
        raise UsageError(str(error)) from None
    check_output(args.output,
                 [*args.package, args.golden, args.adapter, args.fixture, local_source_directory(args.source)])
    for name, values in (("--package", [p.resolve() for p in args.package]), ("--length", args.length or [])):
        if len(set(values)) != len(values):
            raise UsageError(f"{name} is given twice with the same value; give each once")
    kinds = {read_package_kind(package) for package in args.package}
    if kinds == {"embedding"}:
        return validate_embedding_packages(args)
    if "embedding" in kinds:
        raise UsageError("validate takes either body packages or embedding packages, not both at once")
    checkpoint = load_checkpoint(args.source)
    golden_path = golden_path_for(args.source, args.golden, args.adapter)
    reference = checkpoint
    if args.adapter is not None:
        from .package.inputs.adapter import load_adapter, merge

        reference = merge(checkpoint, load_adapter(args.adapter, checkpoint.config))
    fixture = args.fixture or FIXTURE_PATH
    golden = load_golden(golden_path, reference, fixture)
    questions = load_questions(fixture)
    agent = ANEAgent(args.package, checkpoint, args.backend, adapter=args.adapter)
    lengths = sorted(set(args.length or agent.lengths))
    for length in lengths:
        if length not in agent.lengths:
            raise UsageError(f"--length {length} has no package; packages cover {agent.lengths}")
    total = len(questions) * len(lengths) + args.repeats * len(lengths)
    with tqdm(total=total, desc=f"validate ({agent.backend.describe().get('backend')})", unit="call",
              file=sys.stderr) as bar:
        report = validate(agent, golden, golden_path, lengths, args.repeats, questions, progress=bar.update,
                          evidence_dir=args.output.parent)
    with atomic_file(args.output) as temporary:
        temporary.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for length, summary in report["summary"].items():
        print(f"L{length}: {summary['passed_questions']}/{summary['evaluated']} passed, {len(summary['skipped'])} "
              f"skipped (unvalidated), max calibrated error {summary['max_calibrated_error']}, max option-logit "
              f"error {summary['max_option_logit_error']}, repeats identical: {summary['repeats']['identical']}, "
              f"minimum Neural Engine headroom {_headroom_text(summary['headroom'])}")
    print(f"passed: {report['passed']}" + ("" if report["passed"] else " -- " + "; ".join(report["reasons"][:5])))
    return 0 if report["passed"] else 1


def _headroom_text(headroom: dict) -> str:
    if not headroom["measured"]:
        return "not measured (Core ML backend)"
    if headroom["minimum_headroom"] is None:
        return "unbounded (every op output is zero)"
    return f"{headroom['minimum_headroom']:.3g}x at {headroom['op']} ({headroom['type']}, {headroom['cliff']})"


def read_package_kind(package: Path) -> str | None:
    """The kind a package's manifest declares, or None when it cannot be read (the body path then refuses it in its
    own order: the golden file first, then each package)."""
    from .package.manifest import ManifestError, read_manifest

    try:
        return read_manifest(package).get("kind")
    except (ManifestError, OSError):
        return None


def validate_embedding_packages(args) -> int:
    from .run.embedding_agent import EmbeddingAgent
    from .validation.embedding_golden import load_embedding_golden
    from .validation.embedding_run import validate_embeddings

    if args.golden is None:
        raise UsageError("--golden is required for embedding packages (make one with: golden --task embeddings)")
    if args.adapter is not None:
        raise UsageError("embedding packages take no LoRA adapter")
    checkpoint = load_checkpoint(args.source)
    golden = load_embedding_golden(args.golden, checkpoint, args.fixture)
    agent = EmbeddingAgent(args.package, checkpoint, args.backend)
    lengths = sorted(set(args.length or agent.lengths))
    for length in lengths:
        if length not in agent.lengths:
            raise UsageError(f"--length {length} has no package; packages cover {agent.lengths}")
    total = (len(golden["embeddings"]) + args.repeats) * len(lengths)
    with tqdm(total=total, desc=f"validate embeddings ({agent.backend.describe().get('backend')})", unit="call",
              file=sys.stderr) as bar:
        report = validate_embeddings(agent, golden, args.golden, lengths, args.repeats, progress=bar.update,
                                     evidence_dir=args.output.parent)
    with atomic_file(args.output) as temporary:
        temporary.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for length, summary in report["summary"].items():
        ranking = summary["ranking"] or {}
        print(f"L{length}: {summary['passed_texts']}/{summary['evaluated']} texts passed, {len(summary['skipped'])} "
              f"skipped (unvalidated), max similarity error {summary['max_similarity_error']}, min cosine "
              f"{summary['min_cosine']}, max abs error {summary['max_abs_error']}, resolved ranking pairs swapped "
              f"{ranking.get('resolved_pairs_swapped')} of {ranking.get('resolved_pairs')}, repeats identical: "
              f"{summary['repeats']['identical']}")
    print(f"passed: {report['passed']}" + ("" if report["passed"] else " -- " + "; ".join(report["reasons"][:5])))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
