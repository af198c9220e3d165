"""Precision modes and their arithmetic (`Numerics`), and the one rounding of an op's output (`cast_to`).

    Every op reads its fp16 inputs, converts them to float32 and computes the whole op in float32: dot products
    of conv/matmul/linear/einsum/scaled_dot_product_attention go through float32 BLAS (float32 accumulators),
    reductions (layer_norm mean and variance, softmax denominator, reduce_*) accumulate in float32, transcendental
    functions are evaluated in float32 (erf/erfc/expit from scipy). The op's output is then rounded once to fp16.
    This is the model of an FP16 device that keeps wide accumulators and stores fp16 activations.
    Results are deterministic; large products are split over threads by output rows or columns, which leaves
    each output's float32 sum to one BLAS call (measured: the full-size body's 6,400 values are identical with
    one and two threads).

fp16-strict
    A pessimistic all-fp16 model. Inputs stay fp16; every elementary step inside an op is rounded to fp16:
    each elementwise arithmetic result (numpy float16 ufuncs round every result to fp16), each intermediate of a
    composite op (layer_norm: mean, x - mean, square, variance, var + eps, rsqrt, product, gamma, beta; softmax:
    x - max, exp, sum, division; gelu/silu/sigmoid: every primitive), and every sum is accumulated sequentially in
    fp16: a dot product over K terms is `acc = fp16(acc + fp16(a_k * b_k))` for k = 0..K-1 in index order
    (no fused multiply-add, no tree), and a reduction over N values is `acc = fp16(acc + x_n)` in index order.
    `strict_chunk` > 1 relaxes this to: blocks of `strict_chunk` products are summed exactly in float32, each block
    sum is rounded to fp16 and added to the fp16 running sum.
    Limits: it is a bound, not a model of any specific hardware (real FP16 engines may use wider or tree
    accumulation, FMA, or approximate transcendental units); exp/erf/tanh/rsqrt are evaluated in float32 and
    rounded once (a correctly rounded fp16 function, better than most hardware approximations); numpy's own
    float16 matmul/dot/contiguous sum accumulate in float32 (measured: 4096 ones sum to 4096 in np.float16
    matmul, where an fp16 accumulator stalls at 2048), which is why strict sums are written as explicit loops.
    The loops make strict mode O(K) numpy calls per dot product: seconds per call even for the tiny BC1S body,
    far too slow for the full-size body at L1024; it exists to bound the effect of fp16 accumulation on
    small programs, not to run production shapes.
    A few composite ops compute in float32 and round once even in this mode, each saying so in its handler:
    bilinear interpolation (upsample/resize/crop_resize/resample/affine), local_response_norm's power, the
    comparisons of non_maximum_suppression.

ane
    The arithmetic of fp32-accumulate, plus the Neural Engine's published numeric cliffs for one chip family
    (`MILExecutor(mode="ane", ane_family=...)`, family "pre-a16" or "a16"): after each run-time op, cliffs.py's
    `AneCliffs.apply` turns a matmul-class output above the matmul cliff, and (pre-A16) a width-offset slice's values
    above the slice cliff, into +/-inf, rounds a float32 reduce_sum total to the FP16 grid, and records the first op
    where a cliff fired. The values and their sources are in ane_cliffs.json. It models what was measured, no more:
    the device's own accumulation order and its transcendental approximations are not modelled.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .kernels import parallel_for, to_float16, to_float32

FP32_ACCUMULATE = "fp32-accumulate"
FP16_STRICT = "fp16-strict"
ANE = "ane"  # fp32-accumulate arithmetic plus the Neural Engine's cliffs (executor.py applies them, cliffs.py)
MODES = (FP32_ACCUMULATE, FP16_STRICT, ANE)


def cast_to(x, dtype: np.dtype, threads: int = 1) -> np.ndarray:
    """Store a result in a declared dtype; float32 -> float16 goes through the fast rounding kernel."""
    x = np.asarray(x)
    if x.dtype == dtype:
        return x
    if dtype == np.float16:
        return to_float16(x, threads) if x.dtype == np.float32 else x.astype(np.float16)
    return x.astype(dtype)


# ----------------------------------------------------------------------------------------------- numerics

class Numerics:
    """Arithmetic of one precision mode. `f` brings a float operand to the compute dtype, `r` marks a rounding
    point inside a composite op (a no-op in fp32-accumulate), `sum`/`matmul` accumulate as the mode says."""

    def __init__(self, mode: str = FP32_ACCUMULATE, strict_chunk: int = 1, threads: int = 1):
        if mode not in MODES:
            raise ValueError(f"unknown precision mode {mode!r}; choose one of {MODES}")
        if int(strict_chunk) < 1:
            raise ValueError("strict_chunk must be >= 1")
        self.threads = max(1, int(threads))
        self.mode = mode
        self.strict = mode == FP16_STRICT
        self.dtype = np.dtype(np.float16 if self.strict else np.float32)
        self.strict_chunk = int(strict_chunk)

    def describe(self) -> dict:
        out = {"mode": self.mode, "compute_dtype": str(self.dtype)}
        if self.strict:
            out["accumulation"] = (f"sequential fp16, rounding after every {self.strict_chunk} product(s)"
                                   if self.strict_chunk > 1 else "sequential fp16, every product and "
                                                                 "partial sum rounded")
        else:
            out["accumulation"] = ("float32 (BLAS sgemm for dot products, float32 reductions); each op output "
                                   "rounded to fp16")
        if self.mode == ANE:
            out["cliffs"] = ("the Neural Engine's published numeric cliffs (run/mil/ane_cliffs.json) applied after "
                             "each op")
        return out

    def f(self, x):
        """Operand in the compute dtype (floats only; ints and bools are left alone)."""
        x = np.asarray(x)
        if x.dtype.kind == "f" and x.dtype != self.dtype:
            if self.dtype == np.float32:
                return to_float32(x, self.threads)
            return to_float16(x, self.threads) if x.dtype == np.float32 else x.astype(self.dtype)
        return x

    def r(self, x):
        """Rounding point of a composite op: fp16 in strict mode, untouched in fp32-accumulate."""
        if self.strict:
            x = np.asarray(x)
            if x.dtype != np.float16:
                return cast_to(x, np.dtype(np.float16), self.threads)
        return x

    def c(self, value: float):
        """A constant inside a composite op, in the compute dtype (fp16 constants are rounded in strict mode)."""
        return self.dtype.type(value)

    def fn(self, func: Callable, x):
        """A transcendental function: evaluated in float32 (at least), rounded to fp16 in strict mode."""
        x = np.asarray(x)
        y = func(to_float32(x, self.threads) if x.dtype == np.float16 else x)
        return self.r(y) if self.strict else y.astype(np.float32, copy=False)

    # -- reductions
    def sum(self, x, axes, keepdims: bool = True):
        x = np.asarray(x)
        axes = norm_axes(axes, x.ndim)
        if not self.strict:
            return np.sum(self.f(x), axis=axes, keepdims=keepdims, dtype=np.float32 if x.dtype.kind == "f" else None)
        if x.dtype.kind != "f":
            return np.sum(x, axis=axes, keepdims=keepdims)
        return _sequential_sum16(x.astype(np.float16), axes, keepdims)

    def mean(self, x, axes, keepdims: bool = True):
        x = np.asarray(x)
        axes = norm_axes(axes, x.ndim)
        n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        s = self.sum(x, axes, keepdims)
        if self.strict:
            return np.divide(s, np.float16(n)).astype(np.float16)  # the count is an fp16 constant; one rounding
        return s / np.float32(n)

    # -- dot products
    def matmul(self, a, b):
        """numpy-broadcast batched matmul a[..., M, K] @ b[..., K, N]."""
        if not self.strict:
            return _matmul32(self.f(a), self.f(b), self.threads)
        return _sequential_matmul16(np.asarray(a, dtype=np.float16), np.asarray(b, dtype=np.float16), self.strict_chunk)

    def matmul_fp16(self, a, b, row_bias=None, col_bias=None):
        """The same product (plus an optional bias per output row or column) rounded once to fp16.
        fp32-accumulate: float32 BLAS, the bias added in float32, one rounding;
        fp16-strict: the sequential fp16 accumulation of `matmul`, then the bias added in fp16."""
        if self.strict:
            out = self.matmul(a, b)
            if row_bias is not None:
                out = self.r(out + self.f(row_bias)[:, None])
            if col_bias is not None:
                out = self.r(out + self.f(col_bias))
            return out
        return _matmul_fp16(a, b, self.threads, row_bias, col_bias)


def _matmul32(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """np.matmul in float32; a large product is split over its longer output axis into `threads` BLAS calls."""
    if threads <= 1 or a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if int(np.prod(batch)) * m * n * k < (1 << 24):
        return np.matmul(a, b)
    out = np.empty(batch + (m, n), np.result_type(a, b))
    if m >= n:
        parallel_for(lambda s, e: np.matmul(a[..., s:e, :], b, out=out[..., s:e, :]), m, threads, min_chunk=16)
    else:
        parallel_for(lambda s, e: np.matmul(a, b[..., :, s:e], out=out[..., :, s:e]), n, threads, min_chunk=16)
    return out


def _matmul_fp16(a, b, threads: int, row_bias=None, col_bias=None) -> np.ndarray:
    """fp16(a @ b [+ bias]): one float32 BLAS product (split over threads), the bias added in float32, one
    rounding. (Tried and dropped, both slower here: blocking the product so its float32 result stays in cache,
    since BLAS then repacks operands per block; and a numba kernel for the short K=32 contractions.)"""
    a, b = np.asarray(a), np.asarray(b)
    out = _matmul32(to_float32(a, threads), to_float32(b, threads), threads)
    if row_bias is not None:
        out += to_float32(np.asarray(row_bias)).reshape(-1)[:, None]
    if col_bias is not None:
        out += to_float32(np.asarray(col_bias)).reshape(-1)
    return to_float16(out, threads)


def norm_axes(axes, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    axes = np.atleast_1d(np.asarray(axes)).astype(int).tolist()
    return tuple(sorted({a + rank if a < 0 else a for a in axes}))


def _sequential_sum16(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """acc = fp16(acc + x_n) over the reduced elements in row-major order of the reduced axes."""
    rest = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, list(axes) + rest)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    flat = moved.reshape((n,) + tuple(x.shape[d] for d in rest))
    # A 0-d array, not a numpy scalar, when every axis is reduced (ufunc `out=` needs an array); 0 for no terms.
    acc = np.array(flat[0] if n else np.zeros(flat.shape[1:]), dtype=np.float16)
    for i in range(1, n):
        np.add(acc, flat[i], out=acc)  # float16 ufunc: computed exactly, rounded to fp16
    if keepdims:
        shape = [1 if d in axes else x.shape[d] for d in range(x.ndim)]
        return acc.reshape(shape)
    return acc


def _sequential_matmul16(a: np.ndarray, b: np.ndarray, chunk: int) -> np.ndarray:
    k = a.shape[-1]
    if b.shape[-2] != k:
        raise ValueError(f"matmul contraction mismatch {a.shape} @ {b.shape}")
    acc = None
    if chunk == 1:
        for i in range(k):
            part = np.multiply(a[..., :, i:i + 1], b[..., i:i + 1, :])  # fp16 product, rounded
            if acc is None:
                acc = part
            else:
                np.add(acc, part, out=acc)
    else:
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        for i in range(0, k, chunk):
            part = np.matmul(a32[..., :, i:i + chunk], b32[..., i:i + chunk, :]).astype(np.float16)
            if acc is None:
                acc = part
            else:
                np.add(acc, part, out=acc)
    if acc is None:  # K == 0
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        acc = np.zeros(shape, np.float16)
    return acc
