"""The worker of the executor bit-identity benchmark: runs `validate --backend mil` inside a tree under test with
every MILExecutor.run call hashed (input and output names, dtypes, shapes and bytes, in call order), and writes
the record as JSON; optionally runs one package in fp16-strict on recorded inputs.

Run by path, with PYTHONPATH naming the extracted tree (`python executor_call_record.py --record R [--strict-package
P --strict-inputs I] -- VALIDATE ARGS`). It imports only the standard library itself and the tree's modules by name,
in whichever layout the tree has (the reference commit may predate the current folders), never this checkout's.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import sys
from pathlib import Path

# (executor module, program loader module, executor source folder), newest layout first
LAYOUTS = (
    ("experiments.ane_engineering.run.mil.executor", "experiments.ane_engineering.package.mil.load",
     "experiments/ane_engineering/run/mil"),
    ("experiments.ane_engineering.run.mil.executor", "experiments.ane_engineering.package.program",
     "experiments/ane_engineering/run/mil"),
    ("experiments.ane_engineering.execute.executor", "experiments.ane_engineering.execute.program",
     "experiments/ane_engineering/execute"),
)
VALIDATE = "experiments.ane_engineering.validate"


def tree_modules():
    """(executor module, load_program) of the tree on sys.path, in the first layout it has."""
    for executor_name, program_name, _ in LAYOUTS:
        try:
            return importlib.import_module(executor_name), importlib.import_module(program_name).load_program
        except ModuleNotFoundError:
            continue
    raise SystemExit(f"no mil executor in any known layout on {sys.path[:3]}")


def hash_arrays(digest, arrays: dict) -> None:
    import numpy as np

    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())


def signature(program) -> str:
    """A package's input names and shapes: what tells the bucket packages apart inside one validate run."""
    return "; ".join(f"{t.name}{tuple(t.shape)}" for t in program.inputs)


def main(argv=None) -> int:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", required=True, type=Path)
    parser.add_argument("--strict-package", type=Path)
    parser.add_argument("--strict-inputs", type=Path)
    parser.add_argument("validate", nargs="*")
    args = parser.parse_args(argv)
    executor_module, load_program = tree_modules()
    # validate runs private copies of the packages: calls are keyed by the package's input shapes (one per bucket)
    packages = [Path(a) for flag, a in zip(args.validate, args.validate[1:]) if flag == "--package"]
    names = {signature(load_program(p / "model.mlpackage")): p.name for p in packages}
    log: dict[str, dict] = {}
    first_inputs: dict = {}
    original = executor_module.MILExecutor.run

    def recording_run(self, inputs, **kwargs):
        outputs = original(self, inputs, **kwargs)
        name = names[signature(self)]
        entry = log.setdefault(name, {"calls": 0, "digest": hashlib.sha256()})
        entry["calls"] += 1
        hash_arrays(entry["digest"], inputs)
        hash_arrays(entry["digest"], outputs)
        first_inputs.setdefault(name, {k: np.array(v) for k, v in inputs.items()})
        return outputs

    executor_module.MILExecutor.run = recording_run
    status = importlib.import_module(VALIDATE).main(args.validate)
    record = {"executor_module": executor_module.__file__, "validate_status": status,
              "calls": {k: {"calls": v["calls"], "sha256": v["digest"].hexdigest()} for k, v in log.items()}}
    if args.strict_package:
        name = args.strict_package.name
        if not args.strict_inputs.exists():  # the first run (reference) records them
            np.savez(args.strict_inputs, **first_inputs[name])
        feeds = dict(np.load(args.strict_inputs, allow_pickle=False))
        strict = executor_module.MILExecutor(args.strict_package / "model.mlpackage", mode="fp16-strict")
        outputs = original(strict, feeds)
        digest = hashlib.sha256()
        hash_arrays(digest, feeds)
        hash_arrays(digest, outputs)
        record["fp16_strict"] = {"package": name, "sha256": digest.hexdigest()}
    args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    # run by path: this folder is sys.path[0]; drop it so that only the tree under test can be imported
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    sys.exit(main())
