"""The documented-only Orion constraints (placement/rules/not_applicable.py): listed in every report, never checked."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.placement.rules import Orion, Rule
from experiments.ane_engineering.placement.static_check import check_program
from static_check_support import NOT_APPLICABLE, compliant


@pytest.fixture(scope="module")
def compliant_report():
    prog, spec = compliant()
    return check_program(prog, spec)


def test_documented_only_rules_are_listed_but_not_checked(compliant_report):
    """Not-applicable Orion constraints stay in the catalogue as documentation: no check, no severity, never counted."""
    assert NOT_APPLICABLE
    listed = {rule["id"]: rule for rule in compliant_report["rules"]}
    for rule in NOT_APPLICABLE:
        assert rule.check is None and rule.severity is None and listed[rule.id]["severity"] is None
        assert rule.orion.reason.strip()
    with pytest.raises(ValueError):
        Rule("ANE-R99-x", "x", "Orion", "error", Orion("not applicable", "why"), None)
