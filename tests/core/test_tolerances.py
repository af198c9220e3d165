"""The FP32 cross-machine tolerance (core/tolerances.py) against real reorderings of FP32 sums."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.ane_engineering.core import tolerances


def _network(x, weights, matmul):
    """D stages: a dot-product layer, then a layer norm (the scale stays O(1), as in a transformer) and a leaky
    nonlinearity."""
    for weight in weights:
        x = matmul(x, weight)
        x = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True).astype(x.dtype)
        x = np.maximum(x, 0) + 0.5 * x
    return x


def _blas(x, w):
    return (x @ w).astype(np.float32)


def _ordered(order):
    """FP32 products summed one k at a time in `order`: another summation order than BLAS's blocked one."""
    def matmul(x, w):
        total = np.zeros((x.shape[0], w.shape[1]), np.float32)
        for k in order(x.shape[1]):
            total = total + np.outer(x[:, k], w[k]).astype(np.float32)
        return total
    return matmul


@pytest.mark.parametrize("contraction, depth", [(128, 8), (320, 12), (1024, 6)])
def test_fp32_networks_summed_in_other_orders_stay_inside_the_bound(contraction, depth):
    rng = np.random.default_rng(contraction)
    weights = [(rng.standard_normal((contraction, contraction)) / math.sqrt(contraction)).astype(np.float32)
               for _ in range(depth)]
    x = rng.standard_normal((8, contraction)).astype(np.float32)
    exact = _network(x.astype(np.float64), [w.astype(np.float64) for w in weights], lambda a, b: a @ b)
    runs = [_network(x, weights, matmul) for matmul in (_blas, _ordered(range), _ordered(lambda n: range(n)[::-1]))]
    bound = tolerances.fp32_cross_machine_abs(float(np.abs(exact).max()), depth, contraction)
    between = max(float(np.abs(a - b).max()) for a in runs for b in runs)
    to_exact = max(float(np.abs(run - exact).max()) for run in runs)
    assert between <= bound and 2 * to_exact <= bound
    # and the bound is not vacuous: real reorderings come within two orders of magnitude of it
    assert between >= bound / 100


def test_softmax_moves_by_at_most_half_its_largest_logit_move():
    rng = np.random.default_rng(0)
    for _ in range(200):
        logits = rng.normal(0, 3, size=rng.integers(2, 20))
        move = rng.uniform(-1e-3, 1e-3, size=logits.shape)
        temperature = rng.uniform(0.5, 3.0)

        def softmax(z):
            e = np.exp(z / temperature - (z / temperature).max())
            return e / e.sum()

        change = np.abs(softmax(logits + move) - softmax(logits)).max()
        assert change <= tolerances.softmax_abs(np.abs(move).max(), temperature) * (1 + 1e-6)
