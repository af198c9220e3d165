"""The layer-norm weight pass (package/layer_norm_gamma.py): a channel layer_norm and the multiply by its weight
become one layer_norm with gamma that computes the same values, keeps the weight's name, and nothing is fused where
that would not be the same product."""

from __future__ import annotations

import numpy as np
import pytest

# The imports below need what these lines skip the module without (E402: they follow on purpose).
ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from executor_ops_support import build_program, run_program  # noqa: E402
from experiments.ane_engineering.package.layer_norm_gamma import fuse_layer_norm_gamma  # noqa: E402

SHAPE = (1, 8, 1, 5)
RNG = np.random.default_rng(0)
X = RNG.standard_normal(SHAPE).astype(np.float32)
WEIGHT = (RNG.standard_normal((1, 8, 1, 1)) + 1.5).astype(np.float32)
PER_ELEMENT = RNG.standard_normal(SHAPE).astype(np.float32)


def program(build):
    return build_program(build, {"x": mb.TensorSpec(shape=SHAPE, dtype=types.fp32)})


def op_types(prog) -> list[str]:
    return [op.op_type for op in prog.functions["main"].operations if op.op_type != "const"]


def outputs(prog) -> list[np.ndarray]:
    return run_program(prog, {"x": X})


def norm_times_weight(x, weight=WEIGHT, axes=(1,), name="layers_0_mlp_norm_weight"):
    return mb.mul(x=mb.layer_norm(x=x, axes=list(axes), epsilon=1e-5), y=mb.const(val=weight, name=name))


def test_norm_and_weight_become_one_layer_norm_with_the_same_values_and_name():
    before, after = program(norm_times_weight), program(norm_times_weight)
    assert fuse_layer_norm_gamma(after) == 1
    assert op_types(before) == ["layer_norm", "mul"] and op_types(after) == ["layer_norm"]
    norm = next(op for op in after.functions["main"].operations if op.op_type == "layer_norm")
    assert norm.gamma.name == "layers_0_mlp_norm_weight" and norm.gamma.shape == (8,)
    expected, = outputs(before)
    got, = outputs(after)
    assert np.allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["weight read twice", "not per channel", "last axis", "norm read twice"])
def test_other_products_stay_as_they_are(case):
    def build(x):
        if case == "weight read twice":
            weight = mb.const(val=WEIGHT, name="shared")
            return mb.mul(x=mb.layer_norm(x=x, axes=[1]), y=weight), mb.mul(x=x, y=weight)
        if case == "not per channel":
            return mb.mul(x=mb.layer_norm(x=x, axes=[1]), y=PER_ELEMENT)
        if case == "last axis":
            return mb.mul(x=mb.layer_norm(x=x, axes=[3]), y=WEIGHT)
        normed = mb.layer_norm(x=x, axes=[1])
        return mb.mul(x=normed, y=WEIGHT), mb.relu(x=normed)

    before, after = program(build), program(build)
    assert fuse_layer_norm_gamma(after) == 0 and op_types(after) == op_types(before)
    for got, expected in zip(outputs(after), outputs(before)):
        assert np.array_equal(got, expected)


def test_a_gamma_on_the_wrong_axis_would_be_caught():
    """The value check above can fail: the same weights applied along the last axis change the output."""
    along_last = WEIGHT.reshape(-1)[:SHAPE[3]].reshape(1, 1, 1, SHAPE[3])
    wrong = program(lambda x: mb.mul(x=mb.layer_norm(x=x, axes=[1], epsilon=1e-5), y=along_last))
    assert not np.allclose(outputs(wrong)[0], outputs(program(norm_times_weight))[0], rtol=1e-3, atol=1e-3)
