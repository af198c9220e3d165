"""The reference DecisionModel: original B x L x C layout, FP32, any length up to the position limit.

Read top to bottom: embeddings -> ModernBERT layers -> final norm -> token types -> decision-head layers (ReLU FFN)
-> scoring convolutions -> marker read-out. Attention runs either as explicit softmax(QK^T)V or through torch SDPA.
This is the model every on-device candidate is judged against; it is never the thing under test.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..core.buckets import INACTIVE_LOGIT
from ..checkpoint.config import GELU_TANH_NAMES, ModelConfig
from ..checkpoint.tensors import HEAD_PREFIX
from ..core.errors import HarnessError
from .masks import allowed
from .rope import half_tables

ATTENTION_IMPLEMENTATIONS = ("explicit", "sdpa")


def _linear(tensors: dict, name: str) -> nn.Linear:
    weight = tensors[f"{name}.weight"]
    bias = tensors.get(f"{name}.bias")
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    layer.weight.data.copy_(weight)
    if bias is not None:
        layer.bias.data.copy_(bias)
    return layer


def _norm(tensors: dict, name: str, eps: float) -> nn.LayerNorm:
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


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, implementation: str) -> torch.Tensor:
    """softmax(q k^T / sqrt(D), masked to `visible` (B, 1, Lq, Lk)) v, for q, k, v of shape (B, H, L, D)."""
    if implementation == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible)  # (B, H, L, D)
    if implementation == "explicit":
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, Lq, Lk)
        scores = scores.masked_fill(~visible, float("-inf"))  # (B, H, Lq, Lk)
        return scores.softmax(dim=-1) @ v  # (B, H, L, D)
    raise ModelInputError(f"attention implementation must be one of {ATTENTION_IMPLEMENTATIONS}, got {implementation!r}")


class Attention(nn.Module):
    """Multi-head self-attention with RoPE, as transformers' ModernBertAttention (eager or SDPA)."""

    def __init__(self, tensors: dict, prefix: str, num_heads: int, theta: float, window_radius: int | None):
        super().__init__()
        self.Wqkv = _linear(tensors, f"{prefix}.Wqkv")
        self.Wo = _linear(tensors, f"{prefix}.Wo")
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
        self.Wi = _linear(tensors, f"{prefix}.Wi")
        self.Wo = _linear(tensors, f"{prefix}.Wo")
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, gate = self.Wi(x).chunk(2, dim=-1)  # (B, L, I) each
        return self.Wo(F.gelu(hidden, approximate=self.approximate) * gate)  # (B, L, C)


class ReluMLP(nn.Module):
    """Decision-head FFN: Wi -> ReLU -> Wo."""

    def __init__(self, tensors: dict, prefix: str):
        super().__init__()
        self.Wi = _linear(tensors, f"{prefix}.Wi")
        self.Wo = _linear(tensors, f"{prefix}.Wo")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.Wo(F.relu(self.Wi(x)))  # (B, L, C)


class Layer(nn.Module):
    """Pre-norm transformer layer: x + attn(attn_norm(x)); x + mlp(mlp_norm(x))."""

    def __init__(self, tensors: dict, prefix: str, eps: float, attention: Attention, mlp: nn.Module):
        super().__init__()
        has_attn_norm = f"{prefix}.attn_norm.weight" in tensors
        self.attn_norm = _norm(tensors, f"{prefix}.attn_norm", eps) if has_attn_norm else nn.Identity()
        self.attn = attention
        self.mlp_norm = _norm(tensors, f"{prefix}.mlp_norm", eps)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), valid, implementation)  # (B, L, C)
        return x + self.mlp(self.mlp_norm(x))  # (B, L, C)


