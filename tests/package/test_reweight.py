"""reweight: only weight bytes change, the result equals a fresh export, and mismatches are refused."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from experiments.ane_engineering import reweight
from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.package.inputs.device_inputs import body_inputs
from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions
from experiments.ane_engineering.package.mil.blobs import read_blob_table
from experiments.ane_engineering.package.mil.errors import ProgramLoadError
from experiments.ane_engineering.package.package_hash import package_content_hash
from experiments.ane_engineering.package.reweight import ReweightError, program_file, verify_identity, weight_file
from experiments.ane_engineering.run.backends import choose_backend
from experiments.ane_engineering.workflows.probe_run import run_probe

pytestmark = pytest.mark.slow  # every test here converts, exports or starts Python


def fine_tuned(tiny, directory, scale=0.01, seed=1, edit=None):
    """builtin:tiny's architecture with perturbed weights: what a fine-tuning step produces."""
    directory.mkdir()
    shutil.copy(tiny.directory / "config.json", directory)
    shutil.copy(tiny.directory / "tokenizer.json", directory)
    generator = torch.Generator().manual_seed(seed)
    tensors = {k: v + scale * torch.randn(v.shape, generator=generator) for k, v in tiny.tensors.items()}
    if edit:
        edit(tensors, directory)
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


