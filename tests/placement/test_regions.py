"""regions.py: ANE regions, off-ANE islands and crossings in program order, and the split named by its ops."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.placement.regions import split, stated_regions


def test_one_island_in_the_middle_makes_two_regions_and_two_crossings():
    names = ["a", "b", "softmax_fp32", "cast", "c"]
    types = ["conv", "add", "softmax", "cast", "conv"]
    result = split(names, types, {"softmax_fp32", "cast"})
    assert (result["regions"], result["islands"], result["crossings"], result["off_ane_ops"]) == (2, 1, 2, 2)
    assert result["split"] == [{"ops": 2, "first": "softmax_fp32", "last": "cast",
                                "off_ane_types": ["cast", "softmax"]}]
    assert [c["into"] for c in result["crossing_ops"]] == ["off-ANE", "ANE"]
    assert result["crossing_ops"][0]["after"] == "b" and result["crossing_ops"][1]["before"] == "c"


def test_an_island_at_the_start_costs_one_crossing_and_all_on_ane_none():
    start = split(["gather", "conv", "add"], ["gather", "conv", "add"], {"gather"})
    assert (start["regions"], start["islands"], start["crossings"]) == (1, 1, 1)
    whole = split(["conv", "add"], ["conv", "add"], set())
    assert (whole["regions"], whole["islands"], whole["crossings"], whole["split"]) == (1, 0, 0, [])


def test_a_stated_region_count_is_charged_two_crossings_per_island():
    assert stated_regions(13)["crossings"] == 24 and stated_regions(13)["islands"] == 12
    assert stated_regions(1)["crossings"] == 0


@pytest.mark.slow
def test_the_harness_export_is_one_region(tiny):
    from experiments.ane_engineering.workflows.predict_export import export_cost

    cost, _ = export_cost(tiny, "body", 48, "dense")
    assert cost["regions"]["regions"] == 1 and cost["regions"]["crossings"] == 0
    assert cost["regions"]["ops"] == cost["totals"]["non_constant_ops"]
    assert cost["regions"]["split"] == [] and cost["regions"]["label"].startswith("prediction")
