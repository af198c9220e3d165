"""Sensitivity-weighted, input-axis and mixed-bit palettization of builtin:tiny packages; the greedy walk; the
user's own fixture through golden, validate and sweep."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.package.inputs.questions import CALIBRATION_QUESTIONS_PATH, HELDOUT_QUESTIONS_PATH
from experiments.ane_engineering.workflows.mixed_bits import greedy_walk


def test_greedy_walk_lowers_the_cheapest_layer_first_and_keeps_the_boundary():
    units = ["encoder.0", "encoder.1", "encoder.2", "scorer"]
    elements = {"encoder.0": 100, "encoder.1": 100, "encoder.2": 200, "scorer": 10}
    sensitivity = {"encoder.0": {8: 0.0, 6: 0.0, 4: 0.0}, "encoder.1": {8: 0.01, 6: 0.05, 4: 0.4},
                   "encoder.2": {8: 0.01, 6: 0.02, 4: math.inf}, "scorer": {8: 0.0, 6: 0.0, 4: 0.0}}
    steps = greedy_walk(units, elements, sensitivity, [8, 6, 4])
    assert steps[0] == {"allocation": dict.fromkeys(units, 8), "moved": None}
    assert [s["moved"] for s in steps[1:]] == ["encoder.2 8->6", "encoder.1 8->6", "encoder.1 6->4", "encoder.2 6->4"]
    assert all(s["allocation"]["encoder.0"] == 8 and s["allocation"]["scorer"] == 8 for s in steps)  # boundary
    assert steps[-1]["allocation"] == {"encoder.0": 8, "encoder.1": 4, "encoder.2": 4, "scorer": 8}


@pytest.mark.slow
def test_input_axis_luts_decompress_in_the_executor_as_in_coremltools(tiny_packages, tmp_path):
    """coremltools 9.0 takes channel_axis=1 for per_grouped_channel LUTs (lut (1, Cin/G, 1, 1, 2^n, 1)); the
    project's executor expands them exactly as coremltools.optimize.coreml.decompress_weights does."""
    import coremltools as ct
    from coremltools.optimize.coreml import decompress_weights

    from experiments.ane_engineering.package.mil.load import load_program
    from experiments.ane_engineering.run.mil.ops.constexpr import op_constexpr_lut_to_dense
    from experiments.ane_engineering.workflows.palettize_candidate import palettize_candidate

    parent, _ = tiny_packages.get("body", 96)
    report = palettize_candidate(parent, tmp_path / "w6-in", 6, "kmeans", 16, group_axis="input")
    assert report["compression"]["group_axis"] == "input"
    package = tmp_path / "w6-in" / "model.mlpackage"
    program = load_program(package).program
    decompressed = decompress_weights(ct.models.MLModel(str(package), skip_model_load=True))
    decompressed.save(str(tmp_path / "dense.mlpackage"))
    dense_program = load_program(tmp_path / "dense.mlpackage").program
    dense = {op.outputs[0].name: op.outputs[0].val for op in dense_program.functions["main"].operations
             if op.op_type == "const"}

    class Node:
        def where(self):
            return "test"

    checked = 0
    for op in program.functions["main"].operations:
        if op.op_type != "constexpr_lut_to_dense":
            continue
        lut = op.lut.val
        assert lut.shape[0] == 1 and lut.shape[1] == op.indices.val.shape[1] // 16  # groups of input channels
        ours = op_constexpr_lut_to_dense(Node(), {"lut": lut, "indices": op.indices.val}, None)
        assert np.array_equal(ours, dense[op.outputs[0].name]), op.name
        checked += 1
    from experiments.ane_engineering.workflows.palettize_candidate import palettized_contents

    consts = palettized_contents(package)["weight_bits"]  # a const shared by several convs is one LUT op
    assert checked == sum(1 for bits in consts.values() if bits == 6) == len(consts)


