"""fp16 <-> fp32 conversion kernels (numba, optional), the fused fp16 binary kernel and the thread pool.

numpy's own float16 casts run at ~1.3 ns (fp16 -> fp32) and ~2.6 ns (fp32 -> fp16) per element here (numpy's
x86-64 wheels do not use the F16C conversion instructions), which dominated the executor at full size. When
numba is installed (it comes with the `convert` extra, as coremltools does) large arrays go through small
numba kernels that convert with LLVM's `half` type (fpext / fptrunc, i.e. the CPU's IEEE conversion
instructions: vcvtph2ps / vcvtps2ph with round-to-nearest-even on x86): ~0.07 ns per element. The same
conversions make the fused fp16 binary kernel (fp16 x fp16 -> float32 op -> fp16, for add/sub/mul/real_div/
maximum/minimum on same-shape or single-value operands), which is exactly "compute in fp32, round once".
Checked: fp32 -> fp16 equals numpy's astype(np.float16) bit for bit over all 2^32 float32 bit patterns, and
fp16 -> fp32 equals numpy over all 65,536 halves, except NaN payloads (NaN stays NaN; the hardware sets the
quiet bit of signalling NaNs, numpy keeps them as they are).
The numba kernels live in kernels_numba.py, imported when a first array is large enough to use them (a command
that only describes a package never imports numba). A self-check against numpy runs when they are first
compiled; if numba is missing or the check fails, numpy's casts are used. Results are identical either way.
Where numba can write no cache directory (a read-only install), the kernels are compiled without the on-disk
cache (core/numba_cache.py).

Threads: large kernels and large matmuls are split into `threads` slices run on a small pool of Python threads
(numba kernels and BLAS release the GIL), with BLAS itself pinned to one thread while a program runs. Python
threads block when idle; OpenBLAS's own threads spin, which made a shared 2-core machine several times slower.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

FAST_MIN_ELEMENTS = 1 << 12
PARALLEL_MIN_ELEMENTS = 1 << 17
_kernels: dict = {}
BINARY_OPCODES = {"add": 0, "sub": 1, "mul": 2, "real_div": 3, "maximum": 4, "minimum": 5}


def _compile_kernels() -> dict:
    from . import (
        kernels_numba,  # numba is imported only once an array is large enough to need it
    )

    return kernels_numba.kernels()


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
        except Exception:  # noqa: BLE001, S110 - numba is optional; numpy's casts remain
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
    if x.shape == y.shape or (y.size == 1 and y.ndim <= x.ndim):
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
