"""validate and golden: the gates on builtin:tiny through the mil backend, failing candidates, tampered files."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from experiments.ane_engineering import validate
from experiments.ane_engineering.core import gates, tolerances
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.package.inputs.questions import load_questions
from experiments.ane_engineering.package.manifest import read_manifest, write_manifest
from experiments.ane_engineering.validation.golden import (
    COMMITTED_TINY_GOLDEN,
    GoldenError,
    load_golden,
    make_golden,
    reference_decisions,
)
from package_edits import copy_package, edit_largest_weight, reseal, weight_bin
from package_fixtures import VALIDATION_REPEATS

LONG_QUESTIONS = {"en-choice-04", "ru-noul-01", "zh-score-03"}  # about 1,020 tokens each
TWENTY_OPTIONS = "en-choice-03"  # 147 tokens, 20 options
REPEATS = VALIDATION_REPEATS  # validation_report (package_fixtures.py) validates with this many repeats


@pytest.mark.slow
def test_every_bucket_validates_through_mil_and_long_questions_are_skipped(validation_report):
    status, report = validation_report
    assert status == 0 and report["passed"], report["reasons"]
    summary = report["summary"]
    assert {k: (v["evaluated"], len(v["skipped"])) for k, v in summary.items()} == {
        "96": (59, 4), "192": (60, 3), "1024": (63, 0)}
    assert {s["id"] for s in summary["96"]["skipped"]} == LONG_QUESTIONS | {TWENTY_OPTIONS}
    assert {s["id"] for s in summary["192"]["skipped"]} == LONG_QUESTIONS
    for bucket in report["buckets"].values():
        assert bucket["passed_questions"] == bucket["evaluated"]
        assert bucket["max_calibrated_error"] <= gates.PROBABILITY_ERROR_MAX
        assert bucket["repeats"] == {"calls": REPEATS, "mismatches": [], "identical": True}
        for record in bucket["questions"]:  # per-question errors, logit errors included
            assert {"calibrated_error", "action_probability_error", "option_logit_error", "action_logit_error",
                    "decision", "golden_decision", "tokens"} <= set(record)
            assert record["decision"] == record["golden_decision"] and record["finite"]
    assert report["cross_bucket"]["passed"] and report["cross_bucket"]["questions_in_several_buckets"] == 60
    assert report["backend"]["backend"] == "mil" and "platform" in report["backend"]


@pytest.mark.slow
def test_fp16_errors_are_real_but_small(validation_report):
    """The package is FP16: errors against the FP32 golden are non-zero (no self-comparison) yet inside the gate."""
    _, report = validation_report
    bucket = report["buckets"]["1024"]
    assert 0 < bucket["max_option_logit_error"] < 0.1
    assert 0 < bucket["max_calibrated_error"] < gates.PROBABILITY_ERROR_MAX / 2


@pytest.mark.slow
def test_a_perturbed_conv_weight_fails_validation_and_says_which_gate(tiny_packages, tmp_path, capsys):
    source, _ = tiny_packages.get("body", 96)
    bad = copy_package(source, tmp_path / "bad")

    def defect(values):  # a real defect in one conv weight: a quarter of it negated and tripled
        values[: values.size // 4] *= -3
        return values

    edit_largest_weight(bad, defect)
    reseal(bad)  # as an honest export of the defective weights would be: the gates, not the hashes, must catch it
    output = tmp_path / "bad.json"
    status = validate.main(["--package", str(tmp_path / "bad"), "--backend", "mil", "--repeats", "2",
                            "--output", str(output)])
    report = json.loads(output.read_text())
    assert status == 1 and report["passed"] is False
    assert any("argmax differs" in reason or "probability error" in reason for reason in report["reasons"])
    assert report["summary"]["96"]["failed_questions"]


@pytest.mark.slow
def test_tampered_package_bytes_are_refused(tiny_packages, tmp_path, capsys):
    source, _ = tiny_packages.get("body", 96)
    weights = weight_bin(copy_package(source, tmp_path / "tampered") / "model.mlpackage")
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40
    weights.write_bytes(bytes(data))
    status = run_main(validate.main, ["--package", str(tmp_path / "tampered"), "--backend", "mil", "--output",
                                      str(tmp_path / "out.json")])
    assert status == 2 and not (tmp_path / "out.json").exists()
    assert "content hash" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("edit", ["length", "weights_sha256"])
def test_tampered_manifest_is_refused(tiny_packages, tmp_path, capsys, edit):
    source, _ = tiny_packages.get("body", 96)
    copy_package(source, tmp_path / "m")
    path = tmp_path / "m" / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit == "length":
        manifest["length"] = 192
    else:
        manifest["source"]["weights_sha256"] = "0" * 64
    path.write_text(json.dumps(manifest))
    status = run_main(validate.main, ["--package", str(tmp_path / "m"), "--backend", "mil", "--output",
                                      str(tmp_path / "o.json")])
    assert status == 2
    assert "manifest_sha256" in capsys.readouterr().err


@pytest.mark.slow
def test_package_from_other_dimensions_is_refused(tiny_packages, tmp_path, capsys):
    """A manifest that is intact but describes other model dimensions than the source is refused."""
    source, _ = tiny_packages.get("body", 96)
    copy_package(source, tmp_path / "d")
    manifest = read_manifest(tmp_path / "d")
    manifest["model_config"]["encoder"]["hidden_size"] = 256
    write_manifest(tmp_path / "d", manifest)
    status = run_main(validate.main, ["--package", str(tmp_path / "d"), "--backend", "mil", "--output",
                                      str(tmp_path / "o.json")])
    assert status == 2
    assert "dimensions" in capsys.readouterr().err


def test_tampered_golden_is_refused(tiny, tmp_path):
    golden = json.loads(COMMITTED_TINY_GOLDEN.read_text())
    golden["questions"][0]["calibrated"][0] += 0.01
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(golden))
    with pytest.raises(GoldenError, match="content_sha256"):
        load_golden(path, tiny)


def test_golden_from_other_source_weights_is_refused(random_checkpoint, tmp_path):
    from experiments.ane_engineering.checkpoint import load_checkpoint

    other = load_checkpoint(str(random_checkpoint(tokenizer=True)))
    with pytest.raises(GoldenError, match="other source weights"):
        load_golden(COMMITTED_TINY_GOLDEN, other)


def golden_tolerances(config, records: list[dict]) -> tuple[float, float]:
    """The FP32 cross-machine tolerances (core/tolerances.py) of option logits and calibrated probabilities at the scale
    of `records` (golden question records)."""
    shape = tolerances.decision_model_rounding(config, max(r["num_tokens"] for r in records))
    logits = tolerances.fp32_cross_machine_abs(max(abs(v) for r in records for v in r["option_logits"]), **shape)
    return logits, tolerances.softmax_abs(logits, min(config.head.calibration.temperature.values()))


def test_committed_golden_matches_the_reference_model_today(tiny):
    """Any drift of the reference model (or of builtin:tiny's weights) fails here; FP32 rounding on another CPU
    (the committed golden was made on another machine) stays inside the derived tolerance."""
    committed = load_golden(COMMITTED_TINY_GOLDEN, tiny)
    fresh = make_golden(tiny)
    assert fresh["source"] == committed["source"] and fresh["fixture"] == committed["fixture"]
    logit_tolerance, probability_tolerance = golden_tolerances(tiny.config, committed["questions"])
    for new, old in zip(fresh["questions"], committed["questions"]):
        assert new["question_id"] == old["question_id"]
        assert (new["decision_index"], new["action_index"], new["num_tokens"]) == \
               (old["decision_index"], old["action_index"], old["num_tokens"])
        np.testing.assert_allclose(new["option_logits"], old["option_logits"], rtol=0, atol=logit_tolerance)
        np.testing.assert_allclose(new["calibrated"], old["calibrated"], rtol=0, atol=probability_tolerance)


def test_one_perturbed_weight_breaks_the_golden_tolerance(tiny):
    """The tolerance still catches a real defect: one weight of one encoder FFN, moved by a tenth of the matrix's
    mean magnitude, moves the option logits of a few short questions past it."""
    committed = {r["question_id"]: r for r in load_golden(COMMITTED_TINY_GOLDEN, tiny)["questions"]}
    questions = [q for q in load_questions() if committed[q.id]["num_tokens"] <= 96][:8]
    records = [committed[q.id] for q in questions]
    logit_tolerance, _ = golden_tolerances(tiny.config, records)

    def worst(tensors) -> float:
        fresh = reference_decisions(dataclasses.replace(tiny, tensors=tensors), questions)
        return max(float(np.abs(np.subtract(new["option_logits"], old["option_logits"])).max())
                   for new, old in zip(fresh, records))

    name = "layers.3.mlp.Wi.weight"
    weight = tiny.tensors[name].clone()
    weight[5, 7] += 0.1 * float(weight.abs().mean())
    assert worst(tiny.tensors) <= logit_tolerance < worst({**tiny.tensors, name: weight})
