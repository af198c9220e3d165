"""ANE principle: stay 4D, avoid concat, and do elementwise work once per layer rather than once per head.

RoPE, exactly as transformers writes it, per head of D channels [first half | second half]:

    x' = x * cos + rotate_half(x) * sin,      rotate_half([x1 | x2]) = [-x2 | x1]

with the original cos/sin and bases (each table repeated over both halves). Q and K keep the checkpoint's
head-major row order, so each head's D channels are contiguous and one einsum per head contracts all D of them
(attention.py). rotate_half is a fixed signed permutation within each head: a 1x1 conv with groups = H whose
(D x D) block holds -1 at [i, i + D/2] and +1 at [i + D/2, i]. It is exact: every output is one input times +-1
plus exact zeros. One conv, two multiplies and one add rotate all heads of a layer; no slice and no concat.
(The block costs 2 * D multiply-adds per element, D/C of a full projection; folding rotate_half into the
projection weights instead would cost a second C x C projection.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..rope import half_tables
from ..window_tiles import WindowTiles
from .markers import select_columns


def rotate_half_blocks(num_heads: int, head_dim: int) -> torch.Tensor:
    """(H*D, D, 1, 1) weight of the grouped 1x1 conv computing rotate_half on every head."""
    half = head_dim // 2
    block = torch.zeros(head_dim, head_dim)
    block[torch.arange(half), torch.arange(half) + half] = -1.0  # out first half = -x2
    block[torch.arange(half) + half, torch.arange(half)] = 1.0  # out second half = x1
    return block.repeat(num_heads, 1).reshape(num_heads * head_dim, head_dim, 1, 1).contiguous()


class HeadRotation(nn.Module):
    """rotate_half on every head of (1, H*D, 1, S) as one grouped 1x1 conv. One instance per (H, D) is shared by
    every layer, so the package holds the constant once."""

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("weight", rotate_half_blocks(num_heads, head_dim))  # (H*D, D, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, groups=self.num_heads)  # (1, H*D, 1, S)


class RopeTables(nn.Module):
    """cos/sin for one fixed length, repeated over both halves of every head: (1, H*D, 1, L) each, or laid out in
    tiles (1, H*D, nT, T) like the sliding layers of a windowed export (windowed_attention.py; positions beyond L
    pad the last tile)."""

    def __init__(self, theta: float, head_dim: int, num_heads: int, length: int, rotation: HeadRotation,
                 tiles: WindowTiles | None = None):
        super().__init__()
        positions = length if tiles is None else tiles.padded_length
        cos, sin = half_tables(theta, head_dim, torch.arange(positions))  # (P, D/2)
        cos, sin = cos.repeat(1, 2 * num_heads), sin.repeat(1, 2 * num_heads)  # (P, H*D): channel c uses c mod D/2
        channels = num_heads * head_dim
        layout = (1, channels, 1, length) if tiles is None else (1, channels, tiles.n_tiles, tiles.tile)
        self.register_buffer("cos", cos.T.reshape(layout).contiguous())  # (1, H*D, 1, L) / (1, H*D, nT, T)
        self.register_buffer("sin", sin.T.reshape(layout).contiguous())  # (1, H*D, 1, L) / (1, H*D, nT, T)
        self.rotation = rotation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.cos + self.rotation(x) * self.sin  # (1, H*D, 1, L) / (1, H*D, nT, T)

    def at(self, x: torch.Tensor, selector: torch.Tensor) -> torch.Tensor:
        """x (1, H*D, 1, M) taken at the positions a one-hot selector (1, L, 1, M) picks (markers.py)."""
        cos, sin = select_columns(selector, self.cos), select_columns(selector, self.sin)  # (1, H*D, 1, M) each
        return x * cos + self.rotation(x) * sin  # (1, H*D, 1, M)
