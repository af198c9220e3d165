"""read_state and coreml_update_state (ops/stateful.py), called as the executor calls them on an iOS18 stateful
program: a run reads a state buffer and writes into it, and the value persists for the next call, as a numpy
accumulator does. Whole stateful packages run in tests/run/mil/test_images_state.py and
tests/run/mil/test_coremltools_state_suite.py."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.ane_engineering.run.mil import ops as _families  # noqa: F401 - importing it registers every op in OPS
from experiments.ane_engineering.run.mil.numerics import Numerics
from experiments.ane_engineering.run.mil.registry import OPS, OpNode
from experiments.ane_engineering.run.mil.state import StateBuffer, StateError


def _node(op_type: str) -> OpNode:
    return OpNode(3, "acc", op_type, "main", ["y"], [(2, 3)], [np.dtype(np.float16)])


def test_a_state_accumulates_across_calls_like_numpy():
    read, update = OPS["read_state"].handler, OPS["coreml_update_state"].handler
    state = StateBuffer("total", (2, 3), np.float16)
    rng = np.random.default_rng(5)
    want = np.zeros((2, 3), np.float16)
    for _ in range(4):
        step = rng.standard_normal((2, 3)).astype(np.float16)
        current = read(_node("read_state"), {"input": state}, Numerics())
        np.testing.assert_array_equal(current, want)
        written = update(_node("coreml_update_state"), {"state": state, "value": current + step}, Numerics())
        want = (want + step).astype(np.float16)
        np.testing.assert_array_equal(written, want)
        written[...] = 0  # the op returns a copy: the state keeps its value
    np.testing.assert_array_equal(state.read(), want)


def test_a_run_without_a_state_and_a_write_of_another_shape_are_refused():
    with pytest.raises(StateError, match="reads a state.*state=make_state"):
        OPS["read_state"].handler(_node("read_state"), {"input": np.zeros((2, 3), np.float16)}, Numerics())
    state = StateBuffer("total", (2, 3), np.float16)
    with pytest.raises(StateError, match=r"holds \(2, 3\); a write of \(3, 2\) is refused"):
        OPS["coreml_update_state"].handler(_node("coreml_update_state"),
                                           {"state": state, "value": np.zeros((3, 2), np.float16)}, Numerics())
