"""Reductions along axes: reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod, reduce_l1_norm,
reduce_l2_norm, reduce_sum_square, reduce_log_sum, reduce_log_sum_exp, reduce_argmax, reduce_argmin, and cumsum,
the running sum along one axis.

Formulas are coremltools' iOS15 `get_operator` functions (axes default: all; keep_dims default: False).
fp32-accumulate: the elementwise part and the accumulation in float32, one rounding. fp16-strict: each
elementwise step rounded to fp16 and sums accumulated sequentially in fp16 (`num.sum`, `num.mean`), products
likewise (`acc = fp16(acc * x_n)` in index order); log/exp/sqrt evaluated in float32 and rounded once.
Arg-reductions return the first index of the extreme value (numpy; MIL leaves ties unspecified); the iOS17
`output_dtype` ("int32" or "uint16") is the op's declared output dtype, which the executor stores.
cumsum runs along `axis` (default 0); `exclusive` starts from 0; `reverse` sums from the end. It accumulates in
float32 (fp32-accumulate) or sequentially in fp16 with every partial sum rounded (fp16-strict).
"""

from __future__ import annotations

import numpy as np

from ..numerics import norm_axes
from ..registry import register
from .common import as_axis, as_bool


@register("reduce_sum")
def op_reduce_sum(node, args, num):
    x = num.f(args["x"])
    return num.sum(x, args.get("axes"), keepdims=as_bool(args.get("keep_dims", False)))


@register("reduce_mean")
def op_reduce_mean(node, args, num):
    x = num.f(args["x"])
    return num.mean(x, args.get("axes"), keepdims=as_bool(args.get("keep_dims", False)))


@register("reduce_max")
def op_reduce_max(node, args, num):
    x = num.f(args["x"])
    axes = norm_axes(args.get("axes"), x.ndim)
    return np.max(x, axis=axes, keepdims=as_bool(args.get("keep_dims", False)))


@register("reduce_min")
def op_reduce_min(node, args, num):
    x = num.f(args["x"])
    axes = norm_axes(args.get("axes"), x.ndim)
    return np.min(x, axis=axes, keepdims=as_bool(args.get("keep_dims", False)))


def _reduced(x, args):
    return norm_axes(args.get("axes"), x.ndim), as_bool(args.get("keep_dims", False))


def _sum(num, x, axes, keep):
    """num.sum, with a leading unit axis kept so a reduction over every axis stays an array (fp16-strict's
    sequential sum accumulates in place into a 0-d result otherwise)."""
    out = num.sum(x[None], tuple(a + 1 for a in axes), keepdims=keep)
    return np.asarray(out)[0]


def _squeeze(value, axes, keep):
    return value if keep else np.squeeze(value, axis=axes)


def _prod(x, axes, keep, num):
    if not num.strict or x.dtype.kind != "f":
        return np.prod(x, axis=axes, keepdims=keep, dtype=np.float32 if x.dtype.kind == "f" else None)
    rest = [d for d in range(x.ndim) if d not in axes]
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    flat = np.transpose(x, list(axes) + rest).reshape((n,) + tuple(x.shape[d] for d in rest))
    acc = np.ones(flat.shape[1:], np.float16)
    for i in range(n):
        np.multiply(acc, flat[i], out=acc)  # float16 ufunc: rounded after every product
    return acc.reshape([1 if d in axes else x.shape[d] for d in range(x.ndim)]) if keep else acc


@register("reduce_prod")
def op_reduce_prod(node, args, num):
    x = num.f(args["x"])
    axes, keep = _reduced(x, args)
    return _prod(x, axes, keep, num)


@register("reduce_l1_norm")
def op_reduce_l1_norm(node, args, num):
    x = num.f(args["x"])
    axes, keep = _reduced(x, args)
    return _sum(num, np.abs(x), axes, keep)  # sum |x|


@register("reduce_sum_square")
def op_reduce_sum_square(node, args, num):
    x = num.f(args["x"])
    axes, keep = _reduced(x, args)
    return _sum(num, num.r(x * x), axes, keep)  # sum x^2


@register("reduce_l2_norm")
def op_reduce_l2_norm(node, args, num):
    x = num.f(args["x"])
    axes, keep = _reduced(x, args)
    return num.fn(np.sqrt, _sum(num, num.r(x * x), axes, keep))  # sqrt(sum x^2)


@register("reduce_log_sum")
def op_reduce_log_sum(node, args, num):
    x = num.f(args["x"])
    axes, keep = _reduced(x, args)
    with np.errstate(divide="ignore", invalid="ignore"):  # log of a sum <= 0: -inf / NaN, as numpy
        return num.fn(np.log, _sum(num, x, axes, keep))


@register("reduce_log_sum_exp")
def op_reduce_log_sum_exp(node, args, num):
    # max + log(sum(exp(x - max))), as coremltools writes it
    x = num.f(args["x"])
    axes, keep = _reduced(x, args)
    m = np.max(x, axis=axes, keepdims=True)
    e = num.fn(np.exp, num.r(x - m))
    s = num.fn(np.log, _sum(num, e, axes, True))
    return _squeeze(s + m, axes, keep)


def _arg(fn):
    def handler(node, args, num):
        x = np.asarray(args["x"])
        axis = as_axis(args.get("axis", -1), x.ndim)
        out = fn(x, axis=axis)
        return np.expand_dims(out, axis) if as_bool(args.get("keep_dims", False)) else out
    return handler


register("reduce_argmax")(_arg(np.argmax))


register("reduce_argmin")(_arg(np.argmin))


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
