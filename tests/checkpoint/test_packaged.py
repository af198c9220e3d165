"""The real all-MiniLM-L6-v2 weights through the chain: encode (reference, bc1s, mil), the encoder export, the FP16
epsilon of BERT's LayerNorms, the decision source on the real encoder (margins, layout), and the FP16 range
analysis on trained weights (outlier channels, headroom to the cliffs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from checkpoint_support import assert_margins_match_the_fit
from command_support import REPO
from experiments.ane_engineering import encode, probe
from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.core import gates
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.model.sentence_embedder import ReferenceEmbedder
from experiments.ane_engineering.package.kinds import build_export_spec
from experiments.ane_engineering.package.layout_check import layout_check
from experiments.ane_engineering.validation.margins import MIN_DECISION_MARGIN, decision_margins

IDS = "101,7592,2088,1997,1037,3231,6251,1012,102"  # [CLS] hello world ... [SEP] in MiniLM's WordPiece vocabulary


def _normalised_mean(hidden: np.ndarray) -> np.ndarray:
    pooled = hidden.astype(np.float64).mean(axis=0)
    return pooled / np.linalg.norm(pooled)


@pytest.mark.slow
def test_encode_command_runs_minilm_through_reference_bc1s_and_mil(minilm, minilm_packages, tmp_path):
    package, report = minilm_packages.get("encoder", 96)
    assert report["passed"] and report["placement"]["static"]["violations"] == 0
    outputs = {}
    for backend in ("reference", "bc1s", "mil"):
        argv = ["--source", "all-minilm-l6-v2", "--ids", IDS, "--backend", backend,
                "--output", str(tmp_path / f"{backend}.npy")]
        argv += ["--package", str(package)] if backend == "mil" else []
        assert run_main(encode.main, argv) == 0
        outputs[backend] = np.load(tmp_path / f"{backend}.npy")
    assert outputs["reference"].shape == (9, 384)
    assert np.abs(outputs["bc1s"] - outputs["reference"]).max() <= 1e-4  # tolerances.BC1S_ENCODER_ABS
    difference = np.abs(outputs["mil"] - outputs["reference"]).max()
    assert difference > 0  # FP16 is not FP32 ...
    # ... and close enough that the sentence embedding of these hidden states passes the embedding cosine gate
    cosine = _normalised_mean(outputs["mil"]) @ _normalised_mean(outputs["reference"])
    assert cosine >= gates.EMBEDDING_COSINE_MIN


def test_probe_refuses_a_bucket_beyond_the_position_table(tmp_path, capsys):
    status = run_main(probe.main, ["--kind", "encoder", "--length", "1024", "--source", "all-minilm-l6-v2",
                                   "--output", str(tmp_path / "x")])
    assert status == 2 and "takes at most 512 tokens" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_bert_epsilon_below_fp16_becomes_the_smallest_subnormal_and_that_is_harmless(minilm, minilm_packages):
    """coremltools' FP16 cast replaces a constant that would round to 0 by +-2^-24: MiniLM's layer_norm_eps 1e-12
    is stored as 2^-24 in every layer_norm of the package (ANE_MATH.md section 11). The FP32 embeddings with that
    epsilon differ from 1e-12's by far less than the gates resolve, while an epsilon that matters (1e-4) does not.

    The distance is 1 - cos in float64 with both norms: 1 - x.y alone measures the FP32 rounding of each embedding's
    own L2 normalisation (|x| - 1 up to ~4e-8, varying with CPU and thread count), not the epsilon."""
    from dataclasses import replace

    from experiments.ane_engineering.package.mil.load import load_program
    from experiments.ane_engineering.package.mil.walk import walk_operations

    package, _ = minilm_packages.get("embedding", 96)
    program = load_program(Path(package) / "model.mlpackage").program
    epsilons = {float(op.inputs["epsilon"].val) for op in walk_operations(program) if op.op_type == "layer_norm"}
    assert epsilons == {2.0 ** -24}
    ids = [int(i) for i in IDS.split(",")]

    def embedding(epsilon: float) -> np.ndarray:
        config = replace(minilm.config, encoder=replace(minilm.config.encoder, layer_norm_eps=epsilon))
        return ReferenceEmbedder(replace(minilm, config=config)).embed(ids)[0].astype(np.float64)

    def cosine_distance(x: np.ndarray, y: np.ndarray) -> float:
        return 1 - float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))

    exact, bound = embedding(minilm.config.encoder.layer_norm_eps), 1e-3 * (1 - gates.EMBEDDING_COSINE_MIN)
    assert minilm.config.encoder.layer_norm_eps == 1e-12
    assert cosine_distance(exact, embedding(2.0 ** -24)) < bound
    assert cosine_distance(exact, embedding(1e-4)) > bound


@pytest.fixture(scope="module")
def minilm_decision():
    return load_checkpoint("builtin:minilm-decision")


def test_minilm_decision_source_has_the_real_encoder_and_clear_margins(minilm, minilm_decision):
    assert minilm_decision.config.encoder == minilm.config.encoder
    for name, value in minilm.tensors.items():
        assert torch.equal(minilm_decision.tensors[name], value)
    head = minilm_decision.config.head
    assert (head.cls_token_id, head.sep_token_id, head.marker_token_id) == (101, 102, 103)
    measured = decision_margins(minilm_decision.config, minilm_decision.tensors, minilm_decision.tokenizer)
    assert min(measured["min_decision_logit_gap"], measured["min_action_logit_gap"]) >= MIN_DECISION_MARGIN, measured
    fit = json.loads((REPO / "experiments" / "ane_engineering" / "checkpoint"
                      / "minilm_decision_fit.json").read_text(encoding="utf-8"))
    assert_margins_match_the_fit(minilm_decision.config, measured, fit["margins_when_fitted"])  # as builtin:tiny's


def test_minilm_decision_body_layout_check(minilm_decision):
    spec = build_export_spec(minilm_decision, "body", 96)
    result = layout_check(minilm_decision, spec)
    assert result["passed"] and 0 < result["max_abs"] <= result["tolerance"]


def test_fp16_range_on_real_weights_finds_outlier_channels_and_no_cliff(minilm_decision):
    from experiments.ane_engineering.evidence.fp16_range import OUTLIER_RATIO, range_report

    report = range_report(minilm_decision, lengths=(96,), limit_per_bucket={96: 6})
    groups = report["groups"]
    assert groups["encoder.mlp_norm.input"]["max_top_to_median"] > OUTLIER_RATIO
    assert groups["encoder.mlp_norm.input"]["outlier_channels"]
    # the trained residual sums are large: an FP16 square of their deviation inside the layer norm would near the
    # FP16 maximum (recorded for information), but that is no verdict: the stream itself is far below every cliff
    norms = [e for n, e in report["sites"].items() if n.endswith("mlp_norm.input")]
    assert any(e["norm"]["variance_verdict"] != "ok" for e in norms) and all(e["verdict"] == "ok" for e in norms)
    assert not any(name.endswith("mlp_norm.input") for name in report["needs_clamp"])
    assert groups["embedding_norm.input"]["min_variance_valid"] > 2.0 ** -14  # a normal FP16 number


@pytest.mark.slow
def test_benchmark_times_an_embedding_package(minilm_packages, tmp_path):
    from experiments.ane_engineering import benchmark

    package, _ = minilm_packages.get("embedding", 96)
    assert run_main(benchmark.main, ["--package", str(package), "--length", "96", "--source", "all-minilm-l6-v2",
                                     "--backend", "mil", "--warmup", "0", "--calls", "2",
                                     "--output", str(tmp_path / "b.json")]) == 0
    result = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert result["task"] == "embeddings" and result["component"]["timing"]["n"] == 2
    assert result["full_path"]["tokens"] <= 96 and result["cost_model"]


def test_the_mlx_baseline_refuses_a_bert_encoder(minilm_decision):
    from experiments.ane_engineering.evidence.baselines.mlx_decision import BaselineInputError, MLXDecisionBaseline

    with pytest.raises(BaselineInputError, match="implements the ModernBERT encoder"):
        MLXDecisionBaseline(minilm_decision)
