"""Reductions and cumsum (ops/reduction.py) in the mil executor, against numpy references, at both precision modes.

Tolerance for sums: one fp16 ulp (the output rounding), plus in fp16-strict (K - 1) * 2^-11 * sum|terms| for a
sequential fp16 sum of K terms."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import MODES, U16, assert_fp16, f16, mb, run

RNG = np.random.default_rng(77)
X = f16(RNG.standard_normal((3, 4, 5)))
x64 = X.astype(np.float64)
XI = RNG.integers(-5, 6, (3, 4, 5)).astype(np.int32)


@pytest.mark.parametrize("mode", MODES)
def test_reductions_match_numpy(mode):
    P = f16(RNG.uniform(0.5, 1.5, (3, 4, 5)))
    p64 = P.astype(np.float64)
    strict = mode == "fp16-strict"
    outs = run(lambda x, p: (mb.reduce_prod(x=p, axes=[-1]), mb.reduce_l1_norm(x=x, axes=[0, 2], keep_dims=True),
                             mb.reduce_l2_norm(x=x), mb.reduce_sum_square(x=x, axes=[1]),
                             mb.reduce_log_sum(x=p, axes=[2]), mb.reduce_log_sum_exp(x=x, axes=[-2], keep_dims=True),
                             mb.reduce_argmax(x=x, axis=-1), mb.reduce_argmin(x=x, axis=0, keep_dims=True)),
               {"x": X, "p": P}, mode)

    def k(n, terms):
        return n * U16 * terms if strict else 0

    assert_fp16(outs[0], p64.prod(-1), extra=k(5, p64.prod(-1)), what="reduce_prod")
    l1 = np.abs(x64).sum((0, 2), keepdims=True)
    assert_fp16(outs[1], l1, extra=k(15, l1), what="reduce_l1_norm")
    l2 = np.sqrt((x64 ** 2).sum())
    assert outs[2].shape == ()
    assert_fp16(outs[2], l2, extra=k(62, l2), what="reduce_l2_norm over all axes")
    ss = (x64 ** 2).sum(1)
    assert_fp16(outs[3], ss, extra=k(6, ss), what="reduce_sum_square")
    assert_fp16(outs[4], np.log(p64.sum(2)), extra=k(6, np.ones(1)), what="reduce_log_sum")
    lse = np.log(np.exp(x64).sum(-2, keepdims=True))
    assert_fp16(outs[5], lse, extra=k(6, np.abs(lse) + 1), what="reduce_log_sum_exp")
    assert outs[6].dtype == np.int32 and (outs[6] == x64.argmax(-1)).all()
    assert outs[7].shape == (1, 4, 5) and (outs[7][0] == x64.argmin(0)).all()


def test_integer_reductions_and_iOS17_uint16_argmax():
    outs = run(lambda x: (mb.reduce_prod(x=x, axes=[1]), mb.reduce_l1_norm(x=x),
                          mb.reduce_argmax(x=x, axis=1, output_dtype="uint16")), {"x": XI})
    assert outs[0].dtype == np.int32 and (outs[0] == XI.prod(1)).all()
    assert outs[1] == np.abs(XI).sum()
    assert outs[2].dtype == np.uint16 and (outs[2] == XI.argmax(1)).all()


@pytest.mark.parametrize("mode", MODES)
def test_cumsum(mode):
    outs = run(lambda x: (mb.cumsum(x=x, axis=1), mb.cumsum(x=x, axis=-1, exclusive=True),
                          mb.cumsum(x=x, axis=0, reverse=True), mb.cumsum(x=x, axis=2, exclusive=True, reverse=True)),
               {"x": X}, mode)
    ab = np.abs(x64)
    strict = mode == "fp16-strict"
    cases = [(np.cumsum(x64, 1), np.cumsum(ab, 1), 4),
             (np.concatenate([np.zeros((3, 4, 1)), np.cumsum(x64, -1)[..., :-1]], -1), np.cumsum(ab, -1), 5),
             (np.flip(np.cumsum(np.flip(x64, 0), 0), 0), np.flip(np.cumsum(np.flip(ab, 0), 0), 0), 3),
             (np.flip(np.concatenate([np.zeros((3, 4, 1)), np.cumsum(np.flip(x64, 2), 2)[..., :-1]], 2), 2),
              np.flip(np.cumsum(np.flip(ab, 2), 2), 2), 5)]
    for i, (out, (ref, terms, n)) in enumerate(zip(outs, cases)):
        assert_fp16(out, ref, extra=n * U16 * terms if strict else 0, what=f"cumsum case {i} {mode}")
    (out,) = run(lambda x: mb.cumsum(x=x, axis=1), {"x": XI})
    np.testing.assert_array_equal(out, np.cumsum(XI, 1))


def test_cumsum_strict_accumulates_in_fp16():
    # 2050 ones: an fp16 accumulator stops at 2048 (2048 + 1 rounds back to 2048), float32 reaches 2050
    ones = f16(np.ones((1, 2050)))
    (strict,) = run(lambda x: mb.cumsum(x=x, axis=1), {"x": ones}, "fp16-strict")
    (wide,) = run(lambda x: mb.cumsum(x=x, axis=1), {"x": ones})
    assert strict[0, -1] == 2048 and wide[0, -1] == 2050


def test_empty_and_size_one_dimensions():
    """cumsum and reduce_l1_norm here; reverse (ops/slicing.py), topk (ops/sorting.py) and non_zero
    (ops/indexing.py) on the same empty and size-one shapes."""
    e = f16(np.zeros((2, 0, 3)))
    one = f16(RNG.standard_normal((1, 1, 1)))
    outs = run(lambda a, b: (mb.cumsum(x=a, axis=1), mb.reverse(x=a), mb.reduce_l1_norm(x=b, axes=[1]),
                             mb.topk(x=b, k=1)[0], mb.non_zero(x=a)), {"a": e, "b": one})
    assert outs[0].shape == (2, 0, 3) and outs[1].shape == (2, 0, 3)
    assert outs[2].tolist() == [[abs(float(one.reshape(())))]]
    assert outs[3].tolist() == one.tolist() and outs[4].shape == (0, 3)