@pytest.mark.slow
def test_fisher_weighting_is_recorded_and_changes_the_luts(tiny_packages, tmp_path, capsys):
    from experiments.ane_engineering import palettize
    from experiments.ane_engineering.package.manifest import read_manifest

    parent, _ = tiny_packages.get("body", 96)
    base = ["--package", str(parent), "--bits", "4", "--mode", "kmeans", "--group-size", "32"]
    assert run_main(palettize.main, base + ["--output", str(tmp_path / "plain")]) == 0
    assert run_main(palettize.main, base + ["--weighting", "fisher", "--output", str(tmp_path / "fisher")]) == 0
    plain, weighted = read_manifest(tmp_path / "plain"), read_manifest(tmp_path / "fisher")
    record = weighted["compression"]["weighting"]
    import hashlib

    assert plain["compression"]["weighting"] is None and record["method"] == "fisher"
    assert record["calibration"]["path"] == CALIBRATION_QUESTIONS_PATH.name
    assert record["calibration"]["sha256"] == hashlib.sha256(CALIBRATION_QUESTIONS_PATH.read_bytes()).hexdigest()
    assert record["calibration"]["inputs"] > 0 and record["weighted_weights"] > 0
    # every conv weight but the RoPE rotation (a buffer of the module, not a trained weight) is weighted
    assert all("rope" in name for name in record["unweighted_weights"])
    assert plain["package"]["content_hash"]["sha256"] != weighted["package"]["content_hash"]["sha256"]
    # --calibration means nothing without --weighting fisher; an unknown weighting is refused by argparse
    assert run_main(palettize.main, base + ["--calibration", str(CALIBRATION_QUESTIONS_PATH),
                                            "--output", str(tmp_path / "x")]) == 2
    capsys.readouterr()


@pytest.mark.slow
def test_a_mixed_allocation_is_sealed_and_checked(tiny_packages, tmp_path):
    from experiments.ane_engineering.workflows.mixed_bits import layer_units
    from experiments.ane_engineering.workflows.palettize_candidate import (
        PalettizeError,
        palettize_candidate,
        palettized_contents,
    )

    parent, _ = tiny_packages.get("body", 96)
    units, _ = layer_units(parent)
    allocation = {u: 8 for u in units}
    allocation[units[1]], allocation[units[2]] = 4, 16
    report = palettize_candidate(parent, tmp_path / "mixed", 8, "kmeans", 32, allocation=allocation)
    assert (report["compression"]["bits"] == "mixed"
            and report["compression"]["allocation"] == dict(sorted(allocation.items())))
    from experiments.ane_engineering.workflows.palettize_candidate import layer_of

    held = palettized_contents(tmp_path / "mixed" / "model.mlpackage")["weight_bits"]
    assert {name: bits for name, bits in held.items()} == {name: allocation[layer_of(name)] for name in held}
    with pytest.raises(PalettizeError, match="allocation"):
        palettize_candidate(parent, tmp_path / "bad", 8, "kmeans", 32, allocation={units[0]: 5})


@pytest.mark.slow
def test_validate_on_your_own_questions(tiny_packages, tmp_path, capsys):
    """golden --fixture FILE, then validate --fixture FILE; the same golden without (or with another) fixture is
    refused, exit 2."""
    from experiments.ane_engineering import golden, validate

    parent, _ = tiny_packages.get("body", 96)
    assert run_main(golden.main, ["--fixture", str(HELDOUT_QUESTIONS_PATH), "--output", str(tmp_path / "g.json")]) == 0
    argv = ["--package", str(parent), "--golden", str(tmp_path / "g.json"), "--backend", "mil", "--repeats", "2"]
    assert run_main(validate.main, argv + ["--fixture", str(HELDOUT_QUESTIONS_PATH),
                                           "--output", str(tmp_path / "v.json")]) == 0
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["passed"] and report["golden"]["fixture"]["path"] == HELDOUT_QUESTIONS_PATH.name
    evaluated = report["summary"]["96"]["evaluated"] + len(report["summary"]["96"]["skipped"])
    assert evaluated == len(json.loads(HELDOUT_QUESTIONS_PATH.read_text())["questions"])
    assert run_main(validate.main, argv + ["--output", str(tmp_path / "w.json")]) == 2
    assert "made from other questions" in capsys.readouterr().err
    assert run_main(validate.main, argv + ["--fixture", str(CALIBRATION_QUESTIONS_PATH),
                                           "--output", str(tmp_path / "x.json")]) == 2
    capsys.readouterr()
