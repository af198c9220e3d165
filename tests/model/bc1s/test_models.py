"""BC1S export model vs the reference B x L x C model, both FP32, built from the same tensors.

Bounds (core/tolerances.py, where their derivation is): whole DecisionModel option logits within
BC1S_LOGITS_ABS (max abs); one full encoder layer within BC1S_LAYER_ABS on valid tokens. The last tests show the
bounds can fail: a one-weight perturbation, a wrong window or a wrong RoPE rotation each break them.
"""

from __future__ import annotations

import pytest
import torch

from checkpoint_support import config_and_tensors, small_config
from experiments.ane_engineering.checkpoint.tokenizer import build_byte_tokenizer
from experiments.ane_engineering.core import tolerances
from experiments.ane_engineering.core.buckets import INACTIVE_LOGIT, MARKER_SLOTS
from experiments.ane_engineering.model.bc1s.models import BC1SBody, BC1SLayerBlock
from experiments.ane_engineering.model.layers import ATTENTION_IMPLEMENTATIONS
from experiments.ane_engineering.model.masks import additive_bc1s, allowed
from experiments.ane_engineering.model.modernbert_reference import ReferenceEncoder
from experiments.ane_engineering.model.reference import ReferenceDecisionModel
from experiments.ane_engineering.package.inputs.device_inputs import DeviceInputError, body_inputs
from experiments.ane_engineering.package.inputs.questions import Question, encode_question, load_questions

LOGITS_ABS = tolerances.BC1S_LOGITS_ABS
LAYER_ABS = tolerances.BC1S_LAYER_ABS
TOKENIZER = build_byte_tokenizer()

# Encoder overrides of the small test config; biases are scaled x10 where enabled so they are far from zero.
VARIANTS = {
    "defaults": ({}, 1.0),
    "all-biases": (dict(norm_bias=True, attention_bias=True, mlp_bias=True), 10.0),
    "rope-10000-160000": (dict(global_rope_theta=10000.0, local_rope_theta=160000.0), 1.0),
    "rope-500-1e6": (dict(global_rope_theta=500.0, local_rope_theta=1e6), 1.0),
    "eps-1e-6": (dict(norm_eps=1e-6), 1.0),
    "eps-1e-3-biases": (dict(norm_eps=1e-3, norm_bias=True), 10.0),
    "head-dim-64-every-2-tanh": (dict(hidden_size=128, num_attention_heads=2, global_attn_every_n_layers=2,
                                      hidden_activation="gelu_pytorch_tanh"), 1.0),
}


def _hand_made() -> list[Question]:
    return [
        Question("hand-choice", "choice", "Pick the even number.", ("7", "12", "25")),
        Question("hand-score", "score", "Rate: the tests run fast.", ("low", "mid", "high", "top"),
                 (1.0, 2.0, 3.0, 4.0)),
        Question("hand-noul-32", "noul", "Which one?", tuple(f"o{i}" for i in range(MARKER_SLOTS))),  # every slot
    ]


def _questions(config, length: int) -> list:
    """Fixture questions that fit `length`: two of each kind, plus the longest that fits, plus hand-made ones."""
    encoded = [encode_question(TOKENIZER, config.head, q) for q in load_questions() + _hand_made()]
    fitting = [e for e in encoded if e.num_tokens <= length]
    chosen = []
    for kind in ("choice", "score", "noul"):
        chosen += [e for e in fitting if e.question.kind == kind and not e.question.id.startswith("hand")][:2]
    chosen.append(max(fitting, key=lambda e: e.num_tokens))
    chosen += [e for e in fitting if e.question.id.startswith("hand")]
    assert {e.question.kind for e in chosen} == {"choice", "score", "noul"}
    return chosen


def _device_inputs(config, tensors, encoded, length: int) -> dict[str, torch.Tensor]:
    raw = body_inputs(config, tensors, encoded.input_ids, encoded.token_types, encoded.marker_positions, length)
    return {name: torch.from_numpy(value) for name, value in raw.items()}


def _randomize_padding(inputs: dict, n: int, seed: int) -> dict:
    """Replace the padding columns of embeddings and type_vectors (the pad-token row / zeros) by other values."""
    generator = torch.Generator().manual_seed(seed)
    out = dict(inputs)
    for name in ("embeddings", "type_vectors"):
        value = out[name].clone()
        value[..., n:] = 3.0 * torch.randn(value[..., n:].shape, generator=generator)
        out[name] = value
    return out


