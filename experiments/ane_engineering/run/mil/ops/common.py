"""Argument helpers shared by the op families: MIL const inputs arrive as numpy scalars or arrays."""

from __future__ import annotations

import numpy as np


def as_int(v) -> int:
    return int(np.asarray(v).reshape(-1)[0]) if np.ndim(v) else int(v)


def as_ints(v) -> list[int]:
    return [int(i) for i in np.atleast_1d(np.asarray(v)).reshape(-1)]


def as_bool(v) -> bool:
    return bool(np.asarray(v).reshape(-1)[0]) if np.ndim(v) else bool(v)


def as_bools(v, rank: int) -> list[bool]:
    if v is None:
        return [False] * rank
    return [bool(b) for b in np.atleast_1d(np.asarray(v)).reshape(-1)]


def as_axis(v, rank: int) -> int:
    a = as_int(v)
    return a + rank if a < 0 else a


def erf(x):
    from scipy.special import erf

    return erf(x)


def erfc(x):
    from scipy.special import erfc

    return erfc(x)


def expit(x):
    from scipy.special import expit

    return expit(x)


def cached_const(node, num, key, value):
    """A constant operand in the compute dtype, converted once and kept on the node."""
    cached = node.cache.get(key)
    if cached is None:
        cached = num.f(value)
        cached = np.ascontiguousarray(cached)
        node.cache[key] = cached
    return cached
