"""The calibrated cost model (placement/calibration.py) against its committed evidence and the reference run.

Reference timings come from core/reference_run.json and program costs from the evidence's recorded totals (counted from
real exports by benchmarks/cost_calibration.py): nothing measured is typed here. The 15% bound is the acceptance
bound the calibration was set (the dense layout's L1024 request predicted within 15%).
"""

from __future__ import annotations

import json

import pytest

from experiments.ane_engineering.core import reference_run
from experiments.ane_engineering.placement import calibration
from experiments.ane_engineering.placement.calibration import CalibrationError

BOUND = 0.15


@pytest.fixture(scope="module")
def evidence():
    return json.loads(calibration.EVIDENCE_PATH.read_text(encoding="utf-8"))


def test_loads_the_committed_fit(evidence):
    fit = calibration.load_calibration()
    assert fit["parameters"] == evidence["fit"]["parameters"]
    assert fit["chip"] == reference_run.chip()
    assert all(value > 0 for value in fit["parameters"].values())


def test_refuses_missing_and_malformed_evidence(tmp_path, evidence):
    with pytest.raises(CalibrationError, match="no calibration evidence"):
        calibration.load_calibration(tmp_path / "absent.json")
    cases = {
        "format": lambda e: e.update(format="ane-engineering/evidence/cost-calibration/0"),
        "per_op_ms": lambda e: e["fit"]["parameters"].update(per_op_ms=-1e-4),
        "traffic": lambda e: e["fit"]["parameters"].pop("traffic_factor"),
        "extra": lambda e: e["fit"]["parameters"].update(per_byte_ms=1.0),
        "points": lambda e: e["fit"].update(points=e["fit"]["points"][:2]),
    }
    for name, damage in cases.items():
        damaged = json.loads(json.dumps(evidence))
        damage(damaged)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(damaged), encoding="utf-8")
        with pytest.raises(CalibrationError):
            calibration.load_calibration(path)


def test_points_are_the_reference_run(evidence):
    measured = {m["id"]: m for m in reference_run.load()["timings"]["measurements"]}
    points = evidence["fit"]["points"]
    assert {p["id"] for p in points} == set(measured)
    for point in points:
        assert (point["measured_ms"], point["length"], point["scope"]) == (
            measured[point["id"]]["p50_ms"], measured[point["id"]]["length"], measured[point["id"]]["scope"])


def test_refit_reproduces_parameters_and_residuals(evidence):
    fit = evidence["fit"]
    inputs = [{k: p[k] for k in ("id", "length", "scope", "measured_ms", "totals")} for p in fit["points"]]
    refit = calibration.fit(inputs, fit["chip"])
    for name, value in fit["parameters"].items():
        assert refit["parameters"][name] == pytest.approx(value, rel=1e-9)
    for recorded, again in zip(fit["points"], refit["points"]):
        assert again["predicted_ms"] == pytest.approx(recorded["predicted_ms"], rel=1e-9)
        assert again["relative_residual"] == pytest.approx(recorded["relative_residual"], abs=1e-9)


def test_predicts_the_dense_l1024_request_within_bound(evidence):
    """In-sample (the fit uses it): the acceptance check, and every other reference point within the same bound."""
    fit = evidence["fit"]
    measured = reference_run.measurement("L1024-request")["p50_ms"]
    l1024 = next(p for p in fit["points"] if p["id"] == "L1024-request")
    predicted = calibration.predict_request_ms({"totals": l1024["totals"]}, fit["chip"])
    assert abs(predicted / measured - 1) <= BOUND
    for point in fit["points"]:
        assert abs(calibration.predict(point, fit["chip"], fit["parameters"]) / point["measured_ms"] - 1) <= BOUND


@pytest.mark.parametrize("defect", ["no per-op term", "no traffic term"])
def test_a_dropped_term_breaks_the_bound(evidence, defect):
    fit = evidence["fit"]
    parameters = dict(fit["parameters"])
    parameters["per_op_ms" if defect == "no per-op term" else "traffic_factor"] = 0.0
    worst = max(abs(calibration.predict(p, fit["chip"], parameters) / p["measured_ms"] - 1) for p in fit["points"])
    assert worst > BOUND


def test_fit_refuses_what_the_model_cannot_describe(evidence):
    points = [{k: p[k] for k in ("id", "length", "scope", "measured_ms", "totals")} for p in evidence["fit"]["points"]]
    with pytest.raises(CalibrationError, match="cannot test"):
        calibration.fit(points[:2], "M3 Max")
    below_floor = [{**p, "measured_ms": p["measured_ms"] / 50} for p in points]  # faster than the roofline allows
    with pytest.raises(CalibrationError, match="negative"):
        calibration.fit(below_floor, "M3 Max")
    with pytest.raises(CalibrationError, match="unknown chip"):
        calibration.predict_body_ms({"totals": points[0]["totals"]}, "M9")
