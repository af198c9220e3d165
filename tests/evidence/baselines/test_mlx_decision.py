"""The MLX FP16 baseline (evidence/baselines/mlx_decision.py) decides what the FP32 reference decides, within FP16
noise.

Tolerance, derived rather than fitted. An option logit is s = b + sum_j w_j h_j over the S scorer units at its marker.
FP16 perturbs the features h_j relatively; the resulting logit error scales with the absolute mass of that last dot
product, M = sum_j |w_j h_j| (computed per option from the FP32 reference), not with |s| (its terms cancel).
Rounding the weights and the features of that last product to FP16 already costs up to 2u*M (u = 2^-11, the FP16
unit roundoff); every transformer layer the error crosses on its way to the features adds about one more u of
relative error to the residual stream. builtin:tiny has 6 encoder + 2 head layers, so the bound is K*u*M with K = 8.
Broken variants (interleaved, "traditional" RoPE; a sliding window off by one token) must land outside it.

Eager vs compiled and padded vs unpadded are the same FP16 model; they are held to 2u*M, a quarter of the reference
bound (fusion or a different key count may legitimately change FP16 rounding).

Slow: each test compiles and runs MLX graphs of the decision model over the fixture questions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from checkpoint_support import small_config, write_random_checkpoint
from fp16_support import U16

pytest.importorskip("mlx.core")
pytestmark = pytest.mark.slow  # see the module docstring

from experiments.ane_engineering.checkpoint import load_checkpoint  # noqa: E402
from experiments.ane_engineering.core.buckets import smallest_bucket  # noqa: E402
from experiments.ane_engineering.evidence.baselines.mlx_decision import (  # noqa: E402
    BaselineInputError,
    MLXDecisionBaseline,
    choose_faster_variant,
    mlx_available,
)
from experiments.ane_engineering.model.reference import ReferenceDecisionModel  # noqa: E402
from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions  # noqa: E402

K_REFERENCE = 8  # one u per transformer layer (6 encoder + 2 head on builtin:tiny); see the module docstring
K_SAME_MODEL = 2  # eager vs compiled, padded vs unpadded: the same FP16 model, at most rounding of the last product

# All kinds and 8 languages; en-choice-03 has 147 tokens and 20 options, en-choice-04 has 1,022 tokens, so sliding
# windows (radius 64) cut real attention there.
QUESTION_IDS = ("en-choice-01", "en-choice-03", "en-choice-04", "en-score-01", "en-noul-01", "de-score-01",
                "ru-noul-02", "zh-noul-01", "ja-score-01", "ar-noul-01", "hi-choice-01")
LONG_ID, WINDOW_ID = "en-choice-04", "en-choice-03"


@pytest.fixture(scope="module")
def encoded(tiny):
    by_id = {q.id: q for q in load_questions()}
    return {qid: encode_question(tiny.tokenizer, tiny.config.head, by_id[qid]) for qid in QUESTION_IDS}


@pytest.fixture(scope="module")
def reference(tiny, encoded):
    """FP32 reference (explicit attention, unpadded): option logits and the per-option mass M = sum_j |w_j h_j|."""
    model = ReferenceDecisionModel(tiny.config, tiny.tensors).eval()
    weight = model.scorer_out.weight.detach()[0].abs()  # (S,)
    out = {}
    with torch.no_grad():
        for qid, e in encoded.items():
            valid = torch.ones(1, e.num_tokens, dtype=torch.bool)
            features = model.scorer_features(torch.tensor([e.input_ids]), valid, torch.tensor([e.token_types]))[0]
            markers = torch.tensor(e.marker_positions)
            logits = model.scorer_out(features).squeeze(-1)[markers]  # (n_options,)
            out[qid] = (logits.numpy().astype(np.float32), (features[markers].abs() @ weight).numpy())
    return out


def _run(model: MLXDecisionBaseline, encoded: dict, ids=None, padded: bool = False) -> dict:
    return {qid: model.option_logits(e.input_ids, e.token_types, e.marker_positions,
                                     length=smallest_bucket(e.num_tokens) if padded else None)
            for qid, e in encoded.items() if ids is None or qid in ids}


@pytest.fixture(scope="module")
def eager(tiny, encoded):
    return _run(MLXDecisionBaseline(tiny, compiled=False), encoded)


def _ratios(got: dict, want: dict, reference: dict) -> dict:
    """Per question: max over options of |got - want| / (u * M)."""
    return {qid: float(np.max(np.abs(got[qid] - want[qid]) / (U16 * reference[qid][1]))) for qid in got}


def test_mlx_is_available_here():
    ok, reason = mlx_available()
    assert ok, reason


def test_eager_matches_fp32_reference(eager, reference):
    ratios = _ratios(eager, {q: r[0] for q, r in reference.items()}, reference)
    errors = {q: float(np.max(np.abs(eager[q] - reference[q][0]))) for q in eager}
    assert max(ratios.values()) <= K_REFERENCE, (ratios, errors)
    assert max(errors.values()) < 0.1, errors
    for qid, logits in eager.items():
        assert logits.dtype == np.float32 and logits.shape == reference[qid][0].shape
        assert np.all(np.isfinite(logits))
        assert int(np.argmax(logits)) == int(np.argmax(reference[qid][0])), qid


def test_compiled_agrees_with_eager(tiny, encoded, eager, reference):
    compiled = _run(MLXDecisionBaseline(tiny, compiled=True), encoded)
    assert max(_ratios(compiled, eager, reference).values()) <= K_SAME_MODEL
    for qid, logits in compiled.items():
        assert int(np.argmax(logits)) == int(np.argmax(reference[qid][0])), qid


def test_padded_length_mirrors_a_bucket(tiny, encoded, eager, reference):
    """Padded to the bucket (96 / 192 / 1024) with the reference masks: the same logits as exactly n tokens."""
    model = MLXDecisionBaseline(tiny)
    padded = _run(model, encoded, padded=True)
    assert max(_ratios(padded, eager, reference).values()) <= K_SAME_MODEL
    full, sliding = model.masks(1021, 1024)
    full, sliding = np.array(full), np.array(sliding)
    assert full[:, :1021].all() and not full[:, 1021:].any()  # valid keys only
    assert sliding[1020, 1020 - 64] and not sliding[1020, 1020 - 65] and not sliding[1020, 1021]
    assert sliding[1022, :1021].all() and not sliding[1022, 1021:].any()  # a padded query sees every valid key
    assert model.masks(60, 60) == (None, None)  # unpadded and shorter than the window: no mask at all


class _InterleavedRope(MLXDecisionBaseline):
    """Broken on purpose: GPT-J style interleaved pairs instead of ModernBERT's rotate_half."""

    def _rope(self, x, head_dim, freqs):
        return self.mx.fast.rope(x, head_dim, traditional=True, base=None, scale=1.0, offset=0, freqs=freqs)


