"""The op suite's offsets assembled into one evidence file (workflows/benchmarks/suite_offsets.py): per-offset counts
from whole test files, a rerun of a file replacing that file's counts, and the coverage check that refuses an
offset set that misses or repeats a case."""

from __future__ import annotations

import json

import pytest

from experiments.ane_engineering.core.errors import HarnessError
from experiments.ane_engineering.workflows.benchmarks.suite_offsets import (
    OUTCOMES,
    assemble,
)

FILE = "iOS14/test_conv.py"


def counts(**given) -> dict:
    return {o: given.get(o, 0) for o in OUTCOMES}


def evidence(tmp_path, name, offset, per_class, cases=4, failures=(), exclusions=(), every=2, version="15.2",
             **selection):
    data = {"selection": {"sample_every": every, "sample_offset": offset, "macos_version_reported": version,
                          "files_not_run_budget": [], **selection},
            "files": {FILE: {"cases": cases}},
            "per_test_class": {f"{FILE}::{cls}": row for cls, row in per_class.items()},
            "failures": list(failures), "exclusions": list(exclusions),
            "harness": {"sha256": "0" * 64}, "wall_seconds": 1.0}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def two_offsets(tmp_path, *, second_passed=2):
    skip = {"reason": "neuralnetwork backend", "cases": 1, "per_test_class": {f"{FILE}::TestConv": 1}}
    first = evidence(tmp_path, "o0.json", 0, {"TestConv": counts(passed=1, skipped=1, not_sampled=2)},
                     exclusions=[skip])
    failure = {"case": f"{FILE}::TestConv::test_x[a]", "opset": "iOS15", "reason": "AssertionError"}
    second = evidence(tmp_path, "o1.json", 1, {"TestConv": counts(passed=second_passed - 1, failed=1, not_sampled=2)},
                      failures=[failure])
    return first, second


def test_offsets_sum_and_each_case_runs_once(tmp_path):
    out = assemble(list(two_offsets(tmp_path)))
    assert out["offsets"]["0"]["total"] == counts(passed=1, skipped=1, not_sampled=2)
    assert out["offsets"]["0"]["exclusions"] == {"neuralnetwork backend": 1}
    assert out["offsets"]["1"]["unexplained_failures"] == 1 and out["unexplained_failures"] == 1
    assert out["coverage"] == {"test_files": 1, "cases": 4, "cases_run": 4, "each_case_once": True}
    assert out["total"]["passed"] == 2 and "not_sampled" not in out["total"]


def test_a_rerun_of_the_file_replaces_its_counts(tmp_path):
    first, second = two_offsets(tmp_path)
    rerun = evidence(tmp_path, "o1_rerun.json", 1, {"TestConv": counts(passed=2, not_sampled=2)})
    out = assemble([first, second, rerun])
    assert out["offsets"]["1"]["total"] == counts(passed=2, not_sampled=2)
    assert out["offsets"]["1"]["failures"] == [] and out["unexplained_failures"] == 0
    assert out["offsets"]["1"]["test_files_from"] == {FILE: "o1_rerun.json"}
    assert [s["file"] for s in out["sources"]] == ["o0.json", "o1.json", "o1_rerun.json"]


def test_an_offset_that_repeats_a_case_is_refused(tmp_path):
    first, second = two_offsets(tmp_path, second_passed=3)  # 1 + 1 + 3 cases ran of 4
    with pytest.raises(HarnessError, match="do not cover each case once.*5 cases ran over the offsets, 4 collected"):
        assemble([first, second])


def test_collections_that_differ_between_offsets_are_refused(tmp_path):
    first, _ = two_offsets(tmp_path)
    other = evidence(tmp_path, "o1.json", 1, {"TestConv": counts(passed=2, not_sampled=3)}, cases=5)
    with pytest.raises(HarnessError, match="cases collected per offset"):
        assemble([first, other])


def test_missing_offsets_mixed_versions_and_partial_runs_are_refused(tmp_path):
    first, second = two_offsets(tmp_path)
    with pytest.raises(HarnessError, match=r"no evidence for offset\(s\) \[1\]"):
        assemble([first])
    late = evidence(tmp_path, "o1v.json", 1, {"TestConv": counts(passed=2, not_sampled=2)}, version="15.0")
    with pytest.raises(HarnessError, match="mix strides"):
        assemble([first, late])
    functions = evidence(tmp_path, "f.json", 1, {"TestConv": counts(passed=2, not_sampled=2)},
                         functions_failing_in="o1.json")
    with pytest.raises(HarnessError, match="single test functions"):
        assemble([first, second, functions])
    budget = evidence(tmp_path, "b.json", 1, {"TestConv": counts(passed=2, not_sampled=2)},
                      files_not_run_budget=["iOS18/test_states.py"])
    with pytest.raises(HarnessError, match="time budget left files out"):
        assemble([first, budget])
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"selection": {"sample_every": 4}, "per_test_class": {}}))
    with pytest.raises(HarnessError, match="with a sample offset"):
        assemble([old])
