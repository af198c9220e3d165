"""A fixed sample of coremltools' own MIL op tests, their Core ML predictions answered by the mil executor.

The whole suite runs in benchmarks/executor_conformance.py (evidence/executor_conformance_offset*.json); here a fixed
handful of its test functions runs through the same plugin in a pytest subprocess, and one case runs in process
with a deliberately broken handler to show that the suite's comparison reaches the executor's numbers.

coremltools compares fp16 programs loosely (compare_backend widens atol to 0.5 and rtol to 0.05 for fp16): the
suite catches wrong semantics (an offset, a wrong axis, a missing gate), not ulp-level errors; the executor's own
per-op tests hold it to fp16 ulps.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("coremltools")

from experiments.ane_engineering.run.mil.coremltools_suite import (
    NEURALNETWORK_REASON,
    installed,
    suite_directory,
)
from experiments.ane_engineering.run.mil.registry import OPS

# One test function of each of several op families (activation, pooling, gather, normalization, recurrent); within
# a function the 1st, (N+1)th ... case (coremltools' parametrization order), so the sample is fixed.
SAMPLE = [
    "iOS14/test_activation.py::TestReLU6::test_builder_to_backend_smoke",
    "iOS14/test_activation.py::TestLeakyReLU::test_builder_to_backend_smoke",
    "iOS14/test_pool.py::TestMaxPool::test_builder_to_backend_smoke",
    "iOS14/test_scatter_gather.py::TestGatherNd::test_builder_to_backend_smoke",
    "iOS14/test_normalization.py::TestNormalizationBatchNorm::test_builder_to_backend_smoke",
    "iOS17/test_recurrent.py::TestRNN::test_builder_to_backend_smoke",
]
SAMPLE_EVERY = 100


@pytest.mark.slow
def test_fixed_sample_of_the_suite_passes_through_the_executor(tmp_path):
    """The plugin in a nested pytest session (in process: torch and coremltools are already imported)."""
    from experiments.ane_engineering.run.mil import coremltools_suite

    suite = suite_directory()
    report = tmp_path / "report.jsonl"
    args = ["-q", "-p", "no:cacheprovider", "--mil-report", str(report), "--mil-sample-every", str(SAMPLE_EVERY),
            "-o", "addopts=", "--rootdir", str(suite), *[str(suite / s) for s in SAMPLE]]
    with installed():  # the plugin patches coremltools for its session; the originals come back afterwards
        status = pytest.main(args, plugins=[coremltools_suite])
    records = [json.loads(line) for line in report.read_text().splitlines()]
    ran = [r for r in records if r["outcome"] != "not_sampled"]
    failed = [f"{r['nodeid']}: {r['reason']}" for r in ran if r["outcome"] in ("failed", "error")]
    assert not failed, "\n".join(failed)
    assert status == 0
    predicted = [r for r in ran if r["predicted"] and r["outcome"] == "passed"]
    # every sampled test function had cases whose program the executor ran and compared
    assert {r["nodeid"].split("[")[0].split("::", 1)[1] for r in predicted} == {s.split("::", 1)[1] for s in SAMPLE}
    for r in ran:  # a neuralnetwork case never counts as passed: it is skipped by name
        assert r["backend"] != "neuralnetwork" or (r["outcome"], r["reason"]) == ("skipped", NEURALNETWORK_REASON)


def _relu6_case():
    import coremltools as ct
    from coremltools.converters.mil.mil.ops.tests.iOS14.test_activation import TestReLU6
    from coremltools.converters.mil.testing_reqs import BackendConfig

    backend = BackendConfig(backend="mlprogram", precision="fp16", opset_version=ct.target.iOS17)
    return lambda: TestReLU6().test_builder_to_backend_smoke(compute_unit=ct.ComputeUnit.CPU_ONLY, backend=backend)


@pytest.mark.slow
def test_the_suite_fails_when_a_handler_is_wrong(monkeypatch):
    """In process: coremltools' relu6 case passes through the executor, and fails once relu6 is off by one."""
    case = _relu6_case()
    with installed():
        case()  # passes: the executor's relu6 matches coremltools' expected output
        original = OPS["relu6"].handler
        monkeypatch.setitem(OPS, "relu6", dataclasses.replace(
            OPS["relu6"], handler=lambda node, args, num: np.asarray(original(node, args, num)) + num.c(1)))
        with pytest.raises(AssertionError, match="Not equal to tolerance"):
            case()


