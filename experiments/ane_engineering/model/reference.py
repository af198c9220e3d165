"""The reference DecisionModel: original B x L x C layout, FP32, any length up to the position limit.

Read top to bottom: the encoder config.json names (encoders.py) -> token types -> decision-head layers (ReLU FFN)
-> scoring convolutions -> marker read-out. Attention runs either as explicit softmax(QK^T)V or through torch SDPA.
This is the model every on-device candidate is judged against; it is never the thing under test.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint.config import ModelConfig
from ..checkpoint.tensors import HEAD_PREFIX
from ..core.buckets import INACTIVE_LOGIT
from .encoders import reference_encoder
from .layers import Attention, Layer, ModelInputError, ReluMLP, linear_from, norm_from


class ReferenceDecisionModel(nn.Module):
    """Encoder + decision head + scorer + marker read-out: raw option logits, inactive slots at INACTIVE_LOGIT."""

    def __init__(self, config: ModelConfig, tensors: dict):
        super().__init__()
        if config.head is None:
            raise ModelInputError("the decision model needs a 'decision_head' section in config.json")
        head = config.head
        self.config = config
        self.encoder = reference_encoder(config, tensors)
        p = HEAD_PREFIX
        self.type_embeddings = nn.Embedding.from_pretrained(tensors[f"{p}type_embeddings.weight"], freeze=True)
        self.head_layers = nn.ModuleList(
            Layer(tensors, f"{p}layers.{n}", config.encoder.norm_eps,
                  Attention(tensors, f"{p}layers.{n}.attn", head.num_attention_heads, head.rope_theta, None),
                  ReluMLP(tensors, f"{p}layers.{n}.mlp"))
            for n in range(head.num_layers))
        self.scorer_norm = norm_from(tensors, f"{p}scorer.norm", config.encoder.norm_eps)
        self.scorer_proj = linear_from(tensors, f"{p}scorer.proj")
        self.scorer_out = linear_from(tensors, f"{p}scorer.out")

    def scorer_features(self, input_ids: torch.Tensor, valid: torch.Tensor, token_types: torch.Tensor,
                        implementation: str = "explicit") -> torch.Tensor:
        """Hidden units of the scoring convolutions, just before the last one."""
        x = self.encoder(self.encoder.embed(input_ids), valid, implementation)  # (B, L, C)
        x = x + self.type_embeddings(token_types)  # (B, L, C)
        for layer in self.head_layers:
            x = layer(x, valid, implementation)  # (B, L, C)
        return F.relu(self.scorer_proj(self.scorer_norm(x)))  # (B, L, S)

    def token_scores(self, input_ids: torch.Tensor, valid: torch.Tensor, token_types: torch.Tensor,
                     implementation: str = "explicit") -> torch.Tensor:
        hidden = self.scorer_features(input_ids, valid, token_types, implementation)  # (B, L, S)
        return self.scorer_out(hidden).squeeze(-1)  # (B, L)

    def forward(self, input_ids: torch.Tensor, valid: torch.Tensor, token_types: torch.Tensor,
                marker_positions: torch.Tensor, marker_active: torch.Tensor,
                implementation: str = "explicit") -> torch.Tensor:
        scores = self.token_scores(input_ids, valid, token_types, implementation)  # (B, L)
        picked = scores.gather(1, marker_positions)  # (B, M)
        return torch.where(marker_active, picked, torch.full_like(picked, INACTIVE_LOGIT))  # (B, M)
