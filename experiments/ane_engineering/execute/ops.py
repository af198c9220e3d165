"""One numpy handler per MIL op type, and the registry the executor dispatches through (`OP_HANDLERS`).

A handler is `handler(node, args, num) -> array | tuple[array, ...]`:

    node  OpNode: the op's name, type, position, declared output shapes/dtypes and a per-op `cache` dict
    args  {input name: value}: numpy arrays for tensors (fp16 as stored), lists of arrays for tuple inputs
          (einsum/concat `values`), str for string consts; optional inputs that were not given are absent
    num   Numerics: the precision mode (see below) and its arithmetic helpers

A handler returns its result in the mode's compute dtype; the executor then stores it in the op's declared
dtype (np.float16 for FP16 programs), which is the one rounding of an op's output. Handlers on the hot path
(binary arithmetic, conv, matmul, linear, einsum, softmax, gelu) may return that rounded fp16 result themselves
from fused kernels; the values are the same as "compute in the mode's dtype, then round". A handler may carry a
`prepare(node, const_args, num)` attribute that runs once at load (e.g. conv caches its weight matrix).

Semantics follow coremltools' op definitions (coremltools/converters/mil/mil/ops/defs/iOS15..iOS18): inputs,
defaults (PyMIL's loader materialises every default as a const input, so `args` always holds them), broadcasting
and, where an op has one, its `value_inference`/`decompress` formula.

Precision modes (`Numerics.mode`):

fp32-accumulate (default)
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
    The loops make strict mode O(K) numpy calls per dot product: ~2.5 s per call for the tiny BC1S body at L96,
    far too slow (hours) for the full-size body at L1024; it exists to bound the effect of fp16 accumulation on
    small programs, not to run production shapes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import HarnessError

FP32_ACCUMULATE = "fp32-accumulate"
FP16_STRICT = "fp16-strict"
MODES = (FP32_ACCUMULATE, FP16_STRICT)


class UnsupportedOpError(HarnessError):
    """An op type (or an op configuration) this executor has no handler for."""


@dataclass
class OpNode:
    index: int  # position of the op in the function's op list (const ops counted)
    name: str
    op_type: str
    function: str
    output_names: list[str]
    output_shapes: list[tuple[int, ...] | None]
    output_dtypes: list[np.dtype]
    cache: dict = field(default_factory=dict)

    def where(self) -> str:
        return f"op #{self.index} {self.name!r} of type {self.op_type!r} in function {self.function}"


# ----------------------------------------------------------------------------------------------- fp16 <-> fp32, threads

# numpy's own float16 casts run at ~1.3 ns (fp16 -> fp32) and ~2.6 ns (fp32 -> fp16) per element here (numpy's
# x86-64 wheels do not use the F16C conversion instructions), which dominated the executor at full size. When
# numba is installed (it comes with the `convert` extra, as coremltools does) large arrays go through small
# numba kernels that convert with LLVM's `half` type (fpext / fptrunc, i.e. the CPU's IEEE conversion
# instructions: vcvtph2ps / vcvtps2ph with round-to-nearest-even on x86): ~0.07 ns per element. The same
# conversions make the fused fp16 binary kernel (fp16 x fp16 -> float32 op -> fp16, for add/sub/mul/real_div/
# maximum/minimum on same-shape or single-value operands), which is exactly "compute in fp32, round once".
# Checked: fp32 -> fp16 equals numpy's astype(np.float16) bit for bit over all 2^32 float32 bit patterns, and
# fp16 -> fp32 equals numpy over all 65,536 halves, except NaN payloads (NaN stays NaN; the hardware sets the
# quiet bit of signalling NaNs, numpy keeps them as they are).
# A self-check against numpy runs when the kernels are first compiled; if numba is missing or the check
# fails, numpy's casts are used. Results are identical either way.
#
# Threads: large kernels and large matmuls are split into `threads` slices run on a small pool of Python threads
# (numba kernels and BLAS release the GIL), with BLAS itself pinned to one thread while a program runs. Python
# threads block when idle; OpenBLAS's own threads spin, which made a shared 2-core machine several times slower.

FAST_MIN_ELEMENTS = 1 << 12
PARALLEL_MIN_ELEMENTS = 1 << 17
_kernels: dict = {}
BINARY_OPCODES = {"add": 0, "sub": 1, "mul": 2, "real_div": 3, "maximum": 4, "minimum": 5}


try:  # numba is optional: without it numpy's casts and ufuncs are used
    from llvmlite import ir as _ir
    from numba import njit as _njit
    from numba import types as _nbtypes
    from numba.extending import intrinsic as _intrinsic
except Exception:  # noqa: BLE001
    _njit = None

if _njit is not None:
    @_intrinsic
    def _half_to_f32(typingctx, h):  # uint16 bit pattern of an fp16 -> float32 (exact)
        def codegen(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], _ir.HalfType()), _ir.FloatType())
        return _nbtypes.float32(_nbtypes.uint16), codegen

    @_intrinsic
    def _f32_to_half(typingctx, f):  # float32 -> uint16 bit pattern of the fp16, round to nearest even
        def codegen(context, builder, signature, args):
            return builder.bitcast(builder.fptrunc(args[0], _ir.HalfType()), _ir.IntType(16))
        return _nbtypes.uint16(_nbtypes.float32), codegen

    # Loops run over sliced views with range(n): numba vectorizes those, not range(start, stop) over the whole.
    # error_model="numpy": x / 0 gives inf or nan as in numpy (numba's default would raise ZeroDivisionError).

    @_njit(nogil=True, boundscheck=False, cache=True, error_model="numpy")
    def _k_f32_to_f16(src, dst, start, stop):  # src: float32, dst: uint16 view of float16
        s, d = src[start:stop], dst[start:stop]
        for i in range(s.size):
            d[i] = _f32_to_half(s[i])

    @_njit(nogil=True, boundscheck=False, cache=True, error_model="numpy")
    def _k_f16_to_f32(src, dst, start, stop):  # src: uint16 view of float16, dst: float32
        s, d = src[start:stop], dst[start:stop]
        for i in range(s.size):
            d[i] = _half_to_f32(s[i])

    @_njit(nogil=True, boundscheck=False, cache=True, error_model="numpy")
    def _k_binary16(op, a, b, dst, start, stop):
        # a, b, dst: uint16 views of fp16 arrays of the output's size; a or b may hold a single broadcast value
        d = dst[start:stop]
        n = d.size
        if a.size == 1 or b.size == 1:
            one_a = a.size == 1
            v = _half_to_f32(a[0]) if one_a else _half_to_f32(b[0])
            s = b[start:stop] if one_a else a[start:stop]
            for i in range(n):
                x, y = (v, _half_to_f32(s[i])) if one_a else (_half_to_f32(s[i]), v)
                if op == 0:
                    r = x + y
                elif op == 1:
                    r = x - y
                elif op == 2:
                    r = x * y
                elif op == 3:
                    r = x / y
                elif op == 4:
                    r = x if (x > y or x != x) else y
                else:
                    r = x if (x < y or x != x) else y
                d[i] = _f32_to_half(r)
            return
        sa, sb = a[start:stop], b[start:stop]
        if op == 0:
            for i in range(n):
                d[i] = _f32_to_half(_half_to_f32(sa[i]) + _half_to_f32(sb[i]))
        elif op == 1:
            for i in range(n):
                d[i] = _f32_to_half(_half_to_f32(sa[i]) - _half_to_f32(sb[i]))
        elif op == 2:
            for i in range(n):
                d[i] = _f32_to_half(_half_to_f32(sa[i]) * _half_to_f32(sb[i]))
        elif op == 3:
            for i in range(n):
                d[i] = _f32_to_half(_half_to_f32(sa[i]) / _half_to_f32(sb[i]))
        elif op == 4:
            for i in range(n):
                x, y = _half_to_f32(sa[i]), _half_to_f32(sb[i])
                d[i] = _f32_to_half(x if (x > y or x != x) else y)  # NaN propagates, as np.maximum
        else:
            for i in range(n):
                x, y = _half_to_f32(sa[i]), _half_to_f32(sb[i])
                d[i] = _f32_to_half(x if (x < y or x != x) else y)


def _compile_kernels() -> dict:
    if _njit is None:
        raise ImportError("numba is not installed")
    return {"f32_to_f16": _k_f32_to_f16, "f16_to_f32": _k_f16_to_f32, "binary16": _k_binary16}


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit-identical, except that NaNs need only both be NaN (the hardware quiets signalling NaNs)."""
    same = got.view(np.dtype(f"u{got.itemsize}")) == want.view(np.dtype(f"u{want.itemsize}"))
    return bool(np.all(same | (np.isnan(got) & np.isnan(want))))


