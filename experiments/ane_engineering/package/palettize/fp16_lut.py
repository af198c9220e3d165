"""The FP16 step of the palettizer (kmeans_exact.py): from exact k-means segments to the best FP16 LUT near them.

FP16 LUT. What the package holds is an FP16 LUT, so the objective that matters is the SSE with FP16 entries. For a
fixed segment the best FP16 entry is the FP16 value nearest its mean (the SSE is quadratic around the mean), so a
segment's stored cost is SSE(mean) + W (fp16(mean) - mean)^2. That cost is not Monge, so it is minimised exactly only
over a neighbourhood: a chain DP over all K - 1 boundaries, each allowed to move by up to ``WINDOW_RADIUS`` distinct
points from the exact optimum (O(K (2r+1)^2)). The neighbourhood contains the optimum itself and the tie-equivalent
optima next to it (FP16 values on a uniform grid with equal counts make exact ties common, and coremltools' kmeans1d
may return any of them), so the result is at least as good as any partition whose boundaries lie within the window,
stored with rounded means -- which is exactly what coremltools stores for groups of >= 10,000 values when its tie
choice is in the window. Then every distinct value is re-assigned to the nearest FP16 entry (coremltools keeps the DP
segment), and an FP16 Lloyd polish (cluster mean -> nearest FP16 -> nearest-entry reassignment) repeats while the SSE
strictly drops; neither half-step can raise it. FP16 rounding is round-half-to-even, bit-identical to numpy's float64
-> float16 cast.
"""

from __future__ import annotations

import math

import numpy as np

from ...core.numba_cache import cached_njit
from .kmeans_1d import _segment_means

WINDOW_RADIUS = 3  # FP16 window step: each boundary may move this many distinct points (0 disables)


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
