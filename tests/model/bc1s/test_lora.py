"""LoRA adapters as inputs: swapped per call with no recompilation, matching the merged-weight model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from experiments.ane_engineering import validate
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.model.bc1s.lora import LoraSpec
from experiments.ane_engineering.model.bc1s.models import BC1SBody
from experiments.ane_engineering.package.inputs import adapter as adapters
from experiments.ane_engineering.package.inputs.device_inputs import body_inputs
from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions
from experiments.ane_engineering.run.agent import ANEAgent, RequestError
from experiments.ane_engineering.validation.golden import make_golden
from experiments.ane_engineering.workflows.probe_run import run_probe

pytestmark = pytest.mark.slow  # every test here converts, exports or starts Python

SPEC = LoraSpec(rank=4, alpha=8.0, targets=("q", "v"))
SCALE = 0.03  # large enough to move decisions measurably, small enough to stay a realistic adapter
# FP16 package against the FP32 merged-weight model: the bound the FP16 body meets without adapters on this model
# (the validation gates' logit errors), with room for the extra low-rank path.
LOGIT_TOLERANCE = 0.06


@pytest.fixture(scope="module")
def lora_package(tiny, tmp_path_factory):
    directory = tmp_path_factory.mktemp("lora") / "body-96"
    report = run_probe(tiny, "body", 96, directory, show_progress=False, lora=SPEC)
    assert report["passed"] and report["placement"]["static"]["violations"] == 0
    return directory


@pytest.fixture(scope="module")
def agent(lora_package, tiny):
    return ANEAgent([lora_package], tiny, "mil")


def _questions(tiny, count=8):
    return [q for q in load_questions()
            if encode_question(tiny.tokenizer, tiny.config.head, q).num_tokens <= 96][:count]


def _merged_logits(tiny, adapter, question):
    merged = adapters.merge(tiny, adapter)
    body = BC1SBody(merged.config, merged.tensors, 96).eval()
    encoded = encode_question(tiny.tokenizer, tiny.config.head, question)
    inputs = body_inputs(merged.config, merged.tensors, encoded.input_ids, encoded.token_types,
                         encoded.marker_positions, 96)
    with torch.no_grad():
        return body(**{k: torch.from_numpy(v) for k, v in inputs.items()})[0, 0, 0, :len(question.options)].numpy()


def test_two_adapters_swapped_per_call_match_their_merged_models(agent, tiny):
    first = adapters.random_adapter(tiny.config, SPEC, seed=1, scale=SCALE)
    second = adapters.random_adapter(tiny.config, SPEC, seed=2, scale=SCALE)
    questions = _questions(tiny)
    for question in questions:
        results = {}
        for name, adapter in (("a", first), ("b", second), ("a-again", first)):
            results[name] = np.asarray(agent.decide(question, adapter=adapter).option_logits)
        assert np.array_equal(results["a"], results["a-again"])  # swapping back restores the same outputs
        for name, adapter in (("a", first), ("b", second)):
            expected = _merged_logits(tiny, adapter, question)
            assert np.abs(results[name] - expected).max() <= LOGIT_TOLERANCE
    # The adapters really differ in effect (the check above is not vacuous).
    gaps = [np.abs(np.asarray(agent.decide(q, adapter=first).option_logits)
                   - np.asarray(agent.decide(q, adapter=second).option_logits)).max() for q in questions]
    assert max(gaps) > 2 * LOGIT_TOLERANCE


def test_a_wrongly_ordered_adapter_is_caught(agent, tiny, monkeypatch):
    """If the host put B' rows in another order than the package's Q/K rows (here: the half-major order of earlier
    exports), outputs would leave the tolerance."""
    adapter = adapters.random_adapter(tiny.config, SPEC, seed=1, scale=SCALE * 5)
    question = _questions(tiny, 1)[0]
    good = np.asarray(agent.decide(question, adapter=adapter).option_logits)

    def half_major(heads, dim):
        return torch.arange(heads * dim).reshape(heads, 2, dim // 2).transpose(0, 1).reshape(-1)

    monkeypatch.setattr(adapters, "qk_row_order", half_major)
    bad = np.asarray(agent.decide(question, adapter=adapter).option_logits)
    assert np.abs(good - bad).max() > LOGIT_TOLERANCE


def test_zero_adapter_reproduces_the_base_package(agent, tiny, tiny_packages):
    base = ANEAgent([tiny_packages.get("body", 96)[0]], tiny, "mil")
    zero = adapters.zero_adapter(tiny.config, SPEC)
    for question in _questions(tiny, 5):
        assert agent.decide(question, adapter=zero).option_logits == base.decide(question).option_logits


def test_validates_against_a_golden_made_with_merged_weights(lora_package, tiny, tmp_path):
    adapter = adapters.random_adapter(tiny.config, SPEC, seed=3, scale=SCALE)
    path = tmp_path / "adapter.safetensors"
    adapters.save_adapter(path, adapter)
    golden = make_golden(adapters.merge(tiny, adapters.load_adapter(path, tiny.config)))
    (tmp_path / "golden.json").write_text(json.dumps(golden))
    status = validate.main(["--package", str(lora_package), "--adapter", str(path), "--golden",
                            str(tmp_path / "golden.json"),
                            "--backend", "mil", "--repeats", "3", "--output", str(tmp_path / "v.json")])
    report = json.loads((tmp_path / "v.json").read_text())
    assert status == 0 and report["passed"], report["reasons"]
    assert report["adapter"]["sha256"] == adapter.sha256
    # The base golden does not stand in for the adapter's: it is refused (other weights).
    status = run_main(validate.main, ["--package", str(lora_package), "--adapter", str(path), "--golden",
                                      str(__import__("experiments.ane_engineering.validation.golden",
                                                     fromlist=["x"]).COMMITTED_TINY_GOLDEN),
                                      "--backend", "mil", "--output", str(tmp_path / "v2.json")])
    assert status == 2


@pytest.mark.parametrize("problem", ["rank", "missing", "shape", "nan", "targets", "pickle"])
def test_bad_adapters_are_refused(agent, tiny, tmp_path, problem):
    path = tmp_path / "bad.safetensors"
    if problem == "pickle":
        path.write_bytes(b"\x80\x04K\x01.")  # a pickle, not safetensors
    else:
        spec = {"rank": LoraSpec(2, 8.0, ("q", "v")), "targets": LoraSpec(4, 8.0, ("q", "k"))}.get(problem, SPEC)
        adapter = adapters.random_adapter(tiny.config, spec, seed=4, scale=SCALE)
        if problem == "missing":
            adapter.tensors.pop(next(iter(adapter.tensors)))
        elif problem == "shape":
            key = next(k for k in adapter.tensors if k.endswith("lora_A"))
            adapter.tensors[key] = torch.zeros(5, tiny.config.encoder.hidden_size)
        elif problem == "nan":
            adapter.tensors[next(iter(adapter.tensors))][0, 0] = float("nan")
        adapters.save_adapter(path, adapter)
    with pytest.raises(RequestError):
        agent.set_adapter(path)


def test_packages_without_lora_refuse_adapters(tiny, tiny_packages):
    base = ANEAgent([tiny_packages.get("body", 96)[0]], tiny, "mil")
    with pytest.raises(RequestError, match="no LoRA inputs"):
        base.set_adapter(adapters.zero_adapter(tiny.config, SPEC))
