"""Elementwise binary ops (ops/elementwise_binary.py) in the mil executor, run from a saved package together with
unary math and activations, against float64 references: one fp16 step at the reference's magnitude (twice the
rounding bound) plus the smallest fp16 subnormal (tests/run/mil/test_executor.py states the derivation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from executor_packages import P, X, Y, assert_close16, elementwise_package, elementwise_refs, swap_handler, violation
from experiments.ane_engineering.run.mil.executor import MILExecutor


@pytest.fixture(scope="module")
def elementwise_pkg(tmp_path_factory):
    """The elementwise package, converted once for this module."""
    return elementwise_package(tmp_path_factory)


@pytest.mark.slow
def test_elementwise_ops_match_float64_reference(elementwise_pkg):
    """Binary ops with the unary math (ops/elementwise_unary.py) and activations of the same package."""
    ex = MILExecutor(elementwise_pkg)
    out = ex.run({"x": X, "y": Y, "p": P})
    refs = elementwise_refs()
    assert set(out) == set(refs)
    for name, ref in refs.items():
        assert out[name].dtype == np.float16
        assert_close16(out[name], ref, what=name)
    present = set(ex.op_type_counts)
    for t in ("add", "sub", "mul", "real_div", "maximum", "minimum", "pow", "exp", "tanh", "sigmoid", "silu",
              "relu", "sqrt", "rsqrt", "gelu", "clip", "select", "greater"):
        assert t in present, t


@pytest.mark.slow
def test_gelu_tanh_approximation_in_place_of_exact_is_caught(elementwise_pkg, monkeypatch):
    """gelu is an activation (ops/activation.py); it is checked here, in the elementwise package it runs in."""
    def wrong_gelu(node, args, num):
        x = num.f(args["x"])
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))  # ignores mode

    swap_handler(monkeypatch, "gelu", wrong_gelu)
    out = MILExecutor(elementwise_pkg).run({"x": X, "y": Y, "p": P})
    assert violation(out["o_gelu"], elementwise_refs()["o_gelu"]) > 1.0
    assert violation(out["o_gelu_tanh"], elementwise_refs()["o_gelu_tanh"]) <= 1.0