def _reference_logits(model, encoded, implementation: str) -> torch.Tensor:
    n = len(encoded.marker_positions)
    ids = torch.tensor([encoded.input_ids])
    positions = torch.zeros(1, MARKER_SLOTS, dtype=torch.long)
    positions[0, :n] = torch.tensor(encoded.marker_positions)
    active = torch.zeros(1, MARKER_SLOTS, dtype=torch.bool)
    active[0, :n] = True
    logits = model(ids, torch.ones_like(ids, dtype=torch.bool), torch.tensor([encoded.token_types]), positions,
                   active, implementation=implementation)  # (1, M)
    assert torch.all(logits[0, n:] == INACTIVE_LOGIT)
    return logits[0, :n]


def _bc1s_logits(body, inputs, n_options: int) -> torch.Tensor:
    return body(**inputs)[0, 0, 0, :n_options]  # (1, 1, 1, M) -> active slots


@pytest.mark.parametrize("length", [96, 192])
@pytest.mark.parametrize("implementation", ATTENTION_IMPLEMENTATIONS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_decision_model_logits_match_reference(variant, implementation, length):
    overrides, bias_scale = VARIANTS[variant]
    config, tensors = config_and_tensors(small_config(**overrides), seed=3, bias_scale=bias_scale)
    if overrides.get("norm_bias"):
        assert any(name.endswith("norm.bias") for name in tensors)
    reference = ReferenceDecisionModel(config, tensors).eval()
    body = BC1SBody(config, tensors, length).eval()
    worst, checked = 0.0, set()
    with torch.no_grad():
        for index, encoded in enumerate(_questions(config, length)):
            n = len(encoded.marker_positions)
            expected = _reference_logits(reference, encoded, implementation)
            assert expected.abs().max() > 1e-2  # not trivially near zero
            inputs = _device_inputs(config, tensors, encoded, length)
            for candidate in (inputs, _randomize_padding(inputs, encoded.num_tokens, seed=index)):
                worst = max(worst, float((_bc1s_logits(body, candidate, n) - expected).abs().max()))
            checked.add(encoded.question.kind)
    assert checked == {"choice", "score", "noul"}
    assert worst <= LOGITS_ABS, f"{variant}/{implementation}/L{length}: max abs logit difference {worst:.3g}"


def test_decision_model_logits_match_at_1024(tiny):
    """The real tiny checkpoint (head_dim 64, local_attention 128) on a fixture question of ~1,020 tokens."""
    config, tensors = tiny.config, tiny.tensors
    encoded = max((encode_question(TOKENIZER, config.head, q) for q in load_questions()), key=lambda e: e.num_tokens)
    assert 1000 <= encoded.num_tokens <= 1024
    with torch.no_grad():
        expected = _reference_logits(ReferenceDecisionModel(config, tensors).eval(), encoded, "sdpa")
        got = _bc1s_logits(BC1SBody(config, tensors, 1024).eval(), _device_inputs(config, tensors, encoded, 1024),
                           len(encoded.marker_positions))
    assert float((got - expected).abs().max()) <= LOGITS_ABS


@pytest.mark.parametrize("length", [96, 192])
def test_padding_values_do_not_change_bc1s_output(length):
    config, tensors = config_and_tensors(small_config(norm_bias=True, attention_bias=True, mlp_bias=True),
                                         seed=5, bias_scale=10.0)
    body = BC1SBody(config, tensors, length).eval()
    encoded = encode_question(TOKENIZER, config.head, _hand_made()[0])
    assert encoded.num_tokens < length
    inputs = _device_inputs(config, tensors, encoded, length)
    with torch.no_grad():
        before = body(**inputs)
        for seed in range(3):
            changed = _randomize_padding(inputs, encoded.num_tokens, seed)
            assert not torch.equal(changed["embeddings"], inputs["embeddings"])
            # Keys at padding are masked with -1e4 (exp underflows to exactly 0), so not one bit may change.
            assert torch.equal(body(**changed), before)


def _layer_case(config, tensors, index: int, length: int, n: int, seed: int = 0):
    """Reference layer output and BC1S input/mask for the same (1, L, C) hidden states, valid on the first n."""
    generator = torch.Generator().manual_seed(seed)
    hidden = config.encoder.hidden_size
    x = torch.randn(1, length, hidden, generator=generator) * 2.0 + 0.5 * torch.randn(1, 1, hidden, generator=generator)
    valid = torch.zeros(1, length, dtype=torch.bool)
    valid[0, :n] = True
    sliding = config.encoder.layer_types[index] == "sliding_attention"
    radius = config.encoder.window_radius if sliding else None
    return x, valid, radius


def _bc1s_layer(block, x, mask) -> torch.Tensor:
    return block(x.transpose(1, 2).unsqueeze(2), mask)[0, :, 0, :].T  # (1, C, 1, L) -> (L, C)


@pytest.mark.parametrize("implementation", ATTENTION_IMPLEMENTATIONS)
@pytest.mark.parametrize("index", [0, 1, 3])
def test_single_encoder_layer_within_3e5(index, implementation):
    """Layer 0 (global, identity attn norm), layer 1 (sliding, radius 16 at L=96), layer 3 (global)."""
    config, tensors = config_and_tensors(small_config(norm_bias=True, attention_bias=True, mlp_bias=True),
                                         seed=7, bias_scale=10.0)
    length, n = 96, 90
    x, valid, radius = _layer_case(config, tensors, index, length, n)
    if index == 1:
        assert radius == 16 and not allowed(valid, radius)[0, :n, :n].all()  # the window really masks keys
    else:
        assert radius is None
    with torch.no_grad():
        expected = ReferenceEncoder(config, tensors).layers[index](x, valid, implementation)[0]  # (L, C)
        got = _bc1s_layer(BC1SLayerBlock(config, tensors, length, index).eval(), x, additive_bc1s(valid, radius))
    assert expected[:n].abs().max() > 1.0
    assert float((got[:n] - expected[:n]).abs().max()) <= LAYER_ABS


def test_single_sliding_layer_of_tiny_within_3e5(tiny):
    """builtin:tiny's layer 1: head_dim 64, local_attention 128 (radius 64), at L=192 the window masks."""
    config, tensors = tiny.config, tiny.tensors
    length, n = 192, 180
    x, valid, radius = _layer_case(config, tensors, 1, length, n, seed=1)
    assert radius == 64 and not allowed(valid, radius)[0, :n, :n].all()
    with torch.no_grad():
        expected = ReferenceEncoder(config, tensors).layers[1](x, valid)[0]
        got = _bc1s_layer(BC1SLayerBlock(config, tensors, length, 1).eval(), x, additive_bc1s(valid, radius))
    assert float((got[:n] - expected[:n]).abs().max()) <= LAYER_ABS


# --- the bounds can fail ---------------------------------------------------------------------------------------

def _fixture_setup(length: int = 96):
    config, tensors = config_and_tensors(small_config(), seed=3)
    encoded = _questions(config, length)[0]
    with torch.no_grad():
        expected = _reference_logits(ReferenceDecisionModel(config, tensors).eval(), encoded, "explicit")
    return config, tensors, encoded, expected


def test_one_perturbed_bc1s_weight_breaks_the_logit_bound():
    config, tensors, encoded, expected = _fixture_setup()
    body = BC1SBody(config, tensors, 96).eval()
    inputs = _device_inputs(config, tensors, encoded, 96)
    n = len(encoded.marker_positions)
    with torch.no_grad():
        assert float((_bc1s_logits(body, inputs, n) - expected).abs().max()) <= LOGITS_ABS
        body.encoder.layers[1].attn.k.weight[3, 5, 0, 0] += 0.2  # one key-projection entry (std 0.125): ~8x the bound
        assert float((_bc1s_logits(body, inputs, n) - expected).abs().max()) > LOGITS_ABS


def test_wrong_window_breaks_the_layer_bound():
    config, tensors = config_and_tensors(small_config(), seed=7)
    length, n = 96, 90
    x, valid, radius = _layer_case(config, tensors, 1, length, n)
    block = BC1SLayerBlock(config, tensors, length, 1).eval()
    with torch.no_grad():
        expected = ReferenceEncoder(config, tensors).layers[1](x, valid)[0]
        for wrong in (None, radius + 1, radius - 1):  # full attention, and off-by-one windows
            got = _bc1s_layer(block, x, additive_bc1s(valid, wrong))
            assert float((got[:n] - expected[:n]).abs().max()) > LAYER_ABS, f"radius {wrong} went unnoticed"


def test_wrong_rope_rotation_breaks_the_logit_bound():
    config, tensors, encoded, expected = _fixture_setup()
    body = BC1SBody(config, tensors, 96).eval()
    rope = body.encoder.layers[0].attn.rope
    rope.sin.neg_()  # rotate the halves the wrong way round (Q and K): relative positions change sign
    with torch.no_grad():
        got = _bc1s_logits(body, _device_inputs(config, tensors, encoded, 96), len(encoded.marker_positions))
    assert float((got - expected).abs().max()) > LOGITS_ABS


def test_device_inputs_refuse_too_long_and_bad_markers():
    config, tensors = config_and_tensors(small_config(), seed=3)
    encoded = max((encode_question(TOKENIZER, config.head, q) for q in load_questions()), key=lambda e: e.num_tokens)
    with pytest.raises(DeviceInputError, match="never truncated"):
        body_inputs(config, tensors, encoded.input_ids, encoded.token_types, encoded.marker_positions, 96)
    short = _questions(config, 96)[0]
    with pytest.raises(DeviceInputError, match="marker positions"):
        body_inputs(config, tensors, short.input_ids, short.token_types, (0, 0), 96)
