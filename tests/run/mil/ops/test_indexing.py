"""Gathers and scatters (ops/indexing.py) in the mil executor, against numpy references: they copy values and must
be exact, at both precision modes where they add (scatter modes)."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import MODES, U16, assert_fp16, ct, f16, mb, run

RNG = np.random.default_rng(77)
X = f16(RNG.standard_normal((3, 4, 5)))
x64 = X.astype(np.float64)
XI = RNG.integers(-5, 6, (3, 4, 5)).astype(np.int32)


def test_gather_nd_with_batch_dims_and_negative_indices():
    idx = np.array([[[0, 1], [2, -1]], [[1, 3], [0, 0]]], np.int32)  # [2, 2, 2]
    idx_b = np.array([[[1], [3]], [[0], [2]], [[3], [3]]], np.int32)  # batch_dims=1: [3, 2, 1] into x[b]
    outs = run(lambda x, i, j: (mb.gather_nd(x=x, indices=i), mb.gather_nd(x=x, indices=j, batch_dims=1),
                                mb.gather_nd(x=x, indices=mb.expand_dims(x=mb.reduce_argmax(x=x, axis=2), axes=[-1]),
                                             batch_dims=2)),
               {"x": X, "i": idx, "j": idx_b}, opset=ct.target.iOS16)
    want = np.stack([X[tuple(i)] for i in idx.reshape(-1, 2)]).reshape(2, 2, 5)
    np.testing.assert_array_equal(outs[0], want)
    np.testing.assert_array_equal(outs[1], np.stack([X[b][idx_b[b, :, 0]] for b in range(3)]))
    np.testing.assert_array_equal(outs[2], X.max(2))  # the attention-mask pattern: pick one element per row
    # iOS15 (no batch_dims) and int32 data
    (out,) = run(lambda x, i: mb.gather_nd(x=x, indices=i), {"x": XI, "i": idx}, opset=ct.target.iOS15)
    np.testing.assert_array_equal(out, np.stack([XI[tuple(i)] for i in idx.reshape(-1, 2)]).reshape(2, 2, 5))


def test_gather_indices_out_of_range_are_refused_with_validate_indices():
    from experiments.ane_engineering.run.mil.executor import ExecutionError

    with pytest.raises(ExecutionError, match="out of bounds"):
        run(lambda x, i: mb.gather_nd(x=x, indices=i, validate_indices=True),
            {"x": X, "i": np.array([[3, 0]], np.int32)})


def test_scatter_takes_indices_of_any_rank():
    """coremltools' own scatter cases give 2-D and 3-D indices (TF's scatter_update semantics): updates are
    data.shape[:axis] + indices.shape + data.shape[axis+1:]; each index's slice lands in row-major order."""
    idx = np.array([[3, 0], [2, 1]], np.int32)  # [2, 2] into axis 1 (size 4)
    upd = f16(RNG.standard_normal((3, 2, 2, 5)))
    outs = run(lambda x, i, u: (mb.scatter(data=x, indices=i, updates=u, axis=1, mode="update"),
                                mb.scatter(data=x, indices=i, updates=u, axis=1, mode="add")),
               {"x": X, "i": idx, "u": upd}, opset=ct.target.iOS15)
    ref = x64.copy()
    ref[:, idx.reshape(-1)] = upd.reshape(3, 4, 5)
    np.testing.assert_array_equal(outs[0], ref.astype(np.float16))
    ref = x64.copy()
    ref[:, idx.reshape(-1)] += upd.reshape(3, 4, 5).astype(np.float64)
    assert_fp16(outs[1], ref, what="scatter add, 2-D indices")


