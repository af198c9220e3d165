"""The slice-merge graph pass (package/slice_merge.py): a chain of two slice_by_index ops becomes one op that selects
exactly the same values, and nothing is merged where that would not hold."""

from __future__ import annotations

import numpy as np
import pytest

# The imports below need what these lines skip the module without (E402: they follow on purpose).
ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from executor_ops_support import build_program, run_program  # noqa: E402
from experiments.ane_engineering.package.slice_merge import merge_slices  # noqa: E402

SHAPE = (1, 6, 5, 12)


def program(build):
    return build_program(build, {"x": mb.TensorSpec(shape=SHAPE, dtype=types.fp32)})


def slices(prog) -> int:
    return sum(op.op_type == "slice_by_index" for op in prog.functions["main"].operations)


def outputs(prog, x: np.ndarray) -> list[np.ndarray]:
    return run_program(prog, {"x": x})


X = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)

CHAINS = {
    # (first slice kwargs, second slice kwargs): what torch's x[:, :, a:b, c:d] and the window edge pieces trace to
    "two axes": ({"begin": [0, 0, 0, 4], "end": [1, 6, 5, 12]}, {"begin": [0, 0, 1, 0], "end": [1, 6, 4, 8]}),
    "same axis twice": ({"begin": [0, 1, 0, 0], "end": [1, 6, 5, 12]}, {"begin": [0, 2, 0, 0], "end": [1, 4, 5, 12]}),
    "negative and masked bounds": (
        {"begin": [0, 0, -4, 0], "end": [0, 0, 0, -2], "begin_mask": [True, True, False, True],
             "end_mask": [True, True, True, False]},
        {"begin": [0, 0, 0, 3], "end": [0, 0, -1, 0], "begin_mask": [True, True, True, False],
             "end_mask": [True, True, False, True]}),
    "end past the axis": ({"begin": [0, 0, 2, 0], "end": [1, 6, 99, 12]}, {"begin": [0, 0, 0, 0], "end": [1, 6, 2, 5]}),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_a_chain_becomes_one_slice_with_the_same_values(name):
    first, second = CHAINS[name]

    def build(x):
        return mb.slice_by_index(x=mb.slice_by_index(x=x, **first), **second)

    before, after = program(build), program(build)
    assert merge_slices(after) == 1 and slices(after) == 1 and slices(before) == 2
    expected, = outputs(before, X)
    got, = outputs(after, X)
    assert got.shape == expected.shape and np.array_equal(got, expected)


@pytest.mark.parametrize("case", ["stride", "squeeze", "shared first slice"])
def test_chains_that_are_not_plain_slices_stay_as_they_are(case):
    def build(x):
        if case == "stride":
            return mb.slice_by_index(x=mb.slice_by_index(x=x, begin=[0, 0, 0, 0], end=[1, 6, 5, 12],
                                                         stride=[1, 1, 1, 2]), begin=[0, 0, 1, 0], end=[1, 6, 3, 6])
        if case == "squeeze":
            return mb.slice_by_index(x=mb.slice_by_index(x=x, begin=[0, 0, 1, 0], end=[1, 6, 2, 12],
                                                         squeeze_mask=[False, False, True, False]),
                                     begin=[0, 0, 0], end=[1, 6, 4])
        shared = mb.slice_by_index(x=x, begin=[0, 0, 1, 0], end=[1, 6, 5, 12])  # read by two ops
        return mb.slice_by_index(x=shared, begin=[0, 0, 0, 2], end=[1, 6, 2, 12]), mb.relu(x=shared)

    before, after = program(build), program(build)
    assert merge_slices(after) == 0 and slices(after) == slices(before) == 2
    for got, expected in zip(outputs(after, X), outputs(before, X)):
        assert np.array_equal(got, expected)


def test_a_wrongly_merged_bound_would_be_caught():
    """The value check above can fail: shifting the merged begin by one changes the selection."""
    first, second = CHAINS["two axes"]

    def build(x):
        return mb.slice_by_index(x=mb.slice_by_index(x=x, **first), **second)

    before, after = program(build), program(build)
    merge_slices(after)
    merged = next(op for op in after.functions["main"].operations if op.op_type == "slice_by_index")
    shifted = program(lambda x: mb.slice_by_index(x=x, begin=[int(b) + (d == 3)
                                                              for d, b in enumerate(merged.begin.val)],
                                                  end=[int(e) + (d == 3) for d, e in enumerate(merged.end.val)]))
    expected, = outputs(before, X)
    assert not np.array_equal(outputs(shifted, X)[0], expected)
