"""The library behind `python -m experiments.ane_engineering.execute`: describe any ML program package (image
features with their layout, size and baked-in preprocessing; states apart from inputs), run the package and turn
its outputs into arrays (the command writes them atomically; batch.py reads its input files).

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
from .predictor import package_path  # noqa: F401 - part of this module's API


def describe_package(path: Path, function_name: str | None = None) -> dict:
    """Inputs, outputs (shapes, types), opset, op counts and the ops this executor cannot run; builds nothing."""
    from ...package.mil.load import load_program
    from ...package.mil.walk import walk_operations
    from .executor import unsupported_ops
    from .images import image_features

    loaded = load_program(package_path(path), function_name)
    problems = unsupported_ops(loaded.operations(), loaded.opset)
    images_in, images_out = image_features(loaded.spec, loaded.function_name, loaded.function)

    def described(tensors, images):
        return [{**t.describe(), **({"image": images[t.name].describe()} if t.name in images else {})}
                for t in tensors if not t.state]

    return {
        "package": str(loaded.path),
        "function": loaded.function_name,
        "functions": loaded.function_names,
        "opset": loaded.opset,
        "specification_version": loaded.specification_version,
        "inputs": described(loaded.inputs, images_in),
        "states": [t.describe() for t in loaded.inputs if t.state],
        "outputs": described(loaded.outputs, images_out),
        "ops": sum(1 for _ in walk_operations(loaded.operations())),
        "op_types": loaded.op_type_counts(),
        "every_op_supported": not problems,
        "unsupported": problems,
    }


def format_description(info: dict) -> str:
    def tensor(t: dict, output: bool = False) -> str:
        extra = ""
        if "enumerated_shapes" in t:
            extra = f", enumerated shapes {t['enumerated_shapes']}"
        if "shape_ranges" in t:
            extra = ", dims in " + " x ".join(f"[{lo}, {'inf' if hi is None else hi}]" for lo, hi in t["shape_ranges"])
        line = f"  {t['name']}: {t['dtype']} {t['shape']}{extra}"
        if "image" in t:  # ct.ImageType: a picture in the description, this tensor in the program
            image = t["image"]
            # an output has no preprocessing: the program's values become the picture's pixels (images.to_picture)
            after = (("values become float pixels as they are" if image["layout"] == "GRAYSCALE_FLOAT16" else
                      "values become pixels, rounded and clipped to 0..255") if output else image_preprocessing(image))
            line += f"\n    image: {image['layout']}, {image['size']} size {image['sizes']} (height x width); {after}"
        return line

    lines = [f"package: {info['package']}",
             f"function: {info['function']} (functions: {', '.join(info['functions'])})",
             f"opset: {info['opset']} (specification version {info['specification_version']})",
             "inputs:", *[tensor(t) for t in info["inputs"]],
             *(["states (carried across runs: make_state(), or the command's sequence of inputs):",
                *[tensor(t) for t in info["states"]]] if info["states"] else []),
             "outputs:", *[tensor(t, output=True) for t in info["outputs"]],
             f"ops: {info['ops']} ({', '.join(f'{k} {v}' for k, v in info['op_types'].items())})"]
    if info["every_op_supported"]:
        lines.append("every op is supported by the mil executor")
    else:
        lines.append(f"NOT supported ({len(info['unsupported'])} op types):")
        lines += [f"  {t}: {p['count']} op(s), first {p['first']} ({p['reason']})"
                  for t, p in info["unsupported"].items()]
    return "\n".join(lines)


def image_preprocessing(image: dict) -> str:
    """'the graph computes 0.00392157 * pixel + [0.1, 0.2, 0.3]': the scale and bias coremltools baked in."""
    from .images import ImageInfo

    preprocessing = image["preprocessing"]
    return ImageInfo("", image["layout"], 0, 0, scale=tuple(preprocessing["scale"]),
                     bias=tuple(preprocessing["bias"])).preprocessing_text()


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


def run_package(path: Path, inputs: dict, mode: str = FP32_ACCUMULATE, function_name: str | None = None,
                max_loop_iterations: int = MAX_LOOP_ITERATIONS) -> dict[str, np.ndarray]:
    """One run of a (stateless) package as arrays; image inputs take pictures as predictor.Predictor does."""
    from .predictor import Predictor

    return outputs_as_arrays(Predictor(path, mode, function_name, max_loop_iterations).predict(inputs))
