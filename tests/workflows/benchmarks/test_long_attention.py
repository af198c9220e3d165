"""The long-attention evidence (benchmarks/long_attention.py) against the calibrated model and the reference run,
and `benchmark --vs` pairing the dense and the windowed layout of one bucket.

Every expected value is recomputed from the evidence's own recorded inputs (program totals, raw timings) or read
from core/reference_run.json; nothing measured is typed here.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from command_support import REPO
from experiments.ane_engineering.core import reference_run
from experiments.ane_engineering.model.window_tiles import DEFAULT_TILE
from experiments.ane_engineering.placement import calibration

EVIDENCE = REPO / "benchmarks" / "evidence" / "long_attention_mmbert_base_shape.json"


@pytest.fixture(scope="module")
def evidence():
    return json.loads(EVIDENCE.read_text(encoding="utf-8"))


def _buckets(evidence):
    for layout, entry in evidence["layouts"].items():
        for bucket, values in entry["buckets"].items():
            yield layout, bucket, values


def test_predictions_come_from_the_committed_calibration(evidence):
    """Same fit file (by hash) and each prediction reproduced from the bucket's recorded program totals."""
    recorded = evidence["calibration"]
    assert recorded["sha256"] == hashlib.sha256(calibration.EVIDENCE_PATH.read_bytes()).hexdigest()
    parameters = calibration.load_calibration()["parameters"]
    assert set(evidence["layouts"]) == {"dense", "windowed"}
    for layout, bucket, values in _buckets(evidence):
        assert values["length"] == int(bucket)
        cost = {"totals": values["totals"]}
        assert values["predicted_body_ms"] == pytest.approx(
            calibration.predict_body_ms(cost, evidence["chip"], parameters))
        assert values["predicted_request_ms"] == pytest.approx(
            calibration.predict_request_ms(cost, evidence["chip"], parameters))
        assert values["non_constant_ops"] == values["totals"]["non_constant_ops"]
        assert values["unfused_mb"] == pytest.approx(values["totals"]["unfused_bytes"] / 1e6)
    assert {b for _, b, _ in _buckets(evidence)} == {"96", "192", "1024"}


def test_the_windowed_layout_is_what_the_packages_record(evidence):
    for layout, _, values in _buckets(evidence):
        assert values["package"]["attention_recorded"] == layout


def test_comparison_with_mlx(evidence):
    mlx = reference_run.load()["timings"]["mlx"]["p50_ms"]
    comparison = evidence["comparison"]
    windowed = evidence["layouts"]["windowed"]["buckets"]["1024"]["predicted_request_ms"]
    assert comparison["mlx_p50_ms"] == mlx and comparison["windowed_predicted_request_ms"] == windowed
    assert comparison["below_mlx"] == (windowed < mlx)
    assert comparison["below_mlx_ms"] == pytest.approx(mlx - windowed)
    assert sum(comparison["terms"].values()) == pytest.approx(windowed)


def test_the_default_tile_is_the_scan_s_lowest_prediction(evidence):
    """DEFAULT_TILE is argued from the evidence: the windowed L1024 body predicted at each scanned tile size, the
    default's row being the windowed bucket itself."""
    scan = evidence["tile_scan"]
    rows = scan["tiles"]
    assert len(rows) >= 3 and scan["default_tile"] == DEFAULT_TILE
    lowest = min(rows, key=lambda tile: rows[tile]["predicted_body_ms"])
    assert scan["lowest_predicted_body_tile"] == int(lowest) == DEFAULT_TILE
    windowed = evidence["layouts"]["windowed"]["buckets"][str(scan["length"])]
    assert rows[str(DEFAULT_TILE)]["package_sha256"] == windowed["package"]["content_sha256"]
    assert rows[str(DEFAULT_TILE)]["predicted_body_ms"] == windowed["predicted_body_ms"]


def test_measured_mil_ratio_is_the_median_of_the_pairs(evidence):
    timing = evidence["mil_timing"]
    dense, windowed = np.array(timing["dense"]["raw_ms"]), np.array(timing["windowed"]["raw_ms"])
    assert len(dense) == len(windowed) == timing["calls"]
    assert evidence["measured_mil_ratio"] == pytest.approx(float(np.median(windowed / dense)))


@pytest.mark.slow
def test_vs_pairs_two_attention_layouts(tiny_packages, tmp_path):
    """Each body of the pair gets the masks of its own layout: with the first package's masks the windowed body
    would lack its window_mask input."""
    from experiments.ane_engineering.benchmark import main

    dense = tiny_packages.get("body", 1024)[0]  # the session's packages, shared with test_windowed_attention.py
    windowed = tiny_packages.get("body", 1024, "windowed")[0]
    output = tmp_path / "vs.json"
    assert main(["--package", str(dense), "--length", "1024", "--source", "builtin:tiny", "--backend", "mil",
                 "--warmup", "0", "--calls", "1", "--vs", str(windowed), "--output", str(output)]) == 0
    vs = json.loads(output.read_text(encoding="utf-8"))["vs"]
    assert vs["attention"]["first"]["layout"] == "dense"
    assert vs["attention"]["second"]["layout"] == "windowed" and vs["attention"]["second"]["tile"] >= 1
    assert vs["component"]["ratio"]["n"] == 1 and vs["full_path"]["ratio"]["n"] == 1
