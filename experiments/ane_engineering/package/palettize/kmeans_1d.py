"""Exact weighted 1-D k-means of sorted distinct values: the solver behind the FP16 palettizer (kmeans_exact.py).

Exact 1-D k-means on the n distinct points (x sorted, weights w). An optimal partition is contiguous in sorted
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
  ``MAX_SOLVES`` solves falls back to the D&C DP below, so the answer is always exact. The solves each group
  took are in palettize.json's per-group statistics (`solves`).
- ``dc``: the layered DP cost[k][i] = min_j cost[k-1][j] + SSE(j, i) with divide-and-conquer over monotone split
  points, O(k n log n) time, O(k n) int32 back-pointers. Used for k <= 2, as the fallback, and as a reference.

Both are exact up to float64 rounding of near-equal alternatives (far below the FP16 step that follows).
"""

from __future__ import annotations

import numpy as np

from ...core.numba_cache import cached_njit

DC_MAX_K = 2  # k at or below this uses the D&C DP directly (one or two layers are cheaper than the lambda search)
MAX_SOLVES = 60  # penalised solves before the lambda search gives up and falls back to the D&C DP

# Method codes in the per-group statistics.
TRIVIAL, LAGRANGE, DC, DC_FALLBACK = 0, 1, 2, 3
METHOD_NAMES = {TRIVIAL: "trivial", LAGRANGE: "lagrange", DC: "dc", DC_FALLBACK: "dc_fallback"}

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
