"""Stress sources: a massive activation planted in an exact FP32 ModernBERT checkpoint, from its config.

A `massive_activation` section of config.json says what to plant (README "Checkpoint format"):

    "massive_activation": {
        "magnitude": 14000.0,          # |h| written into each dim at the [CLS] position (> 0)
        "dims": [468, 488, 530, 580, 614],   # residual-stream channels that carry it
        "onset_layer": 11,             # encoder layer (0-based, `layers.N`) whose MLP writes it
        "signs": [1, 1, 1, 1, 1],      # optional, +1 or -1 per dim (default all +1)
        "marker_dim": 767              # optional: the channel that marks [CLS] (default hidden_size - 1)
    }

The defaults of `builtin:mmbert-outlier` are the published ones for the real mmBERT weights: |h| of 1.37e4 (256
tokens) to 1.40e4 (512 tokens) at the [CLS] position in dims 468, 488, 530, 580 and 614 from layer 11 on
(john-rocky/coreai-model-zoo, knowledge/laya-multilingual-port.md); the larger figure is planted. Only the place,
the onset and the magnitude are reproduced, not the trained model: every other weight is the seeded random draw of
builtin.py, and the magnitude is one value for every input (the trained model's moves by about 2% with the length).

How it is planted, on top of the random weights (everything below is weights: the architecture, biases included,
is that of mmBERT, and the ordinary loading, reference and export paths run it unchanged):

1. A [CLS] feature. Column `marker_dim` of the token embedding table is +CLS_FEATURE for the [CLS] token and
   -OTHER_FEATURE for every other token; no attention or MLP output projection writes that channel, so after the
   embedding norm it keeps, in every layer, a positive value at [CLS] and a negative one elsewhere.
2. [CLS] reads no context before the onset. In layers 0..onset every head's lowest-frequency RoPE pair carries
   ISOLATION_GAIN * marker channel in its Q and K rows, which adds a score of about ISOLATION_GAIN^2 * f_q * f_k /
   sqrt(head_dim) (f: the normalised marker feature; RoPE turns it by at most 1e-2 rad over 1024 positions): the
   [CLS] query's score for its own key exceeds every other by about 1e2, so its attention weight on other keys is
   below e^-50 and the [CLS] column of the stream up to the onset MLP depends on the [CLS] embedding only. (The
   other queries see a shift of a few units, their keys all having features of one sign.)
3. The onset MLP writes it, as massive activations arise in trained models (an FFN writes them at the first
   token in one layer and the residual stream then carries them; Sun et al. 2024, "Massive Activations in Large
   Language Models", arXiv:2402.17762): its last GeGLU unit reads the marker channel in both halves,
   gelu(DETECTOR_GAIN * f) * (GATE_GAIN * f), which is about 0 where f < 0 (gelu(-20) underflows FP32) and a
   fixed value u at [CLS]; its Wo column is sign * magnitude / u in the planted dims and 0 elsewhere. u is computed
   here by running the [CLS] column through layers 0..onset (`cls_unit_value`), so |h| at [CLS] is the configured
   magnitude to FP32 rounding.
4. It then stays: the embedding norm's weight is 0 in the planted dims and no other attention or MLP output row
   writes them, so they hold exactly 0 before the onset MLP and exactly +-magnitude at [CLS] (0 elsewhere) after it,
   through the last encoder layer; the norms of later layers, the final norm and the decision head read them.
Written at the onset layer only (not re-written by later MLPs): re-writing would add up, and a published magnitude
that is the same "from layer 11 on" is what a value carried by the residual stream looks like.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core.json_documents import POSITIVE_NUMBER, array_of, check, closed_object
from .config import ConfigError, ModelConfig
from .config_fields import TOKEN_ID

MASSIVE_ACTIVATION_KEY = "massive_activation"
CLS_FEATURE = 8.0  # marker column of the [CLS] embedding row (the other channels of a row are N(0, 1))
OTHER_FEATURE = 1.0  # minus the marker column of every other row: a negative feature well clear of the row mean
ISOLATION_GAIN = 6.0  # Q and K weight on the marker channel, in each head's lowest-frequency RoPE pair
DETECTOR_GAIN = 32.0  # GeGLU input weight on the marker channel: gelu(32 f) is 0 in FP32 for f < -0.5
GATE_GAIN = 0.125  # GeGLU gate weight on the marker channel
MIN_DETECTOR_INPUT = 10.0  # gelu(z) = z in FP32 for z >= 10: the unit is linear where it fires

MASSIVE_ACTIVATION_SCHEMA = closed_object(
    {"magnitude": POSITIVE_NUMBER, "dims": array_of(TOKEN_ID, 1, uniqueItems=True), "onset_layer": TOKEN_ID},
    {"signs": array_of({"enum": [1, -1]}, 1), "marker_dim": TOKEN_ID, "source": {"type": "string"}},
)


def planted_spec(raw: dict, config: ModelConfig, where: str = "config.json") -> dict:
    """The `massive_activation` section, checked against the encoder it is planted in; defaults filled in."""
    spec = raw[MASSIVE_ACTIVATION_KEY]
    check(spec, MASSIVE_ACTIVATION_SCHEMA, f"{where} {MASSIVE_ACTIVATION_KEY}", ConfigError)
    enc, where = config.encoder, f"{where} {MASSIVE_ACTIVATION_KEY}"
    if enc.family != "modernbert":
        raise ConfigError(f"{where}: planted only in ModernBERT encoders (pre-norm), not {enc.family!r}")
    dims, marker = list(spec["dims"]), spec.get("marker_dim", enc.hidden_size - 1)
    signs = list(spec.get("signs", [1] * len(dims)))
    if any(not 0 <= d < enc.hidden_size for d in (*dims, marker)):
        raise ConfigError(f"{where}: fields 'dims' and 'marker_dim' must be channels below hidden_size "
                          f"{enc.hidden_size}")
    if marker in dims:
        raise ConfigError(f"{where}: field 'marker_dim' {marker} is one of the planted dims")
    if len(signs) != len(dims):
        raise ConfigError(f"{where}: field 'signs' needs one entry per dim ({len(dims)}), got {len(signs)}")
    if not spec["onset_layer"] < enc.num_hidden_layers:
        raise ConfigError(f"{where}: field 'onset_layer' {spec['onset_layer']} is not below num_hidden_layers "
                          f"{enc.num_hidden_layers}")
    return {"magnitude": float(spec["magnitude"]), "dims": dims, "signs": signs, "onset_layer": spec["onset_layer"],
            "marker_dim": marker}


def _norm(x: torch.Tensor, tensors: dict, name: str, eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape, tensors[f"{name}.weight"], tensors.get(f"{name}.bias"), eps)


def cls_unit_value(config: ModelConfig, tensors: dict, cls_id: int, spec: dict) -> float:
    """The planting unit's value at [CLS]: the [CLS] column through layers 0..onset, attending to itself only
    (step 2 of the module docstring), in FP32 like the reference model."""
    enc, c, inter = config.encoder, config.encoder.hidden_size, config.encoder.intermediate_size
    h = _norm(tensors["embeddings.tok_embeddings.weight"][cls_id], tensors, "embeddings.norm", enc.norm_eps)  # (C,)
    for n in range(spec["onset_layer"] + 1):
        p = f"layers.{n}"
        a = h if n == 0 else _norm(h, tensors, f"{p}.attn_norm", enc.norm_eps)  # (C,)
        value = tensors[f"{p}.attn.Wqkv.weight"][2 * c:] @ a  # (C,): softmax weight 1 on its own key
        h = h + tensors[f"{p}.attn.Wo.weight"] @ value  # (C,)
        m = _norm(h, tensors, f"{p}.mlp_norm", enc.norm_eps)  # (C,)
        hidden, gate = (tensors[f"{p}.mlp.Wi.weight"] @ m).split(inter)  # (I,) each
        if n == spec["onset_layer"]:
            if hidden[-1] < MIN_DETECTOR_INPUT:
                raise ConfigError(f"{MASSIVE_ACTIVATION_KEY}: the [CLS] marker feature reaches the onset MLP at "
                                  f"{float(m[spec['marker_dim']]):.3g}, too weak to fire its unit")
            return float(F.gelu(hidden[-1]) * gate[-1])
        h = h + tensors[f"{p}.mlp.Wo.weight"] @ (F.gelu(hidden) * gate)  # (C,)
    raise AssertionError("unreachable")


def plant_massive_activation(config: ModelConfig, spec: dict, tensors: dict, cls_id: int) -> dict:
    """New tensors carrying the planted activation (planted_spec's `spec`); the input tensors are not modified."""
    enc = config.encoder
    if enc.attention_bias or enc.mlp_bias or enc.norm_bias:
        raise ConfigError(f"{MASSIVE_ACTIVATION_KEY}: planted in encoders without biases (as mmBERT)")
    c, inter, d, heads = enc.hidden_size, enc.intermediate_size, enc.head_dim, enc.num_attention_heads
    out = {name: value.clone() for name, value in tensors.items()}
    dims, marker, onset = spec["dims"], spec["marker_dim"], spec["onset_layer"]
    silent = [*dims, marker]  # channels no attention or MLP output writes (the planting column aside)
    table = out["embeddings.tok_embeddings.weight"]  # (V, C)
    table[:, marker] = -OTHER_FEATURE
    table[cls_id, marker] = CLS_FEATURE
    out["embeddings.norm.weight"][dims] = 0.0  # the planted dims hold 0 until the onset MLP writes them
    out["embeddings.norm.weight"][marker] = 1.0
    for n in range(enc.num_hidden_layers):
        p = f"layers.{n}"
        out[f"{p}.attn.Wo.weight"][silent] = 0.0
        out[f"{p}.mlp.Wo.weight"][silent] = 0.0
        if n <= onset:  # [CLS] attends to itself: each head's lowest-frequency RoPE pair reads the marker
            wqkv = out[f"{p}.attn.Wqkv.weight"]  # (3C, C): [Q | K | V], head-major, halves of D/2
            for h in range(heads):
                for block in (0, c):
                    first, partner = block + h * d + d // 2 - 1, block + h * d + d - 1
                    wqkv[[first, partner]] = 0.0
                    wqkv[first, marker] = ISOLATION_GAIN
    wi = out[f"layers.{onset}.mlp.Wi.weight"]  # (2I, C): [input | gate]
    wi[[inter - 1, 2 * inter - 1]] = 0.0
    wi[inter - 1, marker], wi[2 * inter - 1, marker] = DETECTOR_GAIN, GATE_GAIN
    unit = cls_unit_value(config, out, cls_id, spec)
    wo = out[f"layers.{onset}.mlp.Wo.weight"]  # (C, I)
    wo[:, inter - 1] = 0.0
    for dim, sign in zip(dims, spec["signs"]):
        wo[dim, inter - 1] = sign * spec["magnitude"] / unit
    return out
