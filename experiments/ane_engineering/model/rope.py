"""Rotary position tables, computed exactly as transformers' default RoPE (FP32 inverse frequencies)."""

from __future__ import annotations

import torch


def inverse_frequencies(theta: float, head_dim: int) -> torch.Tensor:
    """(head_dim / 2,) float32: 1 / theta^(2i / head_dim), the same expression and dtype as transformers."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def half_tables(theta: float, head_dim: int, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (L, head_dim / 2): one angle per position and frequency (each half of a head shares it)."""
    angles = positions.to(torch.float32)[:, None] * inverse_frequencies(theta, head_dim)[None, :]  # (L, D/2)
    return angles.cos(), angles.sin()
