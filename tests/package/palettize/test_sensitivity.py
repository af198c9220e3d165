"""Sensitivity-weighted palettization: the exact k-means is exact for the weighted objective, never worse than the
unweighted palettization on that objective, and zero weights cost nothing."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("numba")

from experiments.ane_engineering.package.palettize import kmeans_exact as ke  # noqa: E402


def _fp16(v: float) -> float:
    return float(np.float64(v).astype(np.float16))


def _all_assignments_optimum(x: np.ndarray, w: np.ndarray, k: int) -> float:
    """Brute force over every assignment of the points to k labelled clusters (not only contiguous ones), each
    cluster at its weighted mean: the weighted k-means optimum by definition."""
    best = np.inf
    for labels in itertools.product(range(k), repeat=x.size):
        labels = np.asarray(labels)
        cost = 0.0
        for c in range(k):
            member = labels == c
            if member.any():
                mean = np.dot(w[member], x[member]) / w[member].sum()
                cost += np.dot(w[member], (x[member] - mean) ** 2)
        best = min(best, cost)
    return best


def _weighted_histogram(group: np.ndarray, s: np.ndarray):
    values, inverse = np.unique(group.astype(np.float64), return_inverse=True)
    return values, np.bincount(inverse.ravel(), weights=s.ravel())


def test_weighted_kmeans_is_the_optimum_over_every_assignment():
    rng = np.random.default_rng(11)
    for _ in range(25):
        n = int(rng.integers(3, 8))
        x = np.unique(rng.standard_normal(n))
        w = rng.gamma(0.5, 1.0, x.size) + 1e-3  # sensitivities: heavy-tailed, positive
        for k in (2, 3):
            if k >= x.size:
                continue
            centroids, bounds = ke.kmeans_1d_weighted(x, w, k)
            ours = sum(np.dot(w[bounds[t]:bounds[t + 1]], (x[bounds[t]:bounds[t + 1]] - centroids[t]) ** 2)
                       for t in range(centroids.size))
            best = _all_assignments_optimum(x, w, k)
            assert ours <= best * (1 + 1e-9) + 1e-15, (x, w, k, ours, best)


def _contiguous_rounded_optimum(values: np.ndarray, weights: np.ndarray, k: int) -> float:
    """Best stored cost over every contiguous partition of the distinct values with each segment at the FP16 value
    nearest its weighted mean (what a package can store for that partition)."""
    best = np.inf
    n = values.size
    for cuts in itertools.combinations(range(1, n), k - 1):
        edges = (0, *cuts, n)
        cost = 0.0
        for a, b in zip(edges[:-1], edges[1:]):
            mean = np.dot(weights[a:b], values[a:b]) / weights[a:b].sum()
            cost += np.dot(weights[a:b], (values[a:b] - _fp16(mean)) ** 2)
        best = min(best, cost)
    return best


@pytest.mark.parametrize("nbits", [1, 2])
def test_weighted_palettization_of_small_groups_beats_brute_force(nbits):
    """On groups small enough for brute force the FP16 LUT is at least as good on the weighted objective as the
    best contiguous partition stored with rounded means (the exact optimum is one of them)."""
    rng = np.random.default_rng(5)
    k = 1 << nbits
    for _ in range(30):
        group = (rng.standard_normal(int(rng.integers(6, 14))) * 0.05).astype(np.float16)
        s = rng.gamma(0.4, 1.0, group.size)
        values, weights = _weighted_histogram(group, s)
        if values.size <= k:
            continue
        lut, idx = ke.palettize_group(group, nbits, sensitivity=s)
        ours = ke.group_sse(group, lut, idx, s)
        assert ours <= _contiguous_rounded_optimum(values, weights, k) * (1 + 1e-9) + 1e-18


@pytest.mark.parametrize("nbits", [8, 6, 4])
def test_weighted_never_worse_than_unweighted_on_the_weighted_objective(nbits):
    rng = np.random.default_rng(nbits)
    groups = (rng.standard_normal((12, 32 * 48)) * 0.03).astype(np.float16)
    s = rng.gamma(0.3, 1.0, groups.shape) * (1 + 40 * (rng.random(groups.shape) < 0.02))  # a few outliers weigh a lot
    s[:, :7] = 0.0  # and some weights carry no sensitivity at all
    plain = ke.palettize_groups(groups, nbits, workers=1)
    weighted = ke.palettize_groups(groups, nbits, workers=1, weights=s)
    gains = []
    for g in range(groups.shape[0]):
        a = ke.group_sse(groups[g], plain[0][g], plain[1][g], s[g])
        b = ke.group_sse(groups[g], weighted[0][g], weighted[1][g], s[g])
        assert ke.sse_not_worse(b, a), (g, b, a)
        gains.append(a / b)
    assert np.median(gains) > 1.0  # and it is better, not only tied


def test_zero_weights_cost_nothing_and_uniform_weights_change_nothing():
    rng = np.random.default_rng(2)
    group = (rng.standard_normal(4096) * 0.02).astype(np.float16)
    plain_lut, plain_idx = ke.palettize_group(group, 4)
    lut, idx = ke.palettize_group(group, 4, sensitivity=np.full(group.size, 3.5))  # a constant scale
    assert np.array_equal(lut, plain_lut) and np.array_equal(idx, plain_idx)
    s = np.zeros(group.size)
    s[:100] = 1.0
    lut, idx = ke.palettize_group(group, 4, sensitivity=s)
    dense = lut.astype(np.float64)[idx]
    nearest = np.abs(group.astype(np.float64)[:, None] - lut.astype(np.float64)[None, :]).min(axis=1)
    assert np.allclose(np.abs(dense - group.astype(np.float64)), nearest)  # every value at its nearest entry
    assert ke.group_sse(group, lut, idx, s) <= ke.group_sse(group, plain_lut, plain_idx, s)
    all_zero_lut, all_zero_idx = ke.palettize_group(group, 4, sensitivity=np.zeros(group.size))
    assert np.array_equal(all_zero_lut, plain_lut) and np.array_equal(all_zero_idx, plain_idx)  # unweighted then


def test_weights_are_checked():
    group = np.zeros((2, 64), dtype=np.float16)
    with pytest.raises(ValueError, match="non-negative"):
        ke.palettize_groups(group, 4, weights=-np.ones((2, 64)))
    with pytest.raises(ValueError, match="shape"):
        ke.palettize_groups(group, 4, weights=np.ones((2, 63)))


def test_saved_sensitivities_are_the_same_bytes_every_time(tmp_path):
    """A sweep records the sensitivities file by hash, and `sweep --executor ray` must match the local sweep byte
    for byte: saving the same sensitivities must give the same file. (safetensors writes its metadata map in no
    fixed order; with more than one metadata entry, eight saves all agreeing would be a 1-in-128 accident.)"""
    from experiments.ane_engineering.package.palettize.sensitivity import Sensitivities

    rng = np.random.default_rng(0)
    arrays = {f"w{i}": rng.random((4, 3, 1, 1)).astype(np.float32) for i in range(3)}
    sensitivities = Sensitivities(arrays, {name: f"{i:064x}" for i, name in enumerate(arrays)},
                                  {"method": "fisher", "calibration": {"inputs": 3, "sha256": "0" * 64}})
    hashes = {sensitivities.save(tmp_path / f"s{i}.safetensors") for i in range(8)}
    assert len(hashes) == 1
    loaded = Sensitivities.load(tmp_path / "s0.safetensors")
    assert loaded.digests == sensitivities.digests and set(loaded.arrays) == set(arrays)
