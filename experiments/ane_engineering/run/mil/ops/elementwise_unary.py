"""Elementwise ops of one operand: abs, square, identity, logical_not, exp, tanh, sqrt, sin, cos, erf, floor,
ceil, round, sign, rsqrt, inverse, log, clip, cast, threshold, and acos, asin, atan, atanh, cosh, sinh, tan, exp2.

Each math function is evaluated in float32 and rounded once, in both precision modes (`num.fn`: a correctly rounded
fp16 function in fp16-strict), as coremltools' iOS15 elementwise_unary `value_inference` (the numpy function).
rsqrt, inverse and log add their epsilon first (the ops' defaults when the program gives none). exp2 also takes
int32 (elementwise_unary_with_int): 2^x computed in float64 and stored as int32 (truncated), as the value
inference's numpy result cast to the op's int32 output. cast truncates float -> int toward zero.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import erf


@register("abs")
def op_abs(node, args, num):
    return np.abs(num.f(args["x"]))


@register("square")
def op_square(node, args, num):
    x = num.f(args["x"])
    return x * x


@register("identity")
def op_identity(node, args, num):
    return args["x"]


@register("logical_not")
def op_logical_not(node, args, num):
    return np.logical_not(args["x"])


def _unary(fn):
    def handler(node, args, num):
        return num.fn(fn, args["x"])
    return handler


for _name, _fn in {"exp": np.exp, "tanh": np.tanh, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
                   "erf": erf, "floor": np.floor, "ceil": np.ceil, "round": np.round, "sign": np.sign}.items():
    register(_name)(_unary(_fn))


@register("rsqrt")
def op_rsqrt(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-12)
    return num.fn(lambda v: 1.0 / np.sqrt(v), num.r(x + eps))  # y = 1 / sqrt(x + epsilon)


@register("inverse")
def op_inverse(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-4)
    return num.c(1) / num.r(x + eps)  # y = 1 / (x + epsilon)


@register("log")
def op_log(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-45)
    return num.fn(np.log, num.r(x + eps))


@register("clip")
def op_clip(node, args, num):
    x = num.f(args["x"])
    return np.minimum(np.maximum(x, num.f(args["alpha"])), num.f(args["beta"]))


@register("cast")
def op_cast(node, args, num):
    target = node.output_dtypes[0]
    x = np.asarray(args["x"])
    if target.kind in "iu" and x.dtype.kind == "f":
        x = np.trunc(x)  # float -> int casts truncate toward zero
    return x.astype(target)


def _unary_with_int(fn):
    """Outside the domain NaN/inf as numpy gives them, without warnings; int operands as float64."""
    def handler(node, args, num):
        x = np.asarray(args["x"])
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/inf outside the domain, as numpy
            if x.dtype.kind in "iu":
                return fn(x.astype(np.float64))  # the executor stores it in the declared int dtype
            return num.fn(fn, x)
    return handler


for _name, _fn in {"acos": np.arccos, "asin": np.arcsin, "atan": np.arctan, "atanh": np.arctanh,
                   "cosh": np.cosh, "sinh": np.sinh, "tan": np.tan, "exp2": np.exp2}.items():
    register(_name)(_unary_with_int(_fn))


@register("threshold")
def op_threshold(node, args, num):
    return np.maximum(num.f(args["x"]), num.f(args["alpha"]))  # max(x, alpha): exact
