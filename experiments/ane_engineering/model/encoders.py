"""The reference encoder of the family config.json names: ModernBERT (modernbert_reference.py) or BERT
(bert_reference.py).

Both take the embeddings the host looks up (`embed`) and return final hidden states (B, L, C)."""

from __future__ import annotations

from torch import nn

from ..checkpoint.bert_config import is_bert
from ..checkpoint.config import ModelConfig
from .bert_reference import BertReferenceEncoder
from .modernbert_reference import ReferenceEncoder


def reference_encoder(config: ModelConfig, tensors: dict) -> nn.Module:
    if is_bert(config):
        return BertReferenceEncoder(config, tensors)
    return ReferenceEncoder(config, tensors)