def _self_check(k: dict) -> bool:
    halves = np.arange(65536, dtype=np.uint16)
    wide = np.empty(65536, np.float32)
    k["f16_to_f32"](halves, wide, 0, 65536)
    if not _same_bits(wide, halves.view(np.float16).astype(np.float32)):
        return False
    finite = np.sort(wide[np.isfinite(wide) & (wide >= 0)])
    mids = ((finite[1:].astype(np.float64) + finite[:-1]) / 2).astype(np.float32)  # ties: round to even
    probe = np.concatenate([mids, -mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(1e9)),
                            np.float32([65504, 65519.99, 65520, 1e-8, 3e-8, -0.0, np.inf, -np.inf])])
    narrow = np.empty(probe.size, np.uint16)
    k["f32_to_f16"](probe, narrow, 0, probe.size)
    with np.errstate(over="ignore"):
        return _same_bits(narrow.view(np.float16), probe.astype(np.float16))


def _load_kernels():
    """The compiled kernels, or None (numba missing, or the self-check against numpy failed)."""
    if "loaded" not in _kernels:
        _kernels["loaded"] = True
        try:
            compiled = _compile_kernels()
            if _self_check(compiled):
                _kernels.update(compiled)
        except Exception:  # noqa: BLE001 - numba is optional; numpy's casts remain
            pass
    return _kernels.get("f32_to_f16")


_pools: dict = {}


