"""ANE principle: stay 4D and avoid concat. RoPE rotates the two halves of each head against each other, so each
head is split into its first and second halves (head_dim / 2 channels each) and rotated with the original cos/sin:

    first'  = first * cos - second * sin
    second' = second * cos + first * sin

which is exactly x * cos + rotate_half(x) * sin written per half. The halves are never concatenated back: attention
scores are the sum of the two halves' dot products (see attention.py).
"""

from __future__ import annotations

import torch
from torch import nn

from ..model.rope import half_tables


class RopeHalves(nn.Module):
    """cos/sin tables for one fixed length, in the query layout (1, D/2, 1, L) and the transposed key layout (1, L, 1, D/2)."""

    def __init__(self, theta: float, head_dim: int, length: int):
        super().__init__()
        cos, sin = half_tables(theta, head_dim, torch.arange(length))  # (L, D/2)
        self.register_buffer("cos_q", cos.T.reshape(1, head_dim // 2, 1, length).contiguous())  # (1, D/2, 1, L)
        self.register_buffer("sin_q", sin.T.reshape(1, head_dim // 2, 1, length).contiguous())  # (1, D/2, 1, L)
        self.register_buffer("cos_k", cos.reshape(1, length, 1, head_dim // 2).contiguous())  # (1, L, 1, D/2)
        self.register_buffer("sin_k", sin.reshape(1, length, 1, head_dim // 2).contiguous())  # (1, L, 1, D/2)

    def rotate_query(self, first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (first * self.cos_q - second * self.sin_q,  # (1, D/2, 1, L)
                second * self.cos_q + first * self.sin_q)  # (1, D/2, 1, L)

    def rotate_key(self, first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (first * self.cos_k - second * self.sin_k,  # (1, L, 1, D/2)
                second * self.cos_k + first * self.sin_k)  # (1, L, 1, D/2)
