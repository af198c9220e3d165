"""The reference BERT encoder: original B x L x C layout, FP32, as transformers' BertModel computes it.

Read top to bottom: word + token-type + absolute position embeddings -> embedding LayerNorm -> post-LN layers
(x = LayerNorm(x + attention(x)); x = LayerNorm(x + Wo(gelu(Wi x)))), biases everywhere, full attention in every
layer, no final norm. The output is the last layer's hidden states (BertModel's `last_hidden_state`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint.bert_tensors import bert_layer_prefix
from ..checkpoint.config import ModelConfig
from .layers import ModelInputError, attend, linear_from, norm_from
from .masks import allowed


class BertSelfAttention(nn.Module):
    """Multi-head self-attention with separate Q, K, V projections and no position rotation."""

    def __init__(self, tensors: dict, prefix: str, num_heads: int):
        super().__init__()
        self.query = linear_from(tensors, f"{prefix}.attention.self.query")
        self.key = linear_from(tensors, f"{prefix}.attention.self.key")
        self.value = linear_from(tensors, f"{prefix}.attention.self.value")
        self.output = linear_from(tensors, f"{prefix}.attention.output.dense")
        self.num_heads = num_heads

    def forward(self, x: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        batch, length, channels = x.shape  # (B, L, C)
        shape = (batch, length, self.num_heads, channels // self.num_heads)
        q, k, v = (p(x).view(shape).transpose(1, 2) for p in (self.query, self.key, self.value))  # each (B, H, L, D)
        out = attend(q, k, v, allowed(valid, None)[:, None], implementation)  # (B, H, L, D)
        return self.output(out.transpose(1, 2).reshape(batch, length, channels))  # (B, L, C)


class BertLayer(nn.Module):
    """Post-LN: x = LayerNorm(x + attn(x)); x = LayerNorm(x + Wo(gelu(Wi x)))."""

    def __init__(self, tensors: dict, prefix: str, num_heads: int, eps: float):
        super().__init__()
        self.attention = BertSelfAttention(tensors, prefix, num_heads)
        self.attention_norm = norm_from(tensors, f"{prefix}.attention.output.LayerNorm", eps)
        self.intermediate = linear_from(tensors, f"{prefix}.intermediate.dense")
        self.output = linear_from(tensors, f"{prefix}.output.dense")
        self.output_norm = norm_from(tensors, f"{prefix}.output.LayerNorm", eps)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x, valid, implementation))  # (B, L, C)
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))  # (B, L, C)


class BertReferenceEncoder(nn.Module):
    """BERT encoder: embeddings (word + type + position) -> embedding LayerNorm -> post-LN layers."""

    def __init__(self, config: ModelConfig, tensors: dict):
        super().__init__()
        enc = config.encoder
        self.config = enc
        self.word_embeddings = nn.Embedding.from_pretrained(tensors["embeddings.word_embeddings.weight"], freeze=True)
        self.position_embeddings = nn.Embedding.from_pretrained(tensors["embeddings.position_embeddings.weight"],
                                                                freeze=True)
        self.token_type_embeddings = nn.Embedding.from_pretrained(tensors["embeddings.token_type_embeddings.weight"],
                                                                  freeze=True)
        self.embedding_norm = norm_from(tensors, "embeddings.LayerNorm", enc.layer_norm_eps)
        self.layers = nn.ModuleList(BertLayer(tensors, bert_layer_prefix(n), enc.num_attention_heads,
                                              enc.layer_norm_eps)
                                    for n in range(enc.num_hidden_layers))

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L, C) word + token-type + position embeddings (positions 0..L-1, type 0 unless given), before the
        embedding LayerNorm; summed in transformers' order."""
        length = input_ids.shape[1]
        if length > self.config.max_position_embeddings:
            raise ModelInputError(f"sequence of {length} exceeds max_position_embeddings "
                                  f"{self.config.max_position_embeddings}")
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(types)  # (B, L, C)
        return x + self.position_embeddings(torch.arange(length))[None]  # (B, L, C)

    def forward(self, embeddings: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        if not torch.jit.is_tracing() and (embeddings.dim() != 3 or embeddings.shape[-1] != self.config.hidden_size):
            raise ModelInputError(f"embeddings must be (B, L, {self.config.hidden_size}), got "
                                  f"{tuple(embeddings.shape)}")
        x = self.embedding_norm(embeddings)  # (B, L, C)
        for layer in self.layers:
            x = layer(x, valid, implementation)  # (B, L, C)
        return x  # (B, L, C): BERT has no final norm (each layer ends in one)
