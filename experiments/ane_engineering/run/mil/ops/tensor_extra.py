"""Tensor ops beyond the tensor_shape family: cumsum, band_part, one_hot, non_zero, argsort, topk, flatten2d,
fill_like, reshape_like, reverse, reverse_sequence, sliding_windows, slice_update, space_to_depth, depth_to_space,
pixel_shuffle, pixel_unshuffle, space_to_batch, batch_to_space.

Semantics are coremltools' op definitions (iOS15 tensor_operation.py / tensor_transformation.py and their
iOS16-18 versions), mostly their `value_inference`:
- cumsum: along `axis` (default 0); `exclusive` starts from 0; `reverse` sums from the end.
- band_part: keeps x[..., m, n] where (lower < 0 or m - n <= lower) and (upper < 0 or n - m <= upper).
- one_hot: a new axis (default -1) of one_hot_vector_size; on_value where the index hits, off_value elsewhere.
- argsort / topk: descending unless `ascending`; ties keep index order (stable sort; MIL leaves them open);
  topk k = -1 (iOS17) takes the whole axis; iOS16 `return_indices=False` returns the values only; iOS17
  `output_indices_dtype` is the declared output dtype.
- depth_to_space / space_to_depth: TensorFlow's DCR order, out[n, c, h*b + i, w*b + j] =
  in[n, (i*b + j) * C_out + c, h, w]; pixel_shuffle / pixel_unshuffle: PyTorch's CRD order,
  out[n, c, h*f + i, w*f + j] = in[n, c*f*f + i*f + j, h, w].
- space_to_batch / batch_to_space: tf.space_to_batch_nd on NCHW: pad, then block (i, j) of image n goes to
  batch (i * b1 + j) * N + n; batch_to_space is the inverse followed by the crop.
- sliding_windows: windows of `size` every `stride` along `axis` -> [..., (d - size) // stride + 1, size, ...].
- slice_update (iOS18): x with x[slice_by_index(begin, end, stride, masks)] = update.

Numerics: all but cumsum copy values. cumsum accumulates in float32 (fp32-accumulate) or sequentially in fp16
with every partial sum rounded (fp16-strict).
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_axis, as_bool, as_int, as_ints
from .tensor_shape import slice_index

IOS16_ON = ("iOS16", "iOS17", "iOS18")  # ops coremltools first defines in iOS16


@register("cumsum")
def op_cumsum(node, args, num):
    x = num.f(args["x"])
    axis = as_axis(args.get("axis", 0), x.ndim)
    exclusive, reverse = as_bool(args.get("exclusive", False)), as_bool(args.get("reverse", False))
    data = np.flip(x, axis) if reverse else x
    if num.strict and x.dtype == np.float16:
        moved = np.moveaxis(data, axis, 0)
        out = np.empty_like(moved)
        acc = np.zeros(moved.shape[1:], np.float16)
        for i in range(moved.shape[0]):
            np.add(acc, moved[i], out=acc)  # rounded to fp16 after every addition
            out[i] = acc
        out = np.moveaxis(out, 0, axis)
    else:
        out = np.cumsum(data, axis=axis, dtype=np.float32 if x.dtype.kind == "f" else None)
    if exclusive:  # shift by one: the first sum is 0
        zeros = np.zeros_like(np.take(out, [0], axis=axis))
        out = np.concatenate([zeros, np.take(out, np.arange(out.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


@register("band_part")
def op_band_part(node, args, num):
    x = np.asarray(args["x"])
    lower, upper = as_int(args.get("lower", -1)), as_int(args.get("upper", -1))
    m = np.arange(x.shape[-2])[:, None]
    n = np.arange(x.shape[-1])[None, :]
    keep = ((lower < 0) | (m - n <= lower)) & ((upper < 0) | (n - m <= upper))
    return np.where(keep, x, np.zeros((), x.dtype))


@register("one_hot")
def op_one_hot(node, args, num):
    indices = np.asarray(args["indices"]).astype(np.int64)
    depth = as_int(args["one_hot_vector_size"])
    axis = as_int(args.get("axis", -1))
    axis = axis + indices.ndim + 1 if axis < 0 else axis
    dtype = node.output_dtypes[0]
    hit = np.expand_dims(indices, axis) == np.arange(depth).reshape([-1 if d == axis else 1 for d in range(indices.ndim + 1)])
    on = np.asarray(args.get("on_value", 1)).astype(dtype)
    off = np.asarray(args.get("off_value", 0)).astype(dtype)
    return np.where(hit, on, off)


@register("non_zero")
def op_non_zero(node, args, num):
    return np.argwhere(np.asarray(args["x"])).astype(np.int32)  # [N, rank]: one row per non-zero, row-major


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


@register("flatten2d")
def op_flatten2d(node, args, num):
    x = np.asarray(args["x"])
    axis = as_int(args.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


@register("fill_like", opsets=IOS16_ON)
def op_fill_like(node, args, num):
    ref = np.asarray(args["ref_tensor"])
    return np.full(ref.shape, np.asarray(args.get("value", 0.0)).reshape(()), dtype=node.output_dtypes[0])


@register("reshape_like", opsets=IOS16_ON)
def op_reshape_like(node, args, num):
    shape = []
    for ref, begin, end, end_mask in zip(args["ref_tensors"], args["begins"], args["ends"], args["end_masks"]):
        dims = np.asarray(ref).shape
        shape += list(dims[as_int(begin):] if as_bool(end_mask) else dims[as_int(begin):as_int(end)])
    return np.asarray(args["x"]).reshape(shape)


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


@register("slice_update", opsets=("iOS18",))
def op_slice_update(node, args, num):
    out = np.array(args["x"], copy=True)
    index = slice_index(out.ndim, args)
    out[index] = np.asarray(args["update"]).reshape(out[index].shape)
    return out


def _dcr_to_space(x, b):
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)  # (n, C', h, i, w, j)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_dcr(x, b):
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)  # (n, i, j, c, h, w)
    return y.reshape(n, c * b * b, h // b, w // b)


@register("depth_to_space")
def op_depth_to_space(node, args, num):
    return _dcr_to_space(np.asarray(args["x"]), as_int(args["block_size"]))


@register("space_to_depth")
def op_space_to_depth(node, args, num):
    return _space_to_dcr(np.asarray(args["x"]), as_int(args["block_size"]))


@register("pixel_shuffle")
def op_pixel_shuffle(node, args, num):
    x = np.asarray(args["x"])
    f = as_int(args["upscale_factor"])
    n, c, h, w = x.shape
    y = x.reshape(n, c // (f * f), f, f, h, w).transpose(0, 1, 4, 2, 5, 3)  # (n, C', h, i, w, j)
    return y.reshape(n, c // (f * f), h * f, w * f)


@register("pixel_unshuffle", opsets=IOS16_ON)
def op_pixel_unshuffle(node, args, num):
    x = np.asarray(args["x"])
    f = as_int(args["downscale_factor"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // f, f, w // f, f).transpose(0, 1, 3, 5, 2, 4)  # (n, c, i, j, h, w)
    return y.reshape(n, c * f * f, h // f, w // f)


@register("space_to_batch")
def op_space_to_batch(node, args, num):
    x = np.asarray(args["x"])
    b0, b1 = as_ints(args["block_shape"])
    (p0, p1), (p2, p3) = np.asarray(args["paddings"]).reshape(2, 2).tolist()
    x = np.pad(x, [(0, 0), (0, 0), (p0, p1), (p2, p3)])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b0, b0, w // b1, b1).transpose(3, 5, 0, 1, 2, 4)  # (i, j, n, c, h', w')
    return y.reshape(b0 * b1 * n, c, h // b0, w // b1)


@register("batch_to_space")
def op_batch_to_space(node, args, num):
    x = np.asarray(args["x"])
    b0, b1 = as_ints(args["block_shape"])
    (c0, c1), (c2, c3) = np.asarray(args["crops"]).reshape(2, 2).tolist()
    nb, c, h, w = x.shape
    n = nb // (b0 * b1)
    y = x.reshape(b0, b1, n, c, h, w).transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * b0, w * b1)
    return y[:, :, c0:h * b0 - c1, c2:w * b1 - c3]
