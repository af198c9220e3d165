"""`python -m experiments.ane_engineering.sweep`: a palettization grid (bits x mode x group size) under the gates.

Every candidate is palettized from `--package` and validated against the golden file exactly like `validate`
(decision gates for a body package, embedding gates for an embedding package); writes DIR/sweep.json (evidence),
DIR/sweep.md (table), DIR/sweep.png (package size against the largest errors, with the gate drawn) and DIR/candidates/* (packages and validation
reports). Candidates run in parallel processes (--jobs). Refuses an existing DIR; builds atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .checkpoint.source import add_source_argument
from .core.cli import UsageError, run_main
from .core.staging import check_output, staged_directory
from .core.figures import Document
from .workflows.palettize_candidate import BITS, MODES
from .package.palettize.fast_palettizer import IMPLEMENTATIONS
from .evidence.sweep_report import markdown_table, plot
from .workflows.sweep_run import run_sweep
from .validation.golden import golden_path_for


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="the FP16 body or embedding export to palettize")
    add_source_argument(parser)
    parser.add_argument("--golden", type=Path, help="golden file (default: the committed builtin:tiny one)")
    parser.add_argument("--bits", default="8,6,4", help="comma-separated bit widths (default 8,6,4)")
    parser.add_argument("--modes", default="uniform,kmeans", help="comma-separated modes (default uniform,kmeans)")
    parser.add_argument("--group-sizes", default="32,16", help="comma-separated group sizes (default 32,16)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel candidates")
    parser.add_argument("--repeats", type=int, default=10, help="repeated calls per candidate (identical outputs)")
    parser.add_argument("--backend", default="mil", help="backend that runs the candidates (default mil)")
    parser.add_argument("--implementation", default="auto", choices=("auto",) + IMPLEMENTATIONS,
                        help="k-means implementation (auto: exact)")
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    check_output(args.output, [args.package, args.golden])
    bits, group_sizes = _ints(args.bits), _ints(args.group_sizes)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(bits) <= set(BITS) or not set(modes) <= set(MODES) or not group_sizes or min(group_sizes) < 1:
        raise UsageError(f"bits must be from {BITS}, modes from {MODES}, group sizes positive")
    if args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    if args.repeats < 0:
        raise UsageError("--repeats must be >= 0")
    from .package.manifest import read_manifest

    if read_manifest(args.package)["kind"] == "embedding" and args.golden is None:
        raise UsageError("--golden is required for an embedding package (make one with: golden --task embeddings)")
    golden = golden_path_for(args.source, args.golden)
    with staged_directory(args.output, [args.package, args.golden]) as staging:
        sweep = run_sweep(args.package.resolve(), staging, args.source, golden.resolve(), bits, modes, group_sizes,
                          args.jobs, args.backend, args.repeats, args.implementation)
        (staging / "sweep.json").write_text(json.dumps(sweep, indent=1) + "\n", encoding="utf-8")
        (staging / "sweep.md").write_text(markdown_table(Document(sweep)), encoding="utf-8")
        plot(sweep, staging / "sweep.png")
    passed = [c["name"] for c in sweep["candidates"] if c["passed"]]
    print(f"{args.output}: {len(sweep['candidates'])} candidates, passing the gates: {', '.join(passed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
