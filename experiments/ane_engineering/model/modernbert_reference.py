"""The reference ModernBERT encoder: original B x L x C layout, FP32, any length up to the position limit.

Read top to bottom: token embeddings -> embedding norm -> layers (global or sliding-window attention, GeGLU FFN) ->
final norm. The decision model (reference.py) puts its head on top of it or of the BERT encoder.
"""

from __future__ import annotations

import torch
from torch import nn

from ..checkpoint.config import GELU_TANH_NAMES, ModelConfig
from .layers import Attention, GeGLU, Layer, ModelInputError, norm_from


class ReferenceEncoder(nn.Module):
    """ModernBERT encoder: token embeddings -> norm -> layers (global / sliding) -> final norm."""

    def __init__(self, config: ModelConfig, tensors: dict):
        super().__init__()
        enc = config.encoder
        self.config = enc
        self.tok_embeddings = nn.Embedding.from_pretrained(tensors["embeddings.tok_embeddings.weight"], freeze=True)
        self.embedding_norm = norm_from(tensors, "embeddings.norm", enc.norm_eps)
        approximate = "tanh" if enc.hidden_activation in GELU_TANH_NAMES else "none"
        self.layers = nn.ModuleList()
        for n, layer_type in enumerate(enc.layer_types):
            window = enc.window_radius if layer_type == "sliding_attention" else None
            attention = Attention(tensors, f"layers.{n}.attn", enc.num_attention_heads, enc.rope_theta(layer_type),
                                  window)
            self.layers.append(Layer(tensors, f"layers.{n}", enc.norm_eps, attention,
                                     GeGLU(tensors, f"layers.{n}.mlp", approximate)))
        self.final_norm = norm_from(tensors, "final_norm", enc.norm_eps)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.tok_embeddings(input_ids)  # (B, L, C), before the embedding norm

    def _check_embeddings(self, embeddings: torch.Tensor) -> None:
        if embeddings.dim() != 3 or embeddings.shape[-1] != self.config.hidden_size:
            raise ModelInputError(f"embeddings must be (B, L, {self.config.hidden_size}), got "
                                  f"{tuple(embeddings.shape)}")
        if embeddings.shape[1] > self.config.max_position_embeddings:
            raise ModelInputError(f"sequence of {embeddings.shape[1]} exceeds max_position_embeddings "
                                  f"{self.config.max_position_embeddings}")

    def forward(self, embeddings: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        if not torch.jit.is_tracing():  # traced, the baseline export's input contract fixes these shapes
            self._check_embeddings(embeddings)
        x = self.embedding_norm(embeddings)  # (B, L, C)
        for layer in self.layers:
            x = layer(x, valid, implementation)  # (B, L, C)
        return self.final_norm(x)  # (B, L, C)