@pytest.mark.parametrize("mode", MODES)
def test_scatter_family_matches_numpy(mode):
    upd = f16(RNG.standard_normal((3, 2, 5)))
    idx = np.array([3, 1], np.int32)
    along_idx = RNG.integers(0, 4, (3, 2, 5)).astype(np.int32)
    nd_idx = np.array([[0, 1], [2, 3], [0, 1]], np.int32)  # repeated index: accumulates
    nd_upd = f16(RNG.standard_normal((3, 5)))
    outs = run(lambda x, u, ai, nu, nu2: (mb.scatter(data=x, indices=idx, updates=u, axis=1, mode="update"),
                                     mb.scatter(data=x, indices=idx, updates=u, axis=-2, mode="mul"),
                                     mb.scatter_along_axis(data=x, indices=ai, updates=u, axis=1, mode="add"),
                                     mb.scatter_nd(data=x, indices=nd_idx, updates=nu, mode="add"),
                                     mb.scatter_nd(data=x, indices=nd_idx[:2], updates=nu2, mode="max"),
                                     mb.scatter(data=x, indices=idx, updates=u, axis=1, mode="div")),
               {"x": X, "u": upd, "ai": along_idx, "nu": nd_upd, "nu2": nd_upd[:2]}, mode)
    u64 = upd.astype(np.float64)
    ref = x64.copy()
    ref[:, idx] = u64
    np.testing.assert_array_equal(outs[0], ref.astype(np.float16))
    ref = x64.copy()
    ref[:, idx] *= u64
    assert_fp16(outs[1], ref, what="scatter mul")
    ref = x64.copy()
    np.add.at(ref, (np.arange(3)[:, None, None], along_idx, np.arange(5)[None, None, :]), u64)
    extra = 3 * U16 * (np.abs(x64) + 2 * np.abs(u64).max()) if mode == "fp16-strict" else 0
    assert_fp16(outs[2], ref, extra=extra, what="scatter_along_axis add")
    ref = x64.copy()
    np.add.at(ref, (nd_idx[:, 0], nd_idx[:, 1]), nd_upd.astype(np.float64))
    assert_fp16(outs[3], ref, extra=extra[:, 0, :].max() if mode == "fp16-strict" else 0, what="scatter_nd add")
    ref = x64.copy()
    ref[nd_idx[:2, 0], nd_idx[:2, 1]] = np.maximum(ref[nd_idx[:2, 0], nd_idx[:2, 1]], nd_upd[:2])
    np.testing.assert_array_equal(outs[4], ref.astype(np.float16))
    ref = x64.copy()
    ref[:, idx] /= u64
    assert_fp16(outs[5], ref, what="scatter div")


def test_scatter_default_mode_is_add_and_int_data():
    (out,) = run(lambda x, i, u: mb.scatter(data=x, indices=i, updates=u),
                 {"x": XI, "i": np.array([0, 0], np.int32), "u": np.ones((2, 4, 5), np.int32)})
    ref = XI.copy()
    ref[0] += 2
    np.testing.assert_array_equal(out, ref)


def test_gather_batch_dims_negative_indices_and_validate():
    # gather (the gather family's handler, checked here against tf.gather's definition): iOS16 batch_dims and
    # negative indices, iOS17 validate_indices
    from experiments.ane_engineering.run.mil.executor import ExecutionError

    idx = np.array([[0, -1, 2], [3, 1, 1], [-4, 0, 3]], np.int32)  # [3, 3] into axis 1 of X [3, 4, 5]
    outs = run(lambda x, i: (mb.gather(x=x, indices=i, axis=1, batch_dims=1), mb.gather(x=x, indices=i, axis=-1)),
               {"x": X, "i": idx}, opset=ct.target.iOS16)
    np.testing.assert_array_equal(outs[0], np.stack([X[b][idx[b] % 4] for b in range(3)]))
    np.testing.assert_array_equal(outs[1], np.take(X, idx, axis=-1))
    with pytest.raises(ExecutionError, match="out of bounds"):
        run(lambda x, i: mb.gather(x=x, indices=i, axis=1, validate_indices=True),
            {"x": X, "i": np.array([1, 4], np.int32)}, opset=ct.target.iOS17)


def test_iOS17_scatter_without_validation_drops_invalid_indices():
    # iOS17: negative and out-of-range indices are undefined without validate_indices; the scatters drop them
    # (coremltools' iOS17 op tests require that the wrapped-index result is not produced), and refuse them with it
    from experiments.ane_engineering.run.mil.executor import ExecutionError

    data = f16([[1, 2, 3], [4, 5, 6]])
    upd = f16([[5, 6, 7], [8, 9, 10]])
    for idx in ([-1, 0], [10, 0]):
        (out,) = run(lambda d, u, i: mb.scatter(data=d, indices=i, updates=u, validate_indices=False),
                     {"d": data, "u": upd, "i": np.array(idx, np.int32)})
        np.testing.assert_array_equal(out, f16([[9, 11, 13], [4, 5, 6]]))  # only index 0 applied
        with pytest.raises(ExecutionError, match="out of bounds"):
            run(lambda d, u, i: mb.scatter(data=d, indices=i, updates=u, validate_indices=True),
                {"d": data, "u": upd, "i": np.array(idx, np.int32)})
    outs = run(lambda d, i, j: (mb.scatter_nd(data=d, indices=i, updates=f16([1, 2]), mode="add"),
                                mb.scatter_along_axis(data=d, indices=j, updates=upd, axis=1, mode="update")),
               {"d": data, "i": np.array([[1, 0], [0, -1]], np.int32),
                "j": np.array([[0, 9, 1], [2, 2, -1]], np.int32)})
    np.testing.assert_array_equal(outs[0], f16([[1, 2, 3], [5, 5, 6]]))
    np.testing.assert_array_equal(outs[1], f16([[5, 7, 3], [4, 5, 9]]))
    # iOS16: negative indices count from the end
    (out,) = run(lambda d, u, i: mb.scatter(data=d, indices=i, updates=u),
                 {"d": data, "u": upd, "i": np.array([-1, 0], np.int32)},
                 opset=ct.target.iOS16)
    np.testing.assert_array_equal(out, f16([[9, 11, 13], [9, 11, 13]]))
