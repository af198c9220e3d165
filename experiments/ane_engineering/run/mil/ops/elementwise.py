"""Elementwise ops: binary arithmetic and comparisons (numpy broadcasting, as MIL's elementwise_binary),
unary math, clip, cast and select.
"""

from __future__ import annotations

import numpy as np

from ..kernels import BINARY_OPCODES, binary16
from ..registry import register
from .common import erf

# ---- elementwise binary (numpy broadcasting, as MIL's elementwise_binary)

def _binary(fn, op_type):
    fused = op_type in BINARY_OPCODES  # one rounding of an exact (fp32) result: the same in both modes

    def handler(node, args, num):
        if fused:
            out = binary16(op_type, args["x"], args["y"], num.threads)
            if out is not None:
                return out
        return fn(num.f(args["x"]), num.f(args["y"]))
    return handler


for _name, _fn in {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.true_divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power, "floor_div": np.floor_divide,
    "mod": np.mod, "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}.items():
    register(_name)(_binary(_fn, _name))


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


@register("select")
def op_select(node, args, num):
    return np.where(np.asarray(args["cond"]).astype(bool), num.f(args["a"]), num.f(args["b"]))
