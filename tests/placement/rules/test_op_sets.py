"""The op-type sets (placement/rules/op_sets.py): every name is a MIL op type coremltools defines (a misspelt one
would never match and silently never fire), the allow-list holds the reference run's whole all-ANE plan, and no op
type is both allowed on the ANE and owned by a rule that predicts it off the ANE."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.placement.rules import op_sets

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry  # noqa: E402

SETS = ("ANE_OP_ALLOWLIST", "REFERENCE_PLAN_OPS", "GATHER_OPS", "RECURRENT_OPS", "DYNAMIC_SHAPE_OPS",
        "OWNED_BY_SPECIFIC_RULES", "SHAPE_ARGUMENTS")


@pytest.mark.parametrize("name", SETS)
def test_every_op_type_is_a_mil_op(name):
    assert set(getattr(op_sets, name)) - set(SSAOpRegistry.core_ops) == set()


def test_the_allow_list_and_the_off_ane_families_do_not_overlap():
    assert op_sets.REFERENCE_PLAN_OPS <= op_sets.ANE_OP_ALLOWLIST
    assert op_sets.ANE_OP_ALLOWLIST & op_sets.OWNED_BY_SPECIFIC_RULES == frozenset()
    assert op_sets.GATHER_OPS | op_sets.RECURRENT_OPS | op_sets.DYNAMIC_SHAPE_OPS <= op_sets.OWNED_BY_SPECIFIC_RULES
