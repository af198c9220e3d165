"""Load a saved .mlpackage back into a PyMIL Program, with no torch model, no checkpoint and no Core ML.

    files = open_package(path)                  # container.py: no links or special files, manifest items inside
    spec = read_spec(files)                     # spec_check.py: model.mlmodel, bounded, parsed
    check_spec(spec, ...)                       # op types, variables, opsets, blobs, the model description
    program = milproto.load(spec, version, weights_dir)   # PyMIL's own loader, on what passed

Every refusal is one ProgramLoadError naming the package and what is wrong; whatever PyMIL still raises on a
program the checks let through is turned into one, too. While PyMIL builds the program it computes the value of every
op whose inputs are all constant (Operation._auto_val, right after type inference); a program may declare a small
output and ask for a huge one (tile or fill of constants), so for the length of the load that step first refuses an
inferred output larger than value_bound (core/limits.py), before numpy allocates it. The loader rebuilds every op
through PyMIL's builder, so each op carries all of its inputs, optional ones included (defaults are materialised as
const inputs), and every const holds the value read from the package's weight.bin (fp16 weights are the stored fp16
values; palettized indices are unpacked to uint8 by PyMIL). Nothing here is re-derived from torch weights.

`LoadedProgram` exposes the function's input and output names, shapes and numpy dtypes, and the model spec. Our BC1S
exports have fixed shapes; an input with enumerated shapes (the original-layout baseline export) keeps None for its
flexible dims and lists the shapes it accepts; an input with a shape range (ct.RangeDim) keeps None for its
flexible dims and the [lower, upper] bound of every dim, read from the model description. A multifunction package
runs one function at a time (`function_name`, default: the package's default function).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.limits import value_bound
from .container import PackageFiles, open_package
from .errors import ProgramLoadError
from .spec_check import check_spec, read_spec
from .tensors import var_dtype, var_type_name
from .walk import walk_operations


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | None, ...]  # None for a flexible (symbolic) dimension
    dtype: np.dtype  # numpy storage dtype (np.float16 for our FP16 exports)
    mil_dtype: str  # MIL type name, e.g. "fp16", "fp32", "int32"
    enumerated: tuple[tuple[int, ...], ...] = ()  # the shapes an enumerated-shape input accepts (from the spec)
    ranges: tuple[tuple[int, int | None], ...] = ()  # per dim (lower, upper or None: unbounded) of a RangeDim input
    state: bool = False  # an iOS18 state (ct.StateType): a buffer read_state reads and coreml_update_state writes

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

    def largest(self) -> tuple[int | None, ...]:
        """The largest shape `accepts` accepts, per dim; None where a dim is unbounded."""
        if self.enumerated:
            return tuple(max(e[d] for e in self.enumerated) for d in range(len(self.enumerated[0])))
        if self.ranges:
            return tuple(w if w is not None else hi for w, (_, hi) in zip(self.shape, self.ranges))
        return self.shape

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
        if self.state:
            out["state"] = True
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
    spec: object = None  # the Model protobuf it was loaded from (None for a program built in memory)

    @classmethod
    def built(cls, program, opset: str, function_name: str = "main",
              path: str = "<builder program>") -> "LoadedProgram":
        """A program made with PyMIL's builder in memory (no package), for the executor's own tests."""
        function = program.functions[function_name]
        return cls(path=Path(path), program=program, function_name=function_name, specification_version=0,
                   opset=opset, inputs=[tensor_info(v) for v in function.inputs.values()],
                   outputs=[tensor_info(v) for v in function.outputs], weights_dir=None)

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
        for op in walk_operations(self.function):
            counts[op.op_type] = counts.get(op.op_type, 0) + 1
        return dict(sorted(counts.items()))


def tensor_info(var, feature=None) -> TensorInfo:
    """Static dims as ints, symbolic dims as None; an input's enumerated shapes come from its spec feature."""
    from coremltools.converters.mil.mil import types

    state = types.is_state(var.sym_type)  # its var.shape and var.dtype are those of the tensor it holds
    shape = tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in var.shape) \
        if types.is_tensor(var.sym_type) or state else ()
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
    return TensorInfo(var.name, shape, var_dtype(var), var_type_name(var), enumerated, ranges, state)


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


