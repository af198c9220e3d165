"""concat, split, stack and tile (ops/joining.py) in the mil executor, against numpy: they copy values, so the
results must be exact in both precision modes."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import MODES, f16, mb, run

RNG = np.random.default_rng(31)
A = f16(RNG.standard_normal((2, 3, 4)))
B = f16(RNG.standard_normal((2, 3, 4)))


@pytest.mark.parametrize("mode", MODES)
def test_joining_ops_copy_exactly(mode):
    outs = run(lambda a, b: (mb.concat(values=[a, b, a], axis=-1), mb.stack(values=[a, b], axis=1),
                             mb.tile(x=a, reps=[1, 2, 3]), *mb.split(x=a, split_sizes=[1, 3], axis=2),
                             *mb.split(x=b, num_splits=3, axis=1)),
               {"a": A, "b": B}, mode)
    want = [np.concatenate([A, B, A], axis=-1), np.stack([A, B], axis=1), np.tile(A, (1, 2, 3)),
            A[:, :, :1], A[:, :, 1:], B[:, :1], B[:, 1:2], B[:, 2:]]
    assert len(outs) == len(want)
    for got, ref in zip(outs, want):
        assert got.dtype == np.float16 and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_a_stack_on_the_wrong_axis_is_caught():
    """The exact comparison above can fail: stacking along axis 0 instead of 1 gives other values in that shape."""
    (got,) = run(lambda a, b: mb.stack(values=[a, b], axis=1), {"a": A, "b": B})
    assert not np.array_equal(got.reshape(-1), np.stack([A, B], axis=0).reshape(-1))
