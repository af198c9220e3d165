"""Normalisations: layer_norm, batch_norm, instance_norm, l2_norm, local_response_norm.

Formulas are coremltools' iOS15 op definitions (the iOS17 versions only let the constant parameters have their own
dtype, e.g. fp32 mean/variance with an fp16 x, which `num.f` keeps in fp32-accumulate and rounds in fp16-strict):

    layer_norm           (x - E[x]) / sqrt(Var[x] + epsilon) over `axes`, then gamma and beta of the normalised shape
    batch_norm           gamma[c] * (x - mean[c]) / sqrt(variance[c] + epsilon) + beta[c]      (c = axis 1)
    instance_norm        layer_norm over the spatial axes 2.. of every (n, c), then gamma[c], beta[c]
    l2_norm              x / sqrt(sum(x^2 over the last three axes) + epsilon), leading axes batched
    local_response_norm  x / (k + alpha / size * sum(x^2 over a window of `size` channels)) ^ beta, the window of
                         channel c being [c - size // 2, c + (size - 1) // 2] clipped to the channels (PyTorch's
                         LocalResponseNorm, which coremltools' op tests use as the reference)

fp32-accumulate: float32 throughout, one rounding. fp16-strict: every primitive of these formulas rounded, sums
accumulated sequentially in fp16 (`num.sum` / `num.mean`), sqrt/pow evaluated in float32 and rounded once.
"""

from __future__ import annotations

import numpy as np

from ..numerics import norm_axes
from ..registry import register
from .common import as_int


@register("layer_norm")
def op_layer_norm(node, args, num):
    x = num.f(args["x"])
    axes = norm_axes(args.get("axes"), x.ndim)
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-5)
    mean = num.mean(x, axes)
    d = num.r(x - mean)
    var = num.mean(num.r(d * d), axes)
    inv = num.fn(lambda v: 1.0 / np.sqrt(v), num.r(var + eps))  # 1 / sqrt(Var[x] + epsilon)
    y = num.r(d * inv)
    norm_shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
    if args.get("gamma") is not None:
        y = num.r(y * num.f(args["gamma"]).reshape(norm_shape))
    if args.get("beta") is not None:
        y = y + num.f(args["beta"]).reshape(norm_shape)
    return y


def _channel(param, num, rank: int):
    return num.f(param).reshape((1, -1) + (1,) * (rank - 2))


def _channel_affine(y, args, num):
    """gamma[c] * y + beta[c] (each optional), c = axis 1: the tail batch_norm and instance_norm share."""
    if args.get("gamma") is not None:
        y = num.r(y * _channel(args["gamma"], num, y.ndim))
    if args.get("beta") is not None:
        y = y + _channel(args["beta"], num, y.ndim)
    return y


def _rsqrt(v, num):
    return num.fn(lambda a: 1.0 / np.sqrt(a), v)


@register("batch_norm")
def op_batch_norm(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if args.get("epsilon") is not None else num.c(1e-5)
    inv = _rsqrt(num.r(_channel(args["variance"], num, x.ndim) + eps), num)
    y = num.r(num.r(x - _channel(args["mean"], num, x.ndim)) * inv)
    return _channel_affine(y, args, num)


@register("instance_norm")
def op_instance_norm(node, args, num):
    x = num.f(args["x"])
    axes = tuple(range(2, x.ndim))
    eps = num.f(args["epsilon"]) if args.get("epsilon") is not None else num.c(1e-5)
    d = num.r(x - num.mean(x, axes))
    var = num.mean(num.r(d * d), axes)
    y = num.r(d * _rsqrt(num.r(var + eps), num))
    return _channel_affine(y, args, num)


@register("l2_norm")
def op_l2_norm(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if args.get("epsilon") is not None else num.c(1e-6)
    axes = tuple(range(x.ndim - 2, x.ndim + 1))  # the last three, after a leading unit axis (keeps the sum an array)
    s = num.r(num.sum(num.r(x * x)[None], axes, keepdims=True)[0] + eps)
    return x / num.fn(np.sqrt, s)


@register("local_response_norm")
def op_local_response_norm(node, args, num):
    x = num.f(args["x"])
    size = as_int(args["size"])
    alpha = float(np.asarray(args.get("alpha", 1e-4)))
    beta = num.f(args.get("beta", 0.75))
    k = num.f(args.get("k", 1.0))
    sq = num.r(x * x)
    channels = x.shape[1]
    pad = [(0, 0)] * x.ndim
    pad[1] = (size // 2, (size - 1) // 2)
    padded = np.pad(sq, pad)
    # window sums in channel order: acc = acc + sq[c + j] for j = 0 .. size-1 (sequential fp16 in strict mode)
    windows = np.stack([padded[:, j:j + channels] for j in range(size)], axis=0)  # (size, N, C, *D)
    s = num.sum(windows, (0,), keepdims=False)
    scale = num.r(num.r(s * num.c(alpha / size)) + k)
    power = np.power(np.asarray(scale, np.float32), np.float32(beta))  # in float32; rounded once in strict mode
    return x / num.r(power)
