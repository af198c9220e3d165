"""The random ops' handlers (run/mil/ops/random.py) called directly: degenerate distributions are exact, a seeded op
repeats its values run after run and differs between seeds, and draws follow their distribution (coremltools' own
cases for these ops run in the op suite: benchmarks/evidence/executor_conformance*.json)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from experiments.ane_engineering.run.mil.ops.random import (
    op_random_bernoulli,
    op_random_categorical,
    op_random_normal,
    op_random_uniform,
)

FP32 = types.SimpleNamespace(output_dtypes=[np.dtype(np.float32)])
SHAPE = np.array([2, 3, 4], np.int32)


def test_degenerate_distributions_are_exact():
    assert np.array_equal(op_random_bernoulli(FP32, {"shape": SHAPE, "prob": 1.0}, None), np.ones((2, 3, 4)))
    assert np.array_equal(op_random_bernoulli(FP32, {"shape": SHAPE, "prob": 0.0}, None), np.zeros((2, 3, 4)))
    assert np.array_equal(op_random_normal(FP32, {"shape": SHAPE, "mean": 1.5, "stddev": 0.0}, None),
                          np.full((2, 3, 4), 1.5))
    assert np.array_equal(op_random_uniform(FP32, {"shape": SHAPE, "low": 2.0, "high": 2.0}, None),
                          np.full((2, 3, 4), 2))
    one_class = op_random_categorical(FP32, {"x": np.zeros((3, 1), np.float32), "size": 5}, None)
    assert one_class.shape == (3, 5) and not one_class.any() and one_class.dtype == np.float32


@pytest.mark.parametrize("op, args", [
    (op_random_bernoulli, {"shape": SHAPE, "prob": 0.5}),
    (op_random_normal, {"shape": SHAPE}),
    (op_random_uniform, {"shape": SHAPE, "low": -1.0, "high": 1.0}),
    (op_random_categorical, {"x": np.zeros((2, 6), np.float32), "size": 40}),
])
def test_a_seeded_op_repeats_and_seeds_differ(op, args):
    first, again = op(FP32, {**args, "seed": 7}, None), op(FP32, {**args, "seed": 7}, None)
    other = op(FP32, {**args, "seed": 8}, None)
    assert np.array_equal(first, again) and not np.array_equal(first, other)


def test_draws_follow_their_distribution():
    many = np.array([4000, 50], np.int32)
    ones = op_random_bernoulli(FP32, {"shape": many, "prob": 0.3, "seed": 1}, None).mean()
    normal = op_random_normal(FP32, {"shape": many, "mean": 2.0, "stddev": 0.5, "seed": 1}, None)
    uniform = op_random_uniform(FP32, {"shape": many, "low": -1.0, "high": 3.0, "seed": 1}, None)
    # 200,000 draws: standard errors are below 0.003 of the distributions' scales; 0.01 is over 3 of them
    assert abs(ones - 0.3) < 0.01 and abs(normal.mean() - 2.0) < 0.01 and abs(normal.std() - 0.5) < 0.01
    assert uniform.min() >= -1.0 and uniform.max() < 3.0 and abs(uniform.mean() - 1.0) < 0.02
    probs = np.array([0.1, 0.6, 0.3])
    for mode, x in (("probs", probs), ("logits", np.log(probs))):
        drawn = op_random_categorical(FP32, {"x": x.astype(np.float32)[None], "mode": mode, "size": 50000, "seed": 3},
                                      None)
        assert np.allclose(np.bincount(drawn.astype(int).ravel(), minlength=3) / drawn.size, probs, atol=0.01)
