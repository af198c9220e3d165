"""Normalisations (ops/normalization.py) in the mil executor: builder programs against torch float64 at both
precision modes, and layer_norm in a saved package against a float64 reference.

Tolerance: one fp16 ulp of the reference (the op's one rounding) plus, in fp16-strict, the error of its sequential
fp16 sums: a sum of K terms rounded after every addition is off by at most (K - 1) * 2^-11 * sum|terms|, so each
case adds K * 2^-11 times the same op applied to |x| (and |w|)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from executor_ops_support import MODES, U16, assert_fp16, f16, mb, run
from executor_packages import NS, NX, assert_close16, norm_package, norm_refs, swap_handler, violation
from experiments.ane_engineering.run.mil.executor import MILExecutor
from experiments.ane_engineering.run.mil.registry import OPS


@pytest.fixture(scope="module")
def norm_pkg(tmp_path_factory):
    """The norm, softmax and reduction package, converted once for this module."""
    return norm_package(tmp_path_factory)


RNG = np.random.default_rng(2025)
X = f16(RNG.standard_normal((2, 3, 7, 6)) * 2)
x64 = X.astype(np.float64)
t64 = torch.from_numpy(x64)


def _np(t):
    return t.numpy()


C = X.shape[1]
MEAN, VAR = f16(RNG.standard_normal(C) * 0.5), f16(RNG.uniform(0.5, 2.0, C))
GAMMA, BETA = f16(RNG.uniform(0.5, 1.5, C)), f16(RNG.standard_normal(C) * 0.1)


def _c(p):
    return np.asarray(p, np.float64).reshape(1, -1, 1, 1)


@pytest.mark.parametrize("mode", MODES)
def test_normalisations_match_torch(mode):
    eps = np.float16(1e-3)
    outs = run(lambda x: (mb.batch_norm(x=x, mean=MEAN, variance=VAR, gamma=GAMMA, beta=BETA, epsilon=eps),
                          mb.batch_norm(x=x, mean=MEAN, variance=VAR),
                          mb.instance_norm(x=x, gamma=GAMMA, beta=BETA, epsilon=eps),
                          mb.l2_norm(x=x, epsilon=eps),
                          mb.local_response_norm(x=x, size=2, alpha=np.float16(0.5), beta=np.float16(0.75),
                                                 k=np.float16(1)),
                          mb.local_response_norm(x=x, size=3)),
               {"x": X}, mode)
    e = float(eps)
    bn = _c(GAMMA) * (x64 - _c(MEAN)) / np.sqrt(_c(VAR) + e) + _c(BETA)
    bn_plain = (x64 - _c(MEAN)) / np.sqrt(_c(VAR) + 1e-5)
    inorm = _np(F.instance_norm(t64, weight=torch.from_numpy(GAMMA.astype(np.float64)),
                                bias=torch.from_numpy(BETA.astype(np.float64)), eps=e))
    l2 = x64 / np.sqrt((x64 ** 2).sum(axis=(1, 2, 3), keepdims=True) + e)
    lrn = _np(F.local_response_norm(t64, 2, alpha=0.5, beta=0.75, k=1.0))
    lrn3 = _np(F.local_response_norm(t64, 3))
    strict = mode == "fp16-strict"
    # strict: batch_norm's 4 and instance_norm's ~6 inner roundings (each <= 2^-11 relative of its value);
    # instance_norm's and l2_norm's sums over 42 / 126 elements carry up to n * 2^-11 relative into the variance
    assert_fp16(outs[0], bn, extra=6 * U16 * (np.abs(bn) + 1) if strict else 0, what="batch_norm")
    assert_fp16(outs[1], bn_plain, extra=4 * U16 * np.abs(bn_plain) if strict else 0, what="batch_norm defaults")
    assert_fp16(outs[2], inorm, extra=(42 + 8) * U16 * (np.abs(inorm) + 1) if strict else 0, what="instance_norm")
    assert_fp16(outs[3], l2, extra=(126 + 4) * U16 * np.abs(l2) if strict else 0, what="l2_norm")
    assert_fp16(outs[4], lrn, extra=8 * U16 * np.abs(lrn) if strict else 0, what="local_response_norm size 2")
    assert_fp16(outs[5], lrn3, extra=8 * U16 * np.abs(lrn3) if strict else 0, what="local_response_norm size 3")


@pytest.mark.parametrize("mode", MODES)
def test_l2_norm_of_rank3_input_normalises_everything(mode):
    x = X[0]
    (out,) = run(lambda v: mb.l2_norm(x=v), {"x": x}, mode)
    ref = x.astype(np.float64) / np.sqrt((x.astype(np.float64) ** 2).sum() + 1e-6)
    assert_fp16(out, ref, extra=50 * U16 * np.abs(ref) if mode == "fp16-strict" else 0, what="l2_norm rank 3")


def test_batch_norm_iOS17_fp32_parameters_with_fp16_x():
    (out,) = run(lambda x: mb.batch_norm(x=x, mean=MEAN.astype(np.float32), variance=VAR.astype(np.float32),
                                         epsilon=np.float32(1e-5)), {"x": X})
    assert out.dtype == np.float16
    assert_fp16(out, (x64 - _c(MEAN)) / np.sqrt(_c(VAR) + 1e-5), what="batch_norm fp32 params")


@pytest.mark.slow
def test_norm_softmax_reduction_ops_match_float64_reference(norm_pkg):
    """layer_norm with softmax (ops/activation.py) and reduce_mean / reduce_sum (ops/reduction.py) of one package."""
    ex = MILExecutor(norm_pkg)
    out = ex.run({"x": NX, "s": NS})
    for name, ref in norm_refs().items():
        assert_close16(out[name], ref, what=name)
    assert {"layer_norm", "softmax", "reduce_mean", "reduce_sum"} <= set(ex.op_type_counts)


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["softmax_axis", "layer_norm_epsilon"])
def test_broken_norm_semantics_are_caught(norm_pkg, monkeypatch, broken):
    """A layer_norm that ignores epsilon is caught, and so is a softmax (ops/activation.py) on the wrong axis."""
    if broken == "softmax_axis":
        original = OPS["softmax"].handler

        def wrong(node, args, num):
            args = dict(args)
            args["axis"] = np.int32(-1 if int(args["axis"]) != -1 else 1)  # the other axis
            return original(node, args, num)

        swap_handler(monkeypatch, "softmax", wrong)
        name = "o_softmax1"
    else:
        original = OPS["layer_norm"].handler

        def wrong(node, args, num):
            args = dict(args)
            args["epsilon"] = np.float16(0)  # epsilon ignored
            return original(node, args, num)

        swap_handler(monkeypatch, "layer_norm", wrong)
        name = "o_ln_small"
    out = MILExecutor(norm_pkg).run({"x": NX, "s": NS})
    assert violation(out[name], norm_refs()[name]) > 1.0
