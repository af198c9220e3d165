"""The library behind `python -m experiments.ane_engineering.execute`: describe any ML program package, read
inputs from an .npz, run the package and turn its outputs into arrays (the command writes them atomically).

A package is either an .mlpackage (made by anything: coremltools.convert of any model) or one of our export
directories holding model.mlpackage and manifest.json; nothing here reads the manifest. Describing and running both
load the package through the MIL module (package/mil/load.py), which refuses a damaged or inconsistent package, or
one leading outside itself, in one line; the inputs file is read against the loaded program (npz_inputs.py).

Outputs: one array per output name. Tensors keep their declared dtype (fp16 stays fp16); a classifier's label is
a 0-d array (str or int64) and its probability dictionary a 1-d structured array with fields `class` and
`probability`, one row per class in the model's class order. Only numeric and string arrays are read or written
(allow_pickle=False both ways).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.limits import MAX_LOOP_ITERATIONS
from .cliffs import DEFAULT_FAMILY
from .numerics import FP32_ACCUMULATE


def package_path(path: Path) -> Path:
    """The .mlpackage itself, or the model.mlpackage inside one of our export directories."""
    path = Path(path)
    inner = path / "model.mlpackage"
    if path.is_dir() and not (path / "Manifest.json").exists() and inner.is_dir():
        return inner
    return path


def describe_package(path: Path, function_name: str | None = None) -> dict:
    """Inputs, outputs (shapes, types), opset, op counts and the ops this executor cannot run; builds nothing."""
    from .executor import unsupported_ops
    from ...package.mil.load import load_program
    from ...package.mil.walk import walk_operations

    loaded = load_program(package_path(path), function_name)
    problems = unsupported_ops(loaded.operations(), loaded.opset)
    return {
        "package": str(loaded.path),
        "function": loaded.function_name,
        "functions": loaded.function_names,
        "opset": loaded.opset,
        "specification_version": loaded.specification_version,
        "inputs": [t.describe() for t in loaded.inputs],
        "outputs": [t.describe() for t in loaded.outputs],
        "ops": sum(1 for _ in walk_operations(loaded.operations())),
        "op_types": loaded.op_type_counts(),
        "every_op_supported": not problems,
        "unsupported": problems,
    }


def format_description(info: dict) -> str:
    def tensor(t: dict) -> str:
        extra = ""
        if "enumerated_shapes" in t:
            extra = f", enumerated shapes {t['enumerated_shapes']}"
        if "shape_ranges" in t:
            extra = ", dims in " + " x ".join(f"[{lo}, {'inf' if hi is None else hi}]" for lo, hi in t["shape_ranges"])
        return f"  {t['name']}: {t['dtype']} {t['shape']}{extra}"

    lines = [f"package: {info['package']}",
             f"function: {info['function']} (functions: {', '.join(info['functions'])})",
             f"opset: {info['opset']} (specification version {info['specification_version']})",
             "inputs:", *[tensor(t) for t in info["inputs"]],
             "outputs:", *[tensor(t) for t in info["outputs"]],
             f"ops: {info['ops']} ({', '.join(f'{k} {v}' for k, v in info['op_types'].items())})"]
    if info["every_op_supported"]:
        lines.append("every op is supported by the mil executor")
    else:
        lines.append(f"NOT supported ({len(info['unsupported'])} op types):")
        lines += [f"  {t}: {p['count']} op(s), first {p['first']} ({p['reason']})" for t, p in info["unsupported"].items()]
    return "\n".join(lines)


def outputs_as_arrays(outputs: dict) -> dict[str, np.ndarray]:
    arrays = {}
    for name, value in outputs.items():
        if isinstance(value, dict):  # classify's probabilities: (class, probability) rows in class order
            classes = list(value)
            class_dtype = np.asarray(classes).dtype if classes else np.dtype("U1")
            table = np.zeros(len(classes), dtype=[("class", class_dtype), ("probability", np.float32)])
            table["class"] = classes
            table["probability"] = list(value.values())
            arrays[name] = table
        else:
            arrays[name] = np.asarray(value)  # a str label becomes a 0-d unicode array
    return arrays


def load_executor(path: Path, mode: str = FP32_ACCUMULATE, function_name: str | None = None,
                  max_loop_iterations: int = MAX_LOOP_ITERATIONS, ane_family: str = DEFAULT_FAMILY):
    from .executor import MILExecutor

    return MILExecutor(package_path(path), mode=mode, function_name=function_name,
                       max_loop_iterations=max_loop_iterations, ane_family=ane_family)


def run_package(path: Path, inputs: dict[str, np.ndarray], mode: str = FP32_ACCUMULATE,
                function_name: str | None = None, max_loop_iterations: int = MAX_LOOP_ITERATIONS) -> dict[str, np.ndarray]:
    return outputs_as_arrays(load_executor(path, mode, function_name, max_loop_iterations).run(inputs))
