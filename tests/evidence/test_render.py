"""benchmark evidence schema, the paired --vs mode, and a rendered report whose every number is the evidence field it
was rendered from (an edit of one figure, in the evidence or in the report, is caught)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from command_support import REPO
from experiments.ane_engineering import benchmark
from experiments.ane_engineering.core.provenance import portable_path
from experiments.ane_engineering.evidence.benchmarking.timing import (
    TimingError,
    paired_calls,
    ratio_summary,
    summarize,
)
from experiments.ane_engineering.evidence.ledger import (
    ReportError,
    check_report,
    printed_numbers,
)
from experiments.ane_engineering.evidence.render import render_directory, render_repository
from experiments.ane_engineering.evidence.sections_full_size import REFERENCE_RUN_FILE
from experiments.ane_engineering.render import main as render_main  # the --check command
from experiments.ane_engineering.validation.golden import COMMITTED_TINY_GOLDEN

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


@pytest.mark.slow
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
    floors = bench["cost_model"]["floors"]["m3-max"]
    assert 0 < floors["floor_ms"] and floors["bound"] in ("compute", "memory")


@pytest.mark.slow
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


@pytest.mark.slow
def test_evidence_names_no_directory_of_the_machine(evidence_dir, tiny_packages):
    """Paths are recorded relative to the evidence file that names them (a staging directory renamed to the output,
    or a run moved into the repository, keeps them true); one sharing no directory with it is named alone."""
    body96 = tiny_packages.get("body", 96)[0]
    for path in evidence_dir.rglob("*.json"):
        if any(part.endswith(".mlpackage") for part in path.parts):
            continue
        text = path.read_text(encoding="utf-8")
        assert str(evidence_dir) not in text and str(body96.parent) not in text, path
        assert not re.search(r'"/(tmp|root|home|work|usr)/', text), path
    sweep_dir = evidence_dir / "sweep"
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    assert (sweep_dir / sweep["parent"]["path"]).resolve() == body96.resolve()
    for row in [sweep["baseline"]] + sweep["candidates"]:
        assert (sweep_dir / row["validation"]).is_file()
    (candidate,) = sweep["candidates"]
    assert (sweep_dir / candidate["package"]).resolve() == (sweep_dir / "candidates" / candidate["name"]).resolve()
    manifest = json.loads((sweep_dir / candidate["package"] / "manifest.json").read_text())
    assert (sweep_dir / candidate["package"] / manifest["parent"]["path"]).resolve() == body96.resolve()
    validation = json.loads((evidence_dir / "validation.json").read_text())
    golden = validation["golden"]["path"]  # the committed golden lives in the repository, wherever that is
    if os.path.commonpath([COMMITTED_TINY_GOLDEN.resolve(), evidence_dir.resolve()]) == "/":
        assert golden == COMMITTED_TINY_GOLDEN.name
    else:  # the checkout and the scratch evidence share a directory (a clone under /tmp): a relative path
        assert not golden.startswith("/") and (evidence_dir / golden).resolve() == COMMITTED_TINY_GOLDEN.resolve()
    assert "package" not in validation["backend"]  # it loaded a private verified copy, gone after the run
    bench = json.loads((evidence_dir / "benchmarks" / "body-96.json").read_text())
    assert ((evidence_dir / "benchmarks" / bench["cost_model"]["package"]).resolve()
            == (body96 / "model.mlpackage").resolve())


def test_committed_evidence_names_no_directory_of_the_machine_that_made_it():
    machine_path = re.compile(r"(^|[\s\"'`(])/(tmp|root|home|work|Users|usr|opt|var|private)/")
    files = [REPO / "ANE_BENCHMARKS.md", *sorted((REPO / "benchmarks" / "evidence").rglob("*.json")),
             *sorted((REPO / "benchmarks" / "evidence").rglob("*.md"))]
    assert len(files) > 40
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            assert not machine_path.search(line), f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}"


def test_portable_path(tmp_path):
    run = tmp_path / "run"
    assert portable_path(run / "packages" / "body-96", run) == "packages/body-96"
    assert portable_path(run / "packages" / "body-96", run / "sweep") == "../packages/body-96"
    assert portable_path("/opt/elsewhere/golden.json", run) == "golden.json"


@pytest.mark.slow
def test_every_number_in_the_rendered_report_is_a_figure_of_its_evidence(evidence_dir):
    rendered = render_directory(evidence_dir)
    for section in ("## Export and placement", "## Validation", "## Palettization sweep", "## Timings",
                    "## FP16 range"):
        assert section in rendered.text
    assert len(rendered.figures) > 50 and len(printed_numbers(rendered.text)) > 50
    assert check_report(rendered.text, rendered.figures, evidence_dir) == []
    files = {figure.file for figure in rendered.figures}
    assert {"validation.json", "sweep/sweep.json", "fp16_range.json", "benchmarks/body-96.json"} <= files


@pytest.mark.slow
def test_a_hand_typed_number_is_caught(evidence_dir):
    rendered = render_directory(evidence_dir)
    problems = check_report(rendered.text + "\nThe body runs in 1234.567 ms.\n", rendered.figures, evidence_dir)
    assert len(problems) == 1 and "'1234.567' is not a figure" in problems[0]


def test_the_committed_report_is_rendered_from_committed_evidence():
    """ANE_BENCHMARKS.md is exactly what the renderer makes of benchmarks/evidence/ and the reference run, and every
    number in it is the field of the file it was rendered from (no hand-typed figures)."""
    rendered = render_repository(REPO)
    assert (REPO / "ANE_BENCHMARKS.md").read_text(encoding="utf-8") == rendered.text, \
        "ANE_BENCHMARKS.md is stale: run python -m experiments.ane_engineering.render"
    assert len(rendered.figures) > 300
    assert check_report(rendered.text, rendered.figures, REPO) == []
    assert render_main(["--check"]) == 0
    reproduce_run = REPO / "benchmarks" / "evidence" / "reproduce-builtin-tiny"
    run_report = render_directory(reproduce_run)
    assert (reproduce_run / "ANE_BENCHMARKS.md").read_text(encoding="utf-8") == run_report.text
    assert check_report(run_report.text, run_report.figures, reproduce_run) == []


# ---------------------------------------------------------------------------------------------------------------
# One edited figure, in the evidence or in the report, is caught.

@pytest.fixture(scope="module")
def repository_copy(tmp_path_factory):
    """The files ANE_BENCHMARKS.md is rendered from, in a scratch repository, with the committed report."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO / "benchmarks" / "evidence", root / "benchmarks" / "evidence")
    (root / REFERENCE_RUN_FILE).parent.mkdir(parents=True)
    shutil.copy(REPO / REFERENCE_RUN_FILE, root / REFERENCE_RUN_FILE)
    committed = (REPO / "ANE_BENCHMARKS.md").read_text(encoding="utf-8")
    rendered = render_repository(root)
    assert rendered.text == committed and check_report(committed, rendered.figures, root) == []
    return root, committed, rendered.figures


