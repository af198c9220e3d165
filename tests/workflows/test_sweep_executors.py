"""`sweep --executor ray` makes byte-identical candidates and identical reports to the default local executor.

Ray's local mode (`ray.init(local_mode=True)`) is gone from the Ray versions that install here ("`local_mode` is no
longer supported"), so the test starts a real single-machine Ray runtime of two CPUs, which is what `--executor
ray` does without a cluster. Skipped when Ray is not installed (the `ray` extra)."""

from __future__ import annotations

import json

import pytest

from experiments.ane_engineering.core.cli import run_main

TIMES = ("seconds", "peak_rss", "load_", "_s")


def _without_times(value):
    """A report with every measured time (and the executor's name) taken out: what must be identical."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items()
                if k != "executor" and not any(k.startswith(t) or k.endswith(t) for t in TIMES)}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


@pytest.mark.slow
def test_ray_executor_gives_identical_candidates_and_reports(tiny_packages, tmp_path, capsys):
    pytest.importorskip("ray", reason="the optional ray extra is not installed (pip install 'ane-engineering[ray]')")
    from experiments.ane_engineering import sweep

    parent, _ = tiny_packages.get("body", 96)
    argv = ["--package", str(parent), "--bits", "8", "--modes", "kmeans", "--group-sizes", "32",
            "--weightings", "fisher", "--repeats", "1", "--jobs", "1"]
    assert run_main(sweep.main, argv + ["--output", str(tmp_path / "local")]) == 0
    assert run_main(sweep.main, argv + ["--executor", "ray", "--output", str(tmp_path / "ray")]) == 0
    local, ray = (json.loads((tmp_path / d / "sweep.json").read_text()) for d in ("local", "ray"))
    assert local["executor"] == "local" and ray["executor"] == "ray"
    assert [c["package_sha256"] for c in local["candidates"]] == [c["package_sha256"] for c in ray["candidates"]]
    assert all(c["package_sha256"] for c in local["candidates"]) and len(local["candidates"]) == 1
    assert _without_times(local) == _without_times(ray)
    assert (tmp_path / "local" / "sweep.md").read_bytes() == (tmp_path / "ray" / "sweep.md").read_bytes()
    for candidate in local["candidates"]:
        for name in ("validation.json", "palettize.json"):
            a, b = (json.loads((tmp_path / d / "candidates" / candidate["name"] / name).read_text())
                    for d in ("local", "ray"))
            assert _without_times(a) == _without_times(b), (candidate["name"], name)
        a, b = ((tmp_path / d / "candidates" / candidate["name"] / "manifest.json").read_bytes()
                for d in ("local", "ray"))
        assert a == b
    assert (tmp_path / "local" / "sensitivities.safetensors").read_bytes() == \
        (tmp_path / "ray" / "sensitivities.safetensors").read_bytes()
    capsys.readouterr()
