"""Tensors built from a shape or a range: range_1d, shape, fill, fill_like (coremltools' iOS15/iOS16
tensor_operation.py); the output dtype is the op's declared one."""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_ints


@register("range_1d")
def op_range_1d(node, args, num):
    start, end, step = (np.asarray(args[k]).reshape(()) for k in ("start", "end", "step"))
    return np.arange(start, end, step).astype(node.output_dtypes[0])  # [start, end) by step


@register("shape")
def op_shape(node, args, num):
    return np.array(np.asarray(args["x"]).shape, dtype=np.int32)


@register("fill")
def op_fill(node, args, num):
    shape = as_ints(args["shape"])
    value = args.get("value", 0.0)
    return np.full(shape, np.asarray(value).reshape(()), dtype=node.output_dtypes[0])


@register("fill_like", since="iOS16")
def op_fill_like(node, args, num):
    ref = np.asarray(args["ref_tensor"])
    return np.full(ref.shape, np.asarray(args.get("value", 0.0)).reshape(()), dtype=node.output_dtypes[0])