def check_package(package_path: str | Path, function_name: str | None = None) -> tuple[PackageFiles, object, str]:
    """(files, model spec, function name) of a package that passed every check short of building the program: what
    a backend that does not build it (Core ML) checks before it compiles."""
    path = Path(package_path)
    if not path.exists() and not path.is_symlink():
        raise ProgramLoadError(f"no model package at {path}")
    files = open_package(path)
    spec = read_spec(files)
    with _quiet():
        name = check_spec(spec, str(path), files.weights_dir, function_name, files)
    return files, spec, name


@contextlib.contextmanager
def _bounded_constant_folding(where: str):
    """While a program is built: refuse folding an op of constant inputs into a value larger than value_bound."""
    from coremltools.converters.mil.mil import types
    from coremltools.converters.mil.mil.operation import Operation

    from .tensors import dtype_bits

    limit, original = value_bound(), Operation._auto_val

    def bounded(op, output_types):
        inputs = [v for value in op.inputs.values() for v in (value if isinstance(value, (list, tuple)) else (value,))]
        if op.op_type != "const" and all(getattr(v, "sym_val", None) is not None for v in inputs):
            for output in output_types:
                if not types.is_tensor(output):
                    continue  # a scalar, a list or a dict: no size to speak of
                shape = output.get_shape()
                if all(isinstance(d, (int, np.integer)) for d in shape):
                    size = math.prod(int(d) for d in shape) * max(1, dtype_bits(output.get_primitive())) // 8
                    if size > limit:
                        raise ProgramLoadError(f"{where}: op {op.name[:60]!r} ({op.op_type}) of constant inputs would "
                                               f"fold into a {list(shape)[:8]} value of {size} bytes, more than the "
                                               f"{limit} a value may take")
        return original(op, output_types)

    Operation._auto_val = bounded
    try:
        yield
    finally:
        Operation._auto_val = original


def _build(spec, weights_dir: Path | None, specification_version: int, where: str):
    """PyMIL's loader on a checked spec; anything it still raises becomes one ProgramLoadError line."""
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    try:
        with _bounded_constant_folding(where):
            return milproto_load(spec, specification_version, os.path.abspath(weights_dir) if weights_dir else "")
    except ProgramLoadError:
        raise
    except Exception as problem:  # noqa: BLE001 - whatever the checks did not foresee still ends in one line
        detail = str(problem).strip().splitlines()[0][:200] if str(problem).strip() else ""
        raise ProgramLoadError(f"{where}: PyMIL cannot build the program ({type(problem).__name__}"
                               + (f": {detail}" if detail else "") + ")") from problem


def load_program(package_path: str | Path, function_name: str | None = None, *,
                 specification_version: int | None = None) -> LoadedProgram:
    """Read an .mlpackage (ML program) from disk into a PyMIL Program; `function_name` None: the default function.
    `specification_version`: the version PyMIL builds the program at (default: the package's own)."""
    files, spec, function_name = check_package(package_path, function_name)
    path = files.root
    with _quiet():
        program = _build(spec, files.weights_dir, int(specification_version or spec.specificationVersion), str(path))
    description = spec.description
    for described in description.functions:  # a multifunction package describes each function's inputs apart
        if described.name == function_name:
            description = described
    function = program.functions[function_name]
    features = {f.name: f for f in description.input}
    inputs = [tensor_info(var, features.get(name)) for name, var in function.inputs.items()]
    outputs = [tensor_info(var) for var in function.outputs]
    return LoadedProgram(
        path=path,
        program=program,
        function_name=function_name,
        specification_version=int(spec.specificationVersion),
        opset=getattr(function.opset_version, "name", str(function.opset_version)),
        inputs=inputs,
        outputs=outputs,
        weights_dir=os.path.abspath(files.weights_dir) if files.weights_dir else None,
        spec=spec,
    )


def program_of_model(mlmodel, specification_version: int | None = None):
    """The PyMIL program of a coremltools MLModel kept as a package (mlmodel.package_path), through the checks of
    load_program: a `pymil_load_func` for coremltools' graph-pass helper."""
    return load_program(mlmodel.package_path, specification_version=specification_version).program
