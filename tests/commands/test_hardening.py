"""Attacks on the harness, each reproduced on builtin:tiny packages: refused with one clear line and a non-zero exit,
nothing left at the output path, inputs unchanged (or, for the functional items, working)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from command_support import refused
from experiments.ane_engineering import benchmark, encode, golden, probe, reweight, sweep, validate
from experiments.ane_engineering.core.cli import atomic_file, run_main
from experiments.ane_engineering.core.staging import OutputExistsError, staged_directory
from experiments.ane_engineering.model.bc1s.lora import LoraSpec
from experiments.ane_engineering.package import verified_copy as verified_copy_module
from experiments.ane_engineering.package.inputs import adapter as adapters
from experiments.ane_engineering.package.inputs.questions import load_questions
from experiments.ane_engineering.package.manifest import read_manifest, write_manifest
from experiments.ane_engineering.package.package_hash import package_content_hash
from experiments.ane_engineering.palettize import main as palettize_main
from experiments.ane_engineering.run.agent import ANEAgent
from package_edits import copy_package, edit_largest_weight, intact, reseal, weight_bin


# ------------------------------------------------------------------------------------------------------------
# The finite gate can fail.
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def overflowing_body(tiny_packages, tmp_path_factory):
    """A body package whose largest conv weight is 60000 (finite in FP16): its activations overflow to Inf/NaN."""
    source, _ = tiny_packages.get("body", 96)
    package = copy_package(source, tmp_path_factory.mktemp("overflow") / "body")
    edit_largest_weight(package, lambda values: np.full_like(values, 60000.0))
    reseal(package)
    return package


@pytest.mark.slow
def test_non_finite_outputs_fail_the_finite_gate_in_validate(overflowing_body, tmp_path, capsys):
    output = tmp_path / "v.json"
    status = validate.main(["--package", str(overflowing_body), "--backend", "mil", "--repeats", "2",
                            "--output", str(output)])
    report = json.loads(output.read_text())
    assert status == 1 and report["passed"] is False
    bucket = report["buckets"]["96"]
    non_finite = [q for q in bucket["questions"] if not q["finite"]]
    assert non_finite and all(q["failed_gates"][0].startswith("finite gate:") for q in non_finite)
    assert all(q["decision"] is None and q["calibrated_error"] is None for q in non_finite)
    assert any("finite gate" in reason for reason in report["reasons"])
    assert "finite gate" in capsys.readouterr().out


@pytest.mark.slow
def test_sweep_records_failing_and_refused_candidates_and_finishes(overflowing_body, tmp_path, capsys):
    output = tmp_path / "sweep"
    status = run_main(sweep.main, ["--package", str(overflowing_body), "--bits", "8", "--modes", "uniform",
                                   "--group-sizes", "32,16384", "--jobs", "1", "--repeats", "1",
                                   "--output", str(output)])
    assert status == 0
    result = json.loads((output / "sweep.json").read_text())
    rows = {row["group_size"]: row for row in result["candidates"]}
    assert set(rows) == {32, 16384} and not result["baseline"]["passed"]
    assert not rows[32]["passed"] and any("finite gate" in r for r in rows[32]["failed_reasons"])
    assert not rows[16384]["passed"] and "changed nothing" in rows[16384]["failed_reasons"][0]
    assert (output / "sweep.md").is_file() and (output / "sweep.png").is_file()


# ------------------------------------------------------------------------------------------------------------
# A manifest cannot send the harness to another package.
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def other_package(tiny_packages, tmp_path_factory):
    """A modified package elsewhere on disk, sealed by its own manifest."""
    source, _ = tiny_packages.get("body", 96)
    package = copy_package(source, tmp_path_factory.mktemp("other") / "body")
    edit_largest_weight(package, lambda values: -3.0 * values)
    reseal(package)
    return package


def redirected(tiny_packages, other_package, target: Path, how: str) -> Path:
    source, _ = tiny_packages.get("body", 96)
    victim = copy_package(source, target)
    manifest = read_manifest(victim)
    if how == "absolute":
        manifest["package"]["path"] = str((other_package / "model.mlpackage").resolve())
    elif how == "dotdot":
        manifest["package"]["path"] = os.path.relpath(other_package / "model.mlpackage", victim)
    else:  # a symlink leading out, under the ordinary name
        shutil.rmtree(victim / "model.mlpackage")
        (victim / "model.mlpackage").symlink_to((other_package / "model.mlpackage").resolve())
    manifest["package"]["content_hash"] = package_content_hash(other_package / "model.mlpackage")
    write_manifest(victim, manifest)
    return victim


@pytest.mark.slow
@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_manifest_pointing_outside_its_directory_is_refused(tiny_packages, other_package, tmp_path, capsys, how):
    victim = redirected(tiny_packages, other_package, tmp_path / "victim", how)
    refused(validate.main, ["--package", str(victim), "--backend", "mil", "--output", str(tmp_path / "v.json")],
            capsys, "package path")
    refused(benchmark.main, ["--package", str(victim), "--length", "96", "--calls", "1", "--warmup", "0",
                             "--output", str(tmp_path / "b.json")], capsys, "package path")
    refused(reweight.main, ["--package", str(victim), "--source", "builtin:tiny", "--output", str(tmp_path / "r")],
            capsys, "package path")
    assert not any((tmp_path / name).exists() for name in ("v.json", "b.json", "r"))


# ------------------------------------------------------------------------------------------------------------
# The bytes that run are the bytes that were verified.
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_weights_swapped_after_verification_do_not_run(tiny, tiny_packages, other_package, tmp_path, monkeypatch):
    source, _ = tiny_packages.get("body", 96)
    package = copy_package(source, tmp_path / "body")
    question = load_questions()[0]
    clean = ANEAgent([package], tiny, "mil").decide(question).option_logits
    swapped_in = ANEAgent([other_package], tiny, "mil").decide(question).option_logits
    assert clean != swapped_in  # the swap is a real change of outputs

    real_hash = verified_copy_module.package_content_hash
    swaps = []

    def hash_then_swap(path):  # the attacker's best moment: right when the harness is verifying
        digest = real_hash(path)
        tmp = package / "model.mlpackage" / ".swap"
        shutil.copyfile(weight_bin(other_package / "model.mlpackage"), tmp)
        os.replace(tmp, weight_bin(package / "model.mlpackage"))
        swaps.append(path)
        return digest

    monkeypatch.setattr(verified_copy_module, "package_content_hash", hash_then_swap)
    agent = ANEAgent([package], tiny, "mil")
    assert swaps and not intact(package)  # the directory now holds other weights...
    assert agent.decide(question).option_logits == clean  # ...but what runs is what was verified


# ------------------------------------------------------------------------------------------------------------
# FP16 overflow is an error, not a pass.
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_weight_above_fp16_range_fails_the_probe_and_encode_refuses_nan(random_checkpoint, tmp_path, capsys):
    directory = random_checkpoint()
    tensors = load_file(str(directory / "model.safetensors"))
    weight = tensors["layers.0.mlp.Wi.weight"].clone()
    weight[0, 0] = 1.0e6  # finite in FP32, above FP16's 65,504
    tensors["layers.0.mlp.Wi.weight"] = weight
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    package = tmp_path / "enc"
    assert run_main(probe.main, ["--kind", "encoder", "--length", "96", "--source", str(directory),
                                 "--output", str(package), "--quiet"]) == 1
    report = json.loads((package / "probe.json").read_text())
    assert report["passed"] is False and report["ane_gate"]["program_errors"] >= 1
    assert any(rule in reason for reason in report["ane_gate"]["reasons"]
               for rule in ("ANE-R15-non-finite-constant", "ANE-R16-fp16-range-constant"))
    capsys.readouterr()
    refused(encode.main, ["--source", str(directory), "--ids", "1,2,3,4", "--backend", "mil", "--package",
                          str(package), "--output", str(tmp_path / "h.npy")], capsys, "hidden states", "NaN")
    assert not (tmp_path / "h.npy").exists()


# ------------------------------------------------------------------------------------------------------------
# Outputs inside inputs.
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_outputs_inside_an_input_are_refused_and_the_input_is_untouched(tiny_packages, tmp_path, capsys):
    body = copy_package(tiny_packages.get("body", 96)[0], tmp_path / "body")
    encoder = copy_package(tiny_packages.get("encoder", 96)[0], tmp_path / "encoder")
    inside = body / "model.mlpackage"
    refused(palettize_main, ["--package", str(body), "--bits", "8", "--mode", "uniform", "--group-size", "32",
                             "--output", str(inside / "w8")], capsys, "inside the input")
    refused(validate.main, ["--package", str(body), "--output", str(body / "v.json")], capsys, "inside the input")
    refused(reweight.main, ["--package", str(body), "--source", "builtin:tiny", "--output", str(inside / "r")],
            capsys, "inside the input")
    refused(encode.main, ["--ids", "1,2", "--backend", "mil", "--package", str(encoder), "--output",
                          str(encoder / "h.npy")], capsys, "inside the input")
    refused(sweep.main, ["--package", str(body), "--output", str(body / "s")], capsys, "inside the input")
    assert intact(body) and intact(encoder)
    assert sorted(p.name for p in body.iterdir()) == ["manifest.json", "model.mlpackage", "probe.json"]


# ------------------------------------------------------------------------------------------------------------
# Records that lie.
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_palettization_that_changes_nothing_is_refused(tiny_packages, tmp_path, capsys):
    body = tiny_packages.get("body", 96)[0]
    refused(palettize_main, ["--package", str(body), "--bits", "8", "--mode", "uniform", "--group-size", "16384",
                             "--output", str(tmp_path / "w8")], capsys, "changed nothing")
    assert not (tmp_path / "w8").exists() and not list(tmp_path.glob(".w8*"))


def test_an_infinite_lora_alpha_is_refused(tmp_path, capsys):
    refused(probe.main, ["--kind", "encoder", "--length", "96", "--lora-rank", "2", "--lora-alpha", "inf",
                         "--output", str(tmp_path / "p")], capsys, "finite")
    assert not (tmp_path / "p").exists()


# ------------------------------------------------------------------------------------------------------------
# Adapters.
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int8, torch.float64, torch.int32])
def test_adapters_of_other_dtypes_are_refused(tiny, tmp_path, dtype):
    spec = LoraSpec(2, 2.0, ("q", "v"))
    good = adapters.random_adapter(tiny.config, spec)
    path = tmp_path / "a.safetensors"
    save_file({k: (v * 100).to(dtype) for k, v in good.tensors.items()}, str(path),
              metadata={"rank": "2", "alpha": "2.0", "targets": "q,v"})
    with pytest.raises(adapters.AdapterError, match=str(dtype).removeprefix("torch.")):
        adapters.load_adapter(path, tiny.config, spec)


@pytest.mark.parametrize("alpha", ["inf", "nan", "-1", "0"])
def test_adapters_with_a_non_finite_or_non_positive_alpha_are_refused(tiny, tmp_path, alpha):
    good = adapters.random_adapter(tiny.config, LoraSpec(2, 2.0, ("q", "v")))
    path = tmp_path / "a.safetensors"
    save_file(good.tensors, str(path), metadata={"rank": "2", "alpha": alpha, "targets": "q,v"})
    with pytest.raises(adapters.AdapterError, match="alpha"):
        adapters.load_adapter(path, tiny.config)


# ------------------------------------------------------------------------------------------------------------
# Late failures.
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture
def unwritable_directory(tmp_path):
    """A directory this process cannot create files in, even as root (chmod, then the immutable flag, then sysfs)."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)

    def writable() -> bool:
        try:
            (directory / ".probe").touch()
        except OSError:
            return False
        (directory / ".probe").unlink()
        return True

    made_immutable = False
    if writable() and shutil.which("chattr"):
        made_immutable = subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0
    chosen = directory if not writable() else Path("/sys")
    yield chosen
    if made_immutable:
        subprocess.run(["chattr", "-i", str(directory)], capture_output=True)
    directory.chmod(0o755)


