"""Load a saved .mlpackage back into a PyMIL Program, with no torch model and no checkpoint.

    model = ct.models.MLModel(path, skip_model_load=True)        # reads the spec, never compiles or runs
    spec = model.get_spec()
    program = milproto.load.load(spec, spec.specificationVersion, model.weights_dir)

The loader rebuilds every op through PyMIL's builder, so each op carries all of its inputs, optional ones included
(defaults are materialised as const inputs), and every const holds the value read from the package's weight.bin
(fp16 weights are the stored fp16 values; palettized indices are unpacked to uint8 by PyMIL). Nothing here is
re-derived from torch weights.

`LoadedProgram` exposes the function's input and output names, shapes and numpy dtypes. Our BC1S exports have
fixed shapes; an input with enumerated shapes (the original-layout baseline export) keeps None for its flexible
dims and lists the shapes it accepts.
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import HarnessError


class ProgramLoadError(HarnessError):
    """A package that cannot be read back as an ML program."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | None, ...]  # None for a flexible (symbolic) dimension
    dtype: np.dtype  # numpy storage dtype (np.float16 for our FP16 exports)
    mil_dtype: str  # MIL type name, e.g. "fp16", "fp32", "int32"
    enumerated: tuple[tuple[int, ...], ...] = ()  # the shapes an enumerated-shape input accepts (from the spec)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    def accepts(self, shape: tuple[int, ...]) -> bool:
        shape = tuple(int(d) for d in shape)
        if self.enumerated:
            return shape in self.enumerated
        return len(shape) == len(self.shape) and all(w is None or w == d for w, d in zip(self.shape, shape))

    def describe(self) -> dict:
        out = {"name": self.name, "shape": [("?" if d is None else d) for d in self.shape], "dtype": self.mil_dtype}
        if self.enumerated:
            out["enumerated_shapes"] = [list(s) for s in self.enumerated]
        return out


@dataclass
class LoadedProgram:
    path: Path
    program: object  # coremltools.converters.mil.mil.Program
    function_name: str
    specification_version: int
    opset: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    weights_dir: str | None

    @property
    def function(self):
        return self.program.functions[self.function_name]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def operations(self) -> list:
        """The function's top-level ops in program order (const ops included)."""
        return list(self.function.operations)

    def op_type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.function.operations:
            counts[op.op_type] = counts.get(op.op_type, 0) + 1
        return dict(sorted(counts.items()))


def mil_dtype_name(builtin) -> str:
    from coremltools.converters.mil.mil import types

    return types.builtin_to_string(builtin)


def numpy_dtype(builtin) -> np.dtype:
    """Storage dtype for a MIL builtin type. Sub-byte ints (uint4, int4, uint1...) are held unpacked in 8 bits."""
    from coremltools.converters.mil.mil import types

    name = types.builtin_to_string(builtin)
    table = {
        "fp16": np.float16, "fp32": np.float32, "fp64": np.float64,
        "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
        "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
        "bool": np.bool_,
    }
    if name in table:
        return np.dtype(table[name])
    if name in ("string", "str"):
        return np.dtype(object)  # string consts (pad_type, equation, mode ...) stay Python str
    if name.startswith("uint"):  # uint1 .. uint6
        return np.dtype(np.uint8)
    if name.startswith("int"):  # int4
        return np.dtype(np.int8)
    raise ProgramLoadError(f"MIL type {name!r} has no numpy storage dtype here")


def static_shape(var) -> tuple[int, ...] | None:
    """The var's shape as ints, or None when any dimension is symbolic."""
    from coremltools.converters.mil.mil import types

    if not types.is_tensor(var.sym_type):
        return ()  # a scalar
    shape = []
    for d in var.shape:
        if isinstance(d, (int, np.integer)):
            shape.append(int(d))
        else:
            return None
    return tuple(shape)


def _tensor_info(var, feature=None) -> TensorInfo:
    """Static dims as ints, symbolic dims as None; an input's enumerated shapes come from its spec feature."""
    from coremltools.converters.mil.mil import types

    shape = tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in var.shape) \
        if types.is_tensor(var.sym_type) else ()
    enumerated: tuple = ()
    if feature is not None and feature.type.WhichOneof("Type") == "multiArrayType":
        array = feature.type.multiArrayType
        if array.WhichOneof("ShapeFlexibility") == "enumeratedShapes":
            enumerated = tuple(tuple(int(d) for d in e.shape) for e in array.enumeratedShapes.shapes)
        elif array.WhichOneof("ShapeFlexibility") == "shapeRange" and all(d is not None for d in shape):
            raise ProgramLoadError(f"input {var.name!r} has a shape range; only fixed or enumerated shapes are supported")
    return TensorInfo(var.name, shape, numpy_dtype(var.dtype), mil_dtype_name(var.dtype), enumerated)


@contextlib.contextmanager
def _quiet():
    """coremltools prints progress bars and warnings while loading; keep them out of command output."""
    loggers = [logging.getLogger(n) for n in ("coremltools", "root")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def load_program(package_path: str | Path, function_name: str = "main") -> LoadedProgram:
    """Read an .mlpackage (ML program) from disk into a PyMIL Program."""
    path = Path(package_path)
    if not path.exists():
        raise ProgramLoadError(f"no model package at {path}")
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    with _quiet():
        try:
            model = ct.models.MLModel(str(path), skip_model_load=True)
        except Exception as exc:  # report what the package is, not a traceback from deep inside
            raise ProgramLoadError(f"cannot read {path} as a Core ML model: {exc}") from exc
        spec = model.get_spec()
        if spec.WhichOneof("Type") != "mlProgram":
            raise ProgramLoadError(f"{path} is a {spec.WhichOneof('Type')!r} model, not an ML program (mlprogram)")
        program = milproto_load(spec, spec.specificationVersion, model.weights_dir)
    if function_name not in program.functions:
        raise ProgramLoadError(f"{path} has no function {function_name!r} (functions: {sorted(program.functions)})")
    function = program.functions[function_name]
    features = {f.name: f for f in spec.description.input}
    inputs = [_tensor_info(var, features.get(name)) for name, var in function.inputs.items()]
    outputs = [_tensor_info(var) for var in function.outputs]
    return LoadedProgram(
        path=path,
        program=program,
        function_name=function_name,
        specification_version=int(spec.specificationVersion),
        opset=getattr(function.opset_version, "name", str(function.opset_version)),
        inputs=inputs,
        outputs=outputs,
        weights_dir=model.weights_dir,
    )
