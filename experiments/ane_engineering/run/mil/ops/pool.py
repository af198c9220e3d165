"""Pooling: max_pool, avg_pool, l2_pool over 1-3 spatial axes (x: [N, C, *D]).

Geometry follows coremltools' Pooling op (iOS15 pool.py and `spatial_dimensions_out_shape` in defs/_utils.py):
pad_type valid / custom (pad[2i], pad[2i+1] before/after axis i) / same (total padding
max(0, s * ceil(i / s) - i + k - s), the extra one after) / same_lower (the extra one before);
output size floor((in + pads - k) / s) + 1, or with ceil_mode floor((in + pads - k + s - 1) / s) + 1, minus one
when the last window would start at or after the input's end plus half the padding.
A ceil_mode window that runs past the padded input reads nothing there: max ignores it, and avg_pool divides by
the window clipped to the padded input (PyTorch's avg_pool count_include_pad convention, which its conversions
rely on); with exclude_padding_from_average the divisor counts input elements only.
l2_pool is sqrt(sum of squares over the window).

fp32-accumulate: window sums in float32, one rounding. fp16-strict: window sums accumulated sequentially in fp16
over the window in row-major kernel order, squares, the division by the count and the sqrt each rounded.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..registry import UnsupportedOpError, register
from .common import as_bool, as_ints


def pool_geometry(node, args, in_sp, kernel):
    """(pads [(before, after)], strides, output sizes) for the spatial dims `in_sp`."""
    n = len(in_sp)
    strides = as_ints(args["strides"]) if args.get("strides") is not None else [1] * n
    pad_type = str(args.get("pad_type", "valid")).lower()
    ceil_mode = as_bool(args.get("ceil_mode", False))
    if pad_type == "valid":
        pads = [(0, 0)] * n
    elif pad_type == "custom":
        p = as_ints(args["pad"]) if args.get("pad") is not None else [0] * (2 * n)
        pads = [(p[2 * i], p[2 * i + 1]) for i in range(n)]
    elif pad_type in ("same", "same_lower"):
        pads = []
        for i, k, s in zip(in_sp, kernel, strides):
            total = max(0, s * math.ceil(i / s) - i + k - s)
            small, large = total // 2, total - total // 2
            pads.append((small, large) if pad_type == "same" else (large, small))
    else:
        raise UnsupportedOpError(f"pool pad_type {pad_type!r} ({node.where()})")
    out = []
    for i, (a, b), k, s in zip(in_sp, pads, kernel, strides):
        if ceil_mode:
            o = (i + a + b - k + s - 1) // s + 1
            if (o - 1) * s >= i + (a + b) / 2 and a + b > 0:
                o -= 1
        else:
            o = (i + a + b - k) // s + 1
        out.append(o)
    return pads, strides, out


def _windows(x, pads, strides, kernel, out_sp, fill):
    """(prod(K), N, C, *out): for every kernel offset (row-major) the strided view of the padded input."""
    spatial = len(kernel)
    widths = [(0, 0), (0, 0)]
    for d in range(spatial):
        need = (out_sp[d] - 1) * strides[d] + kernel[d]  # ceil_mode windows may run past the padded input
        have = x.shape[2 + d] + pads[d][0] + pads[d][1]
        widths.append((pads[d][0], pads[d][1] + max(0, need - have)))
    xp = np.pad(x, widths, constant_values=fill)
    views = []
    for offs in itertools.product(*[range(k) for k in kernel]):
        index = [slice(None), slice(None)]
        for d in range(spatial):
            index.append(slice(offs[d], offs[d] + (out_sp[d] - 1) * strides[d] + 1, strides[d]))
        views.append(xp[tuple(index)])
    return np.stack(views, axis=0)


def _counts(in_sp, pads, strides, kernel, out_sp, exclude_padding):
    """Divisor of every output position: the window clipped to the padded input (or to the input)."""
    count = np.ones((), np.int64)
    for d, (i, (a, b), s, k, o) in enumerate(zip(in_sp, pads, strides, kernel, out_sp)):
        start = np.arange(o) * s - a  # window start in input coordinates
        lo = np.maximum(start, 0) if exclude_padding else start
        hi = np.minimum(start + k, i if exclude_padding else i + b)
        count = np.multiply.outer(count, hi - lo)
    return count.reshape((1, 1) + tuple(out_sp))


def _prepare(node, args):
    x = np.asarray(args["x"])
    kernel = as_ints(args["kernel_sizes"])
    pads, strides, out_sp = pool_geometry(node, args, list(x.shape[2:]), kernel)
    return x, kernel, pads, strides, out_sp


@register("max_pool")
def op_max_pool(node, args, num):
    x, kernel, pads, strides, out_sp = _prepare(node, args)
    x = num.f(x)
    return np.max(_windows(x, pads, strides, kernel, out_sp, -np.inf), axis=0)


@register("avg_pool")
def op_avg_pool(node, args, num):
    x, kernel, pads, strides, out_sp = _prepare(node, args)
    x = num.f(x)
    total = num.sum(_windows(x, pads, strides, kernel, out_sp, 0), (0,), keepdims=False)
    counts = _counts(x.shape[2:], pads, strides, kernel, out_sp,
                     as_bool(args.get("exclude_padding_from_average", False)))
    return total / counts.astype(num.dtype)


@register("l2_pool")
def op_l2_pool(node, args, num):
    x, kernel, pads, strides, out_sp = _prepare(node, args)
    x = num.f(x)
    squares = num.r(x * x)
    return num.fn(np.sqrt, num.sum(_windows(squares, pads, strides, kernel, out_sp, 0), (0,), keepdims=False))