class ReferenceEncoder(nn.Module):
    """ModernBERT encoder: token embeddings -> norm -> layers (global / sliding) -> final norm."""

    def __init__(self, config: ModelConfig, tensors: dict):
        super().__init__()
        enc = config.encoder
        self.config = enc
        self.tok_embeddings = nn.Embedding.from_pretrained(tensors["embeddings.tok_embeddings.weight"], freeze=True)
        self.embedding_norm = _norm(tensors, "embeddings.norm", enc.norm_eps)
        approximate = "tanh" if enc.hidden_activation in GELU_TANH_NAMES else "none"
        self.layers = nn.ModuleList()
        for n, layer_type in enumerate(enc.layer_types):
            window = enc.window_radius if layer_type == "sliding_attention" else None
            attention = Attention(tensors, f"layers.{n}.attn", enc.num_attention_heads, enc.rope_theta(layer_type), window)
            self.layers.append(Layer(tensors, f"layers.{n}", enc.norm_eps, attention,
                                     GeGLU(tensors, f"layers.{n}.mlp", approximate)))
        self.final_norm = _norm(tensors, "final_norm", enc.norm_eps)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.tok_embeddings(input_ids)  # (B, L, C), before the embedding norm

    def _check_embeddings(self, embeddings: torch.Tensor) -> None:
        if embeddings.dim() != 3 or embeddings.shape[-1] != self.config.hidden_size:
            raise ModelInputError(f"embeddings must be (B, L, {self.config.hidden_size}), got {tuple(embeddings.shape)}")
        if embeddings.shape[1] > self.config.max_position_embeddings:
            raise ModelInputError(f"sequence of {embeddings.shape[1]} exceeds max_position_embeddings "
                                  f"{self.config.max_position_embeddings}")

    def forward(self, embeddings: torch.Tensor, valid: torch.Tensor, implementation: str = "explicit") -> torch.Tensor:
        if not torch.jit.is_tracing():  # traced, the baseline export's input contract fixes these shapes
            self._check_embeddings(embeddings)
        x = self.embedding_norm(embeddings)  # (B, L, C)
        for layer in self.layers:
            x = layer(x, valid, implementation)  # (B, L, C)
        return self.final_norm(x)  # (B, L, C)


class ReferenceDecisionModel(nn.Module):
    """Encoder + decision head + scorer + marker read-out: raw option logits, inactive slots at INACTIVE_LOGIT."""

    def __init__(self, config: ModelConfig, tensors: dict):
        super().__init__()
        if config.head is None:
            raise ModelInputError("the decision model needs a 'decision_head' section in config.json")
        head = config.head
        from .encoders import reference_encoder  # the encoder family config.json names (ModernBERT or BERT)

        self.config = config
        self.encoder = reference_encoder(config, tensors)
        p = HEAD_PREFIX
        self.type_embeddings = nn.Embedding.from_pretrained(tensors[f"{p}type_embeddings.weight"], freeze=True)
        self.head_layers = nn.ModuleList(
            Layer(tensors, f"{p}layers.{n}", config.encoder.norm_eps,
                  Attention(tensors, f"{p}layers.{n}.attn", head.num_attention_heads, head.rope_theta, None),
                  ReluMLP(tensors, f"{p}layers.{n}.mlp"))
            for n in range(head.num_layers))
        self.scorer_norm = _norm(tensors, f"{p}scorer.norm", config.encoder.norm_eps)
        self.scorer_proj = _linear(tensors, f"{p}scorer.proj")
        self.scorer_out = _linear(tensors, f"{p}scorer.out")

    def scorer_features(self, input_ids: torch.Tensor, valid: torch.Tensor, token_types: torch.Tensor,
                        implementation: str = "explicit") -> torch.Tensor:
        """Hidden units of the scoring convolutions, just before the last one."""
        x = self.encoder(self.encoder.embed(input_ids), valid, implementation)  # (B, L, C)
        x = x + self.type_embeddings(token_types)  # (B, L, C)
        for layer in self.head_layers:
            x = layer(x, valid, implementation)  # (B, L, C)
        return F.relu(self.scorer_proj(self.scorer_norm(x)))  # (B, L, S)

    def token_scores(self, input_ids: torch.Tensor, valid: torch.Tensor, token_types: torch.Tensor,
                     implementation: str = "explicit") -> torch.Tensor:
        hidden = self.scorer_features(input_ids, valid, token_types, implementation)  # (B, L, S)
        return self.scorer_out(hidden).squeeze(-1)  # (B, L)

    def forward(self, input_ids: torch.Tensor, valid: torch.Tensor, token_types: torch.Tensor,
                marker_positions: torch.Tensor, marker_active: torch.Tensor,
                implementation: str = "explicit") -> torch.Tensor:
        scores = self.token_scores(input_ids, valid, token_types, implementation)  # (B, L)
        picked = scores.gather(1, marker_positions)  # (B, M)
        return torch.where(marker_active, picked, torch.full_like(picked, INACTIVE_LOGIT))  # (B, M)
