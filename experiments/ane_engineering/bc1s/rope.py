"""ANE principle: stay 4D, avoid concat, and do elementwise work once per layer rather than once per head.

RoPE rotates the two halves of each head against each other:

    first'  = first * cos - second * sin
    second' = second * cos + first * sin

which is exactly x * cos + rotate_half(x) * sin written per half, with the original cos/sin and bases. The Q and K
projections emit their rows half-major (every head's first half, then every head's second half; see attention.py),
so one rotation with the tables tiled over heads covers all heads at once. The halves are never concatenated back:
attention scores are the sum of the two halves' dot products.
"""

from __future__ import annotations

import torch
from torch import nn

from ..model.rope import half_tables


class RopeHalves(nn.Module):
    """cos/sin for one fixed length, tiled over heads: query layout (1, H*D/2, 1, L), key layout (1, L, 1, H*D/2)."""

    def __init__(self, theta: float, head_dim: int, num_heads: int, length: int):
        super().__init__()
        cos, sin = half_tables(theta, head_dim, torch.arange(length))  # (L, D/2)
        cos, sin = cos.repeat(1, num_heads), sin.repeat(1, num_heads)  # (L, H*D/2): head h uses columns h*D/2..
        half = num_heads * head_dim // 2
        self.register_buffer("cos_q", cos.T.reshape(1, half, 1, length).contiguous())  # (1, H*D/2, 1, L)
        self.register_buffer("sin_q", sin.T.reshape(1, half, 1, length).contiguous())  # (1, H*D/2, 1, L)
        self.register_buffer("cos_k", cos.reshape(1, length, 1, half).contiguous())  # (1, L, 1, H*D/2)
        self.register_buffer("sin_k", sin.reshape(1, length, 1, half).contiguous())  # (1, L, 1, H*D/2)

    def rotate_query(self, first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (first * self.cos_q - second * self.sin_q,  # (1, H*D/2, 1, L)
                second * self.cos_q + first * self.sin_q)  # (1, H*D/2, 1, L)

    def rotate_key(self, first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (first * self.cos_k - second * self.sin_k,  # (1, L, 1, H*D/2)
                second * self.cos_k + first * self.sin_k)  # (1, L, 1, H*D/2)