def test_an_unwritable_output_directory_is_refused_before_any_work(unwritable_directory, capsys, monkeypatch):
    monkeypatch.setattr(golden, "make_golden", lambda *a, **k: pytest.fail("the golden was computed first"))
    refused(golden.main, ["--output", str(unwritable_directory / "g.json")], capsys, "cannot write in")


def test_a_dangling_symlink_at_the_output_is_refused(tmp_path, capsys):
    (tmp_path / "out.json").symlink_to(tmp_path / "nowhere")
    refused(golden.main, ["--output", str(tmp_path / "out.json")], capsys, "symlink")
    assert (tmp_path / "out.json").is_symlink() and not (tmp_path / "nowhere").exists()


def test_an_entry_created_during_the_work_is_never_replaced(tmp_path):
    with pytest.raises(OutputExistsError):
        with staged_directory(tmp_path / "export") as staging:
            (staging / "file").write_text("work")
            (tmp_path / "export").mkdir()  # an empty directory appears meanwhile
    assert (tmp_path / "export").is_dir() and not any((tmp_path / "export").iterdir())
    with pytest.raises(OutputExistsError):
        with atomic_file(tmp_path / "report.json") as temporary:
            temporary.write_text("work")
            (tmp_path / "report.json").symlink_to(tmp_path / "elsewhere")  # a dangling symlink appears meanwhile
    assert (tmp_path / "report.json").is_symlink() and not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "report.json"]  # no staging left behind


