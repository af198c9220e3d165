"""`python -m experiments.ane_engineering.execute`: run any Core ML ML program (.mlpackage) on Linux with the
`mil` executor, or describe it.

    --describe           inputs and outputs (shapes, types, enumerated shapes, ranges), opset, op counts, and
                         every op type the executor cannot run (exit 1 if there is one)
    --inputs IN.npz      one array per input name (allow_pickle=False); shapes are checked against the
                         program's fixed, enumerated or ranged shapes before anything runs
    --output OUT.npz     new file: one array per output name (declared dtype; a classifier's label as a 0-d array,
                         its probabilities as a structured array with fields class, probability)
    --max-loop-iterations N
                         while_loop iterations one run may take, every loop counted (default: core/limits.py
                         MAX_LOOP_ITERATIONS); a program that loops longer is refused, naming the loop

The package may be any .mlpackage (our manifest is not needed) or one of our export directories. A damaged or
inconsistent package, one whose Manifest.json or a symlink leads outside it, or an inputs file that does not fit the
program is refused in one line before anything runs.
Exit status: 0 done, 1 --describe found unsupported ops, 2 refused (unsupported op, bad input, existing output).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from .core.arguments import refuse_unused
from .core.cli import UsageError, atomic_file, run_main
from .core.lean_imports import refuse_frameworks
from .core.limits import MAX_LOOP_ITERATIONS
from .core.staging import check_output
from .run.mil.numerics import FP32_ACCUMULATE, MODES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.execute", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help=".mlpackage (or an export directory holding one)")
    parser.add_argument("--describe", action="store_true", help="describe the package instead of running it")
    parser.add_argument("--json", action="store_true", help="with --describe: print JSON")
    parser.add_argument("--inputs", type=Path, help=".npz with one array per input name")
    parser.add_argument("--output", type=Path, help="new .npz for the outputs (refused if it exists)")
    parser.add_argument("--mode", choices=MODES,
                        help="fp32-accumulate: float32 inside each op, fp16 storage (default); fp16-strict: every "
                             "step rounded to fp16 (slow, a pessimistic bound)")
    parser.add_argument("--function", help="function of a multifunction package (default: its default function)")
    parser.add_argument("--max-loop-iterations", type=int, default=MAX_LOOP_ITERATIONS, metavar="N",
                        help=f"while_loop iterations one run may take, every loop counted (default {MAX_LOOP_ITERATIONS})")
    return parser


def main(argv=None) -> int:
    from .run.mil import tool

    from .run.mil.npz_inputs import read_inputs

    args = build_parser().parse_args(argv)
    if args.max_loop_iterations < 1:
        raise UsageError(f"--max-loop-iterations must be at least 1, got {args.max_loop_iterations}")
    # coremltools warns at import that it cannot predict here (no libcoremlpython) and about untested versions of
    # torch / scikit-learn: true off macOS and irrelevant to running a package here, so kept off this command's output
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    if args.describe:
        refuse_unused(args, {"inputs": "by --describe", "output": "by --describe", "mode": "by --describe (it runs "
                                                                                           "nothing)"})
        info = tool.describe_package(args.package, args.function)
        print(json.dumps(info, indent=1) if args.json else tool.format_description(info))
        return 0 if info["every_op_supported"] else 1
    refuse_unused(args, {"json": "without --describe"})
    if args.inputs is None or args.output is None:
        raise UsageError("give --inputs IN.npz and --output OUT.npz (or --describe)")
    if args.output.suffix != ".npz":
        raise UsageError(f"--output must end in .npz, not {args.output.name!r}")
    check_output(args.output, [args.package, args.inputs])  # before loading anything
    executor = tool.load_executor(args.package, args.mode or FP32_ACCUMULATE, args.function, args.max_loop_iterations)
    arrays = tool.outputs_as_arrays(executor.run(read_inputs(args.inputs, executor.inputs)))
    with atomic_file(args.output, [args.package, args.inputs]) as temporary, open(temporary, "wb") as handle:
        np.savez(handle, **arrays)
    print(f"{args.output}: {', '.join(f'{k} {v.dtype}{list(v.shape)}' for k, v in arrays.items())}")
    return 0


if __name__ == "__main__":
    refuse_frameworks()  # this process imports coremltools without torch & co. (core/lean_imports.py says why)
    sys.exit(run_main(main))
