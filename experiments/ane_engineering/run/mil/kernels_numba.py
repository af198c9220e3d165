"""The numba kernels behind kernels.py: fp16 <-> fp32 conversion through LLVM's `half` type and the fused fp16
binary kernel (see kernels.py for what they compute, how they were checked and when they are used).

Imported by kernels.py only when a first array is large enough to use them, so a command that never needs them
(describing a package) does not pay for importing numba (benchmarks/evidence/execute_startup.json). Importing this
module without numba installed raises ImportError, which kernels.py takes as "use numpy's casts".
"""

from __future__ import annotations

from llvmlite import ir as _ir
from numba import types as _nbtypes
from numba.extending import intrinsic as _intrinsic

from ...core.numba_cache import cached_njit as _cached_njit


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
@_cached_njit(nogil=True, boundscheck=False, error_model="numpy")
def _k_f32_to_f16(src, dst, start, stop):  # src: float32, dst: uint16 view of float16
    s, d = src[start:stop], dst[start:stop]
    for i in range(s.size):
        d[i] = _f32_to_half(s[i])


@_cached_njit(nogil=True, boundscheck=False, error_model="numpy")
def _k_f16_to_f32(src, dst, start, stop):  # src: uint16 view of float16, dst: float32
    s, d = src[start:stop], dst[start:stop]
    for i in range(s.size):
        d[i] = _half_to_f32(s[i])


@_cached_njit(nogil=True, boundscheck=False, error_model="numpy")
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
                r = x if (x > y or x != x) else y  # noqa: PLR0124 - x != x: NaN test (numba)
            else:
                r = x if (x < y or x != x) else y  # noqa: PLR0124 - x != x: NaN test (numba)
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
            d[i] = _f32_to_half(x if (x > y or x != x) else y)  # noqa: PLR0124 - NaN propagates, as np.maximum
    else:
        for i in range(n):
            x, y = _half_to_f32(sa[i]), _half_to_f32(sb[i])
            d[i] = _f32_to_half(x if (x < y or x != x) else y)  # noqa: PLR0124 - x != x: NaN test (numba)


def kernels() -> dict:
    """The kernels by name, as kernels.py calls them (compiled on first call, from numba's cache if it has one)."""
    return {"f32_to_f16": _k_f32_to_f16, "f16_to_f32": _k_f16_to_f32, "binary16": _k_binary16}