# ------------------------------------------------------------------------------------------------------------
# Functional.
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_encode_runs_an_encoder_lora_package_with_and_without_an_adapter(tiny, tmp_path):
    package = tmp_path / "lora-encoder"
    assert probe.main(["--kind", "encoder", "--length", "96", "--lora-rank", "2", "--output", str(package),
                       "--quiet"]) == 0
    ids = "1,72,105,33,2"
    adapter = adapters.random_adapter(tiny.config, LoraSpec(2, 2.0, ("q", "v")), kind="encoder", scale=0.2)
    adapters.save_adapter(tmp_path / "a.safetensors", adapter)
    runs = {
        "base": ["--backend", "mil", "--package", str(package)],
        "adapted": ["--backend", "mil", "--package", str(package), "--adapter", str(tmp_path / "a.safetensors")],
        "reference": ["--backend", "reference"],
    }
    for name, args in runs.items():
        assert encode.main(["--ids", ids, *args, "--output", str(tmp_path / f"{name}.npy")]) == 0
    base, adapted, reference = (np.load(tmp_path / f"{n}.npy") for n in ("base", "adapted", "reference"))
    merged = adapters.merge(tiny, adapter, kind="encoder")
    expected = encode.encode(merged, [int(i) for i in ids.split(",")], "reference")
    fp16_level = 0.05  # the FP16 package against FP32, as in test_encode_command
    assert np.abs(base - reference).max() < fp16_level
    assert np.abs(adapted - expected).max() < fp16_level < np.abs(adapted - reference).max()


@pytest.mark.slow
def test_sweep_refuses_negative_repeats(tiny_packages, tmp_path, capsys):
    refused(sweep.main, ["--package", str(tiny_packages.get("body", 96)[0]), "--repeats", "-1",
                         "--output", str(tmp_path / "s")], capsys, "--repeats")
