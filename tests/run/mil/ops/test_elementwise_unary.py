"""Elementwise unary math (ops/elementwise_unary.py) in the mil executor, against float64 numpy references, at both
precision modes: one fp16 ulp of the exact result (the op's one rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import MODES, assert_fp16, f16, mb, run

RNG = np.random.default_rng(1515)
X = f16(np.concatenate([RNG.standard_normal(40) * 3, [0.0, -0.0, 1e-4, -1e-4, 6.0, -6.0, 7.5, 65504.0, -65504.0, 0.5]]))
X = X.reshape(2, 5, 5, 1)  # rank 4 (prelu takes per-channel alpha at rank 4), channels on axis 1
x64 = X.astype(np.float64)
XU = f16(np.clip(X, -0.99, 0.99))  # inside the domain of asin/acos/atanh
XS = f16(np.clip(X, -9, 9))  # cosh/sinh/exp2 stay finite in fp16
u64, s64 = XU.astype(np.float64), XS.astype(np.float64)
UNARY = {
    "acos": (XU, np.arccos(u64)), "asin": (XU, np.arcsin(u64)), "atan": (X, np.arctan(x64)),
    "atanh": (XU, np.arctanh(u64)), "cosh": (XS, np.cosh(s64)), "sinh": (XS, np.sinh(s64)),
    "tan": (XS, np.tan(s64)), "exp2": (XS, np.exp2(s64)),
}


@pytest.mark.parametrize("mode", MODES)
def test_unary_math_matches_numpy(mode):
    names = list(UNARY)
    outs = run(lambda xu, xs, x: tuple(getattr(mb, n)(x={"XU": xu, "XS": xs, "X": x}[_which(n)]) for n in names),
               {"xu": XU, "xs": XS, "x": X}, mode)
    for name, out in zip(names, outs):
        assert_fp16(out, UNARY[name][1], what=f"{name} {mode}")


def _which(name):
    src = UNARY[name][0]
    return "XU" if src is XU else ("XS" if src is XS else "X")


def test_exp2_of_int32_and_fp32_input():
    xi = np.array([[-2, 0, 3, 10]], np.int32)
    (out,) = run(lambda x: mb.exp2(x=x), {"x": xi})
    assert out.dtype == np.int32 and out.tolist() == [[0, 1, 8, 1024]]
    xf = np.array([[0.5, -1.25, 3.0]], np.float32)
    (out,) = run(lambda x: mb.exp2(x=x), {"x": xf})
    assert out.dtype == np.float32 and np.allclose(out, np.exp2(xf.astype(np.float64)), rtol=2e-7)
