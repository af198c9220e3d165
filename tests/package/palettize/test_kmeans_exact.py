"""Exact weighted 1-D k-means for palettization: exactness, never worse than coremltools, same package format."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
ct = pytest.importorskip("coremltools")

from experiments.ane_engineering.package.palettize import fp16_lut  # noqa: E402
from experiments.ane_engineering.package.palettize import kmeans_exact as ke  # noqa: E402


def _coremltools_group(group: np.ndarray, nbits: int):
    """The per-group call palettize_weights(mode="kmeans", per_grouped_channel) makes: kmeans1d on the histogram for
    FP16 groups of >= 10,000 values, scikit-learn KMeans below."""
    from coremltools.optimize.coreml._quantization_passes import palettize_weights

    return palettize_weights._get_lut_and_indices(group, "KMEANS", nbits, None)


def _brute_force(x: np.ndarray, w: np.ndarray, k: int) -> float:
    """O(k n^2) DP over contiguous partitions with segment costs computed directly (no prefix sums)."""
    n = x.size
    cost = np.zeros((n + 1, n + 1))
    for j in range(n):
        for i in range(j + 1, n + 1):
            xs, ws = x[j:i], w[j:i]
            mean = np.dot(ws, xs) / ws.sum()
            cost[j, i] = np.dot(ws, (xs - mean) ** 2)
    best = np.full((k + 1, n + 1), np.inf)
    best[0, 0] = 0.0
    for c in range(1, k + 1):
        for i in range(1, n + 1):
            best[c, i] = min(best[c - 1, j] + cost[j, i] for j in range(i))
    return float(best[k, n])


def _partition_sse(x, w, centroids, bounds) -> float:
    return float(sum(np.dot(w[bounds[t]:bounds[t + 1]], (x[bounds[t]:bounds[t + 1]] - centroids[t]) ** 2)
                     for t in range(centroids.size)))


def _check_format(group, nbits, lut, idx):
    assert lut.dtype == np.float16 and lut.shape == (1 << nbits,)
    assert idx.dtype == np.uint8 and idx.shape == (group.size,)
    assert int(idx.max()) < (1 << nbits)
    assert np.all(np.diff(lut.astype(np.float64)) >= 0), "LUT is sorted"


def _assert_not_worse(group, nbits):
    lut, idx = ke.palettize_group(group, nbits)
    _check_format(group, nbits, lut, idx)
    ours = ke.group_sse(group, lut, idx)
    theirs = ke.group_sse(group, *_coremltools_group(group, nbits))
    assert ke.sse_not_worse(ours, theirs), f"ours {ours!r} > coremltools {theirs!r} ({ours / theirs - 1:+.3e})"
    return ours, theirs


# (a) never worse than coremltools' own per-group k-means, on the stored FP16 LUT and indices ------------------

def _synthetic_groups():
    rng = np.random.default_rng(7)
    return {
        "normal_32x384": (rng.standard_normal((32, 384)) / np.sqrt(384)).astype(np.float16),  # >= 10k: kmeans1d
        "laplace_32x320": (rng.laplace(size=(32, 320)) * 0.02).astype(np.float16),  # heavy tails, >= 10k
        "tiny_scale_32x320": (rng.standard_normal((32, 320)) * 2e-3).astype(np.float16),  # fine FP16 grid
        "normal_32x64": (rng.standard_normal((32, 64)) / 8).astype(np.float16),  # < 10k: scikit-learn
    }


@pytest.mark.parametrize("nbits", [8, 6, 4])
def test_not_worse_than_coremltools_synthetic(nbits):
    for name, group in _synthetic_groups().items():
        _assert_not_worse(group, nbits)


@pytest.fixture(scope="module")
def tiny_wqkv():
    from experiments.ane_engineering.checkpoint import load_checkpoint

    return load_checkpoint("builtin:tiny").tensors["layers.1.attn.Wqkv.weight"].numpy().astype(np.float16)


@pytest.mark.parametrize("nbits", [8, 6, 4])
def test_not_worse_than_coremltools_real_groups(tiny_wqkv, nbits):
    groups = tiny_wqkv.reshape(-1, 32, tiny_wqkv.shape[1])  # groups of 32 output channels (32 x 128: scikit-learn)
    for g in groups[::4]:  # q, k and v rows
        _assert_not_worse(g, nbits)


# (b) exactness against a brute-force O(k n^2) DP --------------------------------------------------------------

@pytest.mark.parametrize("method", ["auto", "dc", "lagrange"])
def test_matches_brute_force(method):
    rng = np.random.default_rng(3)
    for _ in range(60):
        n = int(rng.integers(2, 28))
        x = np.unique(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 2))
        w = rng.integers(1, 30, x.size).astype(np.float64)
        for k in (1, 2, 3, int(rng.integers(1, x.size + 2))):
            centroids, bounds = ke.kmeans_1d_weighted(x, w, k, method=method)
            kk = min(k, x.size)
            assert centroids.size == kk and bounds[0] == 0 and bounds[-1] == x.size
            assert np.all(np.diff(bounds) > 0) and np.all(np.diff(centroids) > 0)
            best = _brute_force(x, w, kk)
            got = _partition_sse(x, w, centroids, bounds)
            assert got <= best * (1 + 1e-9) + 1e-12 * np.dot(w, x * x), (n, k, got, best)


@pytest.mark.parametrize("k", [256, 64, 16])
def test_same_optimum_as_coremltools_kmeans1d(k):
    """On a large histogram (no brute force possible) the continuous optimum equals coremltools' vendored exact
    weighted k-means (kmeans1d, SMAWK) -- both are exact, so the SSEs agree to rounding."""
    from coremltools._deps import _kmeans1d

    group = _synthetic_groups()["normal_32x384"]
    values, counts = np.unique(group.astype(np.float64), return_counts=True)
    result = _kmeans1d.cluster(values, k, weights=counts)
    theirs = float(np.dot(counts, (values - np.asarray(result.centroids)[np.asarray(result.clusters)]) ** 2))
    for method in ("auto", "dc"):
        centroids, bounds = ke.kmeans_1d_weighted(values, counts.astype(np.float64), k, method=method)
        ours = _partition_sse(values, counts.astype(np.float64), centroids, bounds)
        assert ours == pytest.approx(theirs, rel=1e-9)


def test_ties_fall_back_to_the_dp():
    """Evenly spaced equal weights make C(k) linear in places: the lambda search cannot land on k there."""
    x, w = np.arange(24.0), np.ones(24)
    for k in range(1, 25):
        centroids, bounds = ke.kmeans_1d_weighted(x, w, k)  # auto: falls back to the D&C DP when needed
        assert _partition_sse(x, w, centroids, bounds) <= _brute_force(x, w, k) + 1e-9
    with pytest.raises(RuntimeError):
        for k in range(2, 24):
            ke.kmeans_1d_weighted(x, w, k, method="lagrange")


# (c) few distinct values: every value gets its own entry -----------------------------------------------------

@pytest.mark.parametrize("nbits", [2, 4, 8])
def test_few_distinct_values_give_zero_sse(nbits):
    rng = np.random.default_rng(nbits)
    k = 1 << nbits
    for distinct in (1, k // 2, k):
        values = np.unique(rng.standard_normal(4 * k).astype(np.float16))[:distinct]
        group = rng.choice(values, size=(32, 320))
        lut, idx = ke.palettize_group(group, nbits)
        _check_format(group, nbits, lut, idx)
        assert ke.group_sse(group, lut, idx) == 0.0
        assert np.array_equal(lut[idx].reshape(group.shape), group)
    signed_zeros = np.array([-0.0, 0.0, 1.0, 2.0] * 3000, dtype=np.float16)  # -0 and +0 are one value
    lut, idx = ke.palettize_group(signed_zeros, 2)
    assert ke.group_sse(signed_zeros, lut, idx) == 0.0


# building blocks ----------------------------------------------------------------------------------------------

def test_fp16_rounding_matches_numpy():
    from numba import njit

    @njit
    def round_all(a):
        out = np.empty_like(a)
        for i in range(a.size):
            out[i] = fp16_lut._round_fp16(a[i])
        return out

    fp16 = ke.RANK_VALUES
    mids = (fp16[1:] + fp16[:-1]) / 2  # exact ties: round half to even
    rng = np.random.default_rng(0)
    probes = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), fp16,
                             rng.standard_normal(10_000) * 10.0 ** rng.integers(-8, 4, 10_000)])
    probes = probes[np.abs(probes) <= 65504]
    assert np.array_equal(round_all(probes), probes.astype(np.float16).astype(np.float64))


def test_batch_equals_single_and_rejects_nonfinite():
    rng = np.random.default_rng(1)
    groups = (rng.standard_normal((6, 32, 96)) / 10).astype(np.float16)
    luts, idx, info = ke.palettize_groups(groups, 6, workers=2, chunk=1, return_stats=True)
    for g, lut, ind, sse in zip(groups, luts, idx, info["sse"]):
        lut1, ind1 = ke.palettize_group(g, 6)
        assert np.array_equal(lut, lut1) and np.array_equal(ind, ind1)
        assert sse == pytest.approx(ke.group_sse(g, lut, ind), rel=1e-9)
    bad = groups.copy()
    bad[2, 0, 0] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        ke.palettize_groups(bad, 4)


def test_float32_groups_use_the_generic_path():
    from experiments.ane_engineering.package.palettize.fast_palettizer import _palettize_generic

    group = (np.random.default_rng(5).standard_normal((32, 64)) / 8).astype(np.float32)
    lut, idx = _palettize_generic(group, 4)
    assert lut.dtype == np.float32 and lut.shape == (16,) and idx.dtype == np.uint8 and idx.size == group.size
    theirs = ke.group_sse(group, *_coremltools_group(group, 4))
    assert ke.sse_not_worse(ke.group_sse(group, lut, idx), theirs)


# (d) the package: same ops, LUT shapes and dtypes as coremltools; everything else untouched ------------------

def _program(model):
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    spec = model.get_spec()
    return milproto_load.load(spec, spec.specificationVersion, model.weights_dir)


def _ops(model):
    return list(_program(model).functions["main"].operations)


@pytest.fixture(scope="module")
def small_package():
    import torch
    from torch import nn

    from experiments.ane_engineering.model.bc1s.norm import ChannelLayerNorm

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(0)
            self.up = nn.Conv2d(96, 128, 1, bias=False)
            self.down = nn.Conv2d(128, 96, 1, bias=True)
            self.out = nn.Conv2d(96, 32, 1, bias=False)
            self.small = nn.Conv2d(96, 16, 1, bias=False)  # 1536 elements: under the threshold
            with torch.no_grad():
                for conv in (self.up, self.down, self.out, self.small):
                    conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) / conv.weight.shape[1] ** 0.5)
            self.norm = ChannelLayerNorm(1 + 0.1 * torch.randn(96, generator=gen), None, 1e-5)
            self.register_buffer("rope", torch.randn(1, 32, 1, 96, generator=gen))  # 3072 elements, not a conv weight

        def forward(self, x):
            h = self.down(torch.relu(self.up(self.norm(x))))
            return self.out(h) * self.rope + self.small(h).sum(dim=1, keepdim=True)

    example = torch.randn(1, 96, 1, 96)
    model = ct.convert(torch.jit.trace(Tiny().eval(), example), inputs=[ct.TensorType(name="x", shape=example.shape)],
                       convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                       minimum_deployment_target=ct.target.macOS15, skip_model_load=True)
    return model


@pytest.mark.slow
def test_package_matches_coremltools_format(small_package):
    from coremltools.converters.mil.mil import types

    from experiments.ane_engineering.package.palettize.fast_palettizer import palettize_package

    nbits = 6
    stats = {}
    ours = palettize_package(small_package, nbits, 32, implementation="exact", stats=stats)
    theirs = palettize_package(small_package, nbits, 32, implementation="coremltools", workers=1)
    assert stats["cache_misses"] == 0 and stats["cache_hits"] == 3 + 4 + 1

    before, ops_ours, ops_theirs = _ops(small_package), _ops(ours), _ops(theirs)
    assert [op.op_type for op in ops_ours] == [op.op_type for op in ops_theirs]
    lut_ours = {op.name: op for op in ops_ours if op.op_type == "constexpr_lut_to_dense"}
    lut_theirs = {op.name: op for op in ops_theirs if op.op_type == "constexpr_lut_to_dense"}
    assert sorted(lut_ours) == sorted(lut_theirs) and len(lut_ours) == 3

    original = {op.name: op.outputs[0].val for op in before if op.op_type == "const"}
    for name, op in lut_ours.items():
        other = lut_theirs[name]
        for var in ("lut", "indices"):
            a, b = getattr(op, var), getattr(other, var)
            assert a.shape == b.shape and a.dtype == b.dtype, (name, var)
        assert types.builtin_to_string(op.lut.dtype) == "fp16"
        assert types.builtin_to_string(op.indices.dtype) == f"uint{nbits}"
        weight = original[name[: -len("_palettized")]]
        assert op.lut.shape == (weight.shape[0] // 32, 1, 1, 1, 1 << nbits, 1)
        assert [child.op_type for child in op.outputs[0].child_ops] == ["conv"]
        # Decompressed per group squared error: never worse than coremltools' k-means.
        lut = op.lut.val.reshape(-1, 1 << nbits)
        lut_c = other.lut.val.reshape(-1, 1 << nbits)
        ind = op.indices.val.reshape(lut.shape[0], -1)
        ind_c = other.indices.val.reshape(lut.shape[0], -1)
        for g, w in enumerate(weight.reshape(lut.shape[0], -1)):
            assert ke.sse_not_worse(ke.group_sse(w, lut[g], ind[g]), ke.group_sse(w, lut_c[g], ind_c[g]))

    # Every other const (RoPE-like table, norm weight, the small conv, biases, conv attributes) is untouched.
    after = {op.name: op.outputs[0].val for op in ops_ours if op.op_type == "const"}
    kept = {n: v for n, v in original.items() if n + "_palettized" not in lut_ours}
    assert any(np.size(v) == 3072 for v in kept.values()), "the RoPE-like table is among the kept consts"
    for name, value in kept.items():
        assert name in after, name
        assert np.array_equal(np.asarray(after[name]), np.asarray(value)), name
