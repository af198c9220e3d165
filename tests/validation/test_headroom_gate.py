"""The headroom gate (core/gates.py HEADROOM_MIN, validation/gate_run.py headroom_gate): a program inside the gate
passes, the same program with a scaled weight (a real defect: one projection 'trained' into a massive activation)
fails it, naming the op; on exported builtin:tiny packages the validation report carries the measured headroom."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from executor_ops_support import build_program, loaded, mb, spec
from experiments.ane_engineering.core import gates
from experiments.ane_engineering.run.mil.cliffs import AneCliffs
from experiments.ane_engineering.run.mil.headroom import measure_headroom
from experiments.ane_engineering.validation.gate_run import headroom_gate

MATMUL_CLIFF = AneCliffs("pre-a16").by_class["matmul-class"].value
# The defect of the exported package: the embedding norm's weight x 1e4, so that the residual stream entering the first
# layer carries |h| ~ 1e4 (the size of mmBERT's massive activation) while every norm reading it still normalises.
SCALED_WEIGHT, SCALE = "embeddings.norm.weight", 1e4


def _projection_program(scale: float):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 16)) * scale).astype(np.float16)

    def build(x):
        h = mb.linear(x=x, weight=w, name="projection")
        return mb.layer_norm(x=mb.add(x=x, y=h, name="residual"), axes=[-1], name="norm")

    return build_program(build, {"x": spec(np.zeros((4, 16), np.float16))})


def test_a_scaled_weight_breaks_the_headroom_gate_and_the_op_is_named():
    inputs = [{"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float16)}]
    clean = measure_headroom(loaded(_projection_program(1.0), "iOS17"), inputs)
    gate = headroom_gate(clean)
    assert gate["passed"] and gate["minimum"]["op"] == "projection" and gate["reason"] is None
    # scale the weight so the projection's output sits at headroom 1.5: past the gate, short of the cliff
    scale = clean.minimum.headroom / 1.5
    broken = headroom_gate(measure_headroom(loaded(_projection_program(scale), "iOS17"), inputs))
    assert broken["passed"] is False and broken["minimum"]["op"] == "projection"
    assert "'projection'" in broken["reason"] and "matmul_output" in broken["reason"]
    assert broken["minimum_headroom"] == pytest.approx(1.5, rel=0.01)


def test_core_ml_backends_report_headroom_as_not_measured():
    gate = headroom_gate(None)
    assert gate["measured"] is False and gate["passed"] is None


@pytest.mark.slow
def test_validation_reports_headroom_of_the_tiny_packages(validation_report):
    status, report = validation_report
    assert status == 0 and report["gates"]["headroom_min"] == gates.HEADROOM_MIN
    for length, bucket in report["buckets"].items():
        headroom = bucket["headroom"]
        assert headroom["measured"] and headroom["passed"]
        assert headroom["inputs_measured"] == bucket["evaluated"]
        assert headroom["minimum"]["op"] and len(headroom["tightest"]) == 10
        assert headroom["minimum_headroom"] >= gates.HEADROOM_MIN
        assert report["summary"][length]["headroom"]["op"] == headroom["minimum"]["op"]


@pytest.mark.slow
def test_a_scaled_projection_in_an_exported_package_fails_the_gate(tiny_packages, tmp_path):
    from experiments.ane_engineering.package.inputs.questions import load_questions
    from experiments.ane_engineering.run.agent import ANEAgent
    from experiments.ane_engineering.workflows.probe_run import run_probe

    directory, _ = tiny_packages.get("body", 96)
    checkpoint = tiny_packages.checkpoint
    agent = ANEAgent([directory], checkpoint, "mil")
    encoded = [e for e in (agent.encode(q) for q in load_questions()) if e.num_tokens <= 96][:3]
    inputs = [{k: v.astype(np.float16) for k, v in
               agent.device_inputs(e.input_ids, e.token_types, e.marker_positions, 96).items()} for e in encoded]
    clean = headroom_gate(agent.backends[96].headroom(inputs))
    assert clean["passed"]
    tensors = dict(checkpoint.tensors)
    tensors[SCALED_WEIGHT] = tensors[SCALED_WEIGHT] * SCALE
    defective = dataclasses.replace(checkpoint, tensors=tensors)
    run_probe(defective, "body", 96, tmp_path / "defective", show_progress=False)
    broken = headroom_gate(measure_headroom(tmp_path / "defective", inputs))
    assert broken["passed"] is False and broken["minimum_headroom"] < gates.HEADROOM_MIN
    assert broken["minimum"]["op"] in broken["reason"]


@pytest.mark.slow
def test_probe_json_carries_the_headroom_on_the_longest_golden_inputs(tiny_packages):
    from experiments.ane_engineering.validation.headroom_inputs import PROBE_INPUTS

    _, report = tiny_packages.get("body", 96)
    headroom = report["headroom"]
    about = headroom["golden_inputs"]
    assert headroom["measured"] and headroom["passed"] and about["limit"] == PROBE_INPUTS
    assert headroom["inputs_measured"] == about["measured"] == min(PROBE_INPUTS, about["total"])
    assert headroom["minimum"]["op"] and headroom["minimum_headroom"] >= gates.HEADROOM_MIN
    assert report["placement"]["static"]["measured"] == ["headroom"]  # the static rules saw it
