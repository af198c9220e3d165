"""`python -m experiments.ane_engineering.reproduce`: the whole chain on one source, ending in ANE_BENCHMARKS.md.

Stages: probe the body at L96, L192 and L1024 -> golden -> validate each bucket and across buckets -> palettize
sweep at L96 -> benchmarks (every bucket, the long input at L1024, FP16 vs the best passing palettized candidate
paired) -> FP16 range analysis -> ANE_BENCHMARKS.md rendered from the evidence JSON, every figure linked to the
file and hashes it came from. One progress line per stage; a failing stage stops the chain and says why.
Refuses an existing DIR; works in a staging sibling renamed to DIR at the end (a failed run is kept as
DIR.failed-<time> for inspection, never as DIR; a run stopped by SIGTERM or Ctrl-C leaves nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .checkpoint import load_checkpoint
from .checkpoint.source import add_source_argument, local_source_directory
from .core.arguments import integer
from .core.buckets import BUCKET_LENGTHS
from .core.cli import run_main
from .core.json_documents import BOOLEAN, NON_EMPTY_STRING, POSITIVE_INTEGER, array_of, open_object, read_json
from .core.limits import WORKERS_PER_CPU, max_workers
from .core.staging import check_output
from .workflows.chain import Chain, StageFailed, build_in_staging

# What reproduce reads of sweep.json: every candidate says whether it passed; a passing one names its package.
SWEEP_SCHEMA = open_object({"candidates": array_of({
    **open_object({"passed": BOOLEAN}),
    "if": {"required": ["passed"], "properties": {"passed": {"const": True}}},
    "then": open_object({"package": NON_EMPTY_STRING, "package_bytes": POSITIVE_INTEGER}),
})})


def best_passing_candidate(sweep_dir: Path) -> Path | None:
    sweep = read_json(sweep_dir / "sweep.json", SWEEP_SCHEMA)
    passing = [c for c in sweep["candidates"] if c["passed"]]
    if not passing:
        return None
    return sweep_dir / min(passing, key=lambda c: c["package_bytes"])["package"]  # recorded relative to sweep_dir


def render_report(root: Path) -> None:
    """ANE_BENCHMARKS.md of the run, refused unless every figure in it is the evidence field it was rendered from."""
    from .evidence.ledger import check_report
    from .evidence.render import render_directory

    rendered = render_directory(root)
    problems = check_report(rendered.text, rendered.figures, root)
    if problems:
        raise StageFailed(f"the report does not match its evidence: {'; '.join(problems[:3])}")
    (root / "ANE_BENCHMARKS.md").write_text(rendered.text, encoding="utf-8")


def reproduce(source: str, root: Path, lengths=BUCKET_LENGTHS, jobs: int = 2, repeats: int | None = None) -> dict:
    """Run the chain into `root`. Every evidence file records paths relative to itself, so `root` may be renamed
    afterwards (main() builds in a staging sibling of the output)."""
    from . import benchmark, golden, probe, sweep, validate
    from .evidence.fp16_range import write_range_evidence

    packages = root / "packages"
    packages.mkdir()
    (root / "benchmarks").mkdir()
    chain = Chain(1 + len(lengths) + 3 + len(lengths) + 2 + 2, "reproduce")
    chain.stage(f"load {source}", load_checkpoint, source)
    try:
        for length in lengths:
            chain.command(f"probe body L{length}", probe.main,
                        ["--kind", "body", "--length", str(length), "--source", source,
                         "--output", str(packages / f"body-{length}"), "--require-ane", "--quiet"])
        chain.command("golden (FP32 reference)", golden.main,
                      ["--source", source, "--output", str(root / "golden.json")])
        repeat_args = ["--repeats", str(repeats)] if repeats is not None else []
        chain.command("validate every bucket and across buckets", validate.main,
                    [a for length in lengths for a in ("--package", str(packages / f"body-{length}"))]
                    + ["--source", source, "--golden", str(root / "golden.json"), "--backend", "mil",
                       "--output", str(root / "validation.json")] + repeat_args)
        smallest = min(lengths)
        chain.command(f"palettization sweep at L{smallest}", sweep.main,
                    ["--package", str(packages / f"body-{smallest}"), "--source", source, "--golden",
                     str(root / "golden.json"), "--jobs", str(jobs),
                     "--output", str(root / "sweep")])  # the sweep's default grid
        for length in lengths:
            chain.command(f"benchmark L{length}", benchmark.main,
                        ["--package", str(packages / f"body-{length}"), "--length", str(length), "--source", source,
                         "--backend", "mil", "--output", str(root / "benchmarks" / f"body-{length}.json")])
        longest = max(lengths)
        chain.command(f"benchmark L{longest} on a real long input", benchmark.main,
                    ["--package", str(packages / f"body-{longest}"), "--length", str(longest), "--long", "--source",
                     source, "--backend", "mil", "--output", str(root / "benchmarks" / f"body-{longest}-long.json")])
        candidate = best_passing_candidate(root / "sweep")
        if candidate is not None:
            chain.command(f"paired benchmark L{smallest}: FP16 vs {candidate.name}", benchmark.main,
                        ["--package", str(packages / f"body-{smallest}"), "--length", str(smallest), "--vs",
                         str(candidate), "--source", source, "--backend", "mil",
                         "--output", str(root / "benchmarks" / f"vs-{smallest}-{candidate.name}.json")])
        chain.stage("FP16 range analysis", write_range_evidence, load_checkpoint(source), root / "fp16_range.json")
        chain.stage("render ANE_BENCHMARKS.md", render_report, root)
    finally:
        (root / "reproduce.json").write_text(json.dumps({"source": source, "stages": chain.log}, indent=1) + "\n",
                                             encoding="utf-8")
    return {"stages": chain.log}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.reproduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_argument(parser)
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    parser.add_argument("--jobs",
                        type=integer("--jobs", 1, max_workers(), f"{WORKERS_PER_CPU} per CPU of this machine; "
                                     "more only compete for its cores"),
                        default=min(2, os.cpu_count() or 1), help="parallel sweep candidates")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    output = check_output(args.output, [local_source_directory(args.source)])
    started = time.perf_counter()
    status = build_in_staging(output, lambda staging: reproduce(args.source, staging, jobs=args.jobs), "reproduce")
    if status == 0:
        print(f"{output}: chain complete in {time.perf_counter() - started:.0f} s; report: "
              f"{output / 'ANE_BENCHMARKS.md'}")
    return status


if __name__ == "__main__":
    sys.exit(run_main(main))
