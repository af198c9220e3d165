"""coremltools' own tests of stateful models, their Core ML predictions answered by the executor through the predict
shim (states, and pictures for the image cases): the torch frontend's test_torch_stateful_model.py (KV caches, in-place
buffer updates, ImageType inputs and outputs with state) and the iOS18 op tests of read_state / coreml_update_state.

They run on macOS 15+ only: the op suite's plugin (run/mil/coremltools_suite.py) turns coremltools' prediction path
on and answers it, routing its stateful and picture cases to predict_shim.predict_with_executor; the
torch module's `skipif(ct.utils._macos_version() < (15, 0))` sees 15.0 while it is collected. Every case must pass
(or be one coremltools itself marks xfail) with a prediction made by the executor."""

from __future__ import annotations

import json

import pytest

ct = pytest.importorskip("coremltools")
pytest.importorskip("torch")
pytest.importorskip("PIL")

pytestmark = pytest.mark.slow  # converts with coremltools, about 30 s


def test_coremltools_stateful_model_tests_pass_through_the_executor(tmp_path, monkeypatch):
    from pathlib import Path

    from experiments.ane_engineering.run.mil import coremltools_suite

    suite = coremltools_suite.suite_directory()
    torch_tests = Path(ct.__file__).parent / "converters" / "mil" / "frontend" / "torch" / "test"
    monkeypatch.setattr(ct.utils, "_macos_version", lambda: (15, 0))  # the torch module's skipif, at collection
    report = tmp_path / "report.jsonl"
    args = ["-q", "-p", "no:cacheprovider", "--mil-report", str(report), "-o", "addopts=", "--rootdir", str(suite),
            str(torch_tests / "test_torch_stateful_model.py"), str(suite / "iOS18" / "test_states.py")]
    with coremltools_suite.installed():  # the plugin's own patches: stateful and picture cases go to the shim
        status = pytest.main(args, plugins=[coremltools_suite])
    records = [json.loads(line) for line in report.read_text().splitlines()]
    bad = [f"{r['nodeid']}: {r['reason']}" for r in records if r["outcome"] not in ("passed", "xfailed", "xpassed")]
    assert not bad, "\n".join(bad)
    assert status == 0
    torch_cases = [r for r in records if not r["nodeid"].startswith("iOS18")]
    assert len(torch_cases) >= 10  # the torch module's cases ran
    # the stateful and picture predictions were the executor's: the plugin recorded the ops it ran for them
    ran = [r for r in records if r["outcome"] == "passed" and r["predicted"]]
    assert sum(r["nodeid"].startswith("iOS18") for r in ran) >= 3 and len(ran) >= 10
    assert any("coreml_update_state" in r["ops"] for r in ran) and any("read_state" in r["ops"] for r in ran)
