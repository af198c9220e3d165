"""Unary math beyond the elementwise family: acos, asin, atan, atanh, cosh, sinh, tan, exp2 and threshold.

Each is one function of one operand (coremltools' iOS15 elementwise_unary `value_inference`: the numpy function),
evaluated in float32 and rounded once, in both precision modes (`num.fn`: a correctly rounded fp16 function in
fp16-strict). exp2 also takes int32 (elementwise_unary_with_int): 2^x computed in float64 and stored as int32
(truncated), as the value inference's numpy result cast to the op's int32 output.
"""

from __future__ import annotations

import numpy as np

from ..registry import register


def _unary(fn):
    def handler(node, args, num):
        x = np.asarray(args["x"])
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/inf outside the domain, as numpy
            if x.dtype.kind in "iu":
                return fn(x.astype(np.float64))  # the executor stores it in the declared int dtype
            return num.fn(fn, x)
    return handler


for _name, _fn in {"acos": np.arccos, "asin": np.arcsin, "atan": np.arctan, "atanh": np.arctanh,
                   "cosh": np.cosh, "sinh": np.sinh, "tan": np.tan, "exp2": np.exp2}.items():
    register(_name)(_unary(_fn))


@register("threshold")
def op_threshold(node, args, num):
    return np.maximum(num.f(args["x"]), num.f(args["alpha"]))  # max(x, alpha): exact
