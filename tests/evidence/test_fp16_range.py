"""The FP16 range analysis (evidence/fp16_range.py): coverage, sanity on builtin:tiny, a planted outlier is flagged,
padding columns are kept apart from valid ones, and the benchmark writes (and never overwrites) its evidence."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch

from command_support import REPO
from experiments.ane_engineering.core.buckets import MASK_BIAS
from experiments.ane_engineering.core.staging import OutputExistsError
from experiments.ane_engineering.evidence import fp16_range
from experiments.ane_engineering.evidence.fp16_range import FP16_MAX, clamp_recommendations, needs_clamp, range_report
from experiments.ane_engineering.evidence.range_recorder import RangeRecorder, column_max_abs

# Every bucket, few questions: L96 spans the fixture (evenly spaced), plus the 147-token and one 1,024-token input.
QUICK = {96: 6, 192: 1, 1024: 1}
SMALL = {96: 4}  # planted-weight runs: a few L96 questions are enough to see the outlier


@pytest.fixture(scope="module")
def tiny_report(tiny):
    return range_report(tiny, limit_per_bucket=QUICK)


def _layer_names(config) -> list[str]:
    return ([f"encoder.{i}" for i in range(config.encoder.num_hidden_layers)]
            + [f"head.{j}" for j in range(config.head.num_layers)])


def test_report_covers_every_layer_and_bucket(tiny, tiny_report):
    report, sites = tiny_report, tiny_report["sites"]
    assert report["questions"]["by_bucket"] == {"96": 6, "192": 1, "1024": 1}
    expected_layers = ["embeddings", *_layer_names(tiny.config), "final_norm", "head_input", "scorer", "option_logits"]
    assert set(report["layers"]) == set(expected_layers)
    for prefix in _layer_names(tiny.config):
        common = ["attn.q", "attn.k", "attn.v", "attn.q_rope", "attn.k_rope", "attn.scores",
                  "attn.heads", "attn.concat", "attn.out", "attn_residual", "mlp_norm.input", "mlp_norm",
                  "mlp.input", "mlp.product", "mlp.out", "residual"]
        glu = ["mlp.gelu", "mlp.gate"] if prefix.startswith("encoder") else []
        norm = [] if prefix == "encoder.0" else ["attn_norm.input", "attn_norm"]  # layer 0: identity attention norm
        for name in common + glu + norm:
            assert f"{prefix}.{name}" in sites, f"{prefix}.{name} missing"
        assert sites[f"{prefix}.attn.scores"]["kind"] == "scores" and "mask" in sites[f"{prefix}.attn.scores"]
        assert sites[f"{prefix}.mlp_norm.input"]["kind"] == "norm_input"
    assert "encoder.0.attn_norm" not in sites and "head.0.mlp.gate" not in sites
    for name in ("embeddings", "embedding_norm.input", "embedding_norm", "final_norm.input", "final_norm",
                 "head_input", "scorer.norm.input", "scorer.norm", "scorer.proj", "scorer.hidden",
                 "scorer.scores", "option_logits"):
        assert name in sites, name
    # the attention modules reported their intermediates on every call (8 questions x 8 attention layers x
    # (q, k, v and two RoPE sites; per head scores (one full-head einsum) and head output; the concatenated heads))
    assert report["attention_observations"] == 8 * 8 * (5 + 2 * 2 + 1)


def test_tiny_values_positive_finite_and_no_clamp(tiny_report):
    for name, entry in tiny_report["sites"].items():
        valid, every = entry["max_abs_valid"], entry["max_abs_all"]
        assert valid is not None and every is not None and math.isfinite(valid) and math.isfinite(every), name
        assert 0 < valid <= every < FP16_MAX / 100, name  # random weights: far below the FP16 range
        assert entry["verdict"] == "ok", name
        if entry["kind"] == "norm_input":
            norm = entry["norm"]
            assert 0 < norm["variance"]["valid"] <= norm["variance"]["all"]
            assert norm["variance"]["valid"] <= norm["max_sq_dev"]["valid"] < 256.0 ** 2
            assert norm["variance_verdict"] == "ok"
        if entry["kind"] == "scores":
            mask = entry["mask"]
            assert mask["min_visible_score"] > MASK_BIAS + 20 and not mask["visible_below_mask_plus_20"]
            assert mask["mask_verdict"] == "ok"
    assert tiny_report["verdict"] == "ok"
    assert needs_clamp(tiny_report) == [] and tiny_report["clamp"] == []
    json.dumps(tiny_report, allow_nan=False)  # strict JSON: no inf / NaN anywhere


def _planted(tiny, layer: int, channel: int, factor: float) -> dict:
    tensors = dict(tiny.tensors)
    name = f"layers.{layer}.mlp.Wo.weight"
    weight = tensors[name].clone()
    weight[channel] *= factor
    tensors[name] = weight
    return tensors


def test_planted_outlier_is_flagged(tiny):
    """Scale one output row of encoder layer 2's mlp Wo so its channel reaches ~30,000 in the residual stream."""
    layer, channel, probe = 2, 5, 1000.0
    first = range_report(tiny, lengths=(96,), limit_per_bucket=SMALL, tensors=_planted(tiny, layer, channel, probe))
    per_unit = first["sites"][f"encoder.{layer}.mlp.out"]["max_abs_valid"] / probe  # the row dominates at x1000
    factor = 30000.0 / per_unit
    report = range_report(tiny, lengths=(96,), limit_per_bucket=SMALL, tensors=_planted(tiny, layer, channel, factor))
    sites = report["sites"]

    residual = sites[f"encoder.{layer}.residual"]
    assert 28000 < residual["max_abs_valid"] < 32000
    assert residual["verdict"] == "near" and 1 < residual["headroom_valid"] < 4
    # the projection that writes it is a conv output: it faces the Neural Engine's matmul cliff, not 65,504
    out = sites[f"encoder.{layer}.mlp.out"]
    assert out["cliff"] == "matmul_output" and out["verdict"] == "near" and out["headroom_valid"] < 2
    # the next layer norm's FP16-square statistics are kept for information only: not part of its verdict
    hazard = sites[f"encoder.{layer + 1}.attn_norm.input"]
    assert hazard["norm"]["max_abs_dev_valid"] > 255.9 and hazard["norm"]["variance_verdict"] == "overflow"
    assert hazard["verdict"] == "near" and hazard["cliff"] == "fp16-max"
    # the planted channel is named: the residual's top channel and its only outlier channel
    assert residual["channels"]["top"][0]["channel"] == channel and residual["channels"]["outliers"] == [channel]
    assert report["groups"]["encoder.residual"]["outlier_channels"][str(channel)] >= 1
    # earlier layers are untouched and stay ok: the analysis localises the outlier
    untouched = [e for n, e in sites.items() if n.startswith(("encoder.0.", "encoder.1.", "embedding"))]
    assert untouched and all(e["verdict"] == "ok" for e in untouched)

    flagged = needs_clamp(report)
    assert {f"encoder.{layer}.residual", f"encoder.{layer + 1}.attn_norm.input", "final_norm.input"} <= set(flagged)
    assert report["verdict"] == "near" and report["needs_clamp"] == flagged
    recs = {r["site"]: r for r in clamp_recommendations(report)}
    norm_rec = recs[f"encoder.{layer + 1}.attn_norm.input"]
    assert norm_rec["hazard"] == "residual-stream magnitude"
    # the power-of-two rescaling of the stream brings it back to the near-verdict's margin
    assert norm_rec["max_abs_all"] / 2 ** norm_rec["scale_exponent"] * 4 <= FP16_MAX
    assert recs[f"encoder.{layer}.residual"]["suggested_bound"] == FP16_MAX
    assert recs[f"encoder.{layer}.mlp.out"]["suggested_bound"] == out["cliff_value"]
    json.dumps(report, allow_nan=False)