@pytest.fixture(scope="module")
def reweighted(tiny_packages, tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("reweight")
    parent, _ = tiny_packages.get("body", 96)
    source = fine_tuned(tiny, root / "fine-tuned")
    assert run_main(reweight.main, ["--package", str(parent), "--source", str(source),
                                    "--output", str(root / "reweighted")]) == 0
    fresh = root / "fresh"
    run_probe(load_checkpoint(str(source)), "body", 96, fresh, show_progress=False)
    return parent, source, root / "reweighted", fresh


def test_only_weight_bytes_change(reweighted):
    parent, _, new, _ = reweighted
    old_package, new_package = parent / "model.mlpackage", new / "model.mlpackage"
    assert program_file(old_package).read_bytes() == program_file(new_package).read_bytes()  # byte for byte
    assert read_blob_table(weight_file(old_package)) == read_blob_table(weight_file(new_package))  # offsets, dtypes
    old, now = weight_file(old_package).read_bytes(), weight_file(new_package).read_bytes()
    assert len(old) == len(now) and old != now
    changed = [i for i in range(0, len(old), 4096) if old[i:i + 4096] != now[i:i + 4096]]
    headers = set(read_blob_table(weight_file(old_package)))
    for meta in headers:  # every 64-byte blob header is untouched
        assert old[meta:meta + 64] == now[meta:meta + 64]
    assert changed
    report = json.loads((new / "reweight.json").read_text())
    assert report["identity"]["program_identical"] and report["identity"]["layout_identical"]
    manifest = json.loads((new / "manifest.json").read_text())
    assert manifest["created_by"] == "reweight"
    parent_manifest = json.loads((parent / "manifest.json").read_text())
    assert manifest["parent"]["package_sha256"] == parent_manifest["package"]["content_hash"]["sha256"]


def test_the_identity_record_is_what_was_compared(reweighted, tmp_path):
    """reweight.json records both sides of each comparison it made, and a package whose program or weight layout
    differs from its parent's is refused rather than recorded."""
    parent, _, new, _ = reweighted
    identity = json.loads((new / "reweight.json").read_text())["identity"]
    program = hashlib.sha256(program_file(parent / "model.mlpackage").read_bytes()).hexdigest()
    assert identity["program_sha256"] == {"parent": program, "package": program}
    layouts = identity["weight_layout"]
    assert layouts["parent"] == layouts["package"] and layouts["package"]["blobs"] == len(read_blob_table(
        weight_file(new / "model.mlpackage")))
    for damage, error, message in ((lambda p: program_file(p).write_bytes(program_file(p).read_bytes() + b"\0"),
                                    ReweightError, "program changed"),
                                   (lambda p: weight_file(p).write_bytes(weight_file(p).read_bytes() + bytes(64)),
                                    ProgramLoadError, "after the last")):
        altered = tmp_path / f"altered-{message.split()[0]}.mlpackage"
        shutil.copytree(new / "model.mlpackage", altered)
        damage(altered)
        with pytest.raises(error, match=message):
            verify_identity(parent / "model.mlpackage", altered)


def test_reweighted_package_is_a_fresh_export_of_the_new_checkpoint(reweighted):
    _, _, new, fresh = reweighted
    assert package_content_hash(new / "model.mlpackage") == package_content_hash(fresh / "model.mlpackage")
    # The manifest's hash (carried over from the parent for unchanged files) is the full recomputation.
    recorded = json.loads((new / "manifest.json").read_text())["package"]["content_hash"]
    assert recorded == package_content_hash(new / "model.mlpackage")


def test_reweighted_outputs_through_mil_equal_a_fresh_export(reweighted):
    _, source, new, fresh = reweighted
    checkpoint = load_checkpoint(str(source))
    runners = {}
    for name, directory in (("reweighted", new), ("fresh", fresh)):
        runners[name] = choose_backend("mil")
        runners[name].load(directory / "model.mlpackage")
    encodings = [encode_question(checkpoint.tokenizer, checkpoint.config.head, q) for q in load_questions()]
    for encoded in [e for e in encodings if e.num_tokens <= 96][:6]:
        inputs = body_inputs(checkpoint.config, checkpoint.tensors, encoded.input_ids, encoded.token_types,
                             encoded.marker_positions, 96)
        a = runners["reweighted"].predict(inputs)["option_logits"]
        b = runners["fresh"].predict(inputs)["option_logits"]
        assert np.array_equal(a, b)


def test_mismatched_architecture_is_refused(tiny_packages, tiny, tmp_path, capsys):
    parent, _ = tiny_packages.get("body", 96)
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((tiny.directory / "config.json").read_text())
    config["intermediate_size"] = 256  # wider FFN: other shapes
    (other / "config.json").write_text(json.dumps(config))
    shutil.copy(tiny.directory / "tokenizer.json", other)
    from checkpoint_support import checkpoint_tensors

    save_file(checkpoint_tensors(config, seed=3), str(other / "model.safetensors"))
    status = run_main(reweight.main,
                      ["--package", str(parent), "--source", str(other), "--output", str(tmp_path / "x")])
    assert status == 2 and not (tmp_path / "x").exists()
    assert "intermediate_size: 192 -> 256" in capsys.readouterr().err


def test_palettized_package_is_refused_with_the_way_forward(tiny_packages, tiny, tmp_path, capsys):
    from experiments.ane_engineering.workflows.palettize_candidate import palettize_candidate

    parent, _ = tiny_packages.get("body", 96)
    palettize_candidate(parent, tmp_path / "w8", 8, "kmeans", 32, workers=1)
    source = fine_tuned(tiny, tmp_path / "ft")
    status = run_main(reweight.main, ["--package", str(tmp_path / "w8"), "--source", str(source),
                                      "--output", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert status == 2 and "palettized" in err and "--bits 8 --mode kmeans --group-size 32" in err


def test_a_blob_that_matches_no_tensor_is_refused(tiny_packages, tiny, tmp_path):
    from experiments.ane_engineering.package import reweight as library

    parent, _ = tiny_packages.get("body", 96)
    values = library.module_tensors(tiny, json.loads((parent / "manifest.json").read_text()))
    values.pop("encoder_layers_0_attn_q_weight")
    with pytest.raises(library.ReweightError, match="encoder_layers_0_attn_q_weight_to_fp16"):
        library.plan_blobs(parent / "model.mlpackage", values)


@pytest.mark.parametrize("target", ["weight.bin", "model.mlmodel"])
def test_a_modified_parent_is_refused_before_anything_is_published(tiny_packages, tiny, tmp_path, capsys, target):
    """Even a flipped byte inside a blob that reweight would overwrite is refused: the parent's hash is checked
    whole (in a thread beside the write), and the cause is named before any later error."""
    parent, _ = tiny_packages.get("body", 96)
    copy = tmp_path / "parent"
    shutil.copytree(parent, copy)
    package = copy / "model.mlpackage"
    path = weight_file(package) if target == "weight.bin" else program_file(package)
    data = bytearray(path.read_bytes())
    if target == "weight.bin":
        last = list(read_blob_table(path).values())[-1]
        data[last.data_offset + last.size // 2] ^= 0x01
    else:
        data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    source = fine_tuned(tiny, tmp_path / "ft")
    status = run_main(reweight.main, ["--package", str(copy), "--source", str(source), "--output", str(tmp_path / "x")])
    assert status == 2 and "modified package" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x.*"))
