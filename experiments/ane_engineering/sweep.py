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

from .checkpoint.source import add_source_argument, local_source_directory
from .core.arguments import comma_list, integer
from .core.cli import UsageError, run_main
from .core.limits import MAX_CALLS, MAX_DIMENSION, WORKERS_PER_CPU, max_workers
from .run.backends import BACKEND_CHOICES
from .core.staging import check_output, staged_directory
from .core.figures import Document
from .workflows.palettize_candidate import BITS, MODES
from .package.palettize.fast_palettizer import IMPLEMENTATIONS
from .evidence.sweep_report import markdown_table, plot
from .workflows.sweep_run import run_sweep
from .validation.golden import golden_path_for


GROUP_SIZE = integer("--group-sizes", 1, MAX_DIMENSION, "a group is a slice of a conv's output channels, a device "
                     f"axis; Core ML loads none above {MAX_DIMENSION}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="the FP16 body or embedding export to palettize")
    add_source_argument(parser)
    parser.add_argument("--golden", type=Path, help="golden file (default: the committed builtin:tiny one)")
    parser.add_argument("--bits", default="8,6,4", type=comma_list("--bits", integer("--bits"), BITS),
                        help="comma-separated bit widths, each once (default 8,6,4)")
    parser.add_argument("--modes", default="uniform,kmeans", type=comma_list("--modes", choices=MODES),
                        help="comma-separated modes, each once (default uniform,kmeans)")
    parser.add_argument("--group-sizes", default="32,16", type=comma_list("--group-sizes", GROUP_SIZE),
                        help="comma-separated group sizes, each once (default 32,16)")
    parser.add_argument("--jobs", type=integer("--jobs", 1, max_workers(), f"{WORKERS_PER_CPU} per CPU of this "
                                               "machine; more only compete for its cores"),
                        default=min(2, os.cpu_count() or 1), help="parallel candidates")
    parser.add_argument("--repeats", type=integer("--repeats", 0, MAX_CALLS, "each repeat is a full call"), default=10,
                        help="repeated calls per candidate (identical outputs)")
    parser.add_argument("--backend", default="mil", choices=BACKEND_CHOICES,
                        help="backend that runs the candidates (default mil)")
    parser.add_argument("--implementation", default="auto", choices=("auto",) + IMPLEMENTATIONS,
                        help="k-means implementation (auto: exact)")
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    check_output(args.output, [args.package, args.golden, local_source_directory(args.source)])
    bits, modes, group_sizes = args.bits, args.modes, args.group_sizes
    if args.implementation != "auto" and "kmeans" not in modes:
        raise UsageError("--implementation is not used without the kmeans mode; leave it out")
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
