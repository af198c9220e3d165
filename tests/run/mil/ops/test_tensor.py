"""Reductions, gathers/scatters and tensor ops added to the mil executor, against numpy / torch references, at both
precision modes where the op computes anything (the rest copy values and must be exact).

Tolerance for sums: one fp16 ulp (the output rounding), plus in fp16-strict (K - 1) * 2^-11 * sum|terms| for a
sequential fp16 sum of K terms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from executor_ops_support import MODES, U16, assert_fp16, ct, f16, mb, run

RNG = np.random.default_rng(77)
X = f16(RNG.standard_normal((3, 4, 5)))
x64 = X.astype(np.float64)
XI = RNG.integers(-5, 6, (3, 4, 5)).astype(np.int32)


# ----------------------------------------------------------------------------------------------- reductions

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


# ----------------------------------------------------------------------------------------------- gather / scatter

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


# ----------------------------------------------------------------------------------------------- tensor ops

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


def test_index_and_sort_ops():
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


def test_layout_ops_match_torch():
    x = f16(RNG.standard_normal((2, 8, 4, 6)))
    t = torch.from_numpy(x.astype(np.float32))
    outs = run(lambda v: (mb.pixel_shuffle(x=v, upscale_factor=2),
                          mb.pixel_unshuffle(x=v, downscale_factor=np.uint32(2)),
                          mb.depth_to_space(x=v, block_size=2), mb.space_to_depth(x=v, block_size=2),
                          mb.space_to_depth(x=mb.depth_to_space(x=v, block_size=2), block_size=2),
                          mb.space_to_batch(x=v, block_shape=[2, 3], paddings=[[0, 2], [3, 0]]),
                          mb.batch_to_space(x=mb.space_to_batch(x=v, block_shape=[2, 3], paddings=[[0, 2], [3, 0]]),
                                            block_shape=[2, 3], crops=[[0, 2], [3, 0]]),
                          mb.flatten2d(x=v, axis=-2), mb.flatten2d(x=v),
                          mb.reverse(x=v, axes=[1, -1]), mb.reverse(x=v),
                          mb.sliding_windows(x=v, axis=-1, size=3, stride=2)),
               {"x": x}, opset=ct.target.iOS16)
    np.testing.assert_array_equal(outs[0], F.pixel_shuffle(t, 2).numpy().astype(np.float16))
    np.testing.assert_array_equal(outs[1], F.pixel_unshuffle(t, 2).numpy().astype(np.float16))
    # depth_to_space in DCR order: out[n, c, 2h + i, 2w + j] = in[n, (2i + j) * C/4 + c, h, w]
    d2s = np.empty((2, 2, 8, 12), np.float16)
    for i in range(2):
        for j in range(2):
            d2s[:, :, i::2, j::2] = x[:, (2 * i + j) * 2:(2 * i + j) * 2 + 2]
    np.testing.assert_array_equal(outs[2], d2s)
    s2d = np.concatenate([x[:, :, i::2, j::2] for i in range(2) for j in range(2)], axis=1)
    np.testing.assert_array_equal(outs[3], s2d)
    np.testing.assert_array_equal(outs[4], x)
    padded = np.pad(x, [(0, 0), (0, 0), (0, 2), (3, 0)])
    s2b = np.concatenate([padded[:, :, i::2, j::3] for i in range(2) for j in range(3)], axis=0)
    np.testing.assert_array_equal(outs[5], s2b)
    np.testing.assert_array_equal(outs[6], x)
    np.testing.assert_array_equal(outs[7], x.reshape(2 * 8, 4 * 6))
    np.testing.assert_array_equal(outs[8], x.reshape(2, -1))
    np.testing.assert_array_equal(outs[9], x[:, ::-1, :, ::-1])
    np.testing.assert_array_equal(outs[10], x[::-1, ::-1, ::-1, ::-1])
    np.testing.assert_array_equal(outs[11], np.stack([x[..., s:s + 3] for s in (0, 2)], axis=-2))


def test_reverse_sequence_fill_like_reshape_like_slice_update():
    x = f16(RNG.standard_normal((3, 5, 2)))
    lengths = np.array([2, 5, 0], np.int32)
    upd = f16(RNG.standard_normal((3, 2, 2)))
    r = f16(np.zeros((2, 15)))
    outs = run(lambda v, n, u, r: (mb.reverse_sequence(x=v, lengths=n, seq_axis=1, batch_axis=0),
                                mb.fill_like(ref_tensor=v, value=np.float16(4.5)),
                                mb.reshape_like(x=v, ref_tensors=(r, v), begins=(1, 2), ends=(2, 3),
                                                end_masks=(True, False)),
                                mb.slice_update(x=v, update=u, begin=[0, 1, 0], end=[3, 5, 2], stride=[1, 2, 1]),
                                mb.slice_update(x=v, update=mb.slice_by_index(x=u, begin=[0, 0, 0], end=[3, 1, 2],
                                                                             squeeze_mask=[False, True, False]),
                                                begin=[0, 4, 0], end=[3, 5, 2], squeeze_mask=[False, True, False])),
               {"v": x, "n": lengths, "u": upd, "r": r}, opset=ct.target.iOS18)
    ref = x.copy()
    for b, n in enumerate(lengths):
        ref[b, :n] = x[b, :n][::-1]
    np.testing.assert_array_equal(outs[0], ref)
    np.testing.assert_array_equal(outs[1], np.full(x.shape, 4.5, np.float16))
    np.testing.assert_array_equal(outs[2], x.reshape(15, 2))  # r.shape[1:] + v.shape[2:3]
    ref = x.copy()
    ref[:, 1:5:2] = upd
    np.testing.assert_array_equal(outs[3], ref)
    ref = x.copy()
    ref[:, 4] = upd[:, 0]
    np.testing.assert_array_equal(outs[4], ref)


def test_empty_and_size_one_dimensions():
    e = f16(np.zeros((2, 0, 3)))
    one = f16(RNG.standard_normal((1, 1, 1)))
    outs = run(lambda a, b: (mb.cumsum(x=a, axis=1), mb.reverse(x=a), mb.reduce_l1_norm(x=b, axes=[1]),
                             mb.topk(x=b, k=1)[0], mb.non_zero(x=a)), {"a": e, "b": one})
    assert outs[0].shape == (2, 0, 3) and outs[1].shape == (2, 0, 3)
    assert outs[2].tolist() == [[abs(float(one.reshape(())))]]
    assert outs[3].tolist() == one.tolist() and outs[4].shape == (0, 3)


@pytest.mark.slow
def test_new_ops_survive_a_package_round_trip(tmp_path):
    """The same ops saved as an .mlpackage by coremltools and read back by the executor's loader (defaults
    materialised by the loader, consts read from weight.bin) give the builder program's results."""
    from coremltools.converters.mil.mil import Function, Program

    from experiments.ane_engineering.run.mil.executor import MILExecutor

    x = f16(RNG.standard_normal((1, 4, 6, 6)))
    mask = np.array([[1, 1, 1, 0, 0, 0]], np.int32)
    w = f16(RNG.standard_normal((4, 2, 3, 3)) * 0.3)

    def build(v, m):
        h = mb.max_pool(x=v, kernel_sizes=[3, 3], strides=[2, 2], pad_type="custom", pad=[1, 1, 1, 1], ceil_mode=True)
        h = mb.batch_norm(x=h, mean=f16(np.zeros(4)), variance=f16(np.ones(4) * 2), epsilon=np.float16(1e-3))
        h = mb.upsample_nearest_neighbor(x=mb.leaky_relu(x=h, alpha=np.float16(0.1)), scale_factor_height=2,
                                         scale_factor_width=2)
        h = mb.conv_transpose(x=mb.pad(x=h, pad=[0, 0, 1, 1], mode="reflect"), weight=w, strides=[1, 1])
        pos = mb.cumsum(x=m, axis=1)  # RoBERTa's position ids
        last = mb.gather_nd(x=mb.avg_pool(x=v, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid"),
                            indices=np.array([[0, 1, 2]], np.int32))
        return h, pos, last, mb.topk(x=mb.reshape(x=v, shape=[4, 36]), k=3)[1]

    from conversion_support import save_program
    from executor_ops_support import loaded, spec

    with Function({"v": spec(x), "m": spec(mask)}, ct.target.iOS17) as func:
        func.set_outputs(list(build(func.inputs["v"], func.inputs["m"])))
    prog = Program()
    prog.add_function("main", func)
    want = MILExecutor(loaded(prog, "iOS17")).run({"v": x, "m": mask})
    ex = MILExecutor(save_program(prog, tmp_path / "ops.mlpackage", ct.target.iOS17))
    got = ex.run({"v": x, "m": mask})
    assert {"max_pool", "batch_norm", "conv_transpose", "cumsum", "gather_nd", "topk"} <= set(ex.op_type_counts)
    for (name, a), b in zip(want.items(), got.values()):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b)


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
