"""`python -m experiments.ane_engineering.sweep`: a palettization grid (bits x mode x group size) under the gates.

Every candidate is palettized from `--package` and validated against the golden file exactly like `validate`
(decision gates for a body package, embedding gates for an embedding package); writes DIR/sweep.json (evidence),
DIR/sweep.md (table), DIR/sweep.png (package size against the largest errors, with the gate drawn) and DIR/candidates/*
(packages and validation reports). Candidates run in parallel processes (--jobs), or as Ray tasks (--executor ray).
Beyond bits x mode x group size, the grid can cross LUT grouping axes (--group-axes output,input) and k-means objectives
(--weightings none,fisher). --heldout-golden/--heldout-fixture add a held-out set every candidate must pass as well;
--fixture names the file --golden was made from (your own questions or texts). --mixed-bits adds per-layer sensitivities
and a greedy walk of mixed allocations, each step a validated package. Refuses an existing DIR; builds atomically.
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
from .core.figures import Document
from .core.limits import MAX_CALLS, MAX_DIMENSION, WORKERS_PER_CPU, max_workers
from .core.staging import check_output, staged_directory
from .evidence.sweep_report import markdown_table, plot
from .package.palettize.fast_palettizer import IMPLEMENTATIONS
from .run.backends import BACKEND_CHOICES, BackendError, add_ane_family_argument, backend_name
from .validation.golden import golden_path_for
from .workflows.palettize_candidate import BITS, GROUP_AXES, MODES, WEIGHTINGS
from .workflows.sweep_executors import EXECUTORS
from .workflows.sweep_run import run_sweep

GROUP_SIZE = integer("--group-sizes", 1, MAX_DIMENSION, "a group is a slice of a conv's output channels, a device "
                     f"axis; Core ML loads none above {MAX_DIMENSION}")


def _names(text: str, allowed: tuple, flag: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or not set(names) <= set(allowed) or len(set(names)) != len(names):
        raise UsageError(f"{flag} takes distinct names from {allowed}, got {text!r}")
    return names


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
    add_ane_family_argument(parser)
    parser.add_argument("--implementation", default="auto", choices=("auto",) + IMPLEMENTATIONS,
                        help="k-means implementation (auto: exact)")
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    add_compression_grid_arguments(parser)
    return parser


def add_compression_grid_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group-axes", default="output",
                        help=f"comma-separated LUT grouping axes from {GROUP_AXES} (default output)")
    parser.add_argument("--weightings", default="none",
                        help=f"comma-separated k-means objectives from {WEIGHTINGS} (default none; fisher: "
                             "sensitivity-weighted, computed once on the task's committed calibration set)")
    parser.add_argument("--fixture", type=Path,
                        help="the question or text file --golden was made from (golden --fixture); default: the "
                             "committed fixture")
    parser.add_argument("--heldout-golden", type=Path,
                        help="a second golden (a held-out set, e.g. made with golden --fixture "
                             "package/inputs/fixtures/questions_heldout.json or texts_heldout.json) every candidate "
                             "must pass too; needs --heldout-fixture")
    parser.add_argument("--heldout-fixture", type=Path, help="the file --heldout-golden was made from")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="where candidates run: local worker processes (default) or Ray tasks (the optional "
                             "ray extra; identical packages and reports)")
    parser.add_argument("--mixed-bits", action="store_true",
                        help="also measure each layer's sensitivity at each of --bits on calibration inputs and walk a "
                             "greedy allocation down from all-8-bit (first and last layers kept at 8), validating "
                             "every step; uses the first --group-sizes and --group-axes and the last --weightings")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.backend = backend_name(args.backend, args.ane_family)
    except BackendError as error:
        raise UsageError(str(error)) from None
    check_output(args.output, [args.package, args.golden, args.fixture, args.heldout_golden, args.heldout_fixture,
                               local_source_directory(args.source)])
    bits, modes, group_sizes = args.bits, args.modes, args.group_sizes
    if args.implementation != "auto" and "kmeans" not in modes:
        raise UsageError("--implementation is not used without the kmeans mode; leave it out")
    from .package.manifest import read_manifest

    if read_manifest(args.package)["kind"] == "embedding" and args.golden is None:
        raise UsageError("--golden is required for an embedding package (make one with: golden --task embeddings)")
    golden = golden_path_for(args.source, args.golden)
    group_axes = _names(args.group_axes, GROUP_AXES, "--group-axes")
    weightings = _names(args.weightings, WEIGHTINGS, "--weightings")
    if (args.heldout_golden is None) != (args.heldout_fixture is None):
        raise UsageError("--heldout-golden and --heldout-fixture go together")
    if args.mixed_bits and "kmeans" not in modes:
        raise UsageError("--mixed-bits walks k-means allocations: include kmeans in --modes")
    heldout = None if args.heldout_golden is None else {"golden": args.heldout_golden.resolve(),
                                                         "fixture": args.heldout_fixture.resolve()}
    with staged_directory(args.output, [args.package, args.golden]) as staging:
        sweep = run_sweep(args.package.resolve(), staging, args.source, golden.resolve(), bits, modes, group_sizes,
                          args.jobs, args.backend, args.repeats, args.implementation, group_axes=group_axes,
                          weightings=weightings, fixture=None if args.fixture is None else args.fixture.resolve(),
                          heldout=heldout, executor=args.executor, mixed_bits=args.mixed_bits)
        (staging / "sweep.json").write_text(json.dumps(sweep, indent=1) + "\n", encoding="utf-8")
        (staging / "sweep.md").write_text(markdown_table(Document(sweep)), encoding="utf-8")
        plot(sweep, staging / "sweep.png")
    passed = [c["name"] for c in sweep["candidates"] if c["passed"]]
    print(f"{args.output}: {len(sweep['candidates'])} candidates, passing the gates: {', '.join(passed) or 'none'}")
    if sweep["mixed_bits"] is not None:
        steps = sweep["mixed_bits"]["steps"]
        print(f"mixed bits: {len(steps)} steps, {sum(s['passed'] for s in steps)} passing")
    if sweep["smallest_passing"] is not None:
        print(f"smallest passing package: {sweep['smallest_passing']['name']} "
              f"({sweep['smallest_passing']['package_mb']} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
