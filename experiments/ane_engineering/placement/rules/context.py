"""What the rule checks see: a PyMIL program as a `CheckContext` (ops, tensors, inputs, outputs, the model spec),
and the small helpers every check uses to report a `Finding`.

Every rule is a prediction from static facts (op types, shapes, dtypes, constants). Core ML decides placement with
its own cost model, which depends on the chip and OS version (apple/coremltools issue #1780: "There is no static
documentation, as it changes based on device generation, operating system version, tensor sizes"); on a Mac,
MLComputePlan is the authority (see placement/compute_plan.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...package.mil.tensors import is_const_like
from ...package.mil.walk import walk_operations
from .registry import Finding


def mil_types():
    """coremltools' MIL types module, imported on first use."""
    from coremltools.converters.mil.mil import types

    return types


def is_symbolic_dim(dim) -> bool:
    from coremltools.converters.mil.mil.types.symbolic import is_symbolic

    return is_symbolic(dim)


@dataclass
class TensorRef:
    """A tensor the checks look at: a function input, or one output of a non-constant op."""

    op: str           # the producing op's name (the input's name for a function input)
    op_type: str      # the producing op's type ("input" for a function input)
    var: Any
    shape: tuple
    dtype: str        # "fp16", "fp32", "int32", "bool", ...
    itemsize: int

    @property
    def symbolic(self) -> bool:
        return any(is_symbolic_dim(d) for d in self.shape)

    @property
    def nbytes(self) -> int | None:
        if self.symbolic:
            return None
        return int(math.prod(int(d) for d in self.shape)) * self.itemsize


def tensor_info(var) -> tuple[tuple, str, int] | None:
    """(shape, dtype name, item size) of a tensor or scalar Var; None for lists, tuples and states."""
    types = mil_types()
    sym_type = getattr(var, "sym_type", None)
    if not (types.is_tensor(sym_type) or types.is_scalar(sym_type)):
        return None
    dtype = var.dtype
    name = types.builtin_to_string(dtype)
    if name == "str":
        return None
    try:
        itemsize = np.dtype(types.nptype_from_builtin(dtype)).itemsize
    except Exception:  # pragma: no cover - unusual builtin types
        itemsize = 4
    return tuple(var.shape), name, int(itemsize)


class CheckContext:
    """A PyMIL program (its "main" function) and, optionally, the model spec it came with and what was measured
    running it (`measured`: {"headroom": the JSON of run/mil/headroom.py's HeadroomReport}; rules that need a
    measurement find nothing without it)."""

    def __init__(self, program, spec=None, function: str = "main", measured: dict | None = None):
        self.program = program
        self.spec = spec
        self.measured = measured or {}
        functions = program.functions
        self.function = functions[function] if function in functions else next(iter(functions.values()))
        self.operations = list(walk_operations(self.function))
        self.inputs = dict(self.function.inputs)
        self.outputs = list(self.function.outputs)
        self._input_ids = {id(v) for v in self.inputs.values()}
        self._output_ids = {id(v) for v in self.outputs}
        self.non_constant_ops = [op for op in self.operations if not is_const_like(op.op_type)]
        self.constant_ops = [op for op in self.operations if is_const_like(op.op_type)]
        self.tensors = list(self._collect_tensors())

    # -- tensors ---------------------------------------------------------------------------------------------------
    def _collect_tensors(self) -> Iterator[TensorRef]:
        for name, var in self.inputs.items():
            info = tensor_info(var)
            if info:
                yield TensorRef(name, "input", var, *info)
        for op in self.non_constant_ops:
            for var in op.outputs:
                info = tensor_info(var)
                if info:
                    yield TensorRef(op.name, op.op_type, var, *info)

    def non_constant_tensors(self, include_boundary_casts: bool = True) -> Iterator[TensorRef]:
        for tensor in self.tensors:
            if not include_boundary_casts and tensor.op_type == "cast" and self.is_boundary_cast(tensor.var.op):
                continue
            yield tensor

    def constant_outputs(self) -> Iterator[tuple[Any, Any]]:
        for op in self.constant_ops:
            for var in op.outputs:
                yield op, var

    # -- vars and ops ----------------------------------------------------------------------------------------------
    def is_function_input(self, var) -> bool:
        return id(var) in self._input_ids

    def is_function_output(self, var) -> bool:
        return id(var) in self._output_ids

    @staticmethod
    def is_constant_var(var) -> bool:
        """A compile-time constant: produced by const/constexpr_*, or carrying a known value."""
        producer = getattr(var, "op", None)
        if producer is not None and is_const_like(producer.op_type):
            return True
        return getattr(var, "val", None) is not None

    def is_boundary_cast(self, op) -> bool:
        """A cast that reads a function input or writes a function output: the host-side dtype change of an
        fp32 model interface (reported by the fp32-I/O rule, not as in-graph work)."""
        if op is None or op.op_type != "cast":
            return False
        x = op.inputs.get("x")
        return (x is not None and self.is_function_input(x)) or any(self.is_function_output(v) for v in op.outputs)

    # -- the model spec --------------------------------------------------------------------------------------------
    def spec_inputs(self) -> list:
        if self.spec is None:
            return []
        description = self.spec.description
        inputs = list(description.input)
        for function in getattr(description, "functions", ()):
            inputs.extend(function.input)
        return inputs

    def flexible_inputs(self) -> list[tuple[str, str, str]]:
        """(input name, "enumerated" | "range", detail) for every input of the spec with a flexible shape."""
        found = []
        for feature in self.spec_inputs():
            kind = feature.type.WhichOneof("Type")
            if kind == "multiArrayType":
                array = feature.type.multiArrayType
                flex = array.WhichOneof("ShapeFlexibility")
                if flex == "enumeratedShapes":
                    shapes = [tuple(s.shape) for s in array.enumeratedShapes.shapes]
                    found.append((feature.name, "enumerated", f"{len(shapes)} enumerated shapes {shapes}"))
                elif flex == "shapeRange":
                    ranges = [(r.lowerBound, r.upperBound) for r in array.shapeRange.sizeRanges]
                    found.append((feature.name, "range", f"shape ranges {ranges} (upper bound -1 = unbounded)"))
            elif kind == "imageType":
                image = feature.type.imageType
                flex = image.WhichOneof("SizeFlexibility")
                if flex == "enumeratedSizes":
                    found.append((feature.name, "enumerated",
                                  f"{len(image.enumeratedSizes.sizes)} enumerated image sizes"))
                elif flex == "imageSizeRange":
                    found.append((feature.name, "range", "image size range"))
        return found


def finding(rule_id: str, tensor_or_op, detail: str) -> Finding:
    """A finding of `rule_id` on a TensorRef (named by its producing op) or an op."""
    if isinstance(tensor_or_op, TensorRef):
        return Finding(rule_id, tensor_or_op.op, tensor_or_op.op_type, detail)
    return Finding(rule_id, tensor_or_op.name, tensor_or_op.op_type, detail)


def shape_str(shape: Iterable) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def const_arg(op, name: str):
    """The compile-time value of input `name` of `op` (None if absent or computed at run time)."""
    var = op.inputs.get(name)
    return None if var is None else var.val
