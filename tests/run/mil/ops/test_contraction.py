"""Dot products (ops/contraction.py: conv, matmul, linear, einsum, scaled_dot_product_attention) in the mil
executor, from a saved package, against float64 references within one fp16 step plus the float32 accumulation
bound of a K-term sum (tests/run/mil/test_executor.py states the derivation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from executor_packages import (
    B1,
    CX,
    HK,
    HP,
    HQ,
    LB,
    LW,
    MX,
    MY,
    SK,
    SM,
    SQ,
    SV,
    W1,
    W3,
    W5,
    assert_close16,
    conv2d64,
    dot_extra,
    dot_feeds,
    dot_package,
    softmax64,
)
from experiments.ane_engineering.run.mil.executor import MILExecutor
from experiments.ane_engineering.run.mil.numerics import Numerics
from experiments.ane_engineering.run.mil.ops.contraction import einsum_as_matmul


@pytest.fixture(scope="module")
def dot_pkg(tmp_path_factory):
    """The dot-product package, converted once for this module."""
    return dot_package(tmp_path_factory)


@pytest.mark.slow
def test_dot_product_ops_match_float64_reference(dot_pkg):
    ex = MILExecutor(dot_pkg)
    out = ex.run(dot_feeds())
    x = CX.astype(np.float64)
    ref, absref, k = conv2d64(x, W1, B1)
    assert_close16(out["o_conv1x1"], ref, dot_extra(k, absref), "conv 1x1")
    # same padding, stride 2, input 9x10, kernel 3: total pad (2, 1)... split (1, 1) and (0, 1): extra after
    pads = []
    for size, k_, s in ((9, 3, 2), (10, 3, 2)):
        total = max(0, s * math.ceil(size / s) - size + k_ - s)
        pads.append((total // 2, total - total // 2))
    ref, absref, k = conv2d64(x, W3, strides=(2, 2), pads=tuple(pads), groups=2)
    assert_close16(out["o_conv_same"], ref, dot_extra(k, absref), "conv same/groups/stride")
    ref, absref, k = conv2d64(x, W5, pads=((1, 0), (2, 1)), dilations=(2, 1))
    assert_close16(out["o_conv_custom"], ref, dot_extra(k, absref), "conv custom/dilation")
    a, b = MX.astype(np.float64), MY.astype(np.float64)
    assert_close16(out["o_matmul"], a @ np.swapaxes(b, -1, -2),
                   dot_extra(16, np.abs(a) @ np.abs(np.swapaxes(b, -1, -2))), "matmul")
    assert_close16(out["o_linear"], a @ LW.T.astype(np.float64) + LB,
                   dot_extra(16, np.abs(a) @ np.abs(LW.T.astype(np.float64))), "linear")
    hq, hk, hp = (v.astype(np.float64) for v in (HQ, HK, HP))
    assert_close16(out["o_einsum_qk"], np.einsum("bkhc,bchq->bkhq", hk, hq),
                   dot_extra(16, np.einsum("bkhc,bchq->bkhq", np.abs(hk), np.abs(hq))), "einsum qk")
    assert_close16(out["o_einsum_av"], np.einsum("bchk,bkhq->bchq", hq, hp),
                   dot_extra(12, np.einsum("bchk,bkhq->bchq", np.abs(hq), np.abs(hp))), "einsum av")
    q, kk, v, m = (t.astype(np.float64) for t in (SQ, SK, SV, SM))
    w = softmax64(q @ np.swapaxes(kk, -1, -2) / math.sqrt(8) + m, -1)
    assert_close16(out["o_sdpa"], w @ v, dot_extra(7, np.abs(w) @ np.abs(v)), "sdpa")
    for t in ("conv", "matmul", "linear", "einsum", "scaled_dot_product_attention"):
        assert t in ex.op_type_counts, t


def test_einsum_in_other_orders_matches_numpy():
    """The per-head attention equations in the operand order of ANE_MATH.md ("Per-head einsum attention"), and a few
    permutations."""
    num = Numerics()
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 16, 1, 12)).astype(np.float32)  # b c h q
    k = rng.standard_normal((1, 12, 1, 16)).astype(np.float32)  # b k h c
    p = rng.standard_normal((1, 12, 2, 12)).astype(np.float32)  # b k h q, h broadcast against 1
    for eq, a, b in (("bchq,bkhc->bkhq", q, k), ("bkhc,bchq->bkhq", k, q), ("bkhq,bchk->bchq", p, q),
                     ("bchk,bkhq->bchq", q, p), ("ij,jk->ki", k[0, :, 0, :], q[0, :, 0, :])):
        got = einsum_as_matmul(eq, a, b, num.matmul, lambda t, ax: num.sum(t, ax))
        if a.ndim == 4 and a.shape[2] != b.shape[2]:  # MIL einsum broadcasts a size-1 h
            h = max(a.shape[2], b.shape[2])
            a = np.broadcast_to(a, a.shape[:2] + (h,) + a.shape[3:])
            b = np.broadcast_to(b, b.shape[:2] + (h,) + b.shape[3:])
        want = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=eq)