def test_installed_restores_coremltools():
    from coremltools.converters.mil import testing_utils
    from coremltools.models import MLModel

    before = (testing_utils._IS_MACOS, testing_utils.run_core_ml_predict, MLModel.predict)
    with installed():
        assert testing_utils._IS_MACOS is True
    assert (testing_utils._IS_MACOS, testing_utils.run_core_ml_predict, MLModel.predict) == before


def test_offsets_of_a_stride_cover_every_case_once():
    """The suite's sampling: offset K of stride N keeps the cases at index K, K+N ... of each test function, so the
    N offsets partition the collection (no case twice, none left out), and a bad offset is refused."""
    from experiments.ane_engineering.run.mil.coremltools_suite import parse_macos_version, select

    # two test functions interleaved as pytest may order them, 7 and 3 cases
    nodeids = [f"f.py::T::a[{i}]" for i in range(4)] + [f"f.py::T::b[{i}]" for i in range(3)] + \
              [f"f.py::T::a[{i}]" for i in range(4, 7)]
    seen = []
    for offset in range(4):
        kept, dropped = select(nodeids, 4, offset)
        assert sorted(kept + dropped) == list(range(len(nodeids)))
        seen += kept
    assert sorted(seen) == list(range(len(nodeids)))
    assert [nodeids[i] for i in select(nodeids, 4, 1)[0]] == ["f.py::T::a[1]", "f.py::T::b[1]", "f.py::T::a[5]"]
    assert [nodeids[i] for i in select(nodeids, 4, 0)[0]] == ["f.py::T::a[0]", "f.py::T::b[0]", "f.py::T::a[4]"]
    assert select(nodeids, 1, 0) == (list(range(len(nodeids))), [])
    for every, offset in ((4, 4), (4, -1), (0, 0)):
        with pytest.raises(pytest.UsageError):
            select(nodeids, every, offset)
    assert parse_macos_version("15.2") == (15, 2)
    for bad in ("14.6", "fifteen", ""):
        with pytest.raises(pytest.UsageError):
            parse_macos_version(bad)


def test_only_fp16_overflows_of_values_beyond_its_range_are_explained():
    """The plugin's FP16-range explanation holds only where the expected value lies beyond FP16's range and the
    prediction is the infinity of that sign; any other difference stays a failure."""
    from experiments.ane_engineering.run.mil.coremltools_suite import beyond_fp16_only

    expected = np.array([5.8e5, -7.0e4, 12.0, 3.0], np.float32)
    tol = {"atol": 0.5, "rtol": 0.05}
    assert beyond_fp16_only(np.array([np.inf, -np.inf, 12.1, 3.0]), expected, **tol)
    assert not beyond_fp16_only(np.array([np.inf, -np.inf, 14.0, 3.0]), expected, **tol)  # a real error beside
    assert not beyond_fp16_only(np.array([-np.inf, -np.inf, 12.0, 3.0]), expected, **tol)  # the wrong sign
    assert not beyond_fp16_only(np.array([5.8e5, -7.0e4, np.inf, 3.0]), expected, **tol)  # inf where FP16 holds it
    assert not beyond_fp16_only(expected.astype(np.float64), expected, **tol)  # nothing differs: not this reason
    assert not beyond_fp16_only(np.array([np.inf, -np.inf]), expected, **tol)  # another shape
