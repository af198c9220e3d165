"""Reshapes and transposes (ops/reshape.py) in the mil executor, from a saved package: exact copies."""

from __future__ import annotations

import numpy as np
import pytest

from executor_packages import ALONG_IDX, GATHER_IDX, LX, layout_package
from experiments.ane_engineering.run.mil.executor import MILExecutor


@pytest.fixture(scope="module")
def layout_pkg(tmp_path_factory):
    """The layout package, converted once for this module."""
    return layout_package(tmp_path_factory)


@pytest.mark.slow
def test_layout_ops_are_exact(layout_pkg):
    """reshape, transpose, squeeze and expand_dims here; slice_by_index (ops/slicing.py), concat and split
    (ops/joining.py), gather and gather_along_axis (ops/indexing.py) in the same package."""
    ex = MILExecutor(layout_pkg)
    out = ex.run({"x": LX})
    x = LX
    refs = {
        "o_reshape": x.reshape(2, 24, 5), "o_transpose": x.transpose(0, 3, 1, 2),
        "o_slice": x[0:, 1:6:2, :3, 4::-2], "o_slice_squeeze": x[1, :, 2, :],
        "o_concat": np.concatenate([x, x * np.float16(2)], axis=2),
        "o_squeeze": x[:, :, 0, :], "o_expand": x.reshape(2, 24, 5)[:, None, :, :, None],
        "o_gather": np.take(x, GATHER_IDX, axis=2), "o_along": np.take_along_axis(x, ALONG_IDX, axis=1),
    }
    for name, ref in refs.items():
        assert out[name].shape == ref.shape, name
        np.testing.assert_array_equal(out[name], ref, err_msg=name)
    split_names = [n for n in ex.output_names if n not in refs]
    assert len(split_names) == 2
    np.testing.assert_array_equal(out[split_names[0]], x[:, :2])
    np.testing.assert_array_equal(out[split_names[1]], x[:, 2:])
    for t in ("reshape", "transpose", "slice_by_index", "concat", "split", "squeeze", "expand_dims", "gather",
              "gather_along_axis"):
        assert t in ex.op_type_counts, t
