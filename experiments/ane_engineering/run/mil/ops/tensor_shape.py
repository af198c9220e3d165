"""Shape and layout: transpose, reshape, expand_dims, squeeze, slices, concat, stack, split, tile, range_1d,
shape, fill.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_axis, as_bool, as_bools, as_int, as_ints


@register("transpose")
def op_transpose(node, args, num):
    return np.transpose(args["x"], as_ints(args["perm"]))


@register("reshape")
def op_reshape(node, args, num):
    x = np.asarray(args["x"])
    shape = node.output_shapes[0]
    if shape is None:  # resolve 0 (copy from x, right-aligned as iOS17) and -1 ourselves
        target = as_ints(args["shape"])
        rev_in = list(x.shape)[::-1]
        rev = target[::-1]
        for i, t in enumerate(rev):
            if t == 0:
                rev[i] = rev_in[i] if i < len(rev_in) else 1
        shape = tuple(rev[::-1])
    return x.reshape(shape)


@register("expand_dims")
def op_expand_dims(node, args, num):
    x = np.asarray(args["x"])
    axes = as_ints(args["axes"])
    out_rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a + out_rank if a < 0 else a for a in axes):
        shape.insert(a, 1)
    return x.reshape(shape)


@register("squeeze")
def op_squeeze(node, args, num):
    x = np.asarray(args["x"])
    if args.get("axes") is None:
        y = np.squeeze(x)
    else:
        y = np.squeeze(x, axis=tuple(as_ints(args["axes"])))
    return y if y.shape != () or x.ndim == 0 else y.reshape(1)  # MIL keeps a squeezed-to-scalar tensor rank 1


def slice_index(rank: int, args) -> tuple:
    """slice_by_index's numpy index: begin/end/stride with begin, end and squeeze masks (slice_update shares it)."""
    begin, end = as_ints(args["begin"]), as_ints(args["end"])
    stride = as_ints(args["stride"]) if args.get("stride") is not None else [1] * rank
    begin_mask = as_bools(args.get("begin_mask"), rank)
    end_mask = as_bools(args.get("end_mask"), rank)
    squeeze_mask = as_bools(args.get("squeeze_mask"), rank)
    index = []
    for d in range(rank):
        if squeeze_mask[d]:
            index.append(begin[d])  # pure index at begin[d]; end ignored
            continue
        index.append(slice(None if begin_mask[d] else begin[d], None if end_mask[d] else end[d], stride[d]))
    return tuple(index)


@register("slice_by_index")
def op_slice_by_index(node, args, num):
    x = np.asarray(args["x"])
    return x[slice_index(x.ndim, args)]


@register("slice_by_size")
def op_slice_by_size(node, args, num):
    x = np.asarray(args["x"])
    begin, size = as_ints(args["begin"]), as_ints(args["size"])
    index = tuple(slice(b, x.shape[d] if s == -1 else b + s) for d, (b, s) in enumerate(zip(begin, size)))
    return x[index]


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
    return np.stack(values, axis=as_int(args["axis"]) if as_int(args["axis"]) >= 0 else as_int(args["axis"]) + values[0].ndim + 1)


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
