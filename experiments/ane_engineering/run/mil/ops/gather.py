"""Indexing: gather (with batch_dims) and gather_along_axis."""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_axis, as_bool, as_int


@register("gather")
def op_gather(node, args, num):
    x = np.asarray(args["x"])
    indices = np.asarray(args["indices"]).astype(np.int64)
    axis = as_axis(args.get("axis", 0), x.ndim)
    batch_dims = as_int(args.get("batch_dims", 0))
    if (args.get("validate_indices") is not None and as_bool(args["validate_indices"])
            and np.any((indices < 0) | (indices >= x.shape[axis]))):
        raise IndexError(f"gather indices out of bounds [0, {x.shape[axis]}) ({node.where()})")
    if batch_dims == 0:
        return np.take(x, indices, axis=axis)
    batch_shape = x.shape[:batch_dims]
    nb = int(np.prod(batch_shape))
    xs = x.reshape((nb,) + x.shape[batch_dims:])
    ids = indices.reshape((nb,) + indices.shape[batch_dims:])
    out = np.stack([np.take(xs[b], ids[b], axis=axis - batch_dims) for b in range(nb)])
    return out.reshape(tuple(batch_shape) + out.shape[1:])


@register("gather_along_axis")
def op_gather_along_axis(node, args, num):
    x = np.asarray(args["x"])
    indices = np.asarray(args["indices"]).astype(np.int64)
    axis = as_axis(args.get("axis", 0), x.ndim)
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    if np.any((indices < 0) | (indices >= x.shape[axis])):
        raise IndexError(f"gather_along_axis indices out of bounds [0, {x.shape[axis]}) ({node.where()})")
    return np.take_along_axis(x, indices, axis=axis)