def parallel_for(fn: Callable[[int, int], None], total: int, threads: int, min_chunk: int = PARALLEL_MIN_ELEMENTS):
    """fn(start, stop) over [0, total) in up to `threads` slices; the calling thread runs the first slice."""
    parts = max(1, min(int(threads), total // max(1, min_chunk)))
    if parts <= 1:
        fn(0, total)
        return
    pool = _pools.get(parts)
    if pool is None:
        from concurrent.futures import ThreadPoolExecutor

        pool = _pools[parts] = ThreadPoolExecutor(max_workers=parts - 1, thread_name_prefix="mil-exec")
    bounds = [total * i // parts for i in range(parts + 1)]
    futures = [pool.submit(fn, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    fn(bounds[0], bounds[1])
    for f in futures:
        f.result()


def to_float32(x: np.ndarray, threads: int = 1) -> np.ndarray:
    """fp16 (or any) array -> float32, exact."""
    x = np.asarray(x)
    if x.dtype == np.float32:
        return x
    if x.dtype != np.float16 or x.size < FAST_MIN_ELEMENTS or _load_kernels() is None:
        return x.astype(np.float32)
    src = np.ascontiguousarray(x).reshape(-1).view(np.uint16)
    out = np.empty(x.shape, np.float32)
    flat, kernel = out.reshape(-1), _kernels["f16_to_f32"]
    parallel_for(lambda a, b: kernel(src, flat, a, b), src.size, threads)
    return out


def to_float16(x: np.ndarray, threads: int = 1) -> np.ndarray:
    """float32 (or any) array -> fp16, rounded to nearest even as numpy's astype(np.float16)."""
    x = np.asarray(x)
    if x.dtype == np.float16:
        return x
    if x.dtype != np.float32 or x.size < FAST_MIN_ELEMENTS or _load_kernels() is None:
        return x.astype(np.float16)
    src = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(x.shape, np.float16)
    flat, kernel = out.reshape(-1).view(np.uint16), _kernels["f32_to_f16"]
    parallel_for(lambda a, b: kernel(src, flat, a, b), src.size, threads)
    return out


def binary16(op_type: str, x, y, threads: int = 1):
    """fp16 op fp16 -> fp16 in one pass (computed in float32, rounded once), or None if not applicable:
    both operands fp16, and the same shape or one of them a single value."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != np.float16 or y.dtype != np.float16:
        return None
    if x.shape == y.shape:
        shape = x.shape
    elif y.size == 1 and y.ndim <= x.ndim:
        shape = x.shape
    elif x.size == 1 and x.ndim <= y.ndim:
        shape = y.shape
    else:
        return None
    size = int(np.prod(shape)) if shape else 1
    if size < FAST_MIN_ELEMENTS or _load_kernels() is None:
        return None
    a = np.ascontiguousarray(x).reshape(-1).view(np.uint16)
    b = np.ascontiguousarray(y).reshape(-1).view(np.uint16)
    out = np.empty(shape, np.float16)
    flat, kernel, op = out.reshape(-1).view(np.uint16), _kernels["binary16"], BINARY_OPCODES[op_type]
    parallel_for(lambda s, e: kernel(op, a, b, flat, s, e), size, threads)
    return out


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
                                   if self.strict_chunk > 1 else "sequential fp16, every product and partial sum rounded")
        else:
            out["accumulation"] = "float32 (BLAS sgemm for dot products, float32 reductions); each op output rounded to fp16"
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
        axes = _norm_axes(axes, x.ndim)
        if not self.strict:
            return np.sum(self.f(x), axis=axes, keepdims=keepdims, dtype=np.float32 if x.dtype.kind == "f" else None)
        if x.dtype.kind != "f":
            return np.sum(x, axis=axes, keepdims=keepdims)
        return _sequential_sum16(x.astype(np.float16), axes, keepdims)

    def mean(self, x, axes, keepdims: bool = True):
        x = np.asarray(x)
        axes = _norm_axes(axes, x.ndim)
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


def _norm_axes(axes, rank: int) -> tuple[int, ...]:
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
    acc = flat[0].astype(np.float16, copy=True)
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


# ----------------------------------------------------------------------------------------------- helpers

def _int(v) -> int:
    return int(np.asarray(v).reshape(-1)[0]) if np.ndim(v) else int(v)


def _ints(v) -> list[int]:
    return [int(i) for i in np.atleast_1d(np.asarray(v)).reshape(-1)]


def _bool(v) -> bool:
    return bool(np.asarray(v).reshape(-1)[0]) if np.ndim(v) else bool(v)


def _bools(v, rank: int) -> list[bool]:
    if v is None:
        return [False] * rank
    return [bool(b) for b in np.atleast_1d(np.asarray(v)).reshape(-1)]


def _axis(v, rank: int) -> int:
    a = _int(v)
    return a + rank if a < 0 else a


def _erf(x):
    from scipy.special import erf

    return erf(x)


def _erfc(x):
    from scipy.special import erfc

    return erfc(x)


def _expit(x):
    from scipy.special import expit

    return expit(x)


# ----------------------------------------------------------------------------------------------- registry

OP_HANDLERS: dict[str, Callable] = {}


def register(*op_types: str):
    def deco(fn):
        for t in op_types:
            OP_HANDLERS[t] = fn
        return fn
    return deco


def supported_op_types() -> list[str]:
    return sorted(OP_HANDLERS)


@register("const")
def op_const(node, args, num):
    # The executor reads a const's value from the loaded program (weight.bin) and passes it in as `val`.
    return args["val"]


# ---- elementwise binary (numpy broadcasting, as MIL's elementwise_binary)

def _binary(fn, op_type):
    fused = op_type in BINARY_OPCODES  # one rounding of an exact (fp32) result: the same in both modes

    def handler(node, args, num):
        if fused:
            out = binary16(op_type, args["x"], args["y"], num.threads)
            if out is not None:
                return out
        return fn(num.f(args["x"]), num.f(args["y"]))
    return handler


for _name, _fn in {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.true_divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power, "floor_div": np.floor_divide,
    "mod": np.mod, "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}.items():
    OP_HANDLERS[_name] = _binary(_fn, _name)


# ---- elementwise unary

@register("relu")
def op_relu(node, args, num):
    return np.maximum(num.f(args["x"]), num.c(0))


@register("abs")
def op_abs(node, args, num):
    return np.abs(num.f(args["x"]))


@register("square")
def op_square(node, args, num):
    x = num.f(args["x"])
    return x * x


@register("identity")
def op_identity(node, args, num):
    return args["x"]


@register("logical_not")
def op_logical_not(node, args, num):
    return np.logical_not(args["x"])


for _name, _fn in {"exp": np.exp, "tanh": np.tanh, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
                   "erf": _erf, "floor": np.floor, "ceil": np.ceil, "round": np.round, "sign": np.sign}.items():
    OP_HANDLERS[_name] = (lambda f: (lambda node, args, num: num.fn(f, args["x"])))(_fn)


@register("sigmoid")
def op_sigmoid(node, args, num):
    return num.fn(_expit, args["x"])


@register("silu")
def op_silu(node, args, num):
    x = num.f(args["x"])
    return x * num.fn(_expit, x)  # x * sigmoid(x); in strict mode sigmoid rounded, product rounded


@register("rsqrt")
def op_rsqrt(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-12)
    return num.fn(lambda v: 1.0 / np.sqrt(v), num.r(x + eps))  # y = 1 / sqrt(x + epsilon)


@register("inverse")
def op_inverse(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-4)
    return num.c(1) / num.r(x + eps)  # y = 1 / (x + epsilon)


@register("log")
def op_log(node, args, num):
    x = num.f(args["x"])
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-45)
    return num.fn(np.log, num.r(x + eps))


@register("clip")
def op_clip(node, args, num):
    x = num.f(args["x"])
    return np.minimum(np.maximum(x, num.f(args["alpha"])), num.f(args["beta"]))


@register("gelu")
def op_gelu(node, args, num):
    mode = str(args.get("mode", "EXACT"))
    raw = np.asarray(args["x"])
    x = raw if (mode == "EXACT" and not num.strict and raw.dtype == np.float16) else num.f(raw)
    if mode == "EXACT":
        if num.strict:  # 0.5 * x * (1 + erf(x / sqrt(2))), every primitive rounded to fp16
            u = x * num.c(1.0 / math.sqrt(2.0))
            v = num.c(1) + num.fn(_erf, u)
            return num.c(0.5) * (x * v)
        # fp32: the same function written with erfc (1 + erf(u) == erfc(-u)), accurate in the negative tail
        def exact(v):
            return np.float32(0.5) * v * _erfc(v * np.float32(-1.0 / math.sqrt(2.0))).astype(np.float32, copy=False)

        if raw.dtype == np.float16 and node.output_dtypes[0] == np.float16:
            return map16(raw, exact, num.threads)
        return exact(num.f(raw))
    if mode == "TANH_APPROXIMATION":
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        inner = num.c(math.sqrt(2.0 / math.pi)) * (x + num.c(0.044715) * (x * x * x))
        return num.c(0.5) * (x * (num.c(1) + num.fn(np.tanh, inner)))
    if mode == "SIGMOID_APPROXIMATION":
        return x * num.fn(_expit, num.c(1.702) * x)  # x * sigmoid(1.702 * x)
    raise UnsupportedOpError(f"gelu mode {mode!r} ({node.where()})")


@register("cast")
def op_cast(node, args, num):
    target = node.output_dtypes[0]
    x = np.asarray(args["x"])
    if target.kind in "iu" and x.dtype.kind == "f":
        x = np.trunc(x)  # float -> int casts truncate toward zero
    return x.astype(target)


@register("select")
def op_select(node, args, num):
    return np.where(np.asarray(args["cond"]).astype(bool), num.f(args["a"]), num.f(args["b"]))


# ---- normalisation and softmax

@register("layer_norm")
def op_layer_norm(node, args, num):
    x = num.f(args["x"])
    axes = _norm_axes(args.get("axes"), x.ndim)
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-5)
    mean = num.mean(x, axes)
    d = num.r(x - mean)
    var = num.mean(num.r(d * d), axes)
    inv = num.fn(lambda v: 1.0 / np.sqrt(v), num.r(var + eps))  # 1 / sqrt(Var[x] + epsilon)
    y = num.r(d * inv)
    norm_shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
    if args.get("gamma") is not None:
        y = num.r(y * num.f(args["gamma"]).reshape(norm_shape))
    if args.get("beta") is not None:
        y = y + num.f(args["beta"]).reshape(norm_shape)
    return y


def map16(x: np.ndarray, fn: Callable[[np.ndarray], np.ndarray], threads: int, keep_axis: int | None = None):
    """fp16 in, fp16 out: fn(float32 copy of a slice) -> float32 result of the same shape (fn may work in place),
    rounded to fp16 once. With threads > 1 the largest axis other than `keep_axis` (which fn needs whole) is
    split into one slice per thread."""
    x = np.asarray(x)
    axes = [d for d in range(x.ndim) if d != keep_axis]
    split = max(axes, key=lambda d: x.shape[d]) if axes else None
    per_slice = x.size // max(1, x.shape[split]) if split is not None else x.size
    if split is None or threads <= 1 or x.size < 2 * PARALLEL_MIN_ELEMENTS:
        return to_float16(np.asarray(fn(to_float32(x)), np.float32))
    out = np.empty(x.shape, np.float16)

    def work(start, stop):
        index = tuple(slice(start, stop) if d == split else slice(None) for d in range(x.ndim))
        out[index] = to_float16(np.asarray(fn(to_float32(x[index])), np.float32))

    parallel_for(work, x.shape[split], threads, min_chunk=max(1, PARALLEL_MIN_ELEMENTS // max(1, per_slice)))
    return out


def _softmax32_inplace(v: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(v, axis=axis, keepdims=True)
    np.subtract(v, m, out=v)
    np.exp(v, out=v)
    np.divide(v, np.sum(v, axis=axis, keepdims=True, dtype=np.float32), out=v)
    return v


@register("softmax")
def op_softmax(node, args, num):
    x = np.asarray(args["x"])
    axis = _axis(args.get("axis", -1), x.ndim)
    if not num.strict and x.dtype == np.float16 and node.output_dtypes[0] == np.float16:
        # exp(x - max) / sum(exp(x - max)) in float32, each output rounded once; split over the other axes
        return map16(x, lambda v: _softmax32_inplace(v, axis), num.threads, keep_axis=axis)  # v: a fresh copy
    x = num.f(x)
    m = np.max(x, axis=axis, keepdims=True)
    e = num.fn(np.exp, num.r(x - m))
    s = num.sum(e, (axis,))
    return e / s


@register("reduce_sum")
def op_reduce_sum(node, args, num):
    x = num.f(args["x"])
    return num.sum(x, args.get("axes"), keepdims=_bool(args.get("keep_dims", False)))


@register("reduce_mean")
def op_reduce_mean(node, args, num):
    x = num.f(args["x"])
    return num.mean(x, args.get("axes"), keepdims=_bool(args.get("keep_dims", False)))


@register("reduce_max")
def op_reduce_max(node, args, num):
    x = num.f(args["x"])
    axes = _norm_axes(args.get("axes"), x.ndim)
    return np.max(x, axis=axes, keepdims=_bool(args.get("keep_dims", False)))


@register("reduce_min")
def op_reduce_min(node, args, num):
    x = num.f(args["x"])
    axes = _norm_axes(args.get("axes"), x.ndim)
    return np.min(x, axis=axes, keepdims=_bool(args.get("keep_dims", False)))


# ---- shape and layout

@register("transpose")
def op_transpose(node, args, num):
    return np.transpose(args["x"], _ints(args["perm"]))


@register("reshape")
def op_reshape(node, args, num):
    x = np.asarray(args["x"])
    shape = node.output_shapes[0]
    if shape is None:  # resolve 0 (copy from x, right-aligned as iOS17) and -1 ourselves
        target = _ints(args["shape"])
        rev_in = list(x.shape)[::-1]
        rev = target[::-1]
        for i, t in enumerate(rev):
            if t == 0:
                rev[i] = rev_in[i] if i < len(rev_in) else 1
        shape = tuple(rev[::-1])
    return x.reshape(shape)


@register("expand_dims")
def op_expand_dims(node, args, num):
    x = np.asarray(args["x"])
    axes = _ints(args["axes"])
    out_rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a + out_rank if a < 0 else a for a in axes):
        shape.insert(a, 1)
    return x.reshape(shape)


@register("squeeze")
def op_squeeze(node, args, num):
    x = np.asarray(args["x"])
    if args.get("axes") is None:
        y = np.squeeze(x)
    else:
        y = np.squeeze(x, axis=tuple(_ints(args["axes"])))
    return y if y.shape != () or x.ndim == 0 else y.reshape(1)  # MIL keeps a squeezed-to-scalar tensor rank 1


@register("slice_by_index")
def op_slice_by_index(node, args, num):
    x = np.asarray(args["x"])
    rank = x.ndim
    begin, end = _ints(args["begin"]), _ints(args["end"])
    stride = _ints(args["stride"]) if args.get("stride") is not None else [1] * rank
    begin_mask = _bools(args.get("begin_mask"), rank)
    end_mask = _bools(args.get("end_mask"), rank)
    squeeze_mask = _bools(args.get("squeeze_mask"), rank)
    index = []
    for d in range(rank):
        if squeeze_mask[d]:
            index.append(begin[d])  # pure index at begin[d]; end ignored
            continue
        index.append(slice(None if begin_mask[d] else begin[d], None if end_mask[d] else end[d], stride[d]))
    return x[tuple(index)]


@register("slice_by_size")
def op_slice_by_size(node, args, num):
    x = np.asarray(args["x"])
    begin, size = _ints(args["begin"]), _ints(args["size"])
    index = tuple(slice(b, x.shape[d] if s == -1 else b + s) for d, (b, s) in enumerate(zip(begin, size)))
    return x[index]


@register("concat")
def op_concat(node, args, num):
    values = [np.asarray(v) for v in args["values"]]
    dtype = np.result_type(*values)
    values = [v.astype(dtype, copy=False) for v in values]
    if values[0].ndim == 0:
        return np.stack(values, axis=0)
    axis = _axis(args["axis"], values[0].ndim)
    if args.get("interleave") is not None and _bool(args["interleave"]):
        stacked = np.stack(values, axis=axis + 1)  # output[i::n] = values[i] along axis
        shape = list(values[0].shape)
        shape[axis] *= len(values)
        return stacked.reshape(shape)
    return np.concatenate(values, axis=axis)


@register("stack")
def op_stack(node, args, num):
    values = [np.asarray(v) for v in args["values"]]
    return np.stack(values, axis=_int(args["axis"]) if _int(args["axis"]) >= 0 else _int(args["axis"]) + values[0].ndim + 1)


@register("split")
def op_split(node, args, num):
    x = np.asarray(args["x"])
    axis = _axis(args["axis"], x.ndim)
    if args.get("split_sizes") is not None:
        sizes = _ints(args["split_sizes"])
    else:
        n = _int(args["num_splits"])
        if x.shape[axis] % n:
            raise ValueError(f"split: {x.shape[axis]} not divisible by num_splits {n} ({node.where()})")
        sizes = [x.shape[axis] // n] * n
    cuts = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, cuts, axis=axis))


@register("tile")
def op_tile(node, args, num):
    return np.tile(np.asarray(args["x"]), _ints(args["reps"]))


@register("range_1d")
def op_range_1d(node, args, num):
    start, end, step = (np.asarray(args[k]).reshape(()) for k in ("start", "end", "step"))
    return np.arange(start, end, step).astype(node.output_dtypes[0])  # [start, end) by step


@register("shape")
def op_shape(node, args, num):
    return np.array(np.asarray(args["x"]).shape, dtype=np.int32)


@register("fill")
def op_fill(node, args, num):
    shape = _ints(args["shape"])
    value = args.get("value", 0.0)
    return np.full(shape, np.asarray(value).reshape(()), dtype=node.output_dtypes[0])


@register("gather")
def op_gather(node, args, num):
    x = np.asarray(args["x"])
    indices = np.asarray(args["indices"]).astype(np.int64)
    axis = _axis(args.get("axis", 0), x.ndim)
    batch_dims = _int(args.get("batch_dims", 0))
    if args.get("validate_indices") is not None and _bool(args["validate_indices"]):
        if np.any((indices < 0) | (indices >= x.shape[axis])):
            raise IndexError(f"gather indices out of bounds [0, {x.shape[axis]}) ({node.where()})")
    if batch_dims == 0:
        return np.take(x, indices, axis=axis)
    batch_shape = x.shape[:batch_dims]
    nb = int(np.prod(batch_shape))
    xs = x.reshape((nb,) + x.shape[batch_dims:])
    ids = indices.reshape((nb,) + indices.shape[batch_dims:])
    out = np.stack([np.take(xs[b], ids[b], axis=axis - batch_dims) for b in range(nb)])
    return out.reshape(tuple(batch_shape) + out.shape[1:])


@register("gather_along_axis")
def op_gather_along_axis(node, args, num):
    x = np.asarray(args["x"])
    indices = np.asarray(args["indices"]).astype(np.int64)
    axis = _axis(args.get("axis", 0), x.ndim)
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    if np.any((indices < 0) | (indices >= x.shape[axis])):
        raise IndexError(f"gather_along_axis indices out of bounds [0, {x.shape[axis]}) ({node.where()})")
    return np.take_along_axis(x, indices, axis=axis)


# ---- dot products: linear, matmul, einsum, conv, scaled_dot_product_attention

def _cached_const(node, num, key, value):
    """A constant operand in the compute dtype, converted once and kept on the node."""
    cached = node.cache.get(key)
    if cached is None:
        cached = num.f(value)
        cached = np.ascontiguousarray(cached)
        node.cache[key] = cached
    return cached


def _prepare_linear(node, const_args, num):
    if const_args.get("weight") is not None:
        _cached_const(node, num, "weight", const_args["weight"])
    if const_args.get("bias") is not None:
        _cached_const(node, num, "bias", const_args["bias"])


@register("linear")
def op_linear(node, args, num):
    w = node.cache.get("weight")
    if w is None:
        w = num.f(args["weight"])
    b = None
    if args.get("bias") is not None:
        b = node.cache.get("bias")
        b = num.f(args["bias"]) if b is None else b
    if node.output_dtypes[0] == np.float16:
        return num.matmul_fp16(args["x"], np.swapaxes(w, -1, -2), col_bias=b)  # x @ weight.T + bias, one rounding
    y = num.matmul(num.f(args["x"]), np.swapaxes(w, -1, -2))
    return y if b is None else num.r(y) + b


op_linear.prepare = _prepare_linear


def _prepare_matmul(node, const_args, num):
    for key in ("x", "y"):
        if const_args.get(key) is not None and np.asarray(const_args[key]).dtype.kind == "f":
            _cached_const(node, num, key, const_args[key])


@register("matmul")
def op_matmul(node, args, num):
    fp16_out = node.output_dtypes[0] == np.float16
    x = node.cache.get("x")
    x = (np.asarray(args["x"]) if fp16_out else num.f(args["x"])) if x is None else x
    y = node.cache.get("y")
    y = (np.asarray(args["y"]) if fp16_out else num.f(args["y"])) if y is None else y
    if _bool(args.get("transpose_x", False)):
        x = np.swapaxes(x, -1, -2)
    if _bool(args.get("transpose_y", False)):
        y = np.swapaxes(y, -1, -2)
    squeeze_x = x.ndim == 1
    squeeze_y = y.ndim == 1
    if squeeze_x:
        x = x[None, :]
    if squeeze_y:
        y = y[:, None]
    out = num.matmul_fp16(x, y) if fp16_out else num.matmul(x, y)
    if squeeze_x:
        out = out[..., 0, :]
    if squeeze_y:
        out = out[..., 0]
    return out


op_matmul.prepare = _prepare_matmul


def _parse_einsum(equation: str):
    eq = equation.replace(" ", "")
    if "->" not in eq or "." in eq:
        return None
    lhs, out = eq.split("->")
    operands = lhs.split(",")
    if len(operands) != 2:
        return None
    xs, ys = operands
    if len(set(xs)) != len(xs) or len(set(ys)) != len(ys) or len(set(out)) != len(out):
        return None  # diagonals / repeated labels: not a matmul pattern
    if not set(out) <= set(xs) | set(ys):
        return None
    return xs, ys, out


def einsum_as_matmul(equation: str, x: np.ndarray, y: np.ndarray, matmul: Callable, reduce_sum: Callable):
    """Evaluate a two-operand einsum as one broadcast batched matmul.

    Labels split into batch (x, y and out), contracted (x and y, not out), x-free and y-free (one operand and out);
    labels only in one operand and not in out are summed first. Size-1 batch labels broadcast as MIL einsum does.
    Returns None if the equation is not of that form.
    """
    parsed = _parse_einsum(equation)
    if parsed is None:
        return None
    xs, ys, out = parsed
    if len(xs) != x.ndim or len(ys) != y.ndim:
        raise ValueError(f"einsum {equation!r}: operand ranks {x.ndim}, {y.ndim} do not match the equation")
    x_only_summed = [c for c in xs if c not in ys and c not in out]
    y_only_summed = [c for c in ys if c not in xs and c not in out]
    if x_only_summed:
        x = reduce_sum(x, tuple(xs.index(c) for c in x_only_summed))
        x = x.reshape([x.shape[i] for i, c in enumerate(xs) if c not in x_only_summed])
        xs = "".join(c for c in xs if c not in x_only_summed)
    if y_only_summed:
        y = reduce_sum(y, tuple(ys.index(c) for c in y_only_summed))
        y = y.reshape([y.shape[i] for i, c in enumerate(ys) if c not in y_only_summed])
        ys = "".join(c for c in ys if c not in y_only_summed)
    batch = [c for c in out if c in xs and c in ys]
    contract = [c for c in xs if c in ys and c not in out]
    x_free = [c for c in out if c in xs and c not in ys]
    y_free = [c for c in out if c in ys and c not in xs]
    size = {}
    for labels, arr in ((xs, x), (ys, y)):
        for c, d in zip(labels, arr.shape):
            if c in size and size[c] != d and 1 not in (size[c], d):
                raise ValueError(f"einsum {equation!r}: label {c!r} has sizes {size[c]} and {d}")
            size[c] = max(size.get(c, 1), d)
    for c in contract:
        if x.shape[xs.index(c)] != y.shape[ys.index(c)]:
            raise ValueError(f"einsum {equation!r}: contracted label {c!r} sizes differ")
    xt = np.transpose(x, [xs.index(c) for c in batch + x_free + contract])
    yt = np.transpose(y, [ys.index(c) for c in batch + contract + y_free])
    m = int(np.prod([size[c] for c in x_free])) if x_free else 1
    n = int(np.prod([size[c] for c in y_free])) if y_free else 1
    k = int(np.prod([size[c] for c in contract])) if contract else 1
    xm = xt.reshape(xt.shape[:len(batch)] + (m, k))  # batch dims keep their own size (maybe 1): matmul broadcasts
    ym = yt.reshape(yt.shape[:len(batch)] + (k, n))
    res = matmul(xm, ym)  # (*batch, m, n)
    res = res.reshape(res.shape[:len(batch)] + tuple(size[c] for c in x_free + y_free))
    have = batch + x_free + y_free
    return np.transpose(res, [have.index(c) for c in out])


def _prepare_einsum(node, const_args, num):
    values = const_args.get("values")
    if values is not None:
        for i, v in enumerate(values):
            if v is not None and np.asarray(v).dtype.kind == "f":
                _cached_const(node, num, f"value{i}", v)


@register("einsum")
def op_einsum(node, args, num):
    equation = str(args["equation"])
    fp16_out = node.output_dtypes[0] == np.float16
    values = []
    for i, v in enumerate(args["values"]):
        cached = node.cache.get(f"value{i}")
        values.append((np.asarray(v) if fp16_out else num.f(v)) if cached is None else cached)
    if len(values) == 2:
        out = einsum_as_matmul(equation, values[0], values[1], num.matmul_fp16 if fp16_out else num.matmul,
                               lambda a, axes: num.sum(a, axes, keepdims=True))
        if out is not None:
            return out
    values = [num.f(v) for v in values]
    if num.strict:
        raise UnsupportedOpError(f"einsum {equation!r} is not a two-operand matmul pattern; fp16-strict cannot "
                                 f"order its sums ({node.where()})")
    # Any other equation (MIL itself only defines the matmul-like ones): numpy's einsum in float32.
    return np.einsum(equation, *values, optimize=True)


op_einsum.prepare = _prepare_einsum


def _conv_geometry(node, x_shape, w_shape, args):
    spatial = len(w_shape) - 2
    strides = _ints(args["strides"]) if args.get("strides") is not None else [1] * spatial
    dilations = _ints(args["dilations"]) if args.get("dilations") is not None else [1] * spatial
    pad_type = str(args.get("pad_type", "valid"))
    kernel = list(w_shape[2:])
    in_sp = list(x_shape[2:])
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if pad_type == "valid":
        pads = [(0, 0)] * spatial
    elif pad_type == "custom":
        p = _ints(args["pad"]) if args.get("pad") is not None else [0] * (2 * spatial)
        pads = [(p[2 * i], p[2 * i + 1]) for i in range(spatial)]
    elif pad_type in ("same", "same_lower"):
        pads = []
        for i, k, s in zip(in_sp, eff, strides):
            total = max(0, s * math.ceil(i / s) - i + k - s)
            small, large = total // 2, total - total // 2
            pads.append((small, large) if pad_type == "same" else (large, small))  # same: extra after
    else:
        raise UnsupportedOpError(f"conv pad_type {pad_type!r} ({node.where()})")
    out_sp = [(i + a + b - k) // s + 1 for i, (a, b), k, s in zip(in_sp, pads, eff, strides)]
    return spatial, strides, dilations, kernel, pads, out_sp


def _prepare_conv(node, const_args, num):
    w = const_args.get("weight")
    if w is None:
        return
    w = np.asarray(w)
    groups = _int(const_args.get("groups", 1))
    cout = w.shape[0]
    # (groups, Cout/groups, Cin/groups * prod(K)) in the compute dtype, converted once
    node.cache["weight"] = np.ascontiguousarray(num.f(w.reshape(groups, cout // groups, -1)))
    if const_args.get("bias") is not None:
        node.cache["bias"] = num.f(np.asarray(const_args["bias"]))


@register("conv")
def op_conv(node, args, num):
    x = np.asarray(args["x"])
    w_raw = np.asarray(args["weight"])
    groups = _int(args.get("groups", 1))
    spatial, strides, dilations, kernel, pads, out_sp = _conv_geometry(node, x.shape, w_raw.shape, args)
    n, cin = x.shape[0], x.shape[1]
    cout = w_raw.shape[0]
    w = node.cache.get("weight")
    if w is None:
        w = num.f(w_raw.reshape(groups, cout // groups, -1))
    bias = node.cache.get("bias")
    if bias is None and args.get("bias") is not None:
        bias = num.f(args["bias"])
    cin_g = cin // groups
    pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in strides) and all(p == (0, 0) for p in pads)
    fused = node.output_dtypes[0] == np.float16 and (bias is None or groups == 1)
    if pointwise:
        # 1x1 conv: (Cout/G x Cin/G) @ (Cin/G x positions) per group and batch item
        cols = x.reshape(n, groups, cin_g, -1)  # (N, G, Cin/G, P)
        cols = cols if fused else num.f(cols)
    else:
        xp = num.f(x)
        if any(a or b for a, b in pads):
            xp = np.pad(xp, [(0, 0), (0, 0)] + [tuple(p) for p in pads])
        # im2col: for every kernel offset the strided window, ordered (Cin/G, *K) to match weight[o, c, *k]
        windows = []
        for offs in itertools.product(*[range(k) for k in kernel]):
            index = [slice(None), slice(None)]
            for d in range(spatial):
                start = offs[d] * dilations[d]
                index.append(slice(start, start + (out_sp[d] - 1) * strides[d] + 1, strides[d]))
            windows.append(xp[tuple(index)])  # (N, Cin, *out)
        cols = np.stack(windows, axis=2)  # (N, Cin, prod(K), *out)
        cols = cols.reshape(n, groups, cin_g * len(windows), -1)  # (N, G, Cin/G*prod(K), P)
    if fused:  # conv + bias, rounded once
        out = num.matmul_fp16(w[None], cols, row_bias=bias)  # (N, G, Cout/G, P)
        return out.reshape((n, cout) + tuple(out_sp))
    out = num.matmul(w[None], cols)  # (N, G, Cout/G, P)
    out = out.reshape((n, cout) + tuple(out_sp))
    if bias is not None:
        out = num.r(out) + bias.reshape((1, cout) + (1,) * spatial)
    return out


op_conv.prepare = _prepare_conv


@register("scaled_dot_product_attention")
def op_sdpa(node, args, num):
    q, k, v = num.f(args["query"]), num.f(args["key"]), num.f(args["value"])
    scores = num.r(num.matmul(q, np.swapaxes(k, -1, -2)))
    scores = num.r(scores / num.c(math.sqrt(q.shape[-1])))  # (Q @ K^T) / sqrt(E)
    mask = args.get("attn_mask")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            scores = np.where(mask, scores, num.c(-np.inf))
        else:
            scores = num.r(scores + num.f(mask))
    m = np.max(scores, axis=-1, keepdims=True)
    e = num.fn(np.exp, num.r(scores - m))
    weights = num.r(e / num.sum(e, (-1,)))
    return num.matmul(weights, v)


# ---- constexpr decompression (constant inputs only; run once at load)

def _unpack_bits(packed: np.ndarray, nbits: int, count: int) -> np.ndarray:
    """Elements packed LSB-first into bytes (the order coremltools writes sub-byte data in)."""
    bits = np.unpackbits(np.asarray(packed).astype(np.uint8).reshape(-1), bitorder="little")[: count * nbits]
    bits = bits.reshape(count, nbits).astype(np.uint16)
    return (bits << np.arange(nbits, dtype=np.uint16)).sum(axis=1).astype(np.uint8)


def _block_ids(shape: tuple[int, ...], blocks: tuple[int, ...]) -> np.ndarray:
    """For every element of `shape`, the flat id of its block when dim d is split into blocks[d] equal blocks."""
    ids = np.zeros((1,) * len(shape), dtype=np.int64)
    for d, (size, nb) in enumerate(zip(shape, blocks)):
        if size % nb:
            raise ValueError(f"dimension {d} of size {size} is not divisible into {nb} blocks")
        per = size // nb
        b = (np.arange(size) // per).reshape([size if i == d else 1 for i in range(len(shape))])
        ids = ids * nb + b
    return np.broadcast_to(ids, shape)


@register("constexpr_lut_to_dense")
def op_constexpr_lut_to_dense(node, args, num):
    lut = np.asarray(args["lut"])
    if "shape" in args:  # iOS16: packed uint8 indices, 1-D lut of 2^nbits entries, output shape
        shape = _ints(args["shape"])
        nbits = int(round(math.log2(lut.size)))
        idx = _unpack_bits(args["indices"], nbits, int(np.prod(shape)))
        return lut[idx].reshape(shape)
    # iOS18: indices (uintN, unpacked by PyMIL, one per element), lut [*blocks, 2^nbits, VECTOR_SIZE]
    indices = np.asarray(args["indices"]).astype(np.int64)
    rank = indices.ndim
    if lut.ndim != rank + 2:
        raise ValueError(f"lut rank {lut.ndim} != indices rank {rank} + 2 ({node.where()})")
    palettes, vsize = lut.shape[-2], lut.shape[-1]
    flat_lut = lut.reshape(-1, palettes, vsize)
    blocks = _block_ids(indices.shape, lut.shape[:rank])  # each index reads the table of its block
    values = flat_lut[blocks, indices]  # (*indices.shape, VECTOR_SIZE)
    if vsize == 1:
        return values[..., 0]
    axis = _axis(args["vector_axis"], rank)
    values = np.moveaxis(values, -1, axis + 1)  # the vector fills `vsize` consecutive positions along `axis`
    shape = list(indices.shape)
    shape[axis] *= vsize
    return values.reshape(shape)


@register("constexpr_affine_dequantize")
def op_constexpr_affine_dequantize(node, args, num):
    # unquantized = scale * (quantized - zero_point), scale/zero_point broadcast along `axis`
    q = np.asarray(args["quantized_data"])
    scale = np.asarray(args["scale"])
    zp = np.asarray(args["zero_point"])
    axis = _axis(args["axis"], q.ndim)

    def along(p):
        if p.ndim == q.ndim:
            return p
        if p.ndim == 0:
            return p.reshape((1,) * q.ndim)
        return p.reshape([p.size if i == axis else 1 for i in range(q.ndim)])

    out = q.astype(np.float32) - along(zp).astype(np.float32)
    out = out * along(scale).astype(np.float32)
    return out.astype(scale.dtype)


@register("constexpr_blockwise_shift_scale")
def op_constexpr_blockwise_shift_scale(node, args, num):
    # output = scale * (data - offset); scale/offset blocks repeat over data.shape / scale.shape elements
    data = np.asarray(args["data"])
    scale = np.asarray(args["scale"])
    offset = args.get("offset")
    values = data.astype(scale.dtype)
    reps = [d // s for d, s in zip(data.shape, scale.shape)]

    def expand(p):
        p = np.asarray(p)
        for axis, r in enumerate(reps):
            if r > 1:
                p = np.repeat(p, r, axis=axis)
        return p

    if offset is not None:
        values = values - expand(offset)
    return expand(scale) * values


@register("constexpr_sparse_to_dense")
def op_constexpr_sparse_to_dense(node, args, num):
    data = np.asarray(args["nonzero_data"])
    if "shape" in args:  # iOS16: bit mask packed LSB-first into uint8, explicit shape
        shape = _ints(args["shape"])
        mask = np.unpackbits(np.asarray(args["mask"]).astype(np.uint8), bitorder="little")[: int(np.prod(shape))]
        out = np.zeros(int(np.prod(shape)), dtype=data.dtype)
        out[mask != 0] = data
        return out.reshape(shape)
    mask = np.asarray(args["mask"])  # iOS18: uint1 mask with the output shape
    out = np.zeros(mask.shape, dtype=data.dtype)
    out[mask != 0] = data
    return out


@register("constexpr_cast")
def op_constexpr_cast(node, args, num):
    return np.asarray(args["source_val"]).astype(node.output_dtypes[0])


CONSTEXPR_PREFIX = "constexpr_"
