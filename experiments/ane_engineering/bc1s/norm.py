"""ANE principle: normalise over the channel axis (dim 1) of (B, C, 1, S) so no transpose is needed.

Kept in the original order and epsilon: (x - mean) / sqrt(var + eps), then * weight, then + bias. coremltools fuses
the normalisation into one `layer_norm(axes=[1])` op but leaves the (1, C, 1, 1) weight as a separate mul (its
fusion pattern takes a rank-1 gamma only), which re-reads and re-writes the whole (1, C, 1, L) tensor.

So a bias-free norm whose only readers are 1x1 convs is exported without its weight (`folded`): the convs carry it,
W (w * n) = (W diag(w)) n, one column scale of each reader's weight at export time (bc1s/conv.py `scaled_inputs`).
Equal up to FP32 rounding of the products; one elementwise op and 2 x C x L x 2 bytes fewer per norm
(ANE_MATH.md section 16).
"""

from __future__ import annotations

import torch
from torch import nn


class ChannelLayerNorm(nn.Module):
    """Layer norm over dim 1. folded: no weight or bias here; the 1x1 convs reading the output carry the weight."""

    def __init__(self, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float):
        super().__init__()
        self.weight = None if weight is None else nn.Parameter(weight.detach().clone().view(1, -1, 1, 1),
                                                               requires_grad=False)  # (1, C, 1, 1)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone().view(1, -1, 1, 1), requires_grad=False)
        self.eps = eps

    @classmethod
    def from_tensors(cls, tensors: dict, name: str, eps: float, folded: bool = False) -> ChannelLayerNorm:
        if folded:
            if f"{name}.bias" in tensors:
                raise ValueError(f"{name} has a bias; only a bias-free norm's weight folds into the convs reading it")
            return cls(None, None, eps)
        return cls(tensors[f"{name}.weight"], tensors.get(f"{name}.bias"), eps)

    @property
    def folded(self) -> bool:
        return self.weight is None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=1, keepdim=True)  # (B, 1, 1, S)
        centered = x - mean  # (B, C, 1, S)
        variance = (centered * centered).mean(dim=1, keepdim=True)  # (B, 1, 1, S)
        normalized = centered * torch.rsqrt(variance + self.eps)  # (B, C, 1, S)
        if self.weight is None:
            return normalized  # folded: the readers' conv weights carry the norm's weight
        out = normalized * self.weight  # (B, C, 1, S)
        return out if self.bias is None else out + self.bias  # (B, C, 1, S)


def foldable(tensors: dict, name: str) -> torch.Tensor | None:
    """The weight of a bias-free norm `name` (its readers can carry it), else None."""
    weight = tensors.get(f"{name}.weight")
    return weight if weight is not None and f"{name}.bias" not in tensors else None
