"""The reference encoder of the family config.json names: ModernBERT (modernbert_reference.py) or BERT
(bert_reference.py).

Both take the embeddings the host looks up (`embed`) and return final hidden states (B, L, C)."""

from __future__ import annotations

from torch import nn

from ..checkpoint.config import BertEncoderConfig, EncoderConfig, ModelConfig
from .bert_reference import BertReferenceEncoder
from .modernbert_reference import ReferenceEncoder

# The reference encoder of each family, by the family its config names (checkpoint/config.py FAMILIES).
REFERENCE_ENCODERS = {EncoderConfig.family: ReferenceEncoder, BertEncoderConfig.family: BertReferenceEncoder}


def reference_encoder(config: ModelConfig, tensors: dict) -> nn.Module:
    return REFERENCE_ENCODERS[config.encoder.family](config, tensors)
