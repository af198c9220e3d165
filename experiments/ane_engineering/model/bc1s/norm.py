"""ANE principle: normalise over the channel axis (dim 1) of (B, C, 1, S) so no transpose is needed.

Kept in the original order and epsilon: (x - mean) / sqrt(var + eps), then * weight, then + bias. coremltools fuses
the normalisation into one `layer_norm(axes=[1])` op; the project's pass package/layer_norm_gamma.py then moves the
(1, C, 1, 1) weight into that op as its gamma (coremltools leaves it as a separate mul).
"""

from __future__ import annotations

import torch
from torch import nn


class ChannelLayerNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone().view(1, -1, 1, 1), requires_grad=False)  # (1, C, 1, 1)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone().view(1, -1, 1, 1), requires_grad=False)
        self.eps = eps

    @classmethod
    def from_tensors(cls, tensors: dict, name: str, eps: float) -> "ChannelLayerNorm":
        return cls(tensors[f"{name}.weight"], tensors.get(f"{name}.bias"), eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=1, keepdim=True)  # (B, 1, 1, S)
        centered = x - mean  # (B, C, 1, S)
        variance = (centered * centered).mean(dim=1, keepdim=True)  # (B, 1, 1, S)
        normalized = centered * torch.rsqrt(variance + self.eps)  # (B, C, 1, S)
        out = normalized * self.weight  # (B, C, 1, S)
        return out if self.bias is None else out + self.bias  # (B, C, 1, S)
