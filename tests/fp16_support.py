"""FP16 numbers that test tolerances are built from: the unit roundoff, the smallest subnormal, the spacing (ulp) of
FP16 values at a magnitude, and a cast to FP16 (IEEE 754 binary16: 11 significand bits, exponents -14..15)."""

from __future__ import annotations

import numpy as np

U16 = 2.0 ** -11  # fp16 unit roundoff
TINY16 = 2.0 ** -24  # smallest fp16 subnormal


def ulp16(v) -> np.ndarray:
    """Spacing of fp16 numbers at |v| (2^-24 in the subnormal range)."""
    a = np.abs(np.asarray(v, dtype=np.float64))
    return 2.0 ** (np.floor(np.log2(np.maximum(a, 2.0 ** -14))) - 10)


def f16(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float16)
