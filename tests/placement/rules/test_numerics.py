"""The measured-numerics rule (placement/rules/numerics.py, ANE-R32 the width-offset slice cliff): it reads the
executor's measurement, fails the probe as a program error and is not a placement prediction."""

from __future__ import annotations

import json

import pytest

from experiments.ane_engineering.placement.static_check import check_program
from static_check_support import findings_of, trigger_slice_cliff


def test_the_slice_cliff_rule_reads_the_measurement_and_is_not_a_placement_prediction():
    from experiments.ane_engineering.placement.static_check import program_errors

    prog, spec, measured = trigger_slice_cliff()
    report = check_program(prog, spec, measured=measured)
    (found,) = findings_of(report, "ANE-R32-slice-cliff")
    assert found["op"] == "tile" and "tile" not in report["predicted_off_ane"]
    assert found in program_errors(report)  # it fails the probe as a program error
    assert not findings_of(check_program(prog, spec), "ANE-R32-slice-cliff")  # nothing measured: nothing found
    small = json.loads(json.dumps(measured))
    for entry in small["headroom"]["width_offset_slices"]:
        entry["input_max_abs"] = entry["cliff_value"] / 4  # at the gate's margin and below: silent
    assert not findings_of(check_program(prog, spec, measured=small), "ANE-R32-slice-cliff")


@pytest.mark.slow
def test_windowed_slices_of_the_stress_source_read_projections_not_the_stream(tmp_path):
    """The windowed layout cuts K/V windows at nonzero offsets along S (pre-A16 width-offset slices); on the stress
    source at the published magnitude (tiny-outlier: the massive activation in the residual stream) they read the
    normalised projections, so the measured slice inputs stay far inside the slice cliff and ANE-R32 is silent,
    while the op facing the massive activation is the projection that writes it."""
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.core.gates import HEADROOM_MIN
    from experiments.ane_engineering.workflows.probe_run import run_probe

    checkpoint = load_checkpoint("builtin:tiny-outlier")
    magnitude = checkpoint.raw_config["massive_activation"]["magnitude"]
    report = run_probe(checkpoint, "body", 96, tmp_path / "windowed", show_progress=False, attention="windowed")
    headroom = report["headroom"]
    slices = headroom["width_offset_slices"]
    assert slices and all(s["input_max_abs"] * HEADROOM_MIN <= s["cliff_value"] for s in slices)
    assert not findings_of(report["placement"]["static"], "ANE-R32-slice-cliff")
    assert headroom["minimum"]["cliff"] == "matmul_output" and headroom["minimum"]["max_abs"] >= 0.99 * magnitude
    assert max(s["input_max_abs"] for s in slices) * 100 < magnitude
