"""Selecting elements by position: slice_by_index, slice_by_size, slice_update, reverse, reverse_sequence,
sliding_windows, band_part.

Semantics are coremltools' op definitions (iOS15 tensor_transformation.py / tensor_operation.py and their
iOS16-18 versions), mostly their `value_inference`:
- slice_by_index: begin/end/stride with begin, end and squeeze masks; slice_update (iOS18): x with
  x[slice_by_index(begin, end, stride, masks)] = update.
- sliding_windows: windows of `size` every `stride` along `axis` -> [..., (d - size) // stride + 1, size, ...].
- band_part: keeps x[..., m, n] where (lower < 0 or m - n <= lower) and (upper < 0 or n - m <= upper), zero elsewhere.
All copy values.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_axis, as_bools, as_int, as_ints


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


@register("slice_update", since="iOS18")
def op_slice_update(node, args, num):
    out = np.array(args["x"], copy=True)
    index = slice_index(out.ndim, args)
    out[index] = np.asarray(args["update"]).reshape(out[index].shape)
    return out


@register("reverse")
def op_reverse(node, args, num):
    x = np.asarray(args["x"])
    axes = as_ints(args["axes"]) if args.get("axes") is not None else list(range(x.ndim))
    return np.flip(x, axis=tuple(axes)) if axes else x


@register("reverse_sequence")
def op_reverse_sequence(node, args, num):
    x = np.asarray(args["x"])
    lengths = np.asarray(args["lengths"]).astype(np.int64).reshape(-1)
    seq = as_axis(args.get("seq_axis", 0), x.ndim)
    batch = as_axis(args.get("batch_axis", 0), x.ndim)
    out = np.array(x, copy=True)
    for b, n in enumerate(lengths):  # in slice b of batch_axis, the first n elements along seq_axis reversed
        src = [slice(None)] * x.ndim
        src[batch] = b
        src[seq] = slice(0, int(n))
        reversed_part = np.flip(x[tuple(src)], axis=seq - (1 if batch < seq else 0))
        out[tuple(src)] = reversed_part
    return out


@register("sliding_windows")
def op_sliding_windows(node, args, num):
    x = np.asarray(args["x"])
    axis = as_axis(args["axis"], x.ndim)
    size, stride = as_int(args["size"]), as_int(args.get("stride", 1))
    count = (x.shape[axis] - size) // stride + 1
    starts = np.arange(count) * stride
    index = starts[:, None] + np.arange(size)[None, :]  # (count, size) positions along axis
    return np.take(x, index, axis=axis)  # [..., count, size, ...]


@register("band_part")
def op_band_part(node, args, num):
    x = np.asarray(args["x"])
    lower, upper = as_int(args.get("lower", -1)), as_int(args.get("upper", -1))
    m = np.arange(x.shape[-2])[:, None]
    n = np.arange(x.shape[-1])[None, :]
    keep = ((lower < 0) | (m - n <= lower)) & ((upper < 0) | (n - m <= upper))
    return np.where(keep, x, np.zeros((), x.dtype))
