"""`python -m experiments.ane_engineering.execute`: run any Core ML ML program (.mlpackage) on Linux with the
`mil` executor, or describe it.

    --describe           inputs and outputs (shapes, types, enumerated shapes, ranges), opset, op counts, and
                         every op type the executor cannot run (exit 1 if there is one)
    --inputs IN.npz [IN2.npz ...] | DIR
                         one .npz per run, one array per input name (allow_pickle=False); shapes are checked against
                         the program's fixed, enumerated or ranged shapes before a run. An image input (ct.ImageType)
                         takes an H x W x C uint8 picture in RGB order (swapped for a BGR model, as Core ML does) or
                         the (1, C, H, W) tensor itself; a picture file (PNG, JPEG, ...) is the whole input of a
                         program whose one input is an image. A directory stands for its .npz and picture files,
                         by name. Several files run in order in one process; a stateful program (ct.StateType)
                         starts from a zero state carried from each file to the next.
    --output OUT.npz | OUTDIR
                         one input file: a new .npz, one array per output name (declared dtype; a classifier's label
                         as a 0-d array, its probabilities as a structured array with fields class, probability; an
                         image output as an H x W x C uint8 RGB picture). Several input files (or a directory): a
                         new directory with <input stem>.npz for each, published only when every run succeeded
    --mode ane [--ane-family pre-a16|a16]
                         fp32-accumulate arithmetic plus the Neural Engine's published numeric cliffs of that chip
                         family (run/mil/ane_cliffs.json, default pre-a16, the stricter): a matmul-class output above
                         the matmul cliff and (pre-A16) a width-offset slice's values above the slice cliff become
                         +/-inf. The command then prints, per run, one line `ane_cliff: {...}` (JSON) naming the first
                         op where a cliff fired (op, type, output, cliff, value), or `ane_cliff: null`
    --max-loop-iterations N
                         while_loop iterations one run may take, every loop counted (default: core/limits.py
                         MAX_LOOP_ITERATIONS); a program that loops longer is refused, naming the loop

The package may be any .mlpackage (our manifest is not needed) or one of our export directories. A damaged or
inconsistent package, one whose Manifest.json or a symlink leads outside it, or an inputs file that does not fit the
program is refused in one line before anything of it runs (a batch then publishes no output at all).
Exit status: 0 done, 1 --describe found unsupported ops, 2 refused (unsupported op, bad input, existing output).

From Python: `install_coremltools_predict()` (from this module) makes coremltools' MLModel(path).predict(...) and
make_state() run through the executor off macOS (run/mil/predict_shim.py); run/mil/predictor.py is the executor's
own API (pictures, states, classifiers).
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
from .core.staging import check_output, staged_directory
from .run.mil.cliffs import DEFAULT_FAMILY, FAMILIES
from .run.mil.numerics import ANE, FP32_ACCUMULATE, MODES
from .run.mil.predict_shim import install_coremltools_predict, uninstall_coremltools_predict  # noqa: F401 - the API

__all__ = ["build_parser", "install_coremltools_predict", "main", "uninstall_coremltools_predict"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.execute", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help=".mlpackage (or an export directory holding one)")
    parser.add_argument("--describe", action="store_true", help="describe the package instead of running it")
    parser.add_argument("--json", action="store_true", help="with --describe: print JSON")
    parser.add_argument("--inputs", type=Path, nargs="+", metavar="IN",
                        help=".npz files (one array per input name), pictures for a one-image-input program, or "
                             "directories of them; run in order, state carried from one to the next")
    parser.add_argument("--output", type=Path,
                        help="new .npz for one input file; a new directory for several (refused if it exists)")
    parser.add_argument("--mode", choices=MODES,
                        help="fp32-accumulate: float32 inside each op, fp16 storage (default); fp16-strict: every "
                             "step rounded to fp16 (slow, a pessimistic bound); ane: fp32-accumulate plus the Neural "
                             "Engine's published cliffs (see --ane-family)")
    parser.add_argument("--ane-family", choices=FAMILIES,
                        help="with --mode ane: the Neural Engine generation whose cliffs apply (default "
                             f"{DEFAULT_FAMILY}, every published cliff; a16: no width-offset slice cliff)")
    parser.add_argument("--function", help="function of a multifunction package (default: its default function)")
    parser.add_argument("--max-loop-iterations", type=int, default=MAX_LOOP_ITERATIONS, metavar="N",
                        help="while_loop iterations one run may take, every loop counted (default "
                             f"{MAX_LOOP_ITERATIONS})")
    return parser


def main(argv=None) -> int:
    from .run.mil import batch, tool
    from .run.mil.predictor import Predictor

    args = build_parser().parse_args(argv)
    if args.max_loop_iterations < 1:
        raise UsageError(f"--max-loop-iterations must be at least 1, got {args.max_loop_iterations}")
    # coremltools warns at import that it cannot predict here (no libcoremlpython) and about untested versions of
    # torch / scikit-learn: true off macOS and irrelevant to running a package here, so kept off this command's output
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    if args.describe:
        refuse_unused(args, {"inputs": "by --describe", "output": "by --describe", "mode": "by --describe (it runs "
                                                                                           "nothing)",
                             "ane_family": "by --describe"})
        info = tool.describe_package(args.package, args.function)
        print(json.dumps(info, indent=1) if args.json else tool.format_description(info))
        return 0 if info["every_op_supported"] else 1
    refuse_unused(args, {"json": "without --describe",
                         **({} if args.mode == ANE else {"ane_family": "without --mode ane"})})
    if args.inputs is None or args.output is None:
        raise UsageError("give --inputs IN.npz and --output OUT.npz (or --describe)")
    files = batch.input_files(args.inputs)
    many = batch.is_batch(args.inputs)
    names = batch.output_names(files)
    if not many and args.output.suffix != ".npz":
        raise UsageError(f"--output must end in .npz for one input file, not {args.output.name!r}")
    if many and args.output.suffix == ".npz":
        raise UsageError(f"several input files write a directory; --output {args.output.name!r} names an .npz")
    check_output(args.output, [args.package, *args.inputs])  # before loading anything
    model = Predictor(args.package, args.mode or FP32_ACCUMULATE, args.function, args.max_loop_iterations,
                      ane_family=args.ane_family or DEFAULT_FAMILY)
    state = model.make_state() if model.states else None  # one sequence: carried from each file to the next

    def run(path: Path) -> dict:
        arrays = tool.outputs_as_arrays(model.predict(batch.read_input_file(path, model.inputs), state=state))
        if args.mode == ANE:  # one line per run: the first op where a Neural Engine cliff fired, or null
            print(f"ane_cliff: {json.dumps(model.executor.last_run['ane_cliff'])}"
                  + (f" ({path.name})" if many else ""))
        return arrays

    if not many:
        arrays = run(files[0])
        with atomic_file(args.output, [args.package, *args.inputs]) as temporary, open(temporary, "wb") as handle:
            np.savez(handle, **arrays)
        print(f"{args.output}: {', '.join(f'{k} {v.dtype}{list(v.shape)}' for k, v in arrays.items())}")
        return 0
    with staged_directory(args.output, [args.package, *args.inputs]) as staging:
        for path, name in zip(files, names):
            arrays = run(path)
            with open(Path(staging) / name, "xb") as handle:
                np.savez(handle, **arrays)
    print(f"{args.output}: {len(files)} output file(s), one per input ({', '.join(model.output_names)})")
    return 0


if __name__ == "__main__":
    refuse_frameworks()  # this process imports coremltools without torch & co. (core/lean_imports.py says why)
    sys.exit(run_main(main))
