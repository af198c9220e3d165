"""`python -m experiments.ane_engineering.reweight`: put a same-architecture checkpoint's weights into a copy of an
exported package without tracing or converting (Orion's delta compilation, for Core ML packages).

The MIL program stays byte-identical, weight names, offsets and dtypes stay the same; only weight bytes change.
Both are verified. Refused with a clear message: another architecture, a weight that cannot be matched, a weight
stored inline in the program that would change, a palettized package (reweight its FP16 parent and palettize again
with the same settings). The new manifest records the parent. `--compiled X.mlmodelc` (macOS) also swaps the
weights of a compiled model so no recompilation is needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .checkpoint import load_checkpoint
from .checkpoint.source import SOURCE_HELP, add_source_argument, local_source_directory
from .core.cli import run_main
from .core.staging import check_output


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.reweight", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="probe output directory to update")
    add_source_argument(parser, required=True, help="the new checkpoint: " + SOURCE_HELP)
    parser.add_argument("--compiled", type=Path, help="(macOS) the parent's compiled .mlmodelc to update as well")
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    return parser


def main(argv=None) -> int:
    from .package.reweight import reweight

    args = build_parser().parse_args(argv)
    check_output(args.output, [args.package, args.compiled, local_source_directory(args.source)])
    report = reweight(args.package, load_checkpoint(args.source), args.output, args.compiled)
    print(f"{args.output}: {report['blobs_rewritten']} weight blobs rewritten in {report['seconds']:.2f} s; program "
          f"identical, layout identical; package {report['package_sha256'][:12]}...")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
