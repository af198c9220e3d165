"""Elementwise ops of two operands (and select, of three), with numpy broadcasting as MIL's elementwise_binary:
arithmetic, comparisons and logic.

The arithmetic ops the fused kernels know (kernels.BINARY_OPCODES) compute the exact float32 result of two fp16
operands and round it once, which is the same in both precision modes; the others compute in the mode's dtype.
"""

from __future__ import annotations

import numpy as np

from ..kernels import BINARY_OPCODES, binary16
from ..registry import register


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


@register("select")
def op_select(node, args, num):
    return np.where(np.asarray(args["cond"]).astype(bool), num.f(args["a"]), num.f(args["b"]))
