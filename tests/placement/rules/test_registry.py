"""The rule catalogue (placement/rules/registry.py): ids, statements, sources and severities well formed, the Orion
constraints all catalogued, and a triggering program for every rule that can find something."""

from __future__ import annotations

from experiments.ane_engineering.placement.rules import (
    ANE_OP_ALLOWLIST,
    CATALOGUE,
    CATALOGUE_BY_ID,
    ORION_STATUSES,
    SEVERITIES,
)
from static_check_support import APPLICABLE, TRIGGERS


def test_catalogue_shape():
    assert len(CATALOGUE) >= 20
    ids = [rule.id for rule in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert CATALOGUE_BY_ID.keys() == set(ids)
    for rule in CATALOGUE:
        assert rule.id.startswith("ANE-R") and rule.statement.strip() and rule.source.strip(), rule.id
        assert (rule.severity in SEVERITIES) == rule.applicable == (rule.check is not None), rule.id
        if rule.orion is not None:
            assert rule.orion.status in ORION_STATUSES and rule.orion.reason.strip(), rule.id
            assert "Orion" in rule.source, rule.id
    # The Orion constraints (SRC_ORION) are all catalogued, applicable or not.
    orion = {rule.id: rule.orion.status for rule in CATALOGUE if rule.orion}
    assert {"ANE-R24-sram-cliff", "ANE-R25-exact-gelu", "ANE-R26-concat", "ANE-R28-io-alphabetical",
            "ANE-R29-min-surface", "ANE-R30-uniform-outputs", "ANE-R31-compile-budget",
            "ANE-R27-baked-weights", "ANE-R20-dense-as-conv"} <= orion.keys()
    assert orion["ANE-R25-exact-gelu"] == "warned" and CATALOGUE_BY_ID["ANE-R25-exact-gelu"].severity == "warning"
    assert CATALOGUE_BY_ID["ANE-R26-concat"].severity == "warning"
    assert {"conv", "einsum", "layer_norm", "softmax", "gelu", "relu", "add", "sub", "mul", "slice_by_index",
            "transpose"} <= ANE_OP_ALLOWLIST


def test_every_applicable_rule_has_a_trigger():
    assert set(TRIGGERS) == {rule.id for rule in APPLICABLE}
