"""argsort and topk (ops/sorting.py) in the mil executor, against numpy's stable sorts: exact."""

from __future__ import annotations

import numpy as np

from executor_ops_support import ct, f16, mb, run


def test_index_and_sort_ops():
    """argsort and topk here; one_hot, non_zero (ops/indexing.py) and band_part (ops/slicing.py) in the same program."""
    xs = f16([[3, 1, 2, 3, 0], [5, 5, -1, 2, 7]])
    idx = np.array([[0, 2], [4, 1], [-1, 3]], np.int32)  # -1: no hot position
    outs = run(lambda x, i: (mb.argsort(x=x), mb.argsort(x=x, axis=0, ascending=True),
                             *mb.topk(x=x, k=3), mb.topk(x=x, k=2, axis=-1, ascending=True, return_indices=False),
                             mb.one_hot(indices=i, one_hot_vector_size=5, on_value=np.float16(2.5),
                                        off_value=np.float16(-1)),
                             mb.one_hot(indices=i, one_hot_vector_size=4, axis=0),
                             mb.non_zero(x=x), mb.band_part(x=x, lower=0, upper=1), mb.band_part(x=x, lower=1)),
               {"x": xs, "i": idx}, opset=ct.target.iOS16)
    d = xs.astype(np.float64)
    np.testing.assert_array_equal(outs[0], np.argsort(-d, kind="stable"))
    np.testing.assert_array_equal(outs[1], np.argsort(d, axis=0, kind="stable"))
    np.testing.assert_array_equal(outs[3], np.argsort(-d, kind="stable")[:, :3])
    np.testing.assert_array_equal(outs[2], np.take_along_axis(xs, outs[3], -1))
    np.testing.assert_array_equal(outs[4], np.sort(xs, -1)[:, :2])
    hot = (idx[..., None] == np.arange(5))
    np.testing.assert_array_equal(outs[5], np.where(hot, 2.5, -1).astype(np.float16))
    np.testing.assert_array_equal(outs[6], np.moveaxis(idx[..., None] == np.arange(4), -1, 0).astype(np.float32))
    assert outs[7].dtype == np.int32 and outs[7].tolist() == np.argwhere(xs).tolist()
    m, n = np.indices(xs.shape)
    np.testing.assert_array_equal(outs[8], np.where((m - n <= 0) & (n - m <= 1), xs, 0))
    np.testing.assert_array_equal(outs[9], np.where(m - n <= 1, xs, 0))
    # k = -1 (iOS17: the whole axis); coremltools' type inference declares that output dim as -1, so call the handler
    from experiments.ane_engineering.run.mil.registry import OPS

    values, indices = OPS["topk"].handler(None, {"x": xs, "k": np.int32(-1), "axis": np.int32(-1)}, None)
    assert values.tolist() == np.sort(xs, -1)[:, ::-1].tolist() and indices.shape == xs.shape
