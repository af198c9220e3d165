"""Activations: relu, sigmoid, silu, gelu (its three modes), softmax, and relu6, leaky_relu, thresholded_relu,
clamped_relu, prelu, elu, softplus, softplus_parametric, softsign, scaled_tanh, sigmoid_hard, linear_activation.

Formulas are the `value_inference` of coremltools' iOS15 activation ops; the iOS17 versions only let alpha/beta
have their own dtype (fp32 alpha with an fp16 x), which `num.f` handles: fp32-accumulate keeps an fp32 alpha as
given, fp16-strict rounds it to fp16 like every operand.
fp32-accumulate computes in float32 and rounds once (elu with expm1 and softplus with logaddexp, the float32
forms of the same functions that do not cancel near 0); fp16-strict rounds every primitive of the written
formula (`num.r`), with exp/log/tanh evaluated in float32 and rounded once (`num.fn`). gelu and softmax on fp16
tensors run as fused float32 kernels that round each output once (kernels.map16).
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels import map16
from ..registry import UnsupportedOpError, register
from .common import as_axis, erf, erfc, expit


@register("relu")
def op_relu(node, args, num):
    return np.maximum(num.f(args["x"]), num.c(0))


@register("sigmoid")
def op_sigmoid(node, args, num):
    return num.fn(expit, args["x"])


@register("silu")
def op_silu(node, args, num):
    x = num.f(args["x"])
    return x * num.fn(expit, x)  # x * sigmoid(x); in strict mode sigmoid rounded, product rounded


@register("gelu")
def op_gelu(node, args, num):
    mode = str(args.get("mode", "EXACT"))
    raw = np.asarray(args["x"])
    x = raw if (mode == "EXACT" and not num.strict and raw.dtype == np.float16) else num.f(raw)
    if mode == "EXACT":
        if num.strict:  # 0.5 * x * (1 + erf(x / sqrt(2))), every primitive rounded to fp16
            u = x * num.c(1.0 / math.sqrt(2.0))
            v = num.c(1) + num.fn(erf, u)
            return num.c(0.5) * (x * v)
        # fp32: the same function written with erfc (1 + erf(u) == erfc(-u)), accurate in the negative tail
        def exact(v):
            return np.float32(0.5) * v * erfc(v * np.float32(-1.0 / math.sqrt(2.0))).astype(np.float32, copy=False)

        if raw.dtype == np.float16 and node.output_dtypes[0] == np.float16:
            return map16(raw, exact, num.threads)
        return exact(num.f(raw))
    if mode == "TANH_APPROXIMATION":
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        inner = num.c(math.sqrt(2.0 / math.pi)) * (x + num.c(0.044715) * (x * x * x))
        return num.c(0.5) * (x * (num.c(1) + num.fn(np.tanh, inner)))
    if mode == "SIGMOID_APPROXIMATION":
        return x * num.fn(expit, num.c(1.702) * x)  # x * sigmoid(1.702 * x)
    raise UnsupportedOpError(f"gelu mode {mode!r} ({node.where()})")


def _softmax32_inplace(v: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(v, axis=axis, keepdims=True)
    np.subtract(v, m, out=v)
    np.exp(v, out=v)
    np.divide(v, np.sum(v, axis=axis, keepdims=True, dtype=np.float32), out=v)
    return v


@register("softmax")
def op_softmax(node, args, num):
    x = np.asarray(args["x"])
    axis = as_axis(args.get("axis", -1), x.ndim)
    if not num.strict and x.dtype == np.float16 and node.output_dtypes[0] == np.float16:
        # exp(x - max) / sum(exp(x - max)) in float32, each output rounded once; split over the other axes
        return map16(x, lambda v: _softmax32_inplace(v, axis), num.threads, keep_axis=axis)  # v: a fresh copy
    x = num.f(x)
    m = np.max(x, axis=axis, keepdims=True)
    e = num.fn(np.exp, num.r(x - m))
    s = num.sum(e, (axis,))
    return e / s


def _channel(param, num, rank: int):
    """A per-channel parameter [C] shaped to broadcast along axis 1 of a rank-`rank` tensor."""
    p = num.f(param)
    return p.reshape((1, -1) + (1,) * (rank - 2)) if p.ndim == 1 and rank >= 2 else p


@register("relu6")
def op_relu6(node, args, num):
    return np.minimum(np.maximum(num.f(args["x"]), num.c(0)), num.c(6))  # min(max(x, 0), 6): exact


@register("leaky_relu")
def op_leaky_relu(node, args, num):
    x = num.f(args["x"])
    return np.where(x < 0, x * num.f(args["alpha"]), x)  # x >= 0 ? x : alpha * x


@register("thresholded_relu")
def op_thresholded_relu(node, args, num):
    x = num.f(args["x"])
    return np.where(x < num.f(args["alpha"]), num.c(0), x)  # x >= alpha ? x : 0


@register("clamped_relu")
def op_clamped_relu(node, args, num):
    # min(max(x, 0), beta) + min(min(x, 0) * alpha, beta), as coremltools writes it
    x = num.f(args["x"])
    alpha, beta = num.f(args["alpha"]), num.f(args["beta"])
    pos = np.minimum(np.maximum(x, num.c(0)), beta)
    neg = np.minimum(num.r(np.minimum(x, num.c(0)) * alpha), beta)
    return pos + neg


@register("prelu")
def op_prelu(node, args, num):
    # max(x, 0) + min(x, 0) * alpha[c], alpha along axis 1
    x = num.f(args["x"])
    alpha = _channel(args["alpha"], num, x.ndim)
    return np.maximum(x, num.c(0)) + num.r(np.minimum(x, num.c(0)) * alpha)


@register("elu")
def op_elu(node, args, num):
    # x > 0 ? x : alpha * (exp(x) - 1)
    x = num.f(args["x"])
    alpha = num.f(args["alpha"])
    neg = np.minimum(x, num.c(0))  # the exp branch only matters (and cannot overflow) below 0
    em1 = num.r(num.fn(np.exp, neg) - num.c(1)) if num.strict else np.expm1(neg)
    return np.where(x < 0, alpha * em1, x)


@register("softplus")
def op_softplus(node, args, num):
    return _softplus(num.f(args["x"]), num)


def _softplus(x, num):
    if not num.strict:
        return np.logaddexp(np.float32(0), x)  # log(1 + exp(x)) in float32, no overflow
    # log(1 + exp(-|x|)) + max(x, 0) (the form coremltools' value inference writes), every primitive rounded
    t = num.r(num.c(1) + num.fn(np.exp, -np.abs(x)))
    return num.r(num.fn(np.log, t) + np.maximum(x, num.c(0)))


@register("softplus_parametric")
def op_softplus_parametric(node, args, num):
    # alpha[c] * log(1 + exp(beta[c] * x)), alpha and beta along axis 1
    x = num.f(args["x"])
    alpha = _channel(args["alpha"], num, x.ndim)
    beta = _channel(args["beta"], num, x.ndim)
    return alpha * _softplus(num.r(x * beta), num)


@register("softsign")
def op_softsign(node, args, num):
    x = num.f(args["x"])
    return x / num.r(num.c(1) + np.abs(x))  # x / (1 + |x|)


@register("scaled_tanh")
def op_scaled_tanh(node, args, num):
    x = num.f(args["x"])
    return num.f(args["alpha"]) * num.fn(np.tanh, num.r(x * num.f(args["beta"])))  # alpha * tanh(beta * x)


@register("sigmoid_hard")
def op_sigmoid_hard(node, args, num):
    x = num.f(args["x"])
    y = num.r(num.r(x * num.f(args["alpha"])) + num.f(args["beta"]))  # min(max(alpha * x + beta, 0), 1)
    return np.minimum(np.maximum(y, num.c(0)), num.c(1))


@register("linear_activation")
def op_linear_activation(node, args, num):
    x = num.f(args["x"])
    return num.r(x * num.f(args["alpha"])) + num.f(args["beta"])  # alpha * x + beta
