"""coremltools' own tests of stateful models, their Core ML predictions answered by the executor through the predict
shim (states, and pictures for the image cases): the torch frontend's test_torch_stateful_model.py (KV caches, in-place
buffer updates, ImageType inputs and outputs with state) and the iOS18 op tests of read_state / coreml_update_state.

They run on macOS 15+ only: the op suite's plugin (run/mil/coremltools_suite.py) turns coremltools' prediction path
on and answers it; its stateful and picture cases are routed here to predict_shim.predict_with_executor, and the
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

    from coremltools.models import MLModel

    from experiments.ane_engineering.run.mil import coremltools_suite, predict_shim

    suite = coremltools_suite.suite_directory()
    torch_tests = Path(ct.__file__).parent / "converters" / "mil" / "frontend" / "torch" / "test"
    answered = []
    plain = coremltools_suite.executor_predict

    def predict(mlmodel, data, state=None):
        spec = mlmodel.get_spec()
        pictures = any(f.type.WhichOneof("Type") == "imageType" for f in spec.description.input)
        if state is None and not mlmodel._is_stateful() and not pictures:
            return plain(mlmodel, data, state)
        answered.append(spec.description.input[0].name if spec.description.input else "")
        return predict_shim.predict_with_executor(mlmodel, dict(data), state)

    class States:
        """After the suite plugin's own patches: make_state gives the executor's state."""

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_setup(self, item):
            MLModel.make_state = lambda model: ct.models.model.MLState(predict_shim._predictor(model).make_state())

    monkeypatch.setattr(coremltools_suite, "executor_predict", predict)
    monkeypatch.setattr(ct.utils, "_macos_version", lambda: (15, 0))  # the torch module's skipif, at collection
    report = tmp_path / "report.jsonl"
    args = ["-q", "-p", "no:cacheprovider", "--mil-report", str(report), "-o", "addopts=", "--rootdir", str(suite),
            str(torch_tests / "test_torch_stateful_model.py"), str(suite / "iOS18" / "test_states.py")]
    with coremltools_suite.installed():
        status = pytest.main(args, plugins=[coremltools_suite, States()])
    records = [json.loads(line) for line in report.read_text().splitlines()]
    outcomes = {r["outcome"] for r in records}
    bad = [f"{r['nodeid']}: {r['reason']}" for r in records if r["outcome"] not in ("passed", "xfailed", "xpassed")]
    assert not bad, "\n".join(bad)
    assert status == 0 and "passed" in outcomes
    assert sum(not r["nodeid"].startswith("iOS18") for r in records) >= 10  # the torch module's cases ran
    assert len(answered) >= 10  # the stateful and picture predictions were the executor's
