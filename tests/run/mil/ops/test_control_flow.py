"""while_loop and cond (ops/control_flow.py) in the mil executor: a converted program with a loop and a branch,
against the same loop in numpy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from executor_ops_support import ct, mb
from executor_packages import _convert_program
from experiments.ane_engineering.run.mil.executor import ExecutionError, MILExecutor
from experiments.ane_engineering.run.mil.registry import OPS

pytestmark = pytest.mark.slow  # every test here converts


@pytest.fixture(scope="module")
def control_flow_pkg(tmp_path_factory):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2)), mb.TensorSpec(shape=(1, 2))], opset_version=ct.target.iOS17)
    def prog(a, b):
        def condition(a, b):
            return mb.less(x=mb.reduce_mean(x=a, axes=[0, 1]), y=10.0)

        def body(a, b):
            return mb.add(x=a, y=b), b

        x, y = mb.while_loop(_cond=condition, _body=body, loop_vars=(a, b))
        large = mb.greater(x=mb.reduce_sum(x=x, axes=[0, 1]), y=22.0)
        z = mb.cond(pred=large, _true_fn=lambda: mb.mul(x=x, y=2.0), _false_fn=lambda: mb.sub(x=x, y=y))
        return z, y

    return _convert_program(prog, tmp_path_factory.mktemp("cf") / "cf.mlpackage")


def _loop(a, b):
    x = a.astype(np.float32)
    while x.mean() < 10:
        x = x + b
    return x


def _control_flow_reference(a, b):
    x = _loop(a, b)
    return x * 2 if x.sum() > 22 else x - b


def test_while_loop_and_cond_follow_their_blocks(control_flow_pkg):
    ex = MILExecutor(control_flow_pkg)
    assert {"while_loop", "cond"} <= set(ex.op_type_counts)
    branches = set()
    for a, b in (([[1.0, 2.0]], [[0.5, 1.0]]), ([[-30.0, -40.0]], [[3.0, 4.0]]), ([[20.0, 5.0]], [[1.0, 1.0]]),
                 ([[30.0, 0.0]], [[1.0, 1.0]])):  # 12, 13, 0 and 0 iterations; false, false, false, true branch
        a, b = np.array(a, np.float32), np.array(b, np.float32)
        out = ex.run({"a": a, "b": b})
        np.testing.assert_array_equal(out[ex.output_names[0]], _control_flow_reference(a, b))
        np.testing.assert_array_equal(out[ex.output_names[1]], b)
        branches.add(bool(_loop(a, b).sum() > 22))  # which branch the result above had to come from
    assert branches == {True, False}
    assert set(ex.last_run["live_after_run"]) == set(ex.output_names)  # block values released after their op


def test_an_op_inside_a_block_is_named_when_it_fails(control_flow_pkg, monkeypatch):
    def broken(node, args, num):
        raise ValueError("inside")

    monkeypatch.setitem(OPS, "add", dataclasses.replace(OPS["add"], handler=broken))
    with pytest.raises(ExecutionError, match=r"'add' \(block 1 of 'while_loop.*\).*inside"):
        MILExecutor(control_flow_pkg).run({"a": np.ones((1, 2), np.float32), "b": np.ones((1, 2), np.float32)})
