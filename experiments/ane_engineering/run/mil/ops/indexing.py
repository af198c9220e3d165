"""Reading and writing by index: gather (with batch_dims), gather_along_axis, gather_nd, scatter, scatter_along_axis,
scatter_nd (coremltools' iOS15/16/17 scatter_gather.py), non_zero and one_hot (tensor_operation.py).

- gather_nd: output[i_0..i_{K-2}] = x[indices[i_0..i_{K-2}]] (tf.gather_nd); iOS16+ `batch_dims` leading axes of x
  and indices are batch axes gathered pairwise, output shape indices.shape[:-1] + x.shape[batch_dims + K[-1]:].
- scatter (slices along `axis` at a 1-D index list), scatter_along_axis (np.put_along_axis-shaped), scatter_nd
  (slices at index tuples): output = data, then output[idx] = mode(output[idx], update) for every update in order;
  modes update, add, sub (output - update), mul, div (output / update), max, min; default "add". Repeated indices
  accumulate (numpy's unbuffered ufunc.at) and, for update, the last one wins.
- Indices: iOS15/16 let negative indices count from the end; any other index outside [0, size) is refused.
  iOS17 (the ops that carry `validate_indices`) calls negative indices out of bounds: with validate_indices=True any
  index outside [0, size) is refused; without it the result is undefined ("but memory safe"): gather_nd still
  counts negatives from the end and refuses the rest, the scatters drop the updates at invalid indices (coremltools'
  iOS17 op tests require that such a scatter does not give the wrapped-index result).
- non_zero: [N, rank] int32, one row per non-zero element in row-major order.
- one_hot: a new axis (default -1) of one_hot_vector_size; on_value where the index hits, off_value elsewhere.

Numerics: gathers, non_zero and one_hot copy. Scatter accumulation runs in the mode's compute dtype: float32 then
one rounding in fp32-accumulate, every accumulation rounded to fp16 in fp16-strict; int32 data stays int32.
"""

from __future__ import annotations

import numpy as np

from ..registry import UnsupportedOpError, register
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


_MODES = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum}


def _checked(node, indices, sizes, args) -> np.ndarray:
    """int64 indices with negatives wrapped; out-of-range ones refused (always when validate_indices is set)."""
    idx = np.asarray(indices).astype(np.int64)
    sizes = np.asarray(sizes, np.int64)
    validate = args.get("validate_indices") is not None and as_bool(args["validate_indices"])
    if validate and np.any((idx < 0) | (idx >= sizes)):
        raise IndexError(f"{node.op_type} indices out of bounds [0, {sizes.tolist()}) ({node.where()})")
    idx = np.where(idx < 0, idx + sizes, idx)
    if np.any((idx < 0) | (idx >= sizes)):
        raise IndexError(f"{node.op_type} indices out of bounds for sizes {sizes.tolist()} ({node.where()})")
    return idx


def _scatter_indices(node, indices, sizes, args, tuples: bool = False):
    """(indices, valid): iOS17 scatters without validation keep only in-range indices (`valid` per index, or per
    index tuple along the last axis when `tuples`); otherwise `_checked` and all valid."""
    idx = np.asarray(indices).astype(np.int64)
    if "validate_indices" in args and not as_bool(args["validate_indices"]):
        inside = (idx >= 0) & (idx < np.asarray(sizes, np.int64))
        return np.where(inside, idx, 0), (inside.all(axis=-1) if tuples else inside)
    idx = _checked(node, idx, sizes, args)
    return idx, np.ones(idx.shape[:-1] if tuples else idx.shape, bool)


@register("gather_nd")
def op_gather_nd(node, args, num):
    x = np.asarray(args["x"])
    b = as_int(args.get("batch_dims", 0))
    indices = np.asarray(args["indices"])
    k = indices.shape[-1]
    idx = _checked(node, indices, x.shape[b:b + k], args)
    batch = int(np.prod(x.shape[:b])) if b else 1
    xs = x.reshape((batch,) + x.shape[b:])
    flat = idx.reshape(batch, -1, k)  # (B, M, k)
    batch_index = np.broadcast_to(np.arange(batch)[:, None], flat.shape[:2])
    out = xs[(batch_index,) + tuple(flat[..., j] for j in range(k))]  # (B, M, *x.shape[b+k:])
    return out.reshape(indices.shape[:-1] + x.shape[b + k:])


def _apply(node, out, index, updates, mode: str):
    if mode == "update":
        out[index] = updates  # repeated indices: numpy assigns in order, the last one stays
    elif mode in _MODES:
        with np.errstate(divide="ignore", invalid="ignore"):
            _MODES[mode].at(out, index, updates)
    else:
        raise UnsupportedOpError(f"{node.op_type} mode {mode!r} ({node.where()})")
    return out


def _data(args, num):
    data, updates = num.f(args["data"]), num.f(args["updates"])
    return np.array(data, copy=True), updates.astype(data.dtype, copy=False)


@register("scatter")
def op_scatter(node, args, num):
    out, updates = _data(args, num)
    axis = as_axis(args.get("axis", 0), out.ndim)
    indices = np.asarray(args["indices"])
    idx, valid = _scatter_indices(node, indices.reshape(-1), out.shape[axis], args)
    # indices of any rank, as Core ML takes them (coremltools' own cases, TF's scatter_update semantics): updates
    # are data.shape[:axis] + indices.shape + data.shape[axis+1:], one slice per index in row-major order
    updates = updates.reshape(out.shape[:axis] + (indices.size,) + out.shape[axis + 1:])
    index = (slice(None),) * axis + (idx[valid],)
    kept = np.take(updates, np.flatnonzero(valid), axis=axis)
    return _apply(node, out, index, kept, str(args.get("mode", "add")))


@register("scatter_along_axis")
def op_scatter_along_axis(node, args, num):
    out, updates = _data(args, num)
    axis = as_axis(args.get("axis", 0), out.ndim)
    idx, valid = _scatter_indices(node, args["indices"], out.shape[axis], args)
    grid = [np.broadcast_to(g, idx.shape) for g in np.indices(idx.shape, sparse=True)]
    grid[axis] = idx
    return _apply(node, out, tuple(g[valid] for g in grid), updates[valid], str(args.get("mode", "add")))


@register("scatter_nd")
def op_scatter_nd(node, args, num):
    out, updates = _data(args, num)
    indices = np.asarray(args["indices"])
    k = indices.shape[-1]
    idx, valid = _scatter_indices(node, indices, out.shape[:k], args, tuples=True)
    idx, valid = idx.reshape(-1, k), valid.reshape(-1)
    flat_updates = updates.reshape((idx.shape[0],) + out.shape[k:])[valid]
    return _apply(node, out, tuple(idx[valid, j] for j in range(k)), flat_updates, str(args.get("mode", "add")))


@register("non_zero")
def op_non_zero(node, args, num):
    return np.argwhere(np.asarray(args["x"])).astype(np.int32)  # [N, rank]: one row per non-zero, row-major


@register("one_hot")
def op_one_hot(node, args, num):
    indices = np.asarray(args["indices"]).astype(np.int64)
    depth = as_int(args["one_hot_vector_size"])
    axis = as_int(args.get("axis", -1))
    axis = axis + indices.ndim + 1 if axis < 0 else axis
    dtype = node.output_dtypes[0]
    hit = np.expand_dims(indices, axis) == np.arange(depth).reshape([-1 if d == axis else 1
                                                                     for d in range(indices.ndim + 1)])
    on = np.asarray(args.get("on_value", 1)).astype(dtype)
    off = np.asarray(args.get("off_value", 0)).astype(dtype)
    return np.where(hit, on, off)