def _figure(figures, file, path):
    (figure,) = [f for f in figures if f.file == file and f.path == path]
    return figure


def _edited(root, file, path, value):
    """Write `value` at `path` of `file` (under `root`); return a function that puts the original back."""
    target = root / file
    original = target.read_text(encoding="utf-8")
    data = json.loads(original)
    holder = data
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    target.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return lambda: target.write_text(original, encoding="utf-8")


EVIDENCE_EDITS = [  # (file, JSON path, new value): each changes one printed figure
    ("benchmarks/evidence/mil_executor_mmbert_base_shape.json", ("ratio_p50",), 1.71),  # digits swapped
    ("benchmarks/evidence/probe_export_mmbert_base_shape.json", ("runs", 1, "convert_seconds"), 81.0),
    ("benchmarks/evidence/cost_model_mmbert_base_shape.json", ("reference_check", "rows", 0, "ratio_to_floor"), 2.23),
    ("benchmarks/evidence/reweight_mmbert_base_shape.json", ("warm_in_one_process", "reweight_seconds", 2), 0.258),
    ("benchmarks/evidence/reproduce-builtin-tiny/validation.json", ("summary", "192", "max_calibrated_error"), 0.00421),
    ("benchmarks/evidence/reproduce-builtin-tiny/sweep/sweep.json", ("candidates", 3, "package_mb"), 1.501),
    ("benchmarks/evidence/fp16_range_mmbert_base_shape.json", ("summary", "groups", "encoder.attn.k", "max_abs_all"),
     12.4),
    (REFERENCE_RUN_FILE, ("placement", "bc1s_export", "on_ane"), 6930),
    ("benchmarks/evidence/cost_calibration_mmbert_base_shape.json", ("fit", "points", 1, "predicted_ms"), 4.9),
    ("benchmarks/evidence/long_attention_mmbert_base_shape.json", ("measured_mil_ratio",), 0.5),
]


@pytest.mark.parametrize("file, path, value", EVIDENCE_EDITS,
                         ids=[f"{f.split('/')[-1]}:{p[-1]}" for f, p, _ in EVIDENCE_EDITS])
def test_a_figure_edited_in_the_evidence_is_caught(repository_copy, file, path, value):
    root, committed, figures = repository_copy
    figure = _figure(figures, file, path)
    restore = _edited(root, file, path, value)
    try:
        # The committed report's ledger re-read: the file no longer gives the printed text.
        problems = check_report(committed, figures, root)
        assert len(problems) == 1 and f"offset {figure.start}:" in problems[0] and repr(figure.text) in problems[0]
        # A fresh render prints the new value where the committed report has the old one.
        fresh = render_repository(root)
        assert fresh.text != committed
        assert [p for p in check_report(committed, fresh.figures, root) if f"offset {figure.start}:" in p]
    finally:
        restore()


def test_a_reference_timing_edited_without_rerunning_the_cost_model_is_refused(repository_copy):
    root, committed, figures = repository_copy
    path = ("timings", "measurements", 0, "p50_ms")
    restore = _edited(root, REFERENCE_RUN_FILE, path, 4.043)
    try:
        assert len(check_report(committed, figures, root)) == 1
        with pytest.raises(ReportError, match="rerun benchmarks/cost_model.py"):
            render_repository(root)
    finally:
        restore()


def test_a_figure_edited_in_the_report_is_caught(repository_copy):
    root, committed, figures = repository_copy
    mil = _figure(figures, "benchmarks/evidence/mil_executor_mmbert_base_shape.json", ("ratio_p50",))
    assert mil.text == "1.17"
    edits = [mil] + [f for f in figures if sum(c.isdigit() for c in f.text) >= 2][::37]
    assert len({f.file for f in edits}) >= 5
    for figure in edits:
        digits = [i for i, c in enumerate(figure.text) if c.isdigit()]
        changed = list(figure.text)
        changed[digits[-1]] = str((int(changed[digits[-1]]) + 1) % 10)   # one digit: "1.17" -> "1.18"
        edited = committed[:figure.start] + "".join(changed) + committed[figure.start + len(figure.text):]
        problems = check_report(edited, figures, root)
        assert len(problems) == 1 and f"offset {figure.start}:" in problems[0], (figure, problems)
    swapped = committed[:mil.start] + "1.71" + committed[mil.start + len(mil.text):]
    assert check_report(swapped, figures, root) == [
        f"offset {mil.start}: the report prints '1.71' where {mil.describe()} gives '1.17'"]
