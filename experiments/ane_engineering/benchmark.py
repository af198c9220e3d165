"""`python -m experiments.ane_engineering.benchmark`: time a body (or embedding) package as the reference run did.

Load and compile are timed apart from warm calls. The body alone (synthetic embeddings; component timing) and the
full predict path through the ANEAgent (tokenization to formatted output) are timed separately, each with p50,
p95, min, max and every raw timing; on macOS (Core ML, the Neural Engine) a long window of consecutive body calls
(`--long-window`, default 1000) follows the short one, reported by blocks of 100, to show a burst -> sustained
transition (a public source saw one after ~830 calls). `--long` uses a real ~1,024-token fixture input. `--vs DIR2`
runs two candidates interleaved call by call in one process and reports the per-pair ratio distribution; the two may
be the dense and the windowed attention layout of one bucket (`probe --attention`), each called with the inputs its own
package declares. On macOS `--backend auto` pairs them on the Neural Engine (Core ML, CPU_AND_NE); that pairing is
written against coremltools' documented MLModel API and has not been run by this project (no Mac here). The evidence
file records backend, machine, OS, tool versions, package and source hashes, the harness fingerprint, and the cost
model's latency floor beside the measurement. Timings are of whatever backend ran: the `mil` backend is a numpy
reference executor, not the Neural Engine. An embedding-kind package is timed the same way: the graph alone on synthetic
inputs, and the full path from text to unit embedding (evidence/benchmarking/embedding_run.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .checkpoint import load_checkpoint
from .checkpoint.source import add_source_argument, local_source_directory
from .core import reference_run
from .core.arguments import integer
from .core.cli import UsageError, atomic_file, run_main
from .core.limits import MAX_CALLS, MAX_DIMENSION
from .core.provenance import backend_record, portable_path
from .core.staging import check_output
from .run.backends import BACKEND_CHOICES, BackendError, add_ane_family_argument, backend_name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="probe (or palettize) output directory")
    parser.add_argument("--length", required=True, type=integer("--length", 1, MAX_DIMENSION),
                        help="bucket length (must match the package)")
    add_source_argument(parser)
    parser.add_argument("--long", action="store_true", help="full path on a real ~1,024-token fixture input")
    body, full = reference_run.measurement("L96-body"), reference_run.measurement("L96-full-path")
    parser.add_argument("--warmup", type=integer("--warmup", 0, MAX_CALLS, "every call is a full call"),
                        help=f"warm-up calls (default, as the reference run: {body['warmup']} "
                             f"component, {full['warmup']} full path)")
    parser.add_argument("--calls", type=integer("--calls", 1, MAX_CALLS, "every raw timing is written into the "
                                                "evidence file"),
                        help=f"timed calls (default, as the reference run: {body['calls']} "
                             f"component, {full['calls']} full path)")
    parser.add_argument("--long-window", type=integer("--long-window", 0, MAX_CALLS, "every raw timing is written "
                                                      "into the evidence file"),
                        help="consecutive body calls timed after the short window on a device backend (Core ML on "
                             "macOS), to see a burst -> sustained transition (default 1000; 0 skips)")
    parser.add_argument("--vs", type=Path,
                        help="second package of the same bucket (e.g. the other attention layout), timed "
                             "interleaved call by call")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto", help="what runs the package")
    add_ane_family_argument(parser)
    parser.add_argument("--output", required=True, type=Path, help="new JSON file (refused if it exists)")
    return parser


def main(argv=None) -> int:
    from .evidence.benchmarking.run import benchmark
    from .package.manifest import read_manifest

    args = build_parser().parse_args(argv)
    try:
        args.backend = backend_name(args.backend, args.ane_family)
    except BackendError as error:
        raise UsageError(str(error)) from None
    check_output(args.output, [args.package, args.vs, local_source_directory(args.source)])
    if args.vs is not None and args.vs.resolve() == args.package.resolve():
        raise UsageError("--vs names the --package itself; pairing a package with itself compares nothing")
    if read_manifest(args.package)["length"] != args.length:
        raise UsageError(f"--length {args.length} does not match the package's bucket")
    overrides = {k: v for k, v in (("warmup", args.warmup), ("calls", args.calls)) if v is not None}
    checkpoint = load_checkpoint(args.source)
    print(f"[benchmark] {args.package} L{args.length} ({'long input' if args.long else 'fixture input'})"
          + (f" vs {args.vs}" if args.vs else ""), file=sys.stderr, flush=True)
    if read_manifest(args.package)["kind"] == "embedding":
        from .evidence.benchmarking.embedding_run import benchmark_embedding

        if args.long or args.vs:
            raise UsageError("--long and --vs are for body packages")
        result = benchmark_embedding(checkpoint, args.package, args.backend, overrides, overrides)
    else:
        from .evidence.benchmarking.windows import LONG_WINDOW_CALLS

        calls = LONG_WINDOW_CALLS if args.long_window is None else args.long_window
        result = benchmark(checkpoint, args.package, args.backend, args.long, overrides, overrides, args.vs, calls)
    result["backend"] = backend_record(result["backend"])
    result["cost_model"] = cost_floor(args.package, args.output.parent)
    with atomic_file(args.output) as temporary:
        temporary.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    comp, full = result["component"]["timing"], result["full_path"]["timing"]
    print(f"body p50 {comp['p50_ms']:.3f} ms (p95 {comp['p95_ms']:.3f}); full path p50 {full['p50_ms']:.3f} ms "
          f"(p95 {full['p95_ms']:.3f}) on {result['backend']['backend']}; wrote {args.output}")
    window = (result.get("windows") or {}).get("long") or {}
    if window.get("ran"):
        print(f"long window: {window['calls']} calls, p50 {window['timing']['p50_ms']:.3f} ms; last/first block p50 "
              f"{window['last_over_first_block_p50']:.3f}")
    if "vs" in result:
        print(f"--vs ratio (second/first) p50: body {result['vs']['component']['ratio']['p50']:.3f}, "
              f"full path {result['vs']['full_path']['ratio']['p50']:.3f}")
    return 0


def cost_floor(package: Path, evidence_dir: Path) -> dict:
    """The cost model's latency floors for this package, to stand beside the measurement in a file written in
    `evidence_dir`."""
    from .placement.cost_model import cost_report

    report = cost_report(Path(package))
    return {**report, "package": portable_path(report["package"], evidence_dir),
            "calibrated": calibrated_prediction(report)}


def calibrated_prediction(report: dict) -> dict | None:
    """The calibrated model's body and request predictions (placement/calibration.py) on the reference run's chip, to
    set beside a measurement of a package of the reference model's dimensions (None for other models)."""
    from .placement import calibration
    from .placement.roofline import reference_model_mismatches

    if reference_model_mismatches((report.get("manifest") or {}).get("model_config")):
        return None
    chip = reference_run.chip()
    return {"label": calibration.LABEL, "chip": chip,
            "predicted_body_ms": calibration.predict_body_ms(report["cost"], chip),
            "predicted_request_ms": calibration.predict_request_ms(report["cost"], chip)}


if __name__ == "__main__":
    sys.exit(run_main(main))
