"""The sentence-embedding graph: encoder -> mean pooling over valid tokens -> L2 normalisation, all in BC1S.

Why the package returns the pooled, normalised embedding rather than the final hidden states: it is what a
sentence embedder delivers (all-MiniLM-L6-v2's sentence-transformers pipeline is Transformer -> mean Pooling ->
Normalize), so the gates judge exactly what a user consumes, FP16 pooling and normalisation included; and one
(1, C, 1, 1) vector leaves the device instead of (1, C, 1, L). The hidden states stay available from the `encoder`
kind (the `encode` command).

    pooled     (1, C, 1, 1) = einsum('bkhq,bchk->bchq', pooling (1, L, 1, 1), hidden (1, C, 1, L))
    embedding  (1, C, 1, 1) = pooled * (rsqrt(mean_c pooled^2) * C^-1/2)      # = pooled / |pooled|

`pooling` is prepared on the host: 1/n at the n valid token columns, 0 at padding (a contraction like the marker
read-out: static shape, no gather, padding columns multiplied by an exact 0). The FP16 rounding of 1/n scales every
channel by the same factor, which the normalisation removes; averaging (rather than summing) keeps the pooled values
at the hidden states' magnitude. The mean of the squares (reduce_mean, an op the ANE rules allow; reduce_sum is not
on their list) rather than their sum keeps that intermediate C times smaller: |pooled| may reach
sqrt(65504 C) before it overflows FP16 (ANE_MATH.md section 12).
"""

from __future__ import annotations

import torch
from torch import nn

from ...checkpoint.config import ModelConfig
from ..window_tiles import DENSE, AttentionLayout
from .models import bc1s_encoder, bind_inputs
from .shapes import expect_shape


class BC1SSentenceEmbedder(nn.Module):
    def __init__(self, config: ModelConfig, tensors: dict, length: int, attention: AttentionLayout = DENSE):
        super().__init__()
        self.encoder = bc1s_encoder(config, tensors, length, attention=attention)
        self.length = length
        self.inverse_sqrt_channels = config.encoder.hidden_size ** -0.5

    def input_names(self) -> list[str]:
        names = self.encoder.input_names()
        return names[:2] + ["pooling"] + names[2:]

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        inputs = bind_inputs(self.input_names(), args, kwargs)
        expect_shape("pooling", inputs["pooling"], (1, self.length, 1, 1))
        hidden = self.encoder.encode(inputs)  # (1, C, 1, L)
        pooled = torch.einsum("bkhq,bchk->bchq", inputs["pooling"], hidden)  # (1, C, 1, 1)
        mean_square = (pooled * pooled).mean(dim=1, keepdim=True)  # (1, 1, 1, 1): |pooled|^2 / C
        return pooled * (torch.rsqrt(mean_square) * self.inverse_sqrt_channels)  # (1, C, 1, 1)
