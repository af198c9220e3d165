"""The BERT encoder family's `config.json` (`model_type` "bert"), as transformers' `BertConfig` writes it.

A BERT encoder differs from ModernBERT in every layer: learned absolute position embeddings and token-type
embeddings summed with the word embeddings, post-LN layers (attention -> residual -> LayerNorm; erf-GELU FFN ->
residual -> LayerNorm), biases on every dense layer and norm, full attention everywhere, no final norm. The fields
below are the ones that decide the function; training-only fields (dropout, initializer range) are ignored.
Their structure and bounds are the JSON Schema BERT_SCHEMA, checked by json_documents.check (which names the
field on any problem); the relations between fields are checked after it, as for ModernBERT (modernbert_config.py);
config.py registers this parser under BertEncoderConfig.family ("bert") in FAMILIES.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..core.json_documents import POSITIVE_INTEGER, POSITIVE_NUMBER, check, open_object
from .config_fields import GELU_ERF_NAMES, LAYER_COUNT, TOKEN_ID, VOCAB_SIZE, ConfigError, device_dimension

BERT_MODEL_TYPE = "bert"
# Only the absolute (learned table) position embedding is implemented; relative_key variants change attention.
POSITION_EMBEDDING_TYPES = ("absolute",)

BERT_SCHEMA = open_object(
    {
        "model_type": {"const": BERT_MODEL_TYPE},
        "hidden_size": device_dimension(), "num_hidden_layers": LAYER_COUNT,
        "num_attention_heads": device_dimension(), "intermediate_size": device_dimension(),
        "vocab_size": VOCAB_SIZE, "hidden_act": {"enum": list(GELU_ERF_NAMES)}, "layer_norm_eps": POSITIVE_NUMBER,
        # Host tables: the position table bounds the bucket (package/kinds.py refuses longer ones), never the device.
        "max_position_embeddings": POSITIVE_INTEGER,
    },
    {
        "type_vocab_size": {**POSITIVE_INTEGER, "description": "rows of the token-type table; requests use type 0"},
        "position_embedding_type": {"enum": list(POSITION_EMBEDDING_TYPES)},
        "pad_token_id": TOKEN_ID,
    },
)


@dataclass(frozen=True)
class BertEncoderConfig:
    """Fields as in transformers' BertConfig; the properties give the shared code (decision head, host, runtime)
    the same view of the encoder as ModernBERT's EncoderConfig, family traits included."""

    family: ClassVar[str] = BERT_MODEL_TYPE  # the model_type config.py's FAMILIES registers this parser under
    post_norm: ClassVar[bool] = True  # post-LN layers: norm(x + f(x))
    has_sliding_layers: ClassVar[bool] = False  # full attention in every layer
    has_position_table: ClassVar[bool] = True  # learned absolute positions (and token types), summed on the host
    supports_lora: ClassVar[bool] = False  # LoRA inputs are implemented on ModernBERT's fused Wqkv rows only

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str  # "gelu": exact erf GELU
    max_position_embeddings: int  # rows of the absolute position table: the longest sequence the model can take
    type_vocab_size: int  # rows of the token-type table (segment A / B); requests use type 0
    layer_norm_eps: float
    pad_token_id: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def norm_eps(self) -> float:
        return self.layer_norm_eps

    # BERT has biases on every dense layer and every LayerNorm; a decision head on top follows the same flags.
    norm_bias = attention_bias = mlp_bias = property(lambda self: True)

    @property
    def layer_types(self) -> tuple[str, ...]:
        return ("full_attention",) * self.num_hidden_layers

    @property
    def gelu_approximation(self) -> str:
        return "none"


def parse_bert_encoder(raw: dict, where: str = "config.json") -> BertEncoderConfig:
    """A BERT encoder from config.json fields checked against BERT_SCHEMA, then their relations."""
    check(raw, BERT_SCHEMA, where, ConfigError)
    hidden, heads, vocab = raw["hidden_size"], raw["num_attention_heads"], raw["vocab_size"]
    if hidden % heads:
        raise ConfigError(f"{where}: field 'hidden_size' ({hidden}) must be a multiple of "
                          f"num_attention_heads ({heads})")
    pad = raw.get("pad_token_id", 0)
    if not pad < vocab:
        raise ConfigError(f"{where}: field 'pad_token_id' {pad} is outside the vocabulary of {vocab}")
    return BertEncoderConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=raw["num_hidden_layers"], num_attention_heads=heads,
        intermediate_size=raw["intermediate_size"], hidden_act=raw["hidden_act"],
        max_position_embeddings=raw["max_position_embeddings"], type_vocab_size=raw.get("type_vocab_size", 2),
        layer_norm_eps=float(raw["layer_norm_eps"]), pad_token_id=pad)
