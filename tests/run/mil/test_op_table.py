"""docs/EXECUTOR_OPS.md is generated from the executor's registry and coremltools' core op lists; it must be current."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("coremltools")

from experiments.ane_engineering.run.mil import op_table
from experiments.ane_engineering.run.mil.registry import OPS


def test_committed_table_is_current():
    assert op_table.DOC.read_text(encoding="utf-8") == op_table.render(), (
        "docs/EXECUTOR_OPS.md is stale: python -m experiments.ane_engineering.op_table --write")


def test_table_follows_the_registry(monkeypatch):
    before = op_table.render()
    assert "| `softmax` | yes | yes | yes | yes | activation |" in before
    monkeypatch.setitem(OPS, "softmax", dataclasses.replace(OPS["softmax"], opsets=("iOS15",)))
    after = op_table.render()
    assert "| `softmax` | yes | no | no | no | activation |" in after
    count = int(before.split("iOS17: ")[1].split(" of")[0])
    assert f"iOS17: {count - 1} of" in after
