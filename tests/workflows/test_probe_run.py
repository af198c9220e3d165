"""The probe: exports of every kind and bucket, manifests, determinism, atomicity and placement evidence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from command_support import command_env, refused_process, run_command
from experiments.ane_engineering import probe
from experiments.ane_engineering.core.buckets import BUCKET_LENGTHS
from experiments.ane_engineering.package.manifest import read_manifest
from experiments.ane_engineering.package.package_hash import package_content_hash

pytestmark = pytest.mark.slow  # every test here converts, exports or starts Python

BC1S_KINDS = ("mlp", "layer", "encoder", "body")


@pytest.mark.parametrize("length", BUCKET_LENGTHS)
@pytest.mark.parametrize("kind", BC1S_KINDS)
def test_every_kind_and_bucket_exports_with_zero_static_violations(tiny_packages, kind, length):
    directory, report = tiny_packages.get(kind, length)
    assert report["passed"], report["layout_check"]
    assert report["layout_check"]["max_abs"] <= report["layout_check"]["tolerance"]
    static = report["placement"]["static"]
    assert static["violations"] == 0, static["findings"][:5]
    assert static["label"].startswith("prediction")
    assert report["ane_gate"]["passed"]
    assert report["mil_ops"]["non_constant"] > 0
    assert report["export"]["convert_seconds"] > 0 and report["export"]["peak_rss_bytes"] > 0
    # The files of a probe directory: the package, its probe report and a manifest that describes this export.
    assert sorted(p.name for p in directory.iterdir()) == ["manifest.json", "model.mlpackage", "probe.json"]
    manifest = read_manifest(directory)
    assert (manifest["kind"], manifest["length"]) == (kind, length)
    assert (manifest["package"]["content_hash"]["sha256"]
            == package_content_hash(directory / "model.mlpackage")["sha256"])
    assert manifest["source"]["weights_sha256"] == tiny_packages.checkpoint.weights_sha256
    for contract in manifest["io"]["inputs"] + manifest["io"]["outputs"]:
        assert contract["dtype"] == "float16" and contract["meaning"]
        assert len(contract["shape"]) == 4 and contract["shape"][2] == 1  # (B, C, 1, S)
        if contract["name"] != "option_logits":
            assert length in contract["shape"]
    assert {"python", "torch", "coremltools", "numpy"} <= set(manifest["tools"])
    assert len(manifest["harness"]["sha256"]) == 64


def test_baseline_export_shows_its_violations(tiny_packages):
    _, report = tiny_packages.get("baseline", 96)
    static = report["placement"]["static"]
    rules_hit = {finding["rule"] for finding in static["findings"]}
    assert static["violations"] > 0
    assert {"ANE-R07-gather", "ANE-R08-sdpa", "ANE-R02-bc1s-form"} <= rules_hit
    assert report["mil_ops"]["by_type"].get("gather", 0) > 0
    # The in-graph nn.Embedding also brings int casts (placement/rules/sources.py cites this test as that measurement).
    assert report["mil_ops"]["by_type"].get("cast", 0) > 0 and static["findings_by_rule"].get("ANE-R13-cast", 0) > 0


def test_require_ane_gate_fails_the_baseline_and_passes_the_body(tmp_path, capsys):
    assert probe.main(["--kind", "baseline", "--length", "96", "--output", str(tmp_path / "b"), "--require-ane",
                       "--quiet"]) == 1
    report = json.loads((tmp_path / "b" / "probe.json").read_text())
    assert report["passed"] is False and report["ane_gate"]["reasons"]
    assert probe.main(["--kind", "mlp", "--length", "96", "--output", str(tmp_path / "m"), "--require-ane",
                       "--quiet"]) == 0


def test_probe_refuses_an_existing_output_directory(tmp_path):
    existing = tmp_path / "out"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    result = run_command("probe", "--kind", "mlp", "--output", str(existing))
    refused_process(result, "already exists")
    assert sorted(p.name for p in existing.iterdir()) == ["keep.txt"]


def test_two_exports_of_the_same_source_have_the_same_content_hash(tiny_packages, tmp_path):
    first, _ = tiny_packages.get("encoder", 96)
    assert probe.main(["--kind", "encoder", "--length", "96", "--output", str(tmp_path / "again"), "--quiet"]) == 0
    a, b = read_manifest(first), read_manifest(tmp_path / "again")
    assert a["package"]["content_hash"] == b["package"]["content_hash"]
    # Only the UUID-keyed Manifest.json differs byte-wise; the canonical hash covers it without the UUIDs.
    raw_a = (first / "model.mlpackage" / "Manifest.json").read_text()
    raw_b = (tmp_path / "again" / "model.mlpackage" / "Manifest.json").read_text()
    assert raw_a != raw_b


def test_content_hash_changes_when_one_weight_byte_changes(tiny_packages, tmp_path):
    import shutil

    source, _ = tiny_packages.get("mlp", 96)
    copy = tmp_path / "copy.mlpackage"
    shutil.copytree(source / "model.mlpackage", copy)
    before = package_content_hash(copy)["sha256"]
    weights = next(copy.rglob("weight.bin"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert package_content_hash(copy)["sha256"] != before


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_an_export_killed_part_way_leaves_no_output_directory(tmp_path, sig):
    output = tmp_path / "killed"
    # The baseline at L1024 is the slowest export (default pass pipeline, full-length trace): time to interrupt it.
    process = subprocess.Popen([sys.executable, "-m", "experiments.ane_engineering.probe", "--kind", "baseline",
                                "--length", "1024", "--output", str(output)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=command_env())
    deadline = time.time() + 120
    # Wait until the export is under way (its staging directory exists), then kill it.
    while not any(p.name.startswith(".killed.") for p in tmp_path.iterdir()):
        assert process.poll() is None, process.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    time.sleep(0.2)
    assert process.poll() is None, "the export finished before it could be interrupted"
    os.kill(process.pid, sig)
    process.wait(timeout=60)
    assert not output.exists()
    if sig == signal.SIGTERM:  # a catchable signal also cleans up the staging directory
        assert not any(p.name.startswith(".killed.") for p in tmp_path.iterdir())


def test_probe_help_explains_kinds():
    result = run_command("probe", "--help")
    assert result.returncode == 0
    for word in ("mlp", "layer", "encoder", "body", "baseline", "--require-ane", "--length"):
        assert word in result.stdout