def test_padding_columns_are_excluded_from_valid_maxima(tiny, tiny_report):
    """A huge pad-token embedding row lands only in padding columns: the valid maxima must not see it."""
    tensors = dict(tiny.tensors)
    table = tensors["embeddings.tok_embeddings.weight"].clone()
    signs = torch.tensor([1.0, -1.0]).repeat(table.shape[1] // 2)
    table[tiny.config.encoder.pad_token_id] = 1.0e5 * signs  # above the FP16 maximum, variance 1e10
    tensors["embeddings.tok_embeddings.weight"] = table
    clean = range_report(tiny, lengths=(96,), limit_per_bucket=SMALL)
    report = range_report(tiny, lengths=(96,), limit_per_bucket=SMALL, tensors=tensors)
    embeddings, norm_input = report["sites"]["embeddings"], report["sites"]["embedding_norm.input"]
    assert embeddings["max_abs_all"] == 1.0e5 and embeddings["verdict_all"] == "overflow"
    assert embeddings["max_abs_valid"] == clean["sites"]["embeddings"]["max_abs_valid"] < 10
    assert embeddings["verdict_valid"] == "ok" and embeddings["verdict"] == "overflow"
    clean_norm = clean["sites"]["embedding_norm.input"]["norm"]
    assert norm_input["norm"]["variance"]["valid"] == clean_norm["variance"]["valid"]
    assert norm_input["norm"]["variance"]["verdict_valid"] == "ok"
    assert norm_input["norm"]["variance"]["all"] == pytest.approx(1.0e10)
    assert norm_input["norm"]["variance"]["verdict_all"] == "overflow"
    assert {"embeddings", "embedding_norm.input"} <= set(needs_clamp(report))
    # every valid-column maximum is unchanged: padding never reaches a valid token
    for name, entry in clean["sites"].items():
        assert report["sites"][name]["max_abs_valid"] == pytest.approx(entry["max_abs_valid"], rel=1e-6), name


def test_column_and_score_statistics_keep_padding_apart():
    valid = torch.tensor([True, True, True, False, False])
    x = torch.ones(1, 4, 1, 5)
    x[:, :, :, 3:] = 1.0e6
    x[0, 2, 0, 1] = -7.0
    assert column_max_abs(x, valid, axis=3) == (7.0, 1.0e6)
    assert column_max_abs(x.permute(0, 3, 2, 1), valid, axis=1) == (7.0, 1.0e6)
    nan = x.clone()
    nan[0, 0, 0, 4] = float("nan")
    assert column_max_abs(nan, valid, axis=3) == (7.0, math.inf)

    recorder = RangeRecorder()
    recorder.set_question(valid, torch.ones(32, dtype=torch.bool), {"question": "synthetic"})
    # (1, Lk, 1, Lq): keys 3, 4 are padding (masked); key 2 is masked for query 0 (a sliding-window key)
    mask = torch.zeros(1, 5, 1, 5)
    mask[0, 3:] = MASK_BIAS
    mask[0, 2, 0, 0] = MASK_BIAS
    scores = torch.zeros(1, 5, 1, 5)
    scores[0, 0, 0, :3] = torch.tensor([3.0, -2.0, 1.0])
    scores[0, 3:, 0, :] = -5.0e4  # huge scores at masked (padding) keys: not read, but computed (and harmless to the
    # mask, being low; a high one would count in the spread below, as it must)
    scores[0, 2, 0, 0] = 9990.0  # a masked key 9,987 above the visible max: leaks through the -1e4 mask in FP16
    scores[0, 1, 0, 4] = -2.0e4  # a padding query's score: excluded from the visible maxima
    recorder.scores("s", scores, mask)
    site = recorder.sites["s"]
    assert site.values.valid == 3.0 and site.values.all == 5.0e4
    assert site.min_visible == -2.0 and site.max_visible == 3.0 and site.below_floor == 0
    assert site.spread_valid == pytest.approx(9990.0 - 3.0)
    entry = fp16_range._site_entry("s", site)
    assert entry["verdict_valid"] == "ok" and entry["verdict_all"] == "near"
    assert entry["mask"]["mask_verdict_valid"] == "overflow"  # 9,987 > 1e4 - 17.33: exp no longer underflows


def test_needs_clamp_reads_verdicts():
    report = {"sites": {"a": {"verdict": "ok"}, "b": {"verdict": "near"}, "c": {"verdict": "overflow"}}}
    assert needs_clamp(report) == ["b", "c"]
    assert fp16_range.verdict_for(FP16_MAX / 4 - 1) == "ok"
    assert fp16_range.verdict_for(FP16_MAX / 4 + 1) == "near"
    assert fp16_range.verdict_for(FP16_MAX + 1) == "overflow" and fp16_range.verdict_for(math.inf) == "overflow"


def _benchmark_module():
    path = REPO / "benchmarks" / "fp16_range.py"
    spec = importlib.util.spec_from_file_location("fp16_range_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_writes_evidence_and_refuses_existing(tiny, tmp_path):
    benchmark = _benchmark_module()
    output = tmp_path / "evidence" / "fp16_range.json"  # the directory is created
    assert benchmark.main(["--source", "builtin:tiny", "--limit", "96=2", "--limit", "192=0", "--limit", "1024=0",
                           "--output", str(output)]) == 0
    evidence = json.loads(output.read_text(encoding="utf-8"))
    assert evidence["provenance"]["checkpoint"] == tiny.hashes
    assert {"machine", "tools", "harness"} <= set(evidence["provenance"])
    assert evidence["summary"]["needs_clamp"] == [] and evidence["question_subset"] is not None
    assert evidence["report"]["questions"]["evaluated"] == 2
    before = output.read_bytes()
    with pytest.raises(OutputExistsError):
        benchmark.main(["--source", "builtin:tiny", "--output", str(output)])
    assert output.read_bytes() == before
