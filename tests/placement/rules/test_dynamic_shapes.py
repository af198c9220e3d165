"""The dynamic-shape rules (placement/rules/dynamic_shapes.py): a computed reshape shape is dynamic; enumerated
shapes are explained by the spec, range inputs are not."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.placement.static_check import check_program
from static_check_support import C, L, converted, findings_of, mb, program, tensor, types


def test_computed_reshape_shape_is_dynamic():
    @program(tensor((1, C, 1, L)), tensor((4,), types.int32))
    def prog(x, shape):
        return mb.reshape(x=x, shape=shape)
    assert findings_of(check_program(prog), "ANE-R11-dynamic-shape-op")


@pytest.mark.slow
def test_enumerated_symbols_explained_by_the_spec():
    prog, spec = converted("enumerated")
    with_spec = check_program(prog, spec)
    assert findings_of(with_spec, "ANE-R06-enumerated-input") and not findings_of(with_spec, "ANE-R04-symbolic-shape")
    assert with_spec["violations"] == 0
    without_spec = check_program(prog)  # the symbols are unexplained: dynamic shapes
    assert findings_of(without_spec, "ANE-R04-symbolic-shape")
    ranged = check_program(*converted("range"))
    assert findings_of(ranged, "ANE-R04-symbolic-shape") and findings_of(ranged, "ANE-R05-range-input")
