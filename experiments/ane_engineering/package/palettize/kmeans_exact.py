"""Exact weighted 1-D k-means for per-grouped-channel FP16 palettization: histograms of FP16 groups and the batch
entry points (the solver is kmeans_1d.py, the FP16 LUT step fp16_lut.py).

What coremltools 9.0 does per group (``palettize_weights._get_lut_and_indices`` -> ``quantization_utils.
_get_kmeans_lookup_table_and_weight``): for an FP16 group of at least 10,000 values it takes the ``np.unique``
histogram, runs its vendored exact weighted 1-D k-means (``coremltools._deps.kmeans1d.cluster(values, k,
weights=counts)``, k = min(2^nbits, distinct)), stores the float64 centroids in a zero-filled LUT of 2^nbits entries,
casts the LUT to FP16 and gives every weight the index of the *segment* the DP put its value in (not the nearest FP16
entry). Below 10,000 values it runs scikit-learn ``KMeans(k-means++, n_init=1, tol=1e-2)`` on the raw values, which
is a local search, not an optimum. Either way it returns ``(lut fp16 [2^nbits], indices uint8 flattened)``.

This module solves the same problem exactly for every group size, faster, and then does the FP16 step at least as
well:

1. Histogram. An FP16 value has 65,536 bit patterns, so a group's distinct values and counts come from a counting
   sort over the value rank of each bit pattern (``-0`` and ``+0`` share a rank, as in ``np.unique``): O(m + 65536),
   no comparison sort. NaN and infinities are refused.
2. Exact 1-D k-means on the n distinct points: kmeans_1d.py (Lagrangian search over Monge costs, D&C DP).
3. FP16 LUT from the segments: fp16_lut.py (window DP, nearest-entry reassignment, FP16 Lloyd polish).

SSE comparison tolerance: ``SSE_RTOL`` (relative, 1e-9). Ours is "at least as good" when
``ours <= theirs * (1 + SSE_RTOL) + SSE_ATOL``; ties are allowed.

Numba compiles with ``cache=True`` where it can write a cache, without one where it cannot (core/numba_cache.py);
``warmup()`` reports the first-call time, i.e. compile or cache load. The batch entry point runs groups on
``workers`` Python threads calling ``nogil`` compiled code, so both cores work.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...core.numba_cache import cached_njit
from .fp16_lut import WINDOW_RADIUS, _assign_nearest, _fp16_lut, _fp16_segment_cost, _fp16_window
from .kmeans_1d import (
    DC_MAX_K,
    MAX_SOLVES,
    METHOD_NAMES,
    TRIVIAL,
    _kmeans_core,
    _method_code,
    _prefix,
    kmeans_1d_weighted,
)

__all__ = ["SSE_ATOL", "SSE_RTOL", "kmeans_1d_weighted", "palettize_group", "palettize_groups", "group_sse",
           "sse_not_worse", "warmup", "DC_MAX_K", "MAX_SOLVES", "METHOD_NAMES", "WINDOW_RADIUS"]

SSE_RTOL = 1e-9  # relative tolerance when comparing per-group SSE (ours <= theirs * (1 + SSE_RTOL) + SSE_ATOL)
SSE_ATOL = 1e-18  # absolute slack for groups whose SSE is 0 up to float64 noise
WEIGHT_FLOOR = 1e-12  # weighted objective: a distinct value below this fraction of its group's weight is weightless


def _fp16_tables():
    """rank_of_bits[65536] (-1 for NaN/inf) and the sorted distinct finite FP16 values as float64."""
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    vals = bits.view(np.float16).astype(np.float64)
    finite = np.isfinite(vals)
    uniq = np.unique(vals[finite])  # -0.0 and +0.0 collapse into one value, as in np.unique of a group
    rank = np.full(65536, -1, dtype=np.int32)
    rank[finite] = np.searchsorted(uniq, vals[finite]).astype(np.int32)
    return rank, uniq


RANK_OF_BITS, RANK_VALUES = _fp16_tables()


# ----------------------------------------------------------------------------------------------------------------
@cached_njit(nogil=True)
def _histogram(bits, wrow, weighted, rank_of_bits, counts, sums, R):
    """Distinct values (as ranks) of one FP16 group with their counts and, when `weighted`, the sum of the
    per-element weights `wrow` of each (the objective's weight of that value; otherwise the count). counts and
    sums[R] must be zero and are left zero. Returns ranks, counts, weights, ok (False: a non-finite value)."""
    m = bits.size
    rmin = R
    rmax = -1
    for e in range(m):
        r = rank_of_bits[bits[e]]
        if r < 0:
            return np.empty(0, dtype=np.int32), np.empty(0), np.empty(0), False
        counts[r] += 1
        if weighted:
            sums[r] += wrow[e]
        if r < rmin:
            rmin = r
        if r > rmax:
            rmax = r
    n = 0
    for r in range(rmin, rmax + 1):
        if counts[r] > 0:
            n += 1
    ranks = np.empty(n, dtype=np.int32)
    c = np.empty(n)
    w = np.empty(n) if weighted else c
    q = 0
    for r in range(rmin, rmax + 1):
        if counts[r] > 0:
            ranks[q] = r
            c[q] = counts[r]
            if weighted:
                w[q] = sums[r]
                sums[r] = 0.0
            counts[r] = 0
            q += 1
    return ranks, c, w, True


@cached_njit(nogil=True)
def _palettize_rows(bits2d, K, method, radius, max_polish, rank_of_bits, rank_values, row_lo, row_hi,
                    out_lut, out_idx, out_stats, weights2d, weighted):
    """Palettize rows [row_lo, row_hi) of a [groups, m] uint16 view of FP16 groups.

    weighted: weights2d [groups, m] holds a non-negative weight per element and the objective is sum w (lut - x)^2
    (a distinct value weighs the sum of its elements' weights); otherwise every element weighs 1 (weights2d unused).
    Values of zero weight do not enter the k-means (they cost nothing wherever they go) and are then given their
    nearest entry; a group whose weights are all zero is palettized unweighted.

    out_lut[g, :K] float64 (exact FP16 values, sorted), out_idx[g, :] uint16, out_stats[g] = (sse, n_distinct,
    method, solves, polish rounds, status, window gain) with status 1 ok, -1 non-finite value, -2 search failed."""
    R = rank_values.size
    counts = np.zeros(R, dtype=np.int32)
    slot = np.empty(R, dtype=np.int32)
    bounds = np.empty(K + 1, dtype=np.int64)
    wbounds = np.empty(K + 1, dtype=np.int64)
    sums = np.zeros(R)
    for g in range(row_lo, row_hi):
        bits = bits2d[g]
        ranks, c, w, ok = _histogram(bits, weights2d[g if weighted else 0], weighted, rank_of_bits, counts, sums, R)
        if not ok:
            out_stats[g, 5] = -1.0
            continue
        n_all = ranks.size
        x_all = np.empty(n_all)
        for q in range(n_all):
            x_all[q] = rank_values[ranks[q]]
        # A value weighing less than WEIGHT_FLOOR of the group's total counts as weightless: float64 prefix sums
        # cannot resolve it (a segment's weight is a difference of sums of the total's size), and it moves the
        # objective by less than that fraction.
        floor = 0.0
        for q in range(n_all):
            floor += w[q]
        floor *= WEIGHT_FLOOR
        positive = 0
        for q in range(n_all):
            if w[q] > floor:
                positive += 1
        if positive == 0:  # no element carries weight: the unweighted problem
            w = c
            floor = 0.0
            positive = n_all
        if positive == n_all:
            x, wk = x_all, w
        else:
            x = np.empty(positive)
            wk = np.empty(positive)
            q2 = 0
            for q in range(n_all):
                if w[q] > floor:
                    x[q2] = x_all[q]
                    wk[q2] = w[q]
                    q2 += 1
        n = positive
        labels = np.empty(n, dtype=np.int32)
        lut = np.empty(K)
        gain = 0.0
        if n <= K and n == n_all:
            for q in range(n):
                lut[q] = x[q]
                labels[q] = q
            for t in range(n, K):
                lut[t] = x[n - 1]  # unused entries repeat the largest value so the LUT stays sorted
            sse, code, solves, rounds = 0.0, TRIVIAL, 0, 0
        elif n <= K:  # few weighted values, each its own entry; the zero-weight ones go to their nearest
            for q in range(n):
                lut[q] = x[q]
            for t in range(n, K):
                lut[t] = x[n - 1]
            code, solves, rounds = TRIVIAL, 0, 0
        else:
            P0, P1, P2, mu = _prefix(x, wk)
            code, solves = _kmeans_core(P0, P1, P2, n, K, method, bounds)
            if code < 0:
                out_stats[g, 5] = -2.0
                continue
            if radius > 0:
                before = 0.0
                for t in range(K):
                    before += _fp16_segment_cost(P0, P1, P2, mu, bounds[t], bounds[t + 1])
                after = _fp16_window(P0, P1, P2, mu, n, K, bounds, radius, wbounds)
                if after < before:
                    gain = before - after
                    bounds[:] = wbounds
            sse, rounds = _fp16_lut(x, wk, bounds, K, lut, labels, max_polish)
        if n < n_all:  # the nearest entry for every value, zero-weight ones included (the others keep theirs)
            labels = np.empty(n_all, dtype=np.int32)
            sse = _assign_nearest(x_all, w, lut, labels)
        n = n_all
        for q in range(n):
            slot[ranks[q]] = labels[q]
        row_idx = out_idx[g]
        for e in range(bits.size):
            row_idx[e] = slot[rank_of_bits[bits[e]]]
        for t in range(K):
            out_lut[g, t] = lut[t]
        out_stats[g, 0] = sse
        out_stats[g, 1] = n
        out_stats[g, 2] = code
        out_stats[g, 3] = solves
        out_stats[g, 4] = rounds
        out_stats[g, 5] = 1.0
        out_stats[g, 6] = gain



# ----------------------------------------------------------------------------------------------------------------
# Python API

def _as_fp16_rows(groups) -> np.ndarray:
    a = np.asarray(groups)
    if a.dtype != np.float16:
        raise TypeError(f"FP16 weights expected, got {a.dtype}")
    return np.ascontiguousarray(a.reshape(a.shape[0], -1)).view(np.uint16)


def palettize_groups(groups, nbits: int, workers: int = 2, method: str = "auto", radius: int = WINDOW_RADIUS,
                     max_polish: int = 8, chunk: int | None = None, return_stats: bool = False, weights=None):
    """Palettize many FP16 groups (rows of a [G, ...] array, each flattened) with 2^nbits-entry LUTs.

    weights (optional, the groups' shape, finite and >= 0): a weight per element, and the objective becomes the
    weighted SSE sum w (lut[index] - x)^2 (SqueezeLLM's sensitivity-weighted k-means; with Fisher weights it is the
    second-order estimate of the output loss). The same exact k-means runs on the distinct values weighted by the
    sum of their elements' weights; `sse` in the stats is then the weighted SSE.

    Returns luts fp16 [G, 2^nbits] (sorted) and indices [G, m] (uint8 for nbits <= 8, else uint16), plus, with
    return_stats, a dict of per-group arrays: sse (float64, on the FP16 LUT and the stored indices), n_distinct,
    method (see METHOD_NAMES), solves (penalised solves), polish (FP16 Lloyd rounds that lowered the SSE),
    window_gain (SSE the FP16 window step removed). radius=0 skips the window step; max_polish=0 the Lloyd polish.
    workers threads each run compiled nogil code over chunks of `chunk` groups (default: about 8 chunks per worker,
    so small groups do not pay a task per group and large batches still balance)."""
    if not 1 <= nbits <= 16:
        raise ValueError(f"nbits must be in 1..16, got {nbits}")
    bits2d = _as_fp16_rows(groups)
    G, m = bits2d.shape
    if weights is None:
        weights2d, weighted = np.zeros((1, 1)), False
    else:
        weights2d = np.ascontiguousarray(np.asarray(weights, dtype=np.float64).reshape(G, -1))
        if weights2d.shape != (G, m):
            raise ValueError(f"weights must have the groups' shape ({G} x {m} elements), got {np.shape(weights)}")
        if not np.all(np.isfinite(weights2d)) or np.any(weights2d < 0):
            raise ValueError("weights must be finite and non-negative")
        weighted = True
    K = 1 << nbits
    out_lut = np.zeros((G, K))
    out_idx = np.empty((G, m), dtype=np.uint16)
    stats = np.zeros((G, 7))
    args = (K, _method_code(method), int(radius), int(max_polish), RANK_OF_BITS, RANK_VALUES)
    workers = max(1, int(workers))
    if chunk is None:
        chunk = max(1, -(-G // (8 * workers)))
    if workers == 1 or G <= chunk:
        _palettize_rows(bits2d, *args, 0, G, out_lut, out_idx, stats, weights2d, weighted)
    else:
        spans = [(lo, min(G, lo + chunk)) for lo in range(0, G, chunk)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda s: _palettize_rows(bits2d, *args, s[0], s[1], out_lut, out_idx, stats, weights2d,
                                                       weighted), spans))
    status = stats[:, 5]
    if np.any(status == -1):
        raise ValueError(f"non-finite FP16 value in group(s) {np.flatnonzero(status == -1)[:8].tolist()}")
    if np.any(status == -2):
        raise RuntimeError(f"lambda search did not reach k={K} in group(s) {np.flatnonzero(status == -2)[:8].tolist()} "
                           "(method='lagrange' has no fallback; use 'auto')")
    luts = out_lut.astype(np.float16)  # exact: every entry already is an FP16 value
    indices = out_idx.astype(np.uint8) if nbits <= 8 else out_idx
    if not return_stats:
        return luts, indices
    info = {"sse": stats[:, 0].copy(), "n_distinct": stats[:, 1].astype(np.int64),
            "method": stats[:, 2].astype(np.int64), "solves": stats[:, 3].astype(np.int64),
            "polish": stats[:, 4].astype(np.int64), "window_gain": stats[:, 6].copy()}
    return luts, indices, info


def palettize_group(weights_fp16, nbits: int, method: str = "auto", radius: int = WINDOW_RADIUS, sensitivity=None):
    """One group -> (lut fp16 [2^nbits], indices uint8 (uint16 above 8 bits), flattened in C order).

    The same return convention as coremltools' per-group k-means (``palettize_weights._get_lut_and_indices``).
    `sensitivity`: optional per-element weights of the objective (see palettize_groups)."""
    a = np.asarray(weights_fp16)
    s = None if sensitivity is None else np.asarray(sensitivity).reshape(1, -1)
    luts, idx = palettize_groups(a.reshape(1, -1), nbits, workers=1, method=method, radius=radius, weights=s)
    return luts[0], idx[0]


def group_sse(weights, lut, indices, sensitivity=None) -> float:
    """Squared error of a palettized group as stored: sum(s (lut[indices] - w)^2) in float64 on the FP16 values,
    with s = 1 unless per-element `sensitivity` weights are given."""
    w = np.asarray(weights, dtype=np.float64).ravel()
    dense = np.asarray(lut).astype(np.float64).ravel()[np.asarray(indices).ravel().astype(np.int64)]
    d = dense - w
    if sensitivity is None:
        return float(np.dot(d, d))
    return float(np.dot(np.asarray(sensitivity, dtype=np.float64).ravel(), d * d))


def sse_not_worse(ours: float, theirs: float, rtol: float = SSE_RTOL, atol: float = SSE_ATOL) -> bool:
    """The documented comparison: ours <= theirs * (1 + rtol) + atol (ties allowed)."""
    return ours <= theirs * (1.0 + rtol) + atol


def warmup() -> float:
    """Compile (or load from the numba cache) every kernel; returns the seconds it took."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    g = (0.02 * rng.standard_normal((2, 600))).astype(np.float16)
    for method in ("auto", "dc", "lagrange"):
        palettize_groups(g, 4, workers=1, method=method)
        palettize_groups(g, 6, workers=1, method=method)
    palettize_groups(g, 4, workers=1, weights=np.abs(g.astype(np.float64)))
    kmeans_1d_weighted(np.arange(10.0), np.ones(10), 3)
    return time.perf_counter() - t0
