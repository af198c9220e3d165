"""ANE principle: one pre-norm transformer layer entirely in (1, C, 1, L): channel norms, convs, per-head einsums."""

from __future__ import annotations

import torch
from torch import nn

from .markers import select_columns
from .norm import ChannelLayerNorm


class BC1SLayer(nn.Module):
    """x + attn(attn_norm(x), mask); x + ffn(mlp_norm(x)). Layer 0 of ModernBERT has no attention norm."""

    def __init__(self, tensors: dict, prefix: str, eps: float, attention: nn.Module, ffn: nn.Module):
        super().__init__()
        has_attn_norm = f"{prefix}.attn_norm.weight" in tensors
        self.attn_norm = (ChannelLayerNorm.from_tensors(tensors, f"{prefix}.attn_norm", eps) if has_attn_norm
                          else nn.Identity())
        self.attn = attention
        self.mlp_norm = ChannelLayerNorm.from_tensors(tensors, f"{prefix}.mlp_norm", eps)
        self.mlp = ffn

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lora: dict | None = None,
                selector: torch.Tensor | None = None) -> torch.Tensor:
        """x (1, C, 1, L) -> (1, C, 1, L); with a marker selector (1, L, 1, M) only the selected columns are
        computed, (1, C, 1, M) (markers.py): keys and values still come from every position."""
        normed = self.attn_norm(x)  # (1, C, 1, L)
        if selector is not None:
            x = select_columns(selector, x)  # (1, C, 1, M)
        x = x + self.attn(normed, mask, lora, selector)  # (1, C, 1, L or M)
        return x + self.mlp(self.mlp_norm(x))  # (1, C, 1, L or M)
