"""fill and shape (ops/shape_construction.py): the handlers the converter usually folds away, called directly."""

from __future__ import annotations

import numpy as np

from executor_packages import _node
from experiments.ane_engineering.run.mil.numerics import Numerics
from experiments.ane_engineering.run.mil.registry import OPS


def test_fill_shape_cast_handlers():
    """fill and shape here; cast (ops/elementwise_unary.py) alongside."""
    num = Numerics()
    out = OPS["fill"].handler(_node("fill", [(2, 3)], [np.float16]),
                                      {"shape": np.array([2, 3], np.int32), "value": np.float16(1.5)}, num)
    assert out.shape == (2, 3) and out.dtype == np.float16 and np.all(out == 1.5)
    out = OPS["shape"].handler(_node("shape", [(4,)], [np.int32]), {"x": np.zeros((1, 2, 3, 4))}, num)
    assert out.tolist() == [1, 2, 3, 4]
    out = OPS["cast"].handler(_node("cast", [(3,)], [np.int32]), {"x": np.array([-1.7, 0.2, 2.9]), "dtype": "int32"},
                              num)
    assert out.tolist() == [-1, 0, 2]