def test_wrong_rope_convention_fails_the_tolerance(tiny, encoded, reference):
    short = [q for q in QUESTION_IDS if q != LONG_ID]
    broken = _run(_InterleavedRope(tiny), encoded, ids=short)
    ratios = _ratios(broken, {q: reference[q][0] for q in short}, reference)
    assert min(ratios.values()) > K_REFERENCE, ratios  # every question fails, not just one


@pytest.mark.parametrize("radius", [63, 65, 128])  # off by one either way; local_attention used as the radius
def test_wrong_sliding_window_fails_the_tolerance(tiny, encoded, reference, radius):
    model = MLXDecisionBaseline(tiny)
    assert model.window_radius == tiny.config.encoder.window_radius == 64
    model.window_radius = radius
    broken = _run(model, encoded, ids=(WINDOW_ID,))
    assert _ratios(broken, {WINDOW_ID: reference[WINDOW_ID][0]}, reference)[WINDOW_ID] > K_REFERENCE


def test_describe_and_input_checks(tiny, encoded):
    model = MLXDecisionBaseline(tiny, compiled=True)
    info = model.describe()
    assert info["dtype"] == "float16" and info["compiled"] is True
    assert info["mlx_version"] and info["device"] and info["platform"]
    e = encoded["en-choice-01"]
    with pytest.raises(BaselineInputError, match="never truncated"):
        model.option_logits(e.input_ids, e.token_types, e.marker_positions, length=e.num_tokens - 1)
    with pytest.raises(BaselineInputError, match="marker_positions"):
        model.option_logits(e.input_ids, e.token_types, [e.num_tokens])


