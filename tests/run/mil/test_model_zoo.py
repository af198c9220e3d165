"""Ordinary models converted with coremltools (FP16 ML programs, iOS17) and run through the mil executor agree with
torch FP32 at the level of torch's own FP16 run (criterion and its derivation: run/mil/model_zoo.py).

A fixed subset keeps the suite's budget: a masked BERT encoder (gather_nd, the attention mask), a CNN (batch norm,
pools, padding, upsampling), an LSTM (the lstm op) and a GRU (converted to a while_loop). Every model of the zoo,
DistilBERT, RoBERTa, ModernBERT and the MLP included, runs in benchmarks/executor_models.py
(evidence/executor_models.json). A broken handler (softmax that ignores the mask's -inf, i.e. a mask dropped)
breaks the criterion."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("coremltools")
pytest.importorskip("transformers")

from experiments.ane_engineering.run.mil import executor as _executor  # noqa: F401 - registers every op in OPS
from experiments.ane_engineering.run.mil import model_zoo
from experiments.ane_engineering.run.mil.registry import OPS

pytestmark = pytest.mark.slow  # every test here converts, exports or starts Python

TESTED = ("bert", "cnn", "lstm", "gru")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    directory = tmp_path_factory.mktemp("models")
    return {name: model_zoo.prepare(name, directory) for name in TESTED}


@pytest.mark.parametrize("name", TESTED)
def test_model_agrees_with_torch_at_fp16_level(converted, name):
    result = model_zoo.evaluate(converted[name])
    assert result["torch_fp16_max_abs_error"] > 0  # the FP16 run is a real yardstick, not exact
    assert result["passes"], result


def test_converted_programs_have_the_ops_that_blocked_them_before(converted):
    ops = model_zoo.evaluate(converted["bert"])["op_types"]
    assert "gather_nd" in ops  # the op that blocked every masked encoder
    assert "while_loop" in model_zoo.evaluate(converted["gru"])["op_types"]
    assert "lstm" in model_zoo.evaluate(converted["lstm"])["op_types"]


def test_a_dropped_attention_mask_breaks_the_criterion(converted):
    """softmax that treats masked (-inf / very negative) scores as 0 lets padding in: the criterion must fail."""
    original = OPS["softmax"].handler

    def unmasked_softmax(node, args, num):
        x = np.asarray(args["x"])
        return original(node, {**args, "x": np.where(x < -1e3, np.zeros_like(x), x)}, num)

    broken = dict(OPS)
    broken["softmax"] = dataclasses.replace(OPS["softmax"], handler=unmasked_softmax)
    result = model_zoo.evaluate(converted["bert"], registry=broken)
    assert not result["passes"], result
    assert result["executor_max_abs_error"] > 10 * result["bound"]
