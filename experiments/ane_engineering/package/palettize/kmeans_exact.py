"""Exact weighted 1-D k-means for per-grouped-channel FP16 palettization.

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
2. Exact 1-D k-means on the n distinct points (x sorted, weights w). An optimal partition is contiguous in sorted
   order, and the segment cost SSE(j, i) = S2 - S1^2 / S0 (prefix sums of w, w*x, w*x^2 in float64 over values
   centred on the group mean, against cancellation) satisfies the quadrangle (Monge) inequality. Two exact solvers:

   - ``lagrange`` (default for k > 2). Penalise each cluster by lambda and solve min_P SSE(P) + lambda * |P| over
     *all* partitions with the classic monotone-queue algorithm for Monge costs (each candidate start owns a
     contiguous range of end points; a new candidate's range is found by galloping + binary search), O(n) to
     O(n log n) per lambda, memory O(n). If the returned partition has exactly k clusters it is optimal among all
     k-partitions (for any k-partition Q: SSE(Q) + lambda k >= SSE(P) + lambda k), so exactness needs no
     convexity argument. lambda is searched with points (m, C(m)) that bracket k: a power-law model C ~ A m^-p
     fitted through the bracket (high-resolution quantisation theory) proposes lambda; when the model stalls the
     chord slope of the bracket is used, which by convexity of C(m) (concave Monge => convex in k) must return a
     partition strictly inside the bracket unless C is linear there (a tie face). A tie face or more than
     ``MAX_SOLVES`` solves falls back to the D&C DP below, so the answer is always exact. Measured on weight-like
     groups: about 5 solves at k = 256, 4 at k = 64, 3 at k = 16.
   - ``dc``: the layered DP cost[k][i] = min_j cost[k-1][j] + SSE(j, i) with divide-and-conquer over monotone split
     points, O(k n log n) time, O(k n) int32 back-pointers. Used for k <= 2, as the fallback, and as a reference.

   Both are exact up to float64 rounding of near-equal alternatives (far below the FP16 step that follows).
3. FP16 LUT. What the package holds is an FP16 LUT, so the objective that matters is the SSE with FP16 entries.
   For a fixed segment the best FP16 entry is the FP16 value nearest its mean (the SSE is quadratic around the
   mean), so a segment's stored cost is SSE(mean) + W (fp16(mean) - mean)^2. That cost is not Monge, so it is
   minimised exactly only over a neighbourhood: a chain DP over all K - 1 boundaries, each allowed to move by up
   to ``WINDOW_RADIUS`` distinct points from the exact optimum (O(K (2r+1)^2)). The neighbourhood contains the
   optimum itself and the tie-equivalent optima next to it (FP16 values on a uniform grid with equal counts make
   exact ties common, and coremltools' kmeans1d may return any of them), so the result is at least as good as
   any partition whose boundaries lie within the window, stored with rounded means -- which is exactly what
   coremltools stores for groups of >= 10,000 values when its tie choice is in the window. Then every distinct value is re-assigned to the nearest FP16 entry (coremltools keeps the DP segment),
   and an FP16 Lloyd polish (cluster mean -> nearest FP16 -> nearest-entry reassignment) repeats while the SSE
   strictly drops; neither half-step can raise it. FP16 rounding is round-half-to-even, bit-identical to numpy's
   float64 -> float16 cast.

SSE comparison tolerance: ``SSE_RTOL`` (relative, 1e-9). Ours is "at least as good" when
``ours <= theirs * (1 + SSE_RTOL) + SSE_ATOL``; ties are allowed.

Numba compiles with ``cache=True`` where it can write a cache, without one where it cannot (core/numba_cache.py);
``warmup()`` reports the first-call time, i.e. compile or cache load. The batch entry point runs groups on
``workers`` Python threads calling ``nogil`` compiled code, so both cores work.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from ...core.numba_cache import cached_njit

__all__ = ["SSE_ATOL", "SSE_RTOL", "kmeans_1d_weighted", "palettize_group", "palettize_groups", "group_sse",
           "sse_not_worse", "warmup", "DC_MAX_K", "MAX_SOLVES", "WINDOW_RADIUS"]

SSE_RTOL = 1e-9  # relative tolerance when comparing per-group SSE (ours <= theirs * (1 + SSE_RTOL) + SSE_ATOL)
SSE_ATOL = 1e-18  # absolute slack for groups whose SSE is 0 up to float64 noise
DC_MAX_K = 2  # k at or below this uses the D&C DP directly (one or two layers are cheaper than the lambda search)
WINDOW_RADIUS = 3  # FP16 window step: each boundary may move this many distinct points (0 disables)
MAX_SOLVES = 60  # penalised solves before the lambda search gives up and falls back to the D&C DP
WEIGHT_FLOOR = 1e-12  # weighted objective: a distinct value below this fraction of its group's weight is weightless

# Method codes in the per-group statistics.
TRIVIAL, LAGRANGE, DC, DC_FALLBACK = 0, 1, 2, 3
METHOD_NAMES = {TRIVIAL: "trivial", LAGRANGE: "lagrange", DC: "dc", DC_FALLBACK: "dc_fallback"}


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
# compiled kernels


@cached_njit(nogil=True, inline="always")
def _cost(P0, P1, P2, j, i):
    s0 = P0[i] - P0[j]
    s1 = P1[i] - P1[j]
    return (P2[i] - P2[j]) - s1 * s1 / s0


@cached_njit(nogil=True)
def _prefix(x, w):
    n = x.size
    tw = 0.0
    twx = 0.0
    for t in range(n):
        tw += w[t]
        twx += w[t] * x[t]
    mu = twx / tw
    P0 = np.empty(n + 1)
    P1 = np.empty(n + 1)
    P2 = np.empty(n + 1)
    P0[0] = 0.0
    P1[0] = 0.0
    P2[0] = 0.0
    for t in range(n):
        d = x[t] - mu
        P0[t + 1] = P0[t] + w[t]
        P1[t + 1] = P1[t] + w[t] * d
        P2[t + 1] = P2[t] + w[t] * d * d
    return P0, P1, P2, mu


@cached_njit(nogil=True)
def _solve_penalized(P0, P1, P2, n, lam, F, par, cnt, dqj, dqs):
    """min over all partitions of SSE + lam * clusters (monotone queue for Monge costs). Returns the cluster count."""
    F[0] = 0.0
    cnt[0] = 0
    head = 0
    tail = 1
    dqj[0] = 0
    dqs[0] = 1
    for i in range(1, n + 1):
        while tail - head >= 2 and dqs[head + 1] <= i:
            head += 1
        j = dqj[head]
        F[i] = F[j] + _cost(P0, P1, P2, j, i) + lam
        par[i] = j
        cnt[i] = cnt[j] + 1
        if i == n:
            break
        s0 = i + 1
        Fi = F[i]
        while tail > head:  # drop candidates the new start i beats from where they begin
            b = dqj[tail - 1]
            s = dqs[tail - 1]
            if s < s0:
                s = s0
            if Fi + _cost(P0, P1, P2, i, s) <= F[b] + _cost(P0, P1, P2, b, s):
                tail -= 1
            else:
                break
        if tail == head:
            dqj[tail] = i
            dqs[tail] = s0
            tail += 1
            continue
        b = dqj[tail - 1]
        s = dqs[tail - 1]
        if s < s0:
            s = s0
        if s >= n:
            continue
        Fb = F[b]
        if Fi + _cost(P0, P1, P2, i, n) > Fb + _cost(P0, P1, P2, b, n):
            continue  # never better (once better, always better: Monge)
        lo = s  # not better at lo, better at n
        step = 1
        while True:
            hi = s + step
            if hi >= n:
                hi = n
                break
            if Fi + _cost(P0, P1, P2, i, hi) <= Fb + _cost(P0, P1, P2, b, hi):
                break
            lo = hi
            step *= 2
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if Fi + _cost(P0, P1, P2, i, mid) <= Fb + _cost(P0, P1, P2, b, mid):
                hi = mid
            else:
                lo = mid
        dqj[tail] = i
        dqs[tail] = hi
        tail += 1
    return cnt[n]


@cached_njit(nogil=True)
def _path_cost(P0, P1, P2, n, par):
    c = 0.0
    i = n
    while i > 0:
        j = par[i]
        c += _cost(P0, P1, P2, j, i)
        i = j
    return c


@cached_njit(nogil=True)
def _kmeans_lagrange(P0, P1, P2, n, K, bounds, max_solves):
    """Exact K-partition via the lambda search. Returns the number of solves, or -solves if it gave up."""
    F = np.empty(n + 1)
    par = np.empty(n + 1, dtype=np.int32)
    cnt = np.empty(n + 1, dtype=np.int32)
    dqj = np.empty(n + 1, dtype=np.int32)
    dqs = np.empty(n + 1, dtype=np.int32)
    C1 = _cost(P0, P1, P2, 0, n)
    mlo, Clo, lam_lo = 1, C1, np.inf  # fewer clusters than K (large lambda)
    mhi, Chi, lam_hi = n, 0.0, 0.0  # more clusters than K (small lambda)
    solves = 0
    use_chord = False
    last_side = 0
    while solves < max_solves:
        chord = (Clo - Chi) / (mhi - mlo)
        lam = chord
        if not use_chord:
            if mlo > 1 and mhi < n and Chi > 0.0 and Clo > Chi:
                p = np.log(Clo / Chi) / np.log(mhi / mlo)
                lam = p * Clo * (mlo / K) ** p / K
            elif mlo > 1 and Clo > 0.0:
                lam = 2.0 * Clo * (mlo / K) ** 2 / K
            elif mhi < n and Chi > 0.0:
                lam = 2.0 * Chi * (mhi / K) ** 2 / K
            else:
                lam = 5.4 * C1 / (K * K * K)  # Panter-Dite distortion of a Gaussian; only a first guess
            if not (lam_hi < lam < lam_lo):
                lam = chord
        chord_step = lam == chord
        m = _solve_penalized(P0, P1, P2, n, lam, F, par, cnt, dqj, dqs)
        solves += 1
        if m == K:
            i = n
            t = K
            bounds[K] = n
            while i > 0:
                i = par[i]
                t -= 1
                bounds[t] = i
            return solves
        C = _path_cost(P0, P1, P2, n, par)
        if mlo < m < K:
            mlo, Clo, lam_lo = m, C, lam
            side = -1
        elif K < m < mhi:
            mhi, Chi, lam_hi = m, C, lam
            side = 1
        else:
            if chord_step:
                return -solves  # C(m) is linear across the bracket (a tie face) or rounding got in the way
            use_chord = True
            continue
        use_chord = side == last_side  # the model keeps landing on one side: take a chord step
        last_side = side
    return -solves


@cached_njit(nogil=True)
def _kmeans_dc(P0, P1, P2, n, K, bounds):
    """Layered DP with divide-and-conquer over monotone split points; O(K n log n), exact."""
    prev = np.empty(n + 1)
    cur = np.empty(n + 1)
    for i in range(n + 1):
        prev[i] = _cost(P0, P1, P2, 0, i) if i > 0 else np.inf
    split = np.zeros((K + 1, n + 1), dtype=np.int32)
    stack = np.empty((64 + 2 * n, 4), dtype=np.int64)
    for k in range(2, K + 1):
        ilo = k
        ihi = n - (K - k)
        for i in range(n + 1):
            cur[i] = np.inf
        top = 0
        stack[0, 0] = ilo
        stack[0, 1] = ihi
        stack[0, 2] = k - 1
        stack[0, 3] = ihi - 1
        top = 1
        while top > 0:
            top -= 1
            a = stack[top, 0]
            b = stack[top, 1]
            jlo = stack[top, 2]
            jhi = stack[top, 3]
            if a > b:
                continue
            mid = (a + b) >> 1
            best = np.inf
            bj = jlo
            jend = jhi if jhi < mid - 1 else mid - 1
            for j in range(jlo, jend + 1):
                v = prev[j] + _cost(P0, P1, P2, j, mid)
                if v < best:
                    best = v
                    bj = j
            cur[mid] = best
            split[k, mid] = bj
            stack[top, 0] = a
            stack[top, 1] = mid - 1
            stack[top, 2] = jlo
            stack[top, 3] = bj
            top += 1
            stack[top, 0] = mid + 1
            stack[top, 1] = b
            stack[top, 2] = bj
            stack[top, 3] = jhi
            top += 1
        tmp = prev
        prev = cur
        cur = tmp
    bounds[K] = n
    i = n
    for k in range(K, 1, -1):
        i = split[k, i]
        bounds[k - 1] = i
    bounds[0] = 0
    return K


@cached_njit(nogil=True)
def _kmeans_core(P0, P1, P2, n, K, method, bounds):
    """Exact weighted k-means of n > K sorted distinct points given their prefix sums.

    method: 0 auto, 1 lagrange only (no fallback), 2 dc. Fills bounds[0..K]; returns (method code, solves)."""
    if method == 2 or (method == 0 and K <= DC_MAX_K):
        _kmeans_dc(P0, P1, P2, n, K, bounds)
        return DC, 0
    solves = _kmeans_lagrange(P0, P1, P2, n, K, bounds, MAX_SOLVES)
    if solves > 0:
        return LAGRANGE, solves
    if method == 1:
        return -1, -solves
    _kmeans_dc(P0, P1, P2, n, K, bounds)
    return DC_FALLBACK, -solves


@cached_njit(nogil=True)
def _segment_means(x, w, bounds, K, out):
    for t in range(K):
        sw = 0.0
        swx = 0.0
        for q in range(bounds[t], bounds[t + 1]):
            sw += w[q]
            swx += w[q] * x[q]
        out[t] = swx / sw


@cached_njit(nogil=True)
def _round_fp16(v):
    """Nearest FP16 value of a finite float64 (round half to even, like numpy's cast), as float64.

    frexp gives v = f * 2^e with 0.5 <= |f| < 1, so the FP16 spacing there is 2^(e - 11) for normal numbers and
    2^-24 for subnormals; v / ulp is exact (a power-of-two scale), rint rounds half to even, the product is exact.
    Values beyond the FP16 range (never the mean of FP16 values) saturate at +-65504."""
    if v == 0.0:
        return 0.0
    e = math.frexp(v)[1]
    ulp = math.ldexp(1.0, e - 11) if e - 11 > -24 else 5.960464477539063e-08
    q = np.rint(v / ulp) * ulp
    if q > 65504.0:
        return 65504.0
    if q < -65504.0:
        return -65504.0
    return q


@cached_njit(nogil=True, inline="always")
def _fp16_segment_cost(P0, P1, P2, mu, j, i):
    """SSE of points j..i-1 around the nearest FP16 value of their mean: SSE(mean) + W (fp16(mean) - mean)^2."""
    s0 = P0[i] - P0[j]
    s1 = P1[i] - P1[j]
    mean = s1 / s0 + mu
    d = _round_fp16(mean) - mean
    return (P2[i] - P2[j]) - s1 * s1 / s0 + s0 * d * d


@cached_njit(nogil=True)
def _fp16_window(P0, P1, P2, mu, n, K, bounds, radius, out):
    """Best FP16-LUT partition whose every boundary lies within +-radius points of `bounds` (an exact chain DP).

    The objective is what a package stores when each segment gets the nearest FP16 value of its mean, so every
    partition in the window -- the given optimum and any tie-equivalent optimum nearby -- is covered."""
    W = 2 * radius + 1
    best = np.full((K + 1, W), np.inf)
    arg = np.zeros((K + 1, W), dtype=np.int64)
    best[0, radius] = 0.0
    for t in range(1, K + 1):
        for s in range(W):
            p = bounds[t] + s - radius
            if t == K:
                if p != n:
                    continue
            elif p < 1 or p > n - 1:
                continue
            bv = np.inf
            ba = 0
            for s2 in range(W):
                v0 = best[t - 1, s2]
                if v0 == np.inf:
                    continue
                q = bounds[t - 1] + s2 - radius
                if q >= p:
                    continue
                v = v0 + _fp16_segment_cost(P0, P1, P2, mu, q, p)
                if v < bv:
                    bv = v
                    ba = s2
            best[t, s] = bv
            arg[t, s] = ba
    s = radius
    out[K] = n
    for t in range(K, 0, -1):
        s = arg[t, s]
        out[t - 1] = bounds[t - 1] + s - radius
    return best[K, radius]


@cached_njit(nogil=True)
def _assign_nearest(x, w, lut, labels):
    """Nearest entry of a sorted LUT for sorted x (ties to the lower entry). Returns the weighted SSE."""
    K = lut.size
    t = 0
    sse = 0.0
    for q in range(x.size):
        v = x[q]
        while t + 1 < K and lut[t + 1] <= v:
            t += 1
        best = t
        if t + 1 < K and lut[t + 1] - v < v - lut[t]:
            best = t + 1
        labels[q] = best
        d = v - lut[best]
        sse += w[q] * d * d
    return sse


@cached_njit(nogil=True)
def _fp16_lut(x, w, bounds, K, lut, labels, max_polish):
    """FP16 means of the segments, nearest-entry assignment, then FP16 Lloyd while the SSE strictly drops.

    Returns (sse, polish rounds). Each half-step (nearest assignment; nearest FP16 of a cluster mean) cannot raise
    the SSE, so the result is never worse than the segments with their rounded means."""
    cent = np.empty(K)
    _segment_means(x, w, bounds, K, cent)
    for t in range(K):
        lut[t] = _round_fp16(cent[t])
    lut.sort()
    sse = _assign_nearest(x, w, lut, labels)
    cand = np.empty(K)
    cand_labels = np.empty(x.size, dtype=np.int32)
    sw = np.empty(K)
    swx = np.empty(K)
    rounds = 0
    for _ in range(max_polish):
        for t in range(K):
            sw[t] = 0.0
            swx[t] = 0.0
        for q in range(x.size):
            sw[labels[q]] += w[q]
            swx[labels[q]] += w[q] * x[q]
        for t in range(K):
            cand[t] = _round_fp16(swx[t] / sw[t]) if sw[t] > 0.0 else lut[t]
        cand.sort()
        new_sse = _assign_nearest(x, w, cand, cand_labels)
        if not new_sse < sse:
            break
        sse = new_sse
        lut[:] = cand
        labels[:] = cand_labels
        rounds += 1
    return sse, rounds


@cached_njit(nogil=True)
def _histogram(bits, rank_of_bits, counts, R):
    """Distinct values (as ranks) and counts of one FP16 group; counts[R] must be zero and is left zero."""
    m = bits.size
    rmin = R
    rmax = -1
    for e in range(m):
        r = rank_of_bits[bits[e]]
        if r < 0:
            return np.empty(0, dtype=np.int32), np.empty(0), False
        counts[r] += 1
        if r < rmin:
            rmin = r
        if r > rmax:
            rmax = r
    n = 0
    for r in range(rmin, rmax + 1):
        if counts[r] > 0:
            n += 1
    ranks = np.empty(n, dtype=np.int32)
    w = np.empty(n)
    q = 0
    for r in range(rmin, rmax + 1):
        if counts[r] > 0:
            ranks[q] = r
            w[q] = counts[r]
            counts[r] = 0
            q += 1
    return ranks, w, True


@cached_njit(nogil=True)
def _histogram_weighted(bits, wrow, rank_of_bits, counts, sums, R):
    """As `_histogram`, and the sum of the per-element weights `wrow` of every distinct value (the objective's weight
    of that value); counts and sums[R] must be zero and are left zero. Returns ranks, counts, sums, ok."""
    m = bits.size
    rmin = R
    rmax = -1
    for e in range(m):
        r = rank_of_bits[bits[e]]
        if r < 0:
            return np.empty(0, dtype=np.int32), np.empty(0), np.empty(0), False
        counts[r] += 1
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
    w = np.empty(n)
    q = 0
    for r in range(rmin, rmax + 1):
        if counts[r] > 0:
            ranks[q] = r
            c[q] = counts[r]
            w[q] = sums[r]
            counts[r] = 0
            sums[r] = 0.0
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
        if weighted:
            ranks, c, w, ok = _histogram_weighted(bits, weights2d[g], rank_of_bits, counts, sums, R)
        else:
            ranks, w, ok = _histogram(bits, rank_of_bits, counts, R)
            c = w
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

_METHODS = {"auto": 0, "lagrange": 1, "dc": 2}


def _method_code(method: str) -> int:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {sorted(_METHODS)}, got {method!r}")
    return _METHODS[method]


def kmeans_1d_weighted(values_sorted, counts, k: int, method: str = "auto"):
    """Exact weighted 1-D k-means of strictly increasing values with positive weights.

    Returns (centroids, boundaries): centroids float64 sorted, length min(k, n); boundaries int64 of length
    len(centroids) + 1 with boundaries[0] = 0, boundaries[-1] = n, cluster t = values[boundaries[t]:boundaries[t+1]].
    method "lagrange" raises if the lambda search does not land on k (no fallback); "auto" falls back to "dc"."""
    x = np.ascontiguousarray(values_sorted, dtype=np.float64)
    w = np.ascontiguousarray(counts, dtype=np.float64)
    if x.ndim != 1 or w.shape != x.shape or x.size == 0:
        raise ValueError("values_sorted and counts must be non-empty 1-D arrays of equal length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(w))):
        raise ValueError("values and counts must be finite")
    if np.any(np.diff(x) <= 0):
        raise ValueError("values_sorted must be strictly increasing (pass distinct values with their counts)")
    if np.any(w <= 0):
        raise ValueError("counts must be positive")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n = x.size
    if n <= k:
        return x.copy(), np.arange(n + 1, dtype=np.int64)
    if k == 1:
        return np.array([np.sum(w * x) / np.sum(w)]), np.array([0, n], dtype=np.int64)
    bounds = np.empty(k + 1, dtype=np.int64)
    P0, P1, P2, _ = _prefix(x, w)
    code, solves = _kmeans_core(P0, P1, P2, n, k, _method_code(method), bounds)
    if code < 0:
        raise RuntimeError(f"lambda search did not reach k={k} after {solves} solves (use method='auto')")
    cent = np.empty(k)
    _segment_means(x, w, bounds, k, cent)
    return cent, bounds


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
