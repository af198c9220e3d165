"""Sorting along an axis: argsort and topk (coremltools' iOS15..iOS17 tensor_operation.py).

Descending unless `ascending`; ties keep index order (a stable sort; MIL leaves them open). topk k = -1 (iOS17)
takes the whole axis; iOS16 `return_indices=False` returns the values only; iOS17 `output_indices_dtype` is the
declared output dtype. Values are copied.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_axis, as_bool, as_int


def _order(x, axis, ascending):
    # stable: equal values keep their index order (descending sorts the negated keys; ints as float64)
    keys = x.astype(np.float64) if x.dtype.kind in "iub" else x
    return np.argsort(keys if ascending else -keys, axis=axis, kind="stable")


@register("argsort")
def op_argsort(node, args, num):
    x = np.asarray(args["x"])
    return _order(x, as_axis(args.get("axis", -1), x.ndim), as_bool(args.get("ascending", False)))


@register("topk")
def op_topk(node, args, num):
    x = np.asarray(args["x"])
    axis = as_axis(args.get("axis", -1), x.ndim)
    k = as_int(args.get("k", 1))
    k = x.shape[axis] if k < 0 else k
    order = _order(x, axis, as_bool(args.get("ascending", False)))
    indices = np.take(order, np.arange(k), axis=axis)
    values = np.take_along_axis(x, indices, axis=axis)
    if args.get("return_indices") is not None and not as_bool(args["return_indices"]):
        return values
    return values, indices
