"""Joining and splitting tensors: concat (with interleave), stack, split, tile. All copy values."""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_axis, as_bool, as_int, as_ints


@register("concat")
def op_concat(node, args, num):
    values = [np.asarray(v) for v in args["values"]]
    dtype = np.result_type(*values)
    values = [v.astype(dtype, copy=False) for v in values]
    if values[0].ndim == 0:
        return np.stack(values, axis=0)
    axis = as_axis(args["axis"], values[0].ndim)
    if args.get("interleave") is not None and as_bool(args["interleave"]):
        stacked = np.stack(values, axis=axis + 1)  # output[i::n] = values[i] along axis
        shape = list(values[0].shape)
        shape[axis] *= len(values)
        return stacked.reshape(shape)
    return np.concatenate(values, axis=axis)


@register("stack")
def op_stack(node, args, num):
    values = [np.asarray(v) for v in args["values"]]
    return np.stack(values, axis=(as_int(args["axis"]) if as_int(args["axis"]) >= 0
                                  else as_int(args["axis"]) + values[0].ndim + 1))


@register("split")
def op_split(node, args, num):
    x = np.asarray(args["x"])
    axis = as_axis(args["axis"], x.ndim)
    if args.get("split_sizes") is not None:
        sizes = as_ints(args["split_sizes"])
    else:
        n = as_int(args["num_splits"])
        if x.shape[axis] % n:
            raise ValueError(f"split: {x.shape[axis]} not divisible by num_splits {n} ({node.where()})")
        sizes = [x.shape[axis] // n] * n
    cuts = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, cuts, axis=axis))


@register("tile")
def op_tile(node, args, num):
    return np.tile(np.asarray(args["x"]), as_ints(args["reps"]))
