"""The ModernBERT encoder family's `config.json` fields, as transformers' `ModernBertConfig` writes them.

The structure and the bounds of every field are the JSON Schema MODERNBERT_SCHEMA, checked by json_documents.check
(which names the field on any problem); the relations between fields are checked in code after it. config.py
registers `parse_encoder` under EncoderConfig.family, the model_type "modernbert" (the default when config.json
names none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..core.json_documents import BOOLEAN, POSITIVE_INTEGER, POSITIVE_NUMBER, check, open_object
from .config_fields import (
    ENCODER_ACTIVATIONS,
    GELU_TANH_NAMES,
    LAYER_COUNT,
    LAYER_TYPES,
    TOKEN_ID,
    VOCAB_SIZE,
    ConfigError,
    device_dimension,
)

MODERNBERT_MODEL_TYPE = "modernbert"


@dataclass(frozen=True)
class EncoderConfig:
    """The ModernBERT encoder: embeddings, `num_hidden_layers` layers, final norm.

    The family traits (class attributes and properties, so not config fields) are what the shared code asks
    instead of which family it holds; BertEncoderConfig answers the same questions."""

    family: ClassVar[str] = MODERNBERT_MODEL_TYPE  # the model_type config.py's FAMILIES registers this parser under
    post_norm: ClassVar[bool] = False  # pre-LN layers: x + f(norm(x))
    has_position_table: ClassVar[bool] = False  # positions enter through RoPE, not a learned table on the host
    supports_lora: ClassVar[bool] = True  # LoRA inputs act on the fused Wqkv rows (model/bc1s/lora.py)

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    layer_types: tuple[str, ...]  # "full_attention" | "sliding_attention" per layer
    local_attention: int  # full window; a sliding query sees keys with |q - k| <= local_attention // 2
    global_rope_theta: float
    local_rope_theta: float
    norm_eps: float
    norm_bias: bool
    attention_bias: bool
    mlp_bias: bool
    hidden_activation: str
    pad_token_id: int
    max_position_embeddings: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def has_sliding_layers(self) -> bool:
        """Some layers attend within a sliding window (they take the local or tiled window mask)."""
        return "sliding_attention" in self.layer_types

    @property
    def window_radius(self) -> int:
        return self.local_attention // 2

    @property
    def gelu_approximation(self) -> str:
        return "tanh" if self.hidden_activation in GELU_TANH_NAMES else "none"

    def rope_theta(self, layer_type: str) -> float:
        return self.global_rope_theta if layer_type == "full_attention" else self.local_rope_theta


MODERNBERT_SCHEMA = open_object(
    {
        "hidden_size": device_dimension(), "num_hidden_layers": LAYER_COUNT,
        "num_attention_heads": device_dimension(), "intermediate_size": device_dimension(),
        "vocab_size": VOCAB_SIZE, "local_attention": device_dimension(),
        "norm_eps": POSITIVE_NUMBER, "norm_bias": BOOLEAN, "attention_bias": BOOLEAN, "mlp_bias": BOOLEAN,
        "hidden_activation": {"enum": list(ENCODER_ACTIVATIONS)}, "pad_token_id": TOKEN_ID,
    },
    {
        "model_type": {"const": MODERNBERT_MODEL_TYPE},
        "layer_types": {"type": ["array", "null"], "items": {"enum": list(LAYER_TYPES)}},
        "global_attn_every_n_layers": POSITIVE_INTEGER,
        "global_rope_theta": POSITIVE_NUMBER, "local_rope_theta": POSITIVE_NUMBER,
        "rope_parameters": {"type": ["object", "null"], "propertyNames": {"enum": list(LAYER_TYPES)},
                            "additionalProperties": {"type": ["object", "null"], "required": ["rope_theta"],
                                                     "properties": {"rope_type": {"const": "default"},
                                                                    "rope_theta": POSITIVE_NUMBER}}},
        # Not a device dimension: the device sees the bucket length, which package/kinds.py bounds by this and by
        # MAX_DIMENSION.
        "max_position_embeddings": POSITIVE_INTEGER,
    },
)


def parse_encoder(raw: dict, where: str = "config.json") -> EncoderConfig:
    """A ModernBERT encoder from config.json fields checked against MODERNBERT_SCHEMA, then their relations."""
    check(raw, MODERNBERT_SCHEMA, where, ConfigError)
    hidden, heads, layers = raw["hidden_size"], raw["num_attention_heads"], raw["num_hidden_layers"]
    if hidden % heads:
        raise ConfigError(f"{where}: field 'hidden_size' ({hidden}) must be a multiple of "
                          f"num_attention_heads ({heads})")
    if (hidden // heads) % 2:
        raise ConfigError(f"{where}: head size {hidden // heads} must be even for RoPE (hidden_size / "
                          "num_attention_heads)")
    every, layer_types = raw.get("global_attn_every_n_layers"), raw.get("layer_types")
    implied = None if every is None else ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    if layer_types is None:
        if implied is None:
            raise ConfigError(f"{where}: needs 'layer_types' or 'global_attn_every_n_layers'")
        layer_types = implied
    elif len(layer_types) != layers:
        raise ConfigError(f"{where}: field 'layer_types' must list {layers} entries from {LAYER_TYPES}, got "
                          f"{len(layer_types)}")
    elif implied is not None and implied != layer_types:
        raise ConfigError(f"{where}: fields 'layer_types' and 'global_attn_every_n_layers' disagree")
    if not raw["pad_token_id"] < raw["vocab_size"]:
        raise ConfigError(f"{where}: field 'pad_token_id' {raw['pad_token_id']} is outside the vocabulary of "
                          f"{raw['vocab_size']}")
    global_theta, local_theta = _rope_thetas(raw, where)
    return EncoderConfig(
        vocab_size=raw["vocab_size"], hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=raw["intermediate_size"], layer_types=tuple(layer_types),
        local_attention=raw["local_attention"],
        global_rope_theta=global_theta, local_rope_theta=local_theta, norm_eps=float(raw["norm_eps"]),
        norm_bias=raw["norm_bias"], attention_bias=raw["attention_bias"], mlp_bias=raw["mlp_bias"],
        hidden_activation=raw["hidden_activation"], pad_token_id=raw["pad_token_id"],
        max_position_embeddings=raw.get("max_position_embeddings", 8192),
    )


def _rope_thetas(raw: dict, where: str) -> tuple[float, float]:
    """Global/local RoPE bases from the legacy keys, `rope_parameters`, or both (which must then agree)."""
    params = raw.get("rope_parameters") or {}
    result = []
    for name, layer_type in (("global", "full_attention"), ("local", "sliding_attention")):
        legacy = raw.get(f"{name}_rope_theta")
        new = (params.get(layer_type) or {}).get("rope_theta")
        if legacy is not None and new is not None and legacy != new:
            raise ConfigError(f"{where}: field '{name}_rope_theta' ({float(legacy)}) disagrees with "
                              f"rope_parameters ({float(new)})")
        theta = legacy if legacy is not None else new
        if theta is None:
            raise ConfigError(f"{where}: missing RoPE base: give '{name}_rope_theta' or rope_parameters")
        result.append(float(theta))
    return result[0], result[1]