def test_choose_faster_variant_times_both(tiny, encoded):
    compiled, timings = choose_faster_variant(tiny, [encoded["en-choice-01"]], trials=2, warmup=1)
    assert isinstance(compiled, bool) and timings["chosen"] == ("compiled" if compiled else "eager")
    for name in ("eager", "compiled"):
        assert timings[name]["n"] == 2 and timings[name]["p50_ms"] > 0
    assert (timings["compiled"]["p50_ms"] < timings["eager"]["p50_ms"]) == compiled
    assert timings["describe"]["compiled"] == compiled


def test_tanh_gelu_biases_and_per_layer_type_theta(tmp_path):
    """A config builtin:tiny does not cover: tanh GELU, all biases, local theta 10000 != global 160000, head theta
    50000, window radius 16 at 90 tokens. Random weights make near-ties, so logits are compared, not argmax.
    The bound is one u per layer (4 + 1 = 5); swapping the sliding layers' theta for the global one must exceed it."""
    raw = small_config(hidden_activation="gelu_pytorch_tanh", norm_bias=True, attention_bias=True, mlp_bias=True,
                       local_rope_theta=10000.0, head={"rope_theta": 50000.0})
    checkpoint = load_checkpoint(str(write_random_checkpoint(tmp_path / "checkpoint", raw, seed=3, bias_scale=10.0)))
    config = checkpoint.config
    assert config.encoder.gelu_approximation == "tanh" and config.encoder.window_radius == 16
    bound = config.encoder.num_hidden_layers + config.head.num_layers
    rng = np.random.default_rng(0)
    n = 90
    ids = rng.integers(4, config.encoder.vocab_size, n)
    types = rng.integers(0, config.head.num_token_types, n)
    markers = np.array([5, 20, 44, 61, 88])
    reference = ReferenceDecisionModel(config, checkpoint.tensors).eval()
    with torch.no_grad():
        features = reference.scorer_features(torch.tensor(ids)[None], torch.ones(1, n, dtype=torch.bool),
                                             torch.tensor(types)[None])[0][torch.tensor(markers)]
        want = reference.scorer_out(features).squeeze(-1).numpy()
        mass = (features.abs() @ reference.scorer_out.weight[0].abs()).numpy()

    model = MLXDecisionBaseline(checkpoint)
    got = model.option_logits(ids, types, markers)
    assert np.max(np.abs(got - want) / (U16 * mass)) <= bound
    padded = model.option_logits(ids, types, markers, length=96)
    assert np.max(np.abs(padded - got) / (U16 * mass)) <= K_SAME_MODEL

    swapped = MLXDecisionBaseline(checkpoint)
    global_freqs = next(layer["freqs"] for layer in swapped._layers if not layer["sliding"])
    for layer in swapped._layers:
        if layer["sliding"]:
            layer["freqs"] = global_freqs  # broken on purpose: one theta for every layer type
    broken = swapped.option_logits(ids, types, markers)
    assert np.max(np.abs(broken - want) / (U16 * mass)) > bound


def test_gelu_forms_match_torch(tiny):
    """Both GELU forms against torch in float32 (erf and tanh differ by up to ~5e-4, below FP16 resolution at the
    logits, so they are told apart here); in float16 the tanh form stays finite far outside the cubic's range."""
    import mlx.core as mx

    model = MLXDecisionBaseline(tiny)
    x = np.linspace(-40.0, 40.0, 16001, dtype=np.float32)
    for approximate in ("none", "tanh"):
        model.gelu_approximation = approximate
        got = np.array(model._gelu(mx.array(x)))
        want = F.gelu(torch.from_numpy(x), approximate=approximate).numpy()
        other = F.gelu(torch.from_numpy(x), approximate="tanh" if approximate == "none" else "none").numpy()
        assert np.max(np.abs(got - want)) < 1e-5
        assert np.max(np.abs(got - other)) > 1e-4
    big = mx.array(np.array([-300.0, -50.0, 50.0, 300.0], dtype=np.float16))
    assert np.array_equal(np.array(model._gelu(big).astype(mx.float32)), [0.0, 0.0, 50.0, 300.0])
