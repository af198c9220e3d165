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
dims and lists the shapes it accepts; an input with a shape range (ct.RangeDim) keeps None for its flexible dims
and the [lower, upper] bound of every dim, read from the model description. A multifunction package runs one
function at a time (`function_name`, default: the package's default function).
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import HarnessError


class ProgramLoadError(HarnessError):
    """A package that cannot be read back as an ML program."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | None, ...]  # None for a flexible (symbolic) dimension
    dtype: np.dtype  # numpy storage dtype (np.float16 for our FP16 exports)
    mil_dtype: str  # MIL type name, e.g. "fp16", "fp32", "int32"
    enumerated: tuple[tuple[int, ...], ...] = ()  # the shapes an enumerated-shape input accepts (from the spec)
    ranges: tuple[tuple[int, int | None], ...] = ()  # per dim (lower, upper or None: unbounded) of a RangeDim input

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    def accepts(self, shape: tuple[int, ...]) -> bool:
        shape = tuple(int(d) for d in shape)
        if self.enumerated:
            return shape in self.enumerated
        if len(shape) != len(self.shape) or any(w is not None and w != d for w, d in zip(self.shape, shape)):
            return False
        return all(lo <= d and (hi is None or d <= hi) for (lo, hi), d in zip(self.ranges, shape))

    def expected(self) -> str:
        """What `accepts` accepts, for error messages: '(1, 3)', 'one of [(1, 8), (1, 16)]', '(1, 1..128)'."""
        if self.enumerated:
            return f"one of {[tuple(e) for e in self.enumerated]}"
        if self.ranges:
            dims = [str(w) if w is not None else (f"{lo}.." + ("" if hi is None else str(hi)))
                    for w, (lo, hi) in zip(self.shape, self.ranges)]
            return "(" + ", ".join(dims) + ")"
        return str(tuple("?" if d is None else d for d in self.shape))

    def describe(self) -> dict:
        out = {"name": self.name, "shape": [("?" if d is None else d) for d in self.shape], "dtype": self.mil_dtype}
        if self.enumerated:
            out["enumerated_shapes"] = [list(s) for s in self.enumerated]
        if self.ranges:
            out["shape_ranges"] = [[lo, hi] for lo, hi in self.ranges]  # hi None: unbounded
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

    @property
    def function_names(self) -> list[str]:
        return sorted(self.program.functions)

    def op_type_counts(self) -> dict[str, int]:
        """Ops of each type in the function, ops inside control-flow blocks included."""
        counts: dict[str, int] = {}
        for op in walk_operations(self.function.operations):
            counts[op.op_type] = counts.get(op.op_type, 0) + 1
        return dict(sorted(counts.items()))


def walk_operations(operations):
    """Every op in program order, each op's nested blocks (cond, while_loop) right after it."""
    for op in operations:
        yield op
        for block in getattr(op, "blocks", None) or ():
            yield from walk_operations(block.operations)


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
    if name in ("string", "str") or name.startswith(("dict", "list")):
        return np.dtype(object)  # string consts (pad_type, mode ...), classifier labels/dicts, class lists
    if name.startswith("uint"):  # uint1 .. uint6
        return np.dtype(np.uint8)
    if name.startswith("int"):  # int4
        return np.dtype(np.int8)
    raise ProgramLoadError(f"MIL type {name!r} has no numpy storage dtype here")


def var_dtype(var) -> np.dtype:
    """numpy storage dtype of a var; lists (classify's `classes`) and dicts are Python objects."""
    from coremltools.converters.mil.mil import types

    if types.is_list(var.sym_type) or types.is_dict(var.sym_type):
        return np.dtype(object)
    return numpy_dtype(var.dtype)


def var_type_name(var) -> str:
    from coremltools.converters.mil.mil import types

    if types.is_list(var.sym_type):
        return "list"
    return mil_dtype_name(var.dtype) if not types.is_dict(var.sym_type) else "dict"


def static_shape(var) -> tuple[int, ...] | None:
    """The var's shape as ints, or None when any dimension is symbolic."""
    from coremltools.converters.mil.mil import types

    if types.is_list(var.sym_type) or types.is_dict(var.sym_type):
        return None  # classify's class list and probability dict have no tensor shape
    if not types.is_tensor(var.sym_type):
        return ()  # a scalar
    shape = []
    for d in var.shape:
        if isinstance(d, (int, np.integer)) and d >= 0:
            shape.append(int(d))
        else:
            return None  # symbolic, or -1: coremltools' "known only at run time" (e.g. topk with k = -1)
    return tuple(shape)


def _tensor_info(var, feature=None) -> TensorInfo:
    """Static dims as ints, symbolic dims as None; an input's enumerated shapes come from its spec feature."""
    from coremltools.converters.mil.mil import types

    shape = tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in var.shape) \
        if types.is_tensor(var.sym_type) else ()
    enumerated: tuple = ()
    ranges: tuple = ()
    if feature is not None and feature.type.WhichOneof("Type") == "multiArrayType":
        array = feature.type.multiArrayType
        if array.WhichOneof("ShapeFlexibility") == "enumeratedShapes":
            enumerated = tuple(tuple(int(d) for d in e.shape) for e in array.enumeratedShapes.shapes)
        elif array.WhichOneof("ShapeFlexibility") == "shapeRange":
            # upperBound -1 means unbounded (Core ML's FeatureTypes.proto SizeRange)
            ranges = tuple((int(r.lowerBound), None if r.upperBound < 0 else int(r.upperBound))
                           for r in array.shapeRange.sizeRanges)
            if len(ranges) != len(shape):
                raise ProgramLoadError(f"input {var.name!r}: {len(ranges)} shape ranges for a rank-{len(shape)} input")
    return TensorInfo(var.name, shape, var_dtype(var), var_type_name(var), enumerated, ranges)


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


def load_program(package_path: str | Path, function_name: str | None = None) -> LoadedProgram:
    """Read an .mlpackage (ML program) from disk into a PyMIL Program; `function_name` None: the default function."""
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
    description = spec.description
    if function_name is None:
        function_name = description.defaultFunctionName or "main"
    if function_name not in program.functions:
        raise ProgramLoadError(f"{path} has no function {function_name!r} (functions: {sorted(program.functions)})")
    function = program.functions[function_name]
    for described in description.functions:  # a multifunction package describes each function's inputs apart
        if described.name == function_name:
            description = described
    features = {f.name: f for f in description.input}
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
