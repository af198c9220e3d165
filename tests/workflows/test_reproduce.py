"""reproduce: refuses an existing directory, and a failing stage stops the chain, says why and keeps its evidence
aside (never as the output directory). The full chain itself runs in CI-sized form in test_benchmark_and_render
and is timed by the reproduce command's own evidence (reproduce.json)."""

from __future__ import annotations

import json

import pytest

from command_support import run_command
from experiments.ane_engineering import reproduce
from experiments.ane_engineering.core.cli import run_main


def test_refuses_an_existing_directory(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert run_main(reproduce.main, ["--output", str(tmp_path / "run")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_failing_stage_stops_the_chain_and_says_why(tmp_path, monkeypatch, capsys):
    def broken_probe(argv):
        raise RuntimeError("conversion exploded")

    monkeypatch.setattr("experiments.ane_engineering.probe.main", broken_probe)
    assert reproduce.main(["--output", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "stage 'probe body L96' failed" in err and "conversion exploded" in err
    assert not (tmp_path / "run").exists()
    (failed,) = tmp_path.glob("run.failed-*")
    log = json.loads((failed / "reproduce.json").read_text())
    assert [s["status"] for s in log["stages"]] == ["ok", "failed"]
    assert "conversion exploded" in log["stages"][-1]["error"]


@pytest.mark.slow
def test_help_lists_the_stages():
    result = run_command("reproduce", "--help")
    assert result.returncode == 0
    for word in ("probe", "golden", "validate", "sweep", "benchmark", "ANE_BENCHMARKS.md", "--source"):
        assert word in result.stdout
