"""The rules' sources (placement/rules/sources.py): every citation is used by a catalogued rule (an unused one is a
fact with no rule behind it), and the reference run's is built from core/reference_run.json, the figures' one home."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.core import reference_run
from experiments.ane_engineering.placement.rules import CATALOGUE, sources

CITATIONS = sorted(name for name in dir(sources) if name.startswith("SRC_"))


@pytest.mark.parametrize("name", CITATIONS)
def test_every_citation_is_used_by_a_rule(name):
    text = getattr(sources, name)
    assert text.strip() and any(text in rule.source for rule in CATALOGUE), name


def test_the_reference_run_is_cited_from_its_file():
    assert sources.SRC_REFERENCE_RUN.startswith(reference_run.citation(reference_run.load()))
    assert sources.PLACEMENT == reference_run.load()["placement"]
