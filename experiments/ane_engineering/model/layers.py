"""The layers every reference model shares, in the original B x L x C layout and FP32: weights copied from
checkpoint tensors, attention (explicit softmax(QK^T)V or torch SDPA) with RoPE, the GeGLU and ReLU FFNs and the
pre-norm transformer layer (ModernBERT's encoder layers and the decision head's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import HarnessError
from .masks import allowed
from .rope import half_tables

ATTENTION_IMPLEMENTATIONS = ("explicit", "sdpa")


def linear_from(tensors: dict, name: str) -> nn.Linear:
    weight = tensors[f"{name}.weight"]
    bias = tensors.get(f"{name}.bias")
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    layer.weight.data.copy_(weight)
    if bias is not None:
        layer.bias.data.copy_(bias)
    return layer


def norm_from(tensors: dict, name: str, eps: float) -> nn.LayerNorm:
    weight = tensors[f"{name}.weight"]
    bias = tensors.get(f"{name}.bias")
    norm = nn.LayerNorm(weight.shape[0], eps=eps, bias=bias is not None)
    norm.weight.data.copy_(weight)
    if bias is not None:
        norm.bias.data.copy_(bias)
    return norm


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class ModelInputError(HarnessError):
    """Inputs or settings the FP32 reference model refuses (shapes, lengths, a missing head)."""


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor,
           implementation: str) -> torch.Tensor:
    """softmax(q k^T / sqrt(D), masked to `visible` (B, 1, Lq, Lk)) v, for q, k, v of shape (B, H, L, D)."""
    if implementation == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible)  # (B, H, L, D)
    if implementation == "explicit":
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, Lq, Lk)
        scores = scores.masked_fill(~visible, float("-inf"))  # (B, H, Lq, Lk)
        return scores.softmax(dim=-1) @ v  # (B, H, L, D)
    raise ModelInputError(f"attention implementation must be one of {ATTENTION_IMPLEMENTATIONS}, got "
                          f"{implementation!r}")


class Attention(nn.Module):
    """Multi-head self-attention with RoPE, as transformers' ModernBertAttention (eager or SDPA)."""

    def __init__(self, tensors: dict, prefix: str, num_heads: int, theta: float, window_radius: int | None):
        super().__init__()
        self.Wqkv = linear_from(tensors, f"{prefix}.Wqkv")
        self.Wo = linear_from(tensors, f"{prefix}.Wo")
        self.num_heads = num_heads
        self.theta = theta
        self.window_radius = window_radius

    def forward(self, x: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        batch, length, channels = x.shape  # (B, L, C)
        head_dim = channels // self.num_heads
        qkv = self.Wqkv(x).view(batch, length, 3, self.num_heads, head_dim)  # (B, L, 3, H, D)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=2))  # each (B, H, L, D)
        cos, sin = half_tables(self.theta, head_dim, torch.arange(length))  # (L, D/2)
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # (L, D)
        q = q * cos + rotate_half(q) * sin  # (B, H, L, D)
        k = k * cos + rotate_half(k) * sin  # (B, H, L, D)
        out = attend(q, k, v, allowed(valid, self.window_radius)[:, None], implementation)  # (B, H, L, D)
        return self.Wo(out.transpose(1, 2).reshape(batch, length, channels))  # (B, L, C)


class GeGLU(nn.Module):
    """ModernBERT's MLP: Wi gives [input | gate]; act(input) * gate -> Wo."""

    def __init__(self, tensors: dict, prefix: str, approximate: str):
        super().__init__()
        self.Wi = linear_from(tensors, f"{prefix}.Wi")
        self.Wo = linear_from(tensors, f"{prefix}.Wo")
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, gate = self.Wi(x).chunk(2, dim=-1)  # (B, L, I) each
        return self.Wo(F.gelu(hidden, approximate=self.approximate) * gate)  # (B, L, C)


class ReluMLP(nn.Module):
    """Decision-head FFN: Wi -> ReLU -> Wo."""

    def __init__(self, tensors: dict, prefix: str):
        super().__init__()
        self.Wi = linear_from(tensors, f"{prefix}.Wi")
        self.Wo = linear_from(tensors, f"{prefix}.Wo")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.Wo(F.relu(self.Wi(x)))  # (B, L, C)


class Layer(nn.Module):
    """Pre-norm transformer layer: x + attn(attn_norm(x)); x + mlp(mlp_norm(x))."""

    def __init__(self, tensors: dict, prefix: str, eps: float, attention: Attention, mlp: nn.Module):
        super().__init__()
        has_attn_norm = f"{prefix}.attn_norm.weight" in tensors
        self.attn_norm = norm_from(tensors, f"{prefix}.attn_norm", eps) if has_attn_norm else nn.Identity()
        self.attn = attention
        self.mlp_norm = norm_from(tensors, f"{prefix}.mlp_norm", eps)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), valid, implementation)  # (B, L, C)
        return x + self.mlp(self.mlp_norm(x))  # (B, L, C)
