"""Model configuration read from a Hugging Face `config.json`.

The encoder fields are the ones transformers' `ModernBertConfig` writes; the decision head lives in a documented
`decision_head` section of the same file (see README "Checkpoint format"). Every field is type-checked and a bad
one is refused with a message that names it: a wrong config must never silently become a different model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import HarnessError

if TYPE_CHECKING:
    from .bert_config import BertEncoderConfig

# Activations the harness implements, by their transformers names. "gelu" in transformers is the exact erf GELU.
GELU_ERF_NAMES = ("gelu", "gelu_python")
GELU_TANH_NAMES = ("gelu_pytorch_tanh", "gelu_new")
ENCODER_ACTIVATIONS = GELU_ERF_NAMES + GELU_TANH_NAMES
HEAD_ACTIVATIONS = ("relu",)
ACTION_ACTIVATIONS = ("gelu",)
QUESTION_KINDS = ("choice", "score", "noul")
LAYER_TYPES = ("full_attention", "sliding_attention")


class ConfigError(HarnessError):
    """A config.json that cannot describe a model this harness builds."""


def _take(raw: dict, key: str, kinds: tuple[type, ...], where: str, default: Any = ...) -> Any:
    """Read `key` from `raw`, check its type, and name the field on any problem."""
    if key not in raw:
        if default is ...:
            raise ConfigError(f"{where}: missing required field '{key}'")
        return default
    value = raw[key]
    # bool is an int subclass: never accept True for a count, nor 1 for a flag.
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{where}: field '{key}' must be {_kind_names(kinds)}, got bool {value!r}")
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kinds):
        raise ConfigError(f"{where}: field '{key}' must be {_kind_names(kinds)}, got {type(value).__name__} {value!r}")
    return value


def _kind_names(kinds: tuple[type, ...]) -> str:
    return " or ".join({bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
                        dict: "an object", type(None): "null"}[k] for k in kinds)


def _positive(value: int | float, key: str, where: str) -> None:
    if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"{where}: field '{key}' must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class EncoderConfig:
    """The ModernBERT encoder: embeddings, `num_hidden_layers` layers, final norm."""

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
    def window_radius(self) -> int:
        return self.local_attention // 2

    @property
    def gelu_approximation(self) -> str:
        return "tanh" if self.hidden_activation in GELU_TANH_NAMES else "none"

    def rope_theta(self, layer_type: str) -> float:
        return self.global_rope_theta if layer_type == "full_attention" else self.local_rope_theta


@dataclass(frozen=True)
class CalibrationConfig:
    """Per-kind temperature on the raw option logits; `noul` adds a fixed 'none of these' logit."""

    temperature: dict[str, float]
    none_logit: float  # calibrated-space logit of the implicit "none applies" outcome of noul questions


@dataclass(frozen=True)
class ActionHeadConfig:
    """Small FP32 host MLP on features of softmax(raw option logits); see decision/host.py for the features."""

    hidden_size: int
    actions: tuple[str, ...]
    activation: str = "gelu"


@dataclass(frozen=True)
class DecisionHeadConfig:
    """Two more transformer layers with ReLU FFNs, pointwise scoring convolutions, marker read-out, host heads."""

    num_layers: int
    num_attention_heads: int
    intermediate_size: int
    activation: str
    rope_theta: float
    num_token_types: int  # 0 question text, 1 option text, 2 option marker
    scorer_hidden_size: int
    max_markers: int
    marker_token_id: int
    cls_token_id: int
    sep_token_id: int
    output_decimals: int
    action_head: ActionHeadConfig
    calibration: CalibrationConfig


@dataclass(frozen=True)
class ModelConfig:
    encoder: EncoderConfig | BertEncoderConfig  # chosen by config.json's model_type (parse_config)
    head: DecisionHeadConfig | None  # None: an encoder-only ModernBERT checkpoint

    def to_dict(self) -> dict:
        return asdict(self)


def parse_encoder(raw: dict) -> EncoderConfig:
    where = "config.json"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: top level must be a JSON object")
    model_type = _take(raw, "model_type", (str,), where, "modernbert")
    if model_type != "modernbert":
        raise ConfigError(f"{where}: field 'model_type' must be 'modernbert' or 'bert', got {model_type!r}")
    hidden = _take(raw, "hidden_size", (int,), where)
    layers = _take(raw, "num_hidden_layers", (int,), where)
    heads = _take(raw, "num_attention_heads", (int,), where)
    inter = _take(raw, "intermediate_size", (int,), where)
    vocab = _take(raw, "vocab_size", (int,), where)
    local = _take(raw, "local_attention", (int,), where)
    for key, value in (("hidden_size", hidden), ("num_hidden_layers", layers), ("num_attention_heads", heads),
                       ("intermediate_size", inter), ("vocab_size", vocab), ("local_attention", local)):
        _positive(value, key, where)
    if hidden % heads:
        raise ConfigError(f"{where}: field 'hidden_size' ({hidden}) must be a multiple of num_attention_heads ({heads})")
    if (hidden // heads) % 2:
        raise ConfigError(f"{where}: head size {hidden // heads} must be even for RoPE (hidden_size / num_attention_heads)")

    layer_types = _take(raw, "layer_types", (list, type(None)), where, None)
    every = _take(raw, "global_attn_every_n_layers", (int,), where, None)
    if every is not None:
        _positive(every, "global_attn_every_n_layers", where)
    if layer_types is None:
        if every is None:
            raise ConfigError(f"{where}: needs 'layer_types' or 'global_attn_every_n_layers'")
        layer_types = ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    else:
        if len(layer_types) != layers or any(t not in LAYER_TYPES for t in layer_types):
            raise ConfigError(f"{where}: field 'layer_types' must list {layers} entries from {LAYER_TYPES}, got {layer_types!r}")
        if every is not None:
            implied = ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
            if implied != list(layer_types):
                raise ConfigError(f"{where}: fields 'layer_types' and 'global_attn_every_n_layers' disagree")

    global_theta, local_theta = _rope_thetas(raw, where)
    norm_eps = _take(raw, "norm_eps", (float,), where)
    _positive(norm_eps, "norm_eps", where)
    activation = _take(raw, "hidden_activation", (str,), where)
    if activation not in ENCODER_ACTIVATIONS:
        raise ConfigError(f"{where}: field 'hidden_activation' {activation!r} is not supported (known: {ENCODER_ACTIVATIONS})")
    pad = _take(raw, "pad_token_id", (int,), where)
    if not 0 <= pad < vocab:
        raise ConfigError(f"{where}: field 'pad_token_id' {pad} is outside the vocabulary of {vocab}")
    max_pos = _take(raw, "max_position_embeddings", (int,), where, 8192)
    _positive(max_pos, "max_position_embeddings", where)
    return EncoderConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=inter, layer_types=tuple(layer_types), local_attention=local,
        global_rope_theta=global_theta, local_rope_theta=local_theta, norm_eps=norm_eps,
        norm_bias=_take(raw, "norm_bias", (bool,), where), attention_bias=_take(raw, "attention_bias", (bool,), where),
        mlp_bias=_take(raw, "mlp_bias", (bool,), where), hidden_activation=activation, pad_token_id=pad,
        max_position_embeddings=max_pos,
    )


def _rope_thetas(raw: dict, where: str) -> tuple[float, float]:
    """Global/local RoPE bases from the legacy keys, `rope_parameters`, or both (which must then agree)."""
    legacy_global = _take(raw, "global_rope_theta", (float,), where, None)
    legacy_local = _take(raw, "local_rope_theta", (float,), where, None)
    params = _take(raw, "rope_parameters", (dict, type(None)), where, None)
    new_global = new_local = None
    if params is not None:
        for layer_type in params:
            if layer_type not in LAYER_TYPES:
                raise ConfigError(f"{where}: field 'rope_parameters' has unknown layer type {layer_type!r}")
        for layer_type, slot in (("full_attention", "g"), ("sliding_attention", "l")):
            entry = params.get(layer_type)
            if entry is None:
                continue
            sub = f"{where} rope_parameters.{layer_type}"
            if not isinstance(entry, dict):
                raise ConfigError(f"{sub}: must be an object")
            rope_type = _take(entry, "rope_type", (str,), sub, "default")
            if rope_type != "default":
                raise ConfigError(f"{sub}: field 'rope_type' {rope_type!r} is not supported (only 'default')")
            theta = _take(entry, "rope_theta", (float,), sub)
            if slot == "g":
                new_global = theta
            else:
                new_local = theta
    result = []
    for name, legacy, new in (("global", legacy_global, new_global), ("local", legacy_local, new_local)):
        if legacy is not None and new is not None and legacy != new:
            raise ConfigError(f"{where}: field '{name}_rope_theta' ({legacy}) disagrees with rope_parameters ({new})")
        theta = legacy if legacy is not None else new
        if theta is None:
            raise ConfigError(f"{where}: missing RoPE base: give '{name}_rope_theta' or rope_parameters")
        _positive(theta, f"{name}_rope_theta", where)
        result.append(theta)
    return result[0], result[1]


def parse_head(raw: Any, encoder: EncoderConfig) -> DecisionHeadConfig:
    where = "config.json decision_head"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a JSON object")
    version = _take(raw, "format_version", (int,), where)
    if version != 1:
        raise ConfigError(f"{where}: field 'format_version' {version} is not supported (expected 1)")
    num_layers = _take(raw, "num_layers", (int,), where)
    heads = _take(raw, "num_attention_heads", (int,), where)
    inter = _take(raw, "intermediate_size", (int,), where)
    scorer = _take(raw, "scorer_hidden_size", (int,), where)
    types = _take(raw, "num_token_types", (int,), where)
    markers = _take(raw, "max_markers", (int,), where)
    for key, value in (("num_layers", num_layers), ("num_attention_heads", heads), ("intermediate_size", inter),
                       ("scorer_hidden_size", scorer), ("num_token_types", types), ("max_markers", markers)):
        _positive(value, key, where)
    if encoder.hidden_size % heads or (encoder.hidden_size // heads) % 2:
        raise ConfigError(f"{where}: field 'num_attention_heads' {heads} must split hidden_size {encoder.hidden_size} into even heads")
    if types < 3:
        raise ConfigError(f"{where}: field 'num_token_types' must be at least 3 (question, option, marker), got {types}")
    activation = _take(raw, "activation", (str,), where)
    if activation not in HEAD_ACTIVATIONS:
        raise ConfigError(f"{where}: field 'activation' {activation!r} is not supported (known: {HEAD_ACTIVATIONS})")
    theta = _take(raw, "rope_theta", (float,), where)
    _positive(theta, "rope_theta", where)
    token_ids = {}
    for key in ("marker_token_id", "cls_token_id", "sep_token_id"):
        token_ids[key] = _take(raw, key, (int,), where)
        if not 0 <= token_ids[key] < encoder.vocab_size:
            raise ConfigError(f"{where}: field '{key}' {token_ids[key]} is outside the vocabulary of {encoder.vocab_size}")
    decimals = _take(raw, "output_decimals", (int,), where)
    if not 0 < decimals <= 8:
        raise ConfigError(f"{where}: field 'output_decimals' must be 1..8, got {decimals}")

    action_raw = _take(raw, "action_head", (dict,), where)
    awhere = f"{where}.action_head"
    action_hidden = _take(action_raw, "hidden_size", (int,), awhere)
    _positive(action_hidden, "hidden_size", awhere)
    actions = _take(action_raw, "actions", (list,), awhere)
    if len(actions) < 2 or not all(isinstance(a, str) and a for a in actions) or len(set(actions)) != len(actions):
        raise ConfigError(f"{awhere}: field 'actions' must list at least two distinct names, got {actions!r}")
    action_activation = _take(action_raw, "activation", (str,), awhere, "gelu")
    if action_activation not in ACTION_ACTIVATIONS:
        raise ConfigError(f"{awhere}: field 'activation' {action_activation!r} is not supported (known: {ACTION_ACTIVATIONS})")

    cal_raw = _take(raw, "calibration", (dict,), where)
    cwhere = f"{where}.calibration"
    temps_raw = _take(cal_raw, "temperature", (dict,), cwhere)
    temps = {}
    for kind in QUESTION_KINDS:
        temps[kind] = _take(temps_raw, kind, (float,), f"{cwhere}.temperature")
        _positive(temps[kind], kind, f"{cwhere}.temperature")
    extra = set(temps_raw) - set(QUESTION_KINDS)
    if extra:
        raise ConfigError(f"{cwhere}.temperature: unknown question kinds {sorted(extra)}")
    none_logit = _take(cal_raw, "none_logit", (float,), cwhere)
    if not math.isfinite(none_logit):
        raise ConfigError(f"{cwhere}: field 'none_logit' must be finite")
    return DecisionHeadConfig(
        num_layers=num_layers, num_attention_heads=heads, intermediate_size=inter, activation=activation,
        rope_theta=theta, num_token_types=types, scorer_hidden_size=scorer, max_markers=markers,
        output_decimals=decimals,
        action_head=ActionHeadConfig(hidden_size=action_hidden, actions=tuple(actions), activation=action_activation),
        calibration=CalibrationConfig(temperature=temps, none_logit=none_logit),
        **token_ids,
    )


def parse_config(raw: dict) -> ModelConfig:
    if isinstance(raw, dict) and raw.get("model_type") == "bert":  # the BERT family: its own fields and module
        from .bert_config import parse_bert_encoder

        encoder = parse_bert_encoder(raw)
    else:
        encoder = parse_encoder(raw)
    head_raw = raw.get("decision_head")
    return ModelConfig(encoder=encoder, head=None if head_raw is None else parse_head(head_raw, encoder))


def head_config_to_json(head: DecisionHeadConfig) -> dict:
    """The `decision_head` section as written to config.json (inverse of parse_head)."""
    out = asdict(head)
    out["format_version"] = 1
    out["action_head"]["actions"] = list(head.action_head.actions)
    return out
