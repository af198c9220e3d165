"""ANE principle: the Neural Engine's native layout is channels-first (B, C, 1, S) and its workhorse is convolution.

A dense layer y = W x + b over the channel axis is exactly a 1x1 convolution with kernel K[out, in, 0, 0] = W[out, in]:
the same weights, reshaped, no retraining.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Conv1x1(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        if weight.dim() != 2:
            raise ValueError(f"dense weight must be (out, in), got {tuple(weight.shape)}")
        # Views of the checkpoint's tensors, not copies: a full-size export holds one copy of the weights, not two.
        # Nothing may modify them in place.
        self.weight = nn.Parameter(weight.detach()[:, :, None, None], requires_grad=False)  # (out, in, 1, 1)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)  # (out,)

    @classmethod
    def from_rows(cls, tensors: dict, name: str, rows: slice | None = None) -> "Conv1x1":
        """Build from `name.weight` / `name.bias`, optionally taking a block of output rows (e.g. Q of Wqkv)."""
        weight, bias = tensors[f"{name}.weight"], tensors.get(f"{name}.bias")
        if rows is not None:
            weight, bias = weight[rows], None if bias is None else bias[rows]
        return cls(weight, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias)  # (B, out, 1, S)
