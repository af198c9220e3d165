"""What the rules look at (placement/rules/context.py): a program's tensors, constants, interface casts and
flexible inputs, on small builder programs whose answers are known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.ane_engineering.placement.rules.context import CheckContext, TensorRef, const_arg, shape_str
from static_check_support import converted, get_new_symbol, mb, program, tensor, types


def test_tensors_are_the_inputs_and_non_constant_outputs_with_their_bytes():
    w = np.ones((8, 4, 1, 1), np.float16)

    @program(tensor((1, 4, 1, 16)))
    def prog(x):
        return mb.relu(x=mb.conv(x=x, weight=w))

    ctx = CheckContext(prog)
    by_type = {t.op_type: t for t in ctx.tensors}
    assert set(by_type) == {"input", "conv", "relu"}  # the weight is a constant, not a tensor the rules place
    assert by_type["input"].nbytes == 4 * 16 * 2 and by_type["conv"].nbytes == 8 * 16 * 2
    assert [op.op_type for op in ctx.non_constant_ops] == ["conv", "relu"]
    assert {var.val.shape for _, var in ctx.constant_outputs() if getattr(var.val, "shape", None)} >= {w.shape}
    conv = ctx.non_constant_ops[0]
    assert ctx.is_constant_var(conv.inputs["weight"]) and not ctx.is_constant_var(conv.inputs["x"])
    assert ctx.is_function_input(conv.inputs["x"]) and ctx.is_function_output(ctx.non_constant_ops[1].outputs[0])
    assert const_arg(conv, "weight").shape == w.shape and const_arg(conv, "x") is None
    assert shape_str((1, 8, 1, 16)) == "(1, 8, 1, 16)"


def test_a_symbolic_dimension_has_no_byte_count():
    assert TensorRef("x", "input", None, (1, 4, 1, 16), "fp16", 2).nbytes == 128
    symbolic = TensorRef("x", "input", None, (1, 4, 1, get_new_symbol()), "fp16", 2)
    assert symbolic.symbolic and symbolic.nbytes is None


def test_only_casts_at_the_interface_are_boundary_casts():
    @program(tensor((1, 4, 1, 16), types.fp32))
    def prog(x):
        h = mb.cast(x=x, dtype="fp16")  # reads the function input: the host-side dtype change
        h = mb.cast(x=mb.cast(x=mb.relu(x=h), dtype="fp32"), dtype="fp16")  # in-graph casts
        return mb.cast(x=h, dtype="fp32")  # writes the function output

    ctx = CheckContext(prog)
    casts = [op for op in ctx.non_constant_ops if op.op_type == "cast"]
    assert [ctx.is_boundary_cast(op) for op in casts] == [True, False, False, True]
    kept = {t.op for t in ctx.non_constant_tensors(include_boundary_casts=False) if t.op_type == "cast"}
    assert kept == {casts[1].name, casts[2].name}


@pytest.mark.slow
def test_flexible_inputs_come_from_the_spec():
    prog, spec = converted("enumerated")
    assert [(name, kind) for name, kind, _ in CheckContext(prog, spec).flexible_inputs()] == [("x", "enumerated")]
    prog, spec = converted("range")
    assert [(name, kind) for name, kind, _ in CheckContext(prog, spec).flexible_inputs()] == [("x", "range")]
    assert CheckContext(prog).flexible_inputs() == []  # no spec: nothing to read
