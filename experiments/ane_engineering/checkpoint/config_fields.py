"""What every model family's `config.json` schema shares: the error, activation names, and the bounded field kinds.

Each family (modernbert_config.py, bert_config.py) and the decision head (config.py) build their JSON Schemas from
these fragments, so a size that becomes a device dimension is bounded the same way everywhere (core/limits.py).
"""

from __future__ import annotations

from ..core.errors import HarnessError
from ..core.json_documents import NON_NEGATIVE_INTEGER, POSITIVE_INTEGER
from ..core.limits import MAX_DIMENSION, MAX_LAYERS

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


# ----------------------------------------------------------------------------------------------------------------
# Schemas: the structure and per-field bounds of config.json (core/json_documents.py); relations between fields
# (divisibility, vocabulary ranges, layer lists, RoPE agreement) are checked in code below.
# ----------------------------------------------------------------------------------------------------------------
def device_dimension(minimum: int = 1) -> dict:
    return {"type": "integer", "minimum": minimum, "maximum": MAX_DIMENSION,
            "description": f"a tensor dimension on the device; Core ML loads none above {MAX_DIMENSION}"}


LAYER_COUNT = {"type": "integer", "minimum": 1, "maximum": MAX_LAYERS,
               "description": f"LoRA exports stack every layer on one device axis of at most {MAX_DIMENSION}"}
# Host-only sizes (the vocabulary table, the action head): bounded by the host memory they imply (tensors.py);
# token ids are also 32-bit unsigned integers in the tokenizers library.
HOST_SIZE = POSITIVE_INTEGER
VOCAB_SIZE = {**POSITIVE_INTEGER, "maximum": 2**32, "description": "token ids are 32-bit in the tokenizers library"}
TOKEN_ID = NON_NEGATIVE_INTEGER
