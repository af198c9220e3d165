"""Activations: relu, sigmoid, silu, gelu (its three modes) and softmax."""

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
