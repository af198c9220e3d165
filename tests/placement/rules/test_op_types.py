"""The op-type rules (placement/rules/op_types.py): an op outside the allow-list is reported once, by the rule that
owns its family when there is one (gather: ANE-R07), otherwise by the allow-list rule (ANE-R09)."""

from __future__ import annotations

import numpy as np

from experiments.ane_engineering.placement.rules.op_sets import ANE_OP_ALLOWLIST, GATHER_OPS, OWNED_BY_SPECIFIC_RULES
from experiments.ane_engineering.placement.static_check import check_program
from static_check_support import findings_of, mb, program


def test_each_op_is_reported_by_one_rule():
    assert "sin" not in ANE_OP_ALLOWLIST | OWNED_BY_SPECIFIC_RULES and "gather" in GATHER_OPS  # the premise

    @program()
    def prog(x):
        h = mb.gather(x=mb.sin(x=x), indices=np.array([0, 2, 5], np.int32), axis=3)
        return mb.relu(x=h)

    report = check_program(prog)
    assert [f["op_type"] for f in findings_of(report, "ANE-R07-gather")] == ["gather"]
    assert [f["op_type"] for f in findings_of(report, "ANE-R09-op-allowlist")] == ["sin"]
    assert {entry["op_type"] for entry in report["predicted_off_ane_ops"]} == {"gather", "sin"}  # relu stays on
