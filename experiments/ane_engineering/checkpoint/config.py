"""Model configuration read from a Hugging Face `config.json`.

The encoder fields are the ones transformers' `ModernBertConfig` writes; the decision head lives in a documented
`decision_head` section of the same file (see README "Checkpoint format"). The structure and the bounds of every
field are declared as JSON Schemas (MODERNBERT_SCHEMA, DECISION_HEAD_SCHEMA) and checked by json_documents.check,
which names the field on any problem; the relations between fields are checked in code after it. Every size is
bounded before anything is built from it (core/limits.py): a wrong config must never silently become a different model,
nor a request for more memory than the machine has.

Another model family is another schema, dataclass and parse function (its own module): the parse function checks
the raw dict against its schema, checks the relations, returns its dataclass, and is registered in FAMILIES under
its `model_type`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import HarnessError
from ..core.json_documents import (BOOLEAN, NON_EMPTY_STRING, NON_NEGATIVE_INTEGER, NUMBER, POSITIVE_INTEGER, POSITIVE_NUMBER,
                              STRING, array_of, check, closed_object, open_object)
from ..core.limits import MAX_DIMENSION, MAX_LAYERS

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


# ----------------------------------------------------------------------------------------------------------------
# Schemas: the structure and per-field bounds of config.json (core/json_documents.py); relations between fields
# (divisibility, vocabulary ranges, layer lists, RoPE agreement) are checked in code below.
# ----------------------------------------------------------------------------------------------------------------
def _device_dimension(minimum: int = 1) -> dict:
    return {"type": "integer", "minimum": minimum, "maximum": MAX_DIMENSION,
            "description": f"a tensor dimension on the device; Core ML loads none above {MAX_DIMENSION}"}


LAYER_COUNT = {"type": "integer", "minimum": 1, "maximum": MAX_LAYERS,
               "description": f"LoRA exports stack every layer on one device axis of at most {MAX_DIMENSION}"}
# Host-only sizes (the vocabulary table, the action head): bounded by the host memory they imply (tensors.py);
# token ids are also 32-bit unsigned integers in the tokenizers library.
HOST_SIZE = POSITIVE_INTEGER
VOCAB_SIZE = {**POSITIVE_INTEGER, "maximum": 2**32, "description": "token ids are 32-bit in the tokenizers library"}
TOKEN_ID = NON_NEGATIVE_INTEGER

MODERNBERT_SCHEMA = open_object(
    {
        "hidden_size": _device_dimension(), "num_hidden_layers": LAYER_COUNT,
        "num_attention_heads": _device_dimension(), "intermediate_size": _device_dimension(),
        "vocab_size": VOCAB_SIZE, "local_attention": _device_dimension(),
        "norm_eps": POSITIVE_NUMBER, "norm_bias": BOOLEAN, "attention_bias": BOOLEAN, "mlp_bias": BOOLEAN,
        "hidden_activation": {"enum": list(ENCODER_ACTIVATIONS)}, "pad_token_id": TOKEN_ID,
    },
    {
        "model_type": {"const": "modernbert"},
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

DECISION_HEAD_SCHEMA = closed_object(
    {
        "format_version": {"const": 1}, "num_layers": LAYER_COUNT,
        "num_attention_heads": _device_dimension(), "intermediate_size": _device_dimension(),
        "activation": {"enum": list(HEAD_ACTIVATIONS)}, "rope_theta": POSITIVE_NUMBER,
        "num_token_types": _device_dimension(3),
        "scorer_hidden_size": _device_dimension(), "max_markers": _device_dimension(),
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
CONFIG_SCHEMA = open_object({}, {"model_type": STRING, "decision_head": {**DECISION_HEAD_SCHEMA, "type": ["object", "null"]}})


def parse_encoder(raw: dict, where: str = "config.json") -> EncoderConfig:
    """A ModernBERT encoder from config.json fields checked against MODERNBERT_SCHEMA, then their relations."""
    check(raw, MODERNBERT_SCHEMA, where, ConfigError)
    hidden, heads, layers = raw["hidden_size"], raw["num_attention_heads"], raw["num_hidden_layers"]
    if hidden % heads:
        raise ConfigError(f"{where}: field 'hidden_size' ({hidden}) must be a multiple of num_attention_heads ({heads})")
    if (hidden // heads) % 2:
        raise ConfigError(f"{where}: head size {hidden // heads} must be even for RoPE (hidden_size / num_attention_heads)")
    every, layer_types = raw.get("global_attn_every_n_layers"), raw.get("layer_types")
    implied = None if every is None else ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    if layer_types is None:
        if implied is None:
            raise ConfigError(f"{where}: needs 'layer_types' or 'global_attn_every_n_layers'")
        layer_types = implied
    elif len(layer_types) != layers:
        raise ConfigError(f"{where}: field 'layer_types' must list {layers} entries from {LAYER_TYPES}, got {len(layer_types)}")
    elif implied is not None and implied != layer_types:
        raise ConfigError(f"{where}: fields 'layer_types' and 'global_attn_every_n_layers' disagree")
    if not raw["pad_token_id"] < raw["vocab_size"]:
        raise ConfigError(f"{where}: field 'pad_token_id' {raw['pad_token_id']} is outside the vocabulary of {raw['vocab_size']}")
    global_theta, local_theta = _rope_thetas(raw, where)
    return EncoderConfig(
        vocab_size=raw["vocab_size"], hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=raw["intermediate_size"], layer_types=tuple(layer_types), local_attention=raw["local_attention"],
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
            raise ConfigError(f"{where}: field '{name}_rope_theta' ({float(legacy)}) disagrees with rope_parameters ({float(new)})")
        theta = legacy if legacy is not None else new
        if theta is None:
            raise ConfigError(f"{where}: missing RoPE base: give '{name}_rope_theta' or rope_parameters")
        result.append(float(theta))
    return result[0], result[1]


def parse_head(raw: dict, encoder: EncoderConfig, where: str = "config.json") -> DecisionHeadConfig:
    """The decision head from a `decision_head` section already checked against DECISION_HEAD_SCHEMA."""
    where = f"{where} decision_head"
    heads = raw["num_attention_heads"]
    if encoder.hidden_size % heads or (encoder.hidden_size // heads) % 2:
        raise ConfigError(f"{where}: field 'num_attention_heads' {heads} must split hidden_size {encoder.hidden_size} into even heads")
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


def _parse_bert(raw: dict, where: str):
    from .bert_config import parse_bert_encoder  # its own module, which imports this one

    return parse_bert_encoder(raw, where)


# model_type -> the parser of that family's encoder fields. A new family adds its schema, dataclass and parser
# (in a module of its own) and one entry here.
FAMILIES = {"modernbert": parse_encoder, "bert": _parse_bert}


def parse_config(raw: Any, where: str = "config.json") -> ModelConfig:
    """A ModelConfig from a config.json value; refuses anything else naming the file, the JSON path and the field."""
    check(raw, CONFIG_SCHEMA, where, ConfigError)
    model_type = raw.get("model_type", "modernbert")
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
