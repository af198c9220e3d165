"""Activations (ops/activation.py) in the mil executor, against float64 numpy references, at both precision modes.

Tolerance: fp32-accumulate rounds a float32 evaluation once, so every value is within one fp16 ulp of the exact
result; fp16-strict also rounds each primitive of the formula, so each op's bound adds the absolute error those
inner roundings can carry to the output (stated per case)."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import MODES, U16, assert_fp16, ct, f16, mb, run

RNG = np.random.default_rng(1515)
X = f16(np.concatenate([RNG.standard_normal(40) * 3, [0.0, -0.0, 1e-4, -1e-4, 6.0, -6.0, 7.5, 65504.0, -65504.0, 0.5]]))
X = X.reshape(2, 5, 5, 1)  # rank 4 (prelu takes per-channel alpha at rank 4), channels on axis 1
ALPHA_C = f16([0.1, -0.5, 2.0, 0.0, 1.5])
BETA_C = f16([1.0, 0.5, 2.0, -1.0, 0.25])
x64 = X.astype(np.float64)


def _ch(p):
    return np.asarray(p, np.float64).reshape(1, -1, 1, 1)


def softplus64(v):
    return np.logaddexp(0, v)


# name -> (builder, float64 reference, extra absolute error allowed in fp16-strict beyond 1 ulp)
a16, b16 = np.float16(0.2), np.float16(-0.75)
a, b = float(a16), float(b16)
CASES = {
    "relu6": (lambda x: mb.relu6(x=x), np.clip(x64, 0, 6), 0),
    "leaky_relu": (lambda x: mb.leaky_relu(x=x, alpha=a16), np.where(x64 >= 0, x64, a * x64), 0),
    "thresholded_relu": (lambda x: mb.thresholded_relu(x=x, alpha=a16), np.where(x64 >= a, x64, 0), 0),
    "clamped_relu": (lambda x: mb.clamped_relu(x=x, alpha=a16, beta=np.float16(4.0)),
                     np.minimum(np.maximum(x64, 0), 4) + np.minimum(np.minimum(x64, 0) * a, 4), 0),
    "prelu": (lambda x: mb.prelu(x=x, alpha=ALPHA_C), np.maximum(x64, 0) + np.minimum(x64, 0) * _ch(ALPHA_C), 0),
    # strict: exp(x) rounded (<= 2^-12 absolute for x < 0), minus 1 exact, times alpha rounded
    "elu": (lambda x: mb.elu(x=x, alpha=np.float16(1.5)), np.where(x64 > 0, x64, 1.5 * np.expm1(np.minimum(x64, 0))),
            1.5 * 2 ** -12),
    # strict: 1 + exp(-|x|) rounded (<= 2^-11 relative), log of it (absolute error <= 2^-11), then + max(x, 0)
    "softplus": (lambda x: mb.softplus(x=x), softplus64(x64), 2 ** -10),
    "softplus_parametric": (lambda x: mb.softplus_parametric(x=x, alpha=ALPHA_C, beta=BETA_C),
                            _ch(ALPHA_C) * softplus64(_ch(BETA_C) * x64), 2 * 2 ** -10 * np.abs(_ch(ALPHA_C))
                            * (1 + np.abs(_ch(BETA_C) * x64))),
    # strict: 1 + |x| rounded (relative 2^-11) before the division
    "softsign": (lambda x: mb.softsign(x=x), x64 / (1 + np.abs(x64)), np.abs(x64 / (1 + np.abs(x64))) * U16),
    # strict: beta * x rounded: tanh' <= 1 carries |beta x| * 2^-11 to alpha * tanh
    "scaled_tanh": (lambda x: mb.scaled_tanh(x=x, alpha=np.float16(1.5), beta=b16),
                    1.5 * np.tanh(b * x64), 1.5 * np.abs(b * x64) * U16),
    "sigmoid_hard": (lambda x: mb.sigmoid_hard(x=x, alpha=a16, beta=np.float16(0.5)),
                     np.clip(a * x64 + 0.5, 0, 1), np.abs(a * x64) * U16),
    "linear_activation": (lambda x: mb.linear_activation(x=x, alpha=a16, beta=b16), a * x64 + b,
                          np.abs(a * x64) * U16),
    "threshold": (lambda x: mb.threshold(x=x, alpha=b16), np.maximum(x64, b), 0),
}


@pytest.mark.parametrize("mode", MODES)
def test_activations_match_reference(mode):
    names = list(CASES)
    outs = run(lambda x: tuple(CASES[n][0](x) for n in names), {"x": X}, mode)
    for name, out in zip(names, outs):
        _, ref, extra = CASES[name]
        assert out.dtype == np.float16 and out.shape == X.shape, name
        assert_fp16(out, ref, extra=extra if mode == "fp16-strict" else 0, what=f"{name} {mode}")


def test_iOS17_fp32_alpha_with_fp16_x_and_iOS15_opset():
    # iOS17 lets alpha be fp32 while x is fp16: fp32-accumulate uses it as given
    alpha = np.float32(0.1)
    (out,) = run(lambda x: mb.leaky_relu(x=x, alpha=alpha), {"x": X})
    assert_fp16(out, np.where(x64 >= 0, x64, 0.1 * x64), what="leaky_relu fp32 alpha")
    (out,) = run(lambda x: mb.elu(x=x, alpha=np.float16(1.0)), {"x": X}, opset=ct.target.iOS15)
    assert_fp16(out, np.where(x64 > 0, x64, np.expm1(np.minimum(x64, 0))), what="elu iOS15")


def test_empty_and_scalar_shapes():
    """relu6 and softplus here; atan (ops/elementwise_unary.py) rides along."""
    for shape in ((0, 3), (1,)):
        x = f16(np.ones(shape))
        outs = run(lambda v: (mb.relu6(x=v), mb.softplus(x=v), mb.atan(x=v)), {"x": x})
        assert [o.shape for o in outs] == [shape] * 3
