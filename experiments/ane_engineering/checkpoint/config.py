"""A checkpoint's `config.json` as one ModelConfig: the family registry, and the decision head every family shares.

The encoder section is parsed by its family's module, chosen by `model_type` in FAMILIES: ModernBERT
(modernbert_config.py, the default) or BERT (bert_config.py). The decision head lives in a documented
`decision_head` section of the same file (README "Checkpoint format"), declared as the JSON Schema
DECISION_HEAD_SCHEMA. Every schema is checked by json_documents.check, which names the field on any problem; the
relations between fields are checked in code after it. Every size is bounded before anything is built from it
(core/limits.py): a wrong config must never silently become a different model, nor a request for more memory than
the machine has.

Another model family is another module with its schema, dataclass and parse function, and one entry in FAMILIES.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..core.json_documents import (
    NON_EMPTY_STRING,
    NUMBER,
    POSITIVE_NUMBER,
    STRING,
    array_of,
    check,
    closed_object,
    open_object,
)
from ..core.limits import MAX_LAYERS
from .bert_config import BertEncoderConfig, parse_bert_encoder
from .config_fields import (
    ACTION_ACTIVATIONS,
    GELU_ERF_NAMES,
    GELU_TANH_NAMES,
    HEAD_ACTIVATIONS,
    HOST_SIZE,
    LAYER_COUNT,
    LAYER_TYPES,
    QUESTION_KINDS,
    TOKEN_ID,
    ConfigError,
    device_dimension,
)
from .modernbert_config import EncoderConfig, parse_encoder

__all__ = ["ActionHeadConfig", "BertEncoderConfig", "CalibrationConfig", "ConfigError", "DecisionHeadConfig",
           "EncoderConfig", "GELU_ERF_NAMES", "GELU_TANH_NAMES", "LAYER_TYPES", "ModelConfig", "QUESTION_KINDS",
           "head_config_to_json", "parse_config", "parse_head"]


@dataclass(frozen=True)
class CalibrationConfig:
    """Per-kind temperature on the raw option logits; `noul` adds a fixed 'none of these' logit."""

    temperature: dict[str, float]
    none_logit: float  # calibrated-space logit of the implicit "none applies" outcome of noul questions


@dataclass(frozen=True)
class ActionHeadConfig:
    """Small FP32 host MLP on features of softmax(raw option logits); see run/host.py for the features."""

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


DECISION_HEAD_SCHEMA = closed_object(
    {
        "format_version": {"const": 1}, "num_layers": LAYER_COUNT,
        "num_attention_heads": device_dimension(), "intermediate_size": device_dimension(),
        "activation": {"enum": list(HEAD_ACTIVATIONS)}, "rope_theta": POSITIVE_NUMBER,
        "num_token_types": device_dimension(3),
        "scorer_hidden_size": device_dimension(), "max_markers": device_dimension(),
        "marker_token_id": TOKEN_ID, "cls_token_id": TOKEN_ID, "sep_token_id": TOKEN_ID,
        "output_decimals": {"type": "integer", "minimum": 1, "maximum": 8},
        "action_head": closed_object({"hidden_size": HOST_SIZE,
                                      "actions": array_of(NON_EMPTY_STRING, 2, uniqueItems=True)},
                                     {"activation": {"enum": list(ACTION_ACTIVATIONS)}}),
        "calibration": closed_object({"temperature": closed_object({kind: POSITIVE_NUMBER for kind in QUESTION_KINDS}),
                                      "none_logit": NUMBER}),
    },
)

# Fields every family shares: the decision head section (absent or null for an encoder-only checkpoint).
CONFIG_SCHEMA = open_object({}, {"model_type": STRING,
                                 "decision_head": {**DECISION_HEAD_SCHEMA, "type": ["object", "null"]}})


def parse_head(raw: dict, encoder: EncoderConfig, where: str = "config.json") -> DecisionHeadConfig:
    """The decision head from a `decision_head` section already checked against DECISION_HEAD_SCHEMA."""
    where = f"{where} decision_head"
    heads = raw["num_attention_heads"]
    if encoder.hidden_size % heads or (encoder.hidden_size // heads) % 2:
        raise ConfigError(f"{where}: field 'num_attention_heads' {heads} must split hidden_size {encoder.hidden_size} "
                          "into even heads")
    if encoder.num_hidden_layers + raw["num_layers"] > MAX_LAYERS:
        raise ConfigError(f"{where}: field 'num_layers' {raw['num_layers']} with {encoder.num_hidden_layers} encoder "
                          f"layers exceeds {MAX_LAYERS} layers ({LAYER_COUNT['description']})")
    for key in ("marker_token_id", "cls_token_id", "sep_token_id"):
        if not raw[key] < encoder.vocab_size:
            raise ConfigError(f"{where}: field '{key}' {raw[key]} is outside the vocabulary of {encoder.vocab_size}")
    action, calibration = raw["action_head"], raw["calibration"]
    return DecisionHeadConfig(
        num_layers=raw["num_layers"], num_attention_heads=heads, intermediate_size=raw["intermediate_size"],
        activation=raw["activation"], rope_theta=float(raw["rope_theta"]), num_token_types=raw["num_token_types"],
        scorer_hidden_size=raw["scorer_hidden_size"], max_markers=raw["max_markers"],
        marker_token_id=raw["marker_token_id"], cls_token_id=raw["cls_token_id"], sep_token_id=raw["sep_token_id"],
        output_decimals=raw["output_decimals"],
        action_head=ActionHeadConfig(hidden_size=action["hidden_size"], actions=tuple(action["actions"]),
                                     activation=action.get("activation", "gelu")),
        calibration=CalibrationConfig(temperature={k: float(v) for k, v in calibration["temperature"].items()},
                                      none_logit=float(calibration["none_logit"])),
    )


# model_type -> the parser of that family's encoder fields: the one map from a model_type to a family. A new family
# adds its schema, dataclass (with its `family` and traits) and parser in a module of its own, and one entry here.
FAMILIES = {EncoderConfig.family: parse_encoder, BertEncoderConfig.family: parse_bert_encoder}


def parse_config(raw: Any, where: str = "config.json") -> ModelConfig:
    """A ModelConfig from a config.json value; refuses anything else naming the file, the JSON path and the field."""
    check(raw, CONFIG_SCHEMA, where, ConfigError)
    model_type = raw.get("model_type", EncoderConfig.family)
    if model_type not in FAMILIES:
        raise ConfigError(f"{where}: field 'model_type' must be {' or '.join(map(repr, FAMILIES))}, got {model_type!r}")
    encoder = FAMILIES[model_type](raw, where)
    head_raw = raw.get("decision_head")
    return ModelConfig(encoder=encoder, head=None if head_raw is None else parse_head(head_raw, encoder, where))


def head_config_to_json(head: DecisionHeadConfig) -> dict:
    """The `decision_head` section as written to config.json (inverse of parse_head)."""
    out = asdict(head)
    out["format_version"] = 1
    out["action_head"]["actions"] = list(head.action_head.actions)
    return out
