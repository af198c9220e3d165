"""PyMIL vars as tensors: numpy storage dtypes, shapes, element sizes, and what a constant occupies in weight.bin.

The one home of these facts for every reader of a program: the executor stores values in `var_dtype`, the loader
describes inputs with `var_type_name` and `static_shape`, the cost model counts bytes with `fixed_shape`,
`dtype_bits` and `stored_bytes`, and every module tells constants from computed values with `is_const_like`.
"""

from __future__ import annotations

import math
import re

import numpy as np

from .errors import ProgramLoadError, SymbolicShapeError

# Inputs that configure an op rather than carry data: never bytes moved, never part of a constant's storage.
PARAMETER_PORTS = frozenset({
    "axes", "axis", "perm", "begin", "end", "stride", "strides", "begin_mask", "end_mask", "squeeze_mask", "size",
    "pad", "pad_type", "dilations", "groups", "equation", "shape", "reps", "split_sizes", "num_splits", "epsilon",
    "mode", "keep_dims", "interleave", "transpose_x", "transpose_y", "output_shape", "alpha", "vector_axis",
    "validate_indices", "batch_dims", "dtype", "lower", "upper", "half_pixel_centers", "align_corners",
})
_NUMPY = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int8": np.int8, "int16": np.int16,
          "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
          "uint64": np.uint64, "bool": np.bool_}


def _types():
    from coremltools.converters.mil.mil import types

    return types


def is_const_like(op_type: str) -> bool:
    """const and constexpr_* ops are constants: Core ML does not place them on a compute device."""
    return op_type == "const" or op_type.startswith("constexpr_")


def is_const_var(var) -> bool:
    """A var produced by a const or constexpr_* op."""
    return var.op is not None and is_const_like(var.op.op_type)


def mil_dtype_name(builtin) -> str:
    return _types().builtin_to_string(builtin)


def numpy_dtype(builtin) -> np.dtype:
    """Storage dtype for a MIL builtin type. Sub-byte ints (uint4, int4, uint1...) are held unpacked in 8 bits."""
    name = mil_dtype_name(builtin)
    if name in _NUMPY:
        return np.dtype(_NUMPY[name])
    if name in ("string", "str") or name.startswith(("dict", "list")):
        return np.dtype(object)  # string consts (pad_type, mode ...), classifier labels/dicts, class lists
    if name.startswith("uint"):  # uint1 .. uint6
        return np.dtype(np.uint8)
    if name.startswith("int"):  # int4
        return np.dtype(np.int8)
    raise ProgramLoadError(f"MIL type {name!r} has no numpy storage dtype here")


def var_dtype(var) -> np.dtype:
    """numpy storage dtype of a var; lists (classify's `classes`) and dicts are Python objects."""
    types = _types()
    if types.is_list(var.sym_type) or types.is_dict(var.sym_type):
        return np.dtype(object)
    return numpy_dtype(var.dtype)


def var_type_name(var) -> str:
    types = _types()
    if types.is_list(var.sym_type):
        return "list"
    return mil_dtype_name(var.dtype) if not types.is_dict(var.sym_type) else "dict"


def static_shape(var) -> tuple[int, ...] | None:
    """The var's shape as ints, or None when any dimension is symbolic."""
    types = _types()
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


def fixed_shape(var) -> tuple[int, ...]:
    """The var's shape as ints (a scalar: ()); SymbolicShapeError when a dimension is not a fixed number."""
    shape = tuple(var.shape) if var.shape is not None else ()
    for dim in shape:
        if not isinstance(dim, (int,)) and not hasattr(dim, "__index__"):
            raise SymbolicShapeError(f"{var.name}: symbolic shape {shape}; a fixed shape is needed here")
    return tuple(int(d) for d in shape)


def element_count(var) -> int:
    return math.prod(fixed_shape(var))


def dtype_bits(dtype) -> int:
    """Bits per element of a MIL builtin type (fp16 -> 16, uint4 -> 4, bool -> 8, str -> 0)."""
    name = mil_dtype_name(dtype)
    if name == "bool":
        return 8
    match = re.search(r"(\d+)$", name or "")
    return int(match.group(1)) if match else 0


def dense_bytes(var) -> int:
    """Bytes of the var's elements in its dtype (sub-byte types packed)."""
    return math.ceil(element_count(var) * dtype_bits(var.dtype) / 8)


def stored_bytes(var) -> int:
    """Bytes a constant occupies in the package's weight file: a const in its dtype (uint4 indices: half a byte
    each); a constexpr_* output as the sum of what it is made from (indices + LUT, data + scales, ...)."""
    if var.op is None or var.op.op_type == "const":
        return dense_bytes(var)
    total = 0
    for port, value in var.op.inputs.items():
        for source in (value if isinstance(value, (list, tuple)) else (value,)):
            if port in PARAMETER_PORTS or not fixed_shape(source):
                continue
            total += stored_bytes(source) if is_const_var(source) else dense_bytes(source)
    return total
