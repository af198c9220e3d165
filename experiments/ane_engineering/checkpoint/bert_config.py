"""The BERT encoder family's `config.json` (`model_type` "bert"), as transformers' `BertConfig` writes it.

A BERT encoder differs from ModernBERT in every layer: learned absolute position embeddings and token-type
embeddings summed with the word embeddings, post-LN layers (attention -> residual -> LayerNorm; erf-GELU FFN ->
residual -> LayerNorm), biases on every dense layer and norm, full attention everywhere, no final norm. The fields
below are the ones that decide the function; training-only fields (dropout, initializer range) are ignored.
Every field is type-checked and a bad one is refused by name, as for ModernBERT (config.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import GELU_ERF_NAMES, ConfigError, _positive, _take

BERT_MODEL_TYPE = "bert"
# Only the absolute (learned table) position embedding is implemented; relative_key variants change attention.
POSITION_EMBEDDING_TYPES = ("absolute",)


@dataclass(frozen=True)
class BertEncoderConfig:
    """Fields as in transformers' BertConfig; the properties give the shared code (decision head, host, runtime)
    the same view of the encoder as ModernBERT's EncoderConfig."""

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


def is_bert(config) -> bool:
    """True for a ModelConfig (or an encoder config) of the BERT family."""
    return isinstance(getattr(config, "encoder", config), BertEncoderConfig)


def parse_bert_encoder(raw: dict) -> BertEncoderConfig:
    where = "config.json (model_type bert)"
    counts = {key: _take(raw, key, (int,), where) for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings")}
    for key, value in counts.items():
        _positive(value, key, where)
    hidden, heads = counts["hidden_size"], counts["num_attention_heads"]
    if hidden % heads:
        raise ConfigError(f"{where}: field 'hidden_size' ({hidden}) must be a multiple of num_attention_heads ({heads})")
    types = _take(raw, "type_vocab_size", (int,), where, 2)
    if types < 1:
        raise ConfigError(f"{where}: field 'type_vocab_size' must be at least 1 (requests use type 0), got {types}")
    activation = _take(raw, "hidden_act", (str,), where)
    if activation not in GELU_ERF_NAMES:
        raise ConfigError(f"{where}: field 'hidden_act' {activation!r} is not supported (known: {GELU_ERF_NAMES})")
    position_type = _take(raw, "position_embedding_type", (str,), where, "absolute")
    if position_type not in POSITION_EMBEDDING_TYPES:
        raise ConfigError(f"{where}: field 'position_embedding_type' {position_type!r} is not supported "
                          f"(known: {POSITION_EMBEDDING_TYPES})")
    eps = _take(raw, "layer_norm_eps", (float,), where)
    _positive(eps, "layer_norm_eps", where)
    pad = _take(raw, "pad_token_id", (int,), where, 0)
    if not 0 <= pad < counts["vocab_size"]:
        raise ConfigError(f"{where}: field 'pad_token_id' {pad} is outside the vocabulary of {counts['vocab_size']}")
    return BertEncoderConfig(**counts, hidden_act=activation, type_vocab_size=types, layer_norm_eps=eps,
                             pad_token_id=pad)
