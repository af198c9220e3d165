"""The committed cross-chip fit (benchmarks/evidence/latency_fit.json) is what the code computes from the committed
counts and public points, and it meets the issue's bound on chips it never saw: leave-one-chip-out median absolute
error <= 15% and worst <= 40% over every held-out point of this harness's graph kind (masked BC1S encoders)."""

from __future__ import annotations

import json

import pytest

from experiments.ane_engineering.placement.predict import FIT_PATH
from experiments.ane_engineering.workflows.benchmarks.latency_fit import COUNTS_PATH, fit_evidence

MEDIAN_BOUND, WORST_BOUND = 0.15, 0.40  # issue 35, "Must show"


@pytest.fixture(scope="module")
def committed():
    return json.loads(FIT_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def recomputed():
    return fit_evidence(COUNTS_PATH)


def test_the_committed_fit_is_recomputed_from_its_inputs(committed, recomputed):
    for term, value in committed["fit"]["coefficients"].items():
        assert recomputed["fit"]["coefficients"][term] == pytest.approx(value, rel=1e-6, abs=1e-12), term
    for mine, theirs in zip(recomputed["points"], committed["points"]):
        assert mine["id"] == theirs["id"]
        for key in ("in_sample_ms", "leave_one_chip_out_ms", "leave_one_source_out_ms"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-6), (mine["id"], key)
    assert recomputed["inputs"]["counts_sha256"] == committed["inputs"]["counts_sha256"]
    assert recomputed["inputs"]["public_latencies_sha256"] == committed["inputs"]["public_latencies_sha256"]


def test_leave_one_chip_out_meets_the_bound_on_our_graph_kind(recomputed):
    summary = recomputed["leave_one_chip_out"]["summary"]
    masked = summary["masked_bc1s"]
    assert masked["points"] >= 40
    assert masked["median_absolute_relative_error"] <= MEDIAN_BOUND
    assert masked["max_absolute_relative_error"] <= WORST_BOUND
    assert set(summary["masked_bc1s_by_chip"]) == {"m3-max", "m4", "m4-pro", "m4-max"}
    for record in recomputed["leave_one_chip_out"]["records"]:  # no held-out point was seen by its fit
        assert record["fitted_on_points"] == sum(1 for p in recomputed["points"]
                                                 if p["fitted"] and p["chip"] != record["chip"])


def test_every_point_says_whether_it_was_fitted_or_only_checked(recomputed):
    fitted = [p for p in recomputed["points"] if p["fitted"]]
    checked = [p for p in recomputed["points"] if not p["fitted"]]
    assert fitted and checked and recomputed["fit"]["points"] == len(fitted)
    assert all(p["state"] != "warm" for p in checked)  # the state figures bound the band; they are not fitted
    assert recomputed["not_counted"] and all(p["why"] for p in recomputed["not_counted"])


def test_the_one_against_thirteen_region_check_is_reported(recomputed):
    check = recomputed["regions_check"]
    assert check["checked"] and check["crossings"] == 24
    assert check["measured_ratio"] > 1 and check["source_held_out_ratio"] > 1
