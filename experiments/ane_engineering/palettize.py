"""`python -m experiments.ane_engineering.palettize`: weight-only palettization of an exported package.

Per-grouped-channel LUTs (FP16, 2^bits entries per group of output channels) for conv weights of more than 2048
elements only: RoPE tables, norm parameters and masks stay untouched. Modes: uniform (coremltools) and kmeans (the
project's exact k-means by default, `--implementation coremltools` for coremltools' own). The new manifest records
the parent package's hashes and every setting. Refuses an existing output and builds atomically.
With `--weighting fisher` the k-means minimises the squared error weighted by each weight's sensitivity (the
diagonal Fisher information of the FP32 model's own output on calibration inputs, recorded by hash in the
manifest); `--group-axis input` groups LUTs along the input channels, as Core ML's iOS18 palettization allows.
For a grid of candidates validated under the gates, use `python -m experiments.ane_engineering.sweep`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .core.arguments import integer, refuse_unused
from .core.cli import run_main
from .core.limits import MAX_DIMENSION, WORKERS_PER_CPU, max_workers
from .core.staging import check_output
from .package.palettize.fast_palettizer import IMPLEMENTATIONS
from .workflows.palettize_candidate import BITS, GROUP_AXES, MODES, WEIGHTINGS, palettize_candidate

DEFAULT_WORKERS = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.palettize", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="probe output directory to palettize")
    parser.add_argument("--bits", required=True, type=int, choices=BITS)
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--group-size", required=True, help="output channels per LUT (e.g. 32)",
                        type=integer("--group-size", 1, MAX_DIMENSION, "a group is a slice of a conv's output "
                                     f"channels, a device axis; Core ML loads none above {MAX_DIMENSION}"))
    parser.add_argument("--workers",
                        help=f"k-means worker threads/processes (default {DEFAULT_WORKERS}; --mode kmeans)",
                        type=integer("--workers", 1, max_workers(), f"{WORKERS_PER_CPU} per CPU of this machine; "
                                     "more only compete for its cores"))
    parser.add_argument("--implementation", choices=("auto",) + IMPLEMENTATIONS, default="auto",
                        help="k-means: 'exact' (default for kmeans) or 'coremltools'; uniform is always coremltools")
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    add_compression_arguments(parser)
    return parser


def add_compression_arguments(parser: argparse.ArgumentParser) -> None:
    """The options beyond coremltools' own (shared with the sweep command)."""
    parser.add_argument("--group-axis", choices=GROUP_AXES, default="output",
                        help="LUTs per group of output channels (default) or of input channels")
    parser.add_argument("--weighting", choices=WEIGHTINGS, default="none",
                        help="k-means objective: plain squared error (none, default) or Fisher-weighted squared error "
                             "(fisher: squared gradients of the FP32 model's own output loss on calibration inputs)")
    parser.add_argument("--calibration", type=Path,
                        help="calibration inputs of --weighting fisher (default: the committed set of the package's "
                             "task, package/inputs/fixtures/questions_calibration.json or texts_calibration.json)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    refuse_unused(args, {} if args.mode == "kmeans" else {"workers": "by --mode uniform (no k-means)"})
    check_output(args.output, [args.package, args.calibration])
    workers = DEFAULT_WORKERS if args.workers is None else args.workers
    stderr = sys.stderr  # coremltools' stderr is silenced while it palettizes; the progress lines are not
    report = palettize_candidate(args.package, args.output, args.bits, args.mode, args.group_size, workers,
                                 args.implementation, progress=lambda m: print(f"[palettize] {m}", file=stderr,
                                                                                 flush=True),
                                 group_axis=args.group_axis, weighting=args.weighting, calibration=args.calibration)
    print(f"{args.output}: W{args.bits} {args.mode} group {args.group_size} "
          f"({report['compression']['implementation']}) in {report['seconds']:.1f} s; "
          f"{report['parent_bytes'] / 1e6:.2f} MB -> {report['package_bytes'] / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
