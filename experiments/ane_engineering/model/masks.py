"""Attention masks shared by the reference model and the host: one definition of who may attend to whom.

Rules: a key is visible only if it is a valid (non-padding) token; in sliding layers a valid query also needs
|q - k| <= local_attention // 2 (transformers' ModernBERT builds its sliding-window mask the same way,
modeling_modernbert.py). The padded-query rule: a padding query sees every valid key and nothing else, so no row
is ever empty (a row with no visible key would be undefined under -inf and meaningless under -1e4).
Padding outputs are never read: they only feed later layers as keys, and keys at padding are masked.
"""

from __future__ import annotations

import torch

from ..core.buckets import MASK_BIAS
from ..core.errors import HarnessError


class MaskInputError(HarnessError):
    """A validity mask of the wrong shape or dtype."""


def allowed(valid: torch.Tensor, window_radius: int | None) -> torch.Tensor:
    """Boolean (B, Lq, Lk) visibility from a (B, L) validity mask; window_radius None means full attention."""
    if valid.dim() != 2 or valid.dtype != torch.bool:
        raise MaskInputError(f"valid must be a (B, L) bool tensor, got {tuple(valid.shape)} {valid.dtype}")
    length = valid.shape[1]
    visible = valid[:, None, :].expand(-1, length, -1)  # (B, Lq, Lk): valid keys
    if window_radius is not None:
        positions = torch.arange(length)
        near = (positions[:, None] - positions[None, :]).abs() <= window_radius  # (Lq, Lk)
        query_valid = valid[:, :, None]  # (B, Lq, 1)
        # padded queries keep all valid keys
        visible = torch.logical_and(visible, torch.logical_or(near[None], torch.logical_not(query_valid)))
    return visible


def additive_bc1s(valid: torch.Tensor, window_radius: int | None) -> torch.Tensor:
    """Finite additive mask in the BC1S score layout (B, Lk, 1, Lq): 0 where visible, MASK_BIAS elsewhere."""
    visible = allowed(valid, window_radius)  # (B, Lq, Lk)
    bias = torch.where(visible, 0.0, MASK_BIAS).to(torch.float32)  # (B, Lq, Lk)
    return bias.transpose(1, 2).unsqueeze(2).contiguous()  # (B, Lk, 1, Lq)
