"""benchmark evidence schema, the paired --vs mode, and a rendered report whose every number is in its evidence."""

from __future__ import annotations

import json
import shutil

import pytest

from evidence_numbers import printed_numbers, unmatched_numbers
from experiments.ane_engineering import benchmark
from experiments.ane_engineering.benchmarking.timing import TimingError, paired_calls, ratio_summary, summarize
from experiments.ane_engineering.evidence.render import render_directory

CALLS = 4


@pytest.fixture(scope="module")
def evidence_dir(tiny_packages, tiny, tmp_path_factory):
    """A small reproduce-like directory: probe reports, a validation, a one-candidate sweep, benchmarks, ranges."""
    from experiments.ane_engineering import sweep, validate
    from experiments.ane_engineering.evidence.fp16_range import write_range_evidence

    root = tmp_path_factory.mktemp("evidence")
    for length in (96, 192):
        directory, _ = tiny_packages.get("body", length)
        (root / "packages" / f"body-{length}").mkdir(parents=True)
        shutil.copy(directory / "probe.json", root / "packages" / f"body-{length}" / "probe.json")
    body96, body192 = tiny_packages.get("body", 96)[0], tiny_packages.get("body", 192)[0]
    assert validate.main(["--package", str(body96), "--package", str(body192), "--backend", "mil", "--repeats", "2",
                          "--output", str(root / "validation.json")]) == 0
    assert sweep.main(["--package", str(body96), "--bits", "8", "--modes", "kmeans", "--group-sizes", "32",
                       "--jobs", "1", "--repeats", "1", "--output", str(root / "sweep")]) == 0
    (root / "benchmarks").mkdir()
    candidate = next((root / "sweep" / "candidates").glob("w8-*"))
    assert benchmark.main(["--package", str(body96), "--length", "96", "--backend", "mil", "--warmup", "1",
                           "--calls", str(CALLS), "--vs", str(candidate),
                           "--output", str(root / "benchmarks" / "body-96.json")]) == 0
    write_range_evidence(tiny, root / "fp16_range.json", lengths=(96, 192, 1024))
    return root


def test_benchmark_evidence_schema(evidence_dir, tiny):
    bench = json.loads((evidence_dir / "benchmarks" / "body-96.json").read_text())
    assert bench["format"] == "ane-engineering/evidence/benchmark/1" and bench["length"] == 96
    for part in ("component", "full_path"):
        timing = bench[part]["timing"]
        assert timing["n"] == CALLS == len(timing["raw_ms"])
        assert timing["min_ms"] <= timing["p50_ms"] <= timing["p95_ms"] <= timing["max_ms"]
        assert 0 < timing["min_ms"]
    assert bench["full_path"]["tokens"] <= 96 and bench["full_path"]["question"]
    assert bench["package"]["package_sha256"] and bench["package"]["load_seconds"] > 0
    assert bench["source"]["weights_sha256"] == tiny.weights_sha256
    assert bench["backend"]["backend"] == "mil" and bench["backend"]["platform"]
    assert {"platform", "cpu_count"} <= set(bench["machine"]) and bench["tools"]["coremltools"]
    assert len(bench["harness"]["sha256"]) == 64
    floors = bench["cost_model"]["floors"]["M3 Max"]
    assert 0 < floors["floor_ms"] and floors["bound"] in ("compute", "memory")


def test_vs_mode_pairs_every_call_in_one_process(evidence_dir):
    vs = json.loads((evidence_dir / "benchmarks" / "body-96.json").read_text())["vs"]
    assert vs["second"]["compression"]["bits"] == 8 and vs["first"]["compression"] is None
    for part in ("component", "full_path"):
        ratio = vs[part]["ratio"]
        first, second = vs[part]["first"]["raw_ms"], vs[part]["second"]["raw_ms"]
        assert ratio["n"] == len(first) == len(second) == CALLS
        assert ratio["raw"] == pytest.approx([b / a for a, b in zip(first, second)])


def test_paired_calls_interleave_in_abba_order():
    order = []
    a, b = paired_calls(lambda: order.append("A"), lambda: order.append("B"), warmup=1, calls=4)
    assert order == ["A", "B"] + ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert len(a) == len(b) == 4
    summary = ratio_summary([1.0, 2.0, 4.0], [2.0, 2.0, 2.0])
    assert summary["raw"] == [2.0, 1.0, 0.5] and summary["p50"] == 1.0
    with pytest.raises(TimingError):
        summarize([])


def test_every_number_in_the_rendered_report_is_in_an_evidence_file(evidence_dir):
    report = render_directory(evidence_dir)
    for section in ("## Export and placement", "## Validation", "## Palettization sweep", "## Timings", "## FP16 range"):
        assert section in report
    evidence = [p for p in evidence_dir.rglob("*.json") if not any(part.endswith(".mlpackage") for part in p.parts)]
    assert len(printed_numbers(report)) > 50
    assert unmatched_numbers(report, evidence) == []


def test_a_hand_typed_number_is_caught(evidence_dir):
    report = render_directory(evidence_dir) + "\nThe body runs in 1234.567 ms.\n"
    evidence = [p for p in evidence_dir.rglob("*.json") if not any(part.endswith(".mlpackage") for part in p.parts)]
    assert unmatched_numbers(report, evidence) == ["1234.567"]


def test_the_committed_report_is_rendered_from_committed_evidence():
    """ANE_BENCHMARKS.md is exactly what the renderer makes of benchmarks/evidence/, and every number in it is a
    field of those files (no hand-typed figures)."""
    from pathlib import Path

    from experiments.ane_engineering.evidence.render import render_repository

    repo = Path(__file__).resolve().parent.parent
    rendered = render_repository(repo)
    assert (repo / "ANE_BENCHMARKS.md").read_text(encoding="utf-8") == rendered, \
        "ANE_BENCHMARKS.md is stale: run python -m experiments.ane_engineering.evidence.render"
    evidence = sorted((repo / "benchmarks" / "evidence").rglob("*.json"))
    assert evidence and len(printed_numbers(rendered)) > 100
    assert unmatched_numbers(rendered, evidence) == []
