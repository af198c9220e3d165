"""The precision rules (placement/rules/precision.py): boundary casts are the fp32-I/O rule, not in-graph work, and
the finite -1e4 mask constant is neither non-finite nor out of FP16 range."""

from __future__ import annotations

import numpy as np

from experiments.ane_engineering.placement.static_check import check_program
from static_check_support import L, findings_of, mb, program, trigger_cast, trigger_fp32_io


def test_boundary_casts_are_the_interface_rule_not_in_graph_work():
    report = check_program(trigger_fp32_io()[0])
    assert findings_of(report, "ANE-R14-fp32-io")
    for rule_id in ("ANE-R13-cast", "ANE-R12-fp16-compute"):
        assert not findings_of(report, rule_id)
    cast_report = check_program(trigger_cast()[0])
    assert len(findings_of(cast_report, "ANE-R13-cast")) == 2


def test_finite_mask_constant_is_fine():
    @program()
    def prog(x):
        return mb.add(x=x, y=np.full((1, 1, 1, L), -1e4, dtype=np.float16))
    report = check_program(prog)
    assert not findings_of(report, "ANE-R15-non-finite-constant")
    assert not findings_of(report, "ANE-R16-fp16-range-constant")
