"""The scripts in benchmarks/ are thin wrappers over workflows/benchmarks/: they refuse bad requests the way the
commands do (one `error: ` line, exit 2, nothing written), and the evidence logic they share is tested here from the
library, without running a full-size benchmark."""

from __future__ import annotations

import importlib.util
import json

import pytest

from command_support import REPO, refused
from experiments.ane_engineering.workflows.benchmarks.executor_bit_identity import VOLATILE, differences
from experiments.ane_engineering.workflows.benchmarks.executor_models import model_names
from experiments.ane_engineering.workflows.benchmarks.steps import BenchmarkError, last_error_line, parse_lengths

WRAPPERS = {  # script -> arguments it needs besides --output
    "probe_export": [],
    "reweight_vs_export": ["--package", "no-such-package"],
    "executor_bit_identity": ["--work", "no-such-work"],
    "mil_executor": ["--package", "no-such-package"],
    "executor_models": [],
    "execute_startup": [],
}


def wrapper(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmark_script_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", WRAPPERS)
def test_a_wrapper_refuses_an_existing_output_in_one_line(name, tmp_path, capsys):
    output = tmp_path / "evidence.json"
    output.write_text("{}", encoding="utf-8")
    line = refused(wrapper(name).main, [*WRAPPERS[name], "--output", str(output)], capsys, "already exists")
    assert str(output) in line and output.read_text(encoding="utf-8") == "{}"


@pytest.mark.parametrize("name, argv, needle", [
    ("probe_export", ["--lengths", "96,x"], "--lengths must be comma-separated integers"),
    ("probe_export", ["--lengths", "96,96"], "--lengths must be distinct positive integers"),
    ("executor_models", ["--models", "mlp", "no-such-model"], "unknown model(s) no-such-model"),
    ("mil_executor", ["--package", "no-such-package", "--rounds", "0"], "--rounds must be at least 1"),
    ("execute_startup", ["--repeats", "0"], "--repeats must be at least 1"),
])
def test_a_wrapper_refuses_a_bad_value_before_any_work(name, argv, needle, tmp_path, capsys):
    output = tmp_path / "evidence.json"
    refused(wrapper(name).main, [*argv, "--output", str(output)], capsys, needle, output=output)


def test_lengths_are_parsed_in_order():
    assert parse_lengths("96,1024,192") == [96, 1024, 192]
    for text in ("", "0", "-96", "96,", "9.6"):
        with pytest.raises(BenchmarkError):
            parse_lengths(text)


def test_the_zoo_defaults_to_every_model_and_keeps_a_requested_order():
    assert len(model_names(None)) > 4 and model_names(["mlp", "bert"]) == ["mlp", "bert"]


def test_a_failed_step_is_quoted_by_its_error_line():
    assert last_error_line("progress\nerror: the package is damaged\n\n") == "error: the package is damaged"
    assert last_error_line("Traceback (most recent call last):\n  ...\nValueError: bad\n") == "ValueError: bad"
    assert last_error_line("") == "(no output)"


def test_differences_ignore_only_the_volatile_fields():
    a = {"passed": True, "seconds": 1.0, "buckets": {"96": {"errors": [0.5, 0.25], "harness": "x"}}}
    assert differences(a, {**a, "seconds": 2.0, "buckets": {"96": {"errors": [0.5, 0.25], "harness": "y"}}}) == []
    assert differences(a, {**a, "buckets": {"96": {"errors": [0.5, 0.26], "harness": "x"}}}) == [
        "/buckets/96/errors[1]"]
    assert differences(a, {**a, "passed": False, "extra": 1}) == ["/extra (present in one only)", "/passed"]
    assert differences([1, 2], [1, 2, 3]) == ["/"] and "seconds" in VOLATILE


def test_the_conformance_rerun_takes_the_failed_cases_functions(tmp_path):
    evidence = tmp_path / "conformance.json"
    cases = ["iOS14/test_random.py::TestRandomNormal::test_builder_to_backend_stress[mlprogram-fp16-iOS15-rank=1]",
             "iOS14/test_random.py::TestRandomNormal::test_builder_to_backend_stress[mlprogram-fp16-iOS15-rank=2]",
             "iOS14/test_random.py::TestRandomUniform::test_builder_to_backend_smoke[mlprogram-fp16-iOS15]",
             "iOS17/test_scatter_gather.py::TestScatter::test_ios17_invalid_indices[x]"]
    evidence.write_text(json.dumps({"failures": [{"case": c, "reason": ""} for c in cases]}), encoding="utf-8")
    assert wrapper("executor_conformance").failing_functions(evidence) == {
        "iOS14/test_random.py": ["iOS14/test_random.py::TestRandomNormal::test_builder_to_backend_stress",
                                 "iOS14/test_random.py::TestRandomUniform::test_builder_to_backend_smoke"],
        "iOS17/test_scatter_gather.py": ["iOS17/test_scatter_gather.py::TestScatter::test_ios17_invalid_indices"]}


def test_the_conformance_benchmark_refuses_an_offset_outside_its_stride(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        wrapper("executor_conformance").main(["--output", str(tmp_path / "e.json"), "--sample-every", "4",
                                              "--sample-offset", "4"])
    assert stop.value.code == 2 and "--sample-offset must be in [0, 4)" in capsys.readouterr().err
    assert not (tmp_path / "e.json").exists()
