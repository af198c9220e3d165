"""The BC1S export models, built from the same tensors as the reference by the rules in BRIEF.md.

Everything the host prepares arrives as an input of fixed shape (bucket length L, hidden C, marker slots M):

    embeddings      (1, C, 1, L)  token embedding rows looked up on the host (padding columns: pad-token row)
    global_mask     (1, L, 1, L)  additive, [0, key, 0, query]: 0 visible, -1e4 hidden (full-attention layers)
    local_mask      (1, L, 1, L)  additive, same layout, sliding-window layers (only when the model has any)
    type_vectors    (1, C, 1, L)  token-type embedding rows (question / option / marker), zero at padding
    marker_selector (1, L, 1, M)  one-hot: [0, position, 0, slot] = 1 reads the score at `position` into `slot`

No gather and no embedding lookup happens inside: both push work off the ANE.
"""

from __future__ import annotations

import torch
from torch import nn

from ..buckets import MARKER_SLOTS
from ..checkpoint.config import ModelConfig
from ..checkpoint.tensors import HEAD_PREFIX
from .attention import SingleHeadAttention
from .conv import Conv1x1
from .ffn import GeGLUConv, ReluConv
from .layer import BC1SLayer
from .norm import ChannelLayerNorm
from .shapes import expect_shape


def encoder_layer(config: ModelConfig, tensors: dict, index: int, length: int) -> BC1SLayer:
    enc = config.encoder
    layer_type = enc.layer_types[index]
    prefix = f"layers.{index}"
    attention = SingleHeadAttention(tensors, f"{prefix}.attn", enc.num_attention_heads, enc.hidden_size,
                                    enc.rope_theta(layer_type), length)
    ffn = GeGLUConv(tensors, f"{prefix}.mlp", enc.intermediate_size, enc.gelu_approximation)
    return BC1SLayer(tensors, prefix, enc.norm_eps, attention, ffn)


def head_layer(config: ModelConfig, tensors: dict, index: int, length: int) -> BC1SLayer:
    enc, head = config.encoder, config.head
    prefix = f"{HEAD_PREFIX}layers.{index}"
    attention = SingleHeadAttention(tensors, f"{prefix}.attn", head.num_attention_heads, enc.hidden_size,
                                    head.rope_theta, length)
    return BC1SLayer(tensors, prefix, enc.norm_eps, attention, ReluConv(tensors, f"{prefix}.mlp"))


class BC1SEncoder(nn.Module):
    """Embedding norm -> all encoder layers -> final norm. Works for an encoder-only ModernBERT checkpoint."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int):
        super().__init__()
        enc = config.encoder
        self.hidden, self.length = enc.hidden_size, length
        self.layer_types = enc.layer_types
        self.has_local = "sliding_attention" in enc.layer_types
        self.embedding_norm = ChannelLayerNorm.from_tensors(tensors, "embeddings.norm", enc.norm_eps)
        self.layers = nn.ModuleList(encoder_layer(config, tensors, n, length) for n in range(enc.num_hidden_layers))
        self.final_norm = ChannelLayerNorm.from_tensors(tensors, "final_norm", enc.norm_eps)

    def input_names(self) -> list[str]:
        return ["embeddings", "global_mask"] + (["local_mask"] if self.has_local else [])

    def encode(self, embeddings: torch.Tensor, global_mask: torch.Tensor, local_mask: torch.Tensor | None) -> torch.Tensor:
        c, length = self.hidden, self.length
        expect_shape("embeddings", embeddings, (1, c, 1, length))
        expect_shape("global_mask", global_mask, (1, length, 1, length))
        if self.has_local:
            expect_shape("local_mask", local_mask, (1, length, 1, length))
        x = self.embedding_norm(embeddings)  # (1, C, 1, L)
        for layer, layer_type in zip(self.layers, self.layer_types):
            x = layer(x, local_mask if layer_type == "sliding_attention" else global_mask)  # (1, C, 1, L)
        return self.final_norm(x)  # (1, C, 1, L)

    def forward(self, embeddings: torch.Tensor, global_mask: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.encode(embeddings, global_mask, local_mask)  # (1, C, 1, L)


class BC1SBody(nn.Module):
    """The whole on-device part: encoder, token types, decision-head layers, scorer, one-hot marker read-out."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int):
        super().__init__()
        if config.head is None:
            raise ValueError("kind 'body' needs a decision head; this checkpoint is encoder-only (use kind 'encoder')")
        if config.head.max_markers != MARKER_SLOTS:
            raise ValueError(f"decision_head.max_markers is {config.head.max_markers}; the graph keeps {MARKER_SLOTS} slots")
        self.encoder = BC1SEncoder(config, tensors, length)
        self.head_layers = nn.ModuleList(head_layer(config, tensors, n, length) for n in range(config.head.num_layers))
        eps = config.encoder.norm_eps
        self.scorer_norm = ChannelLayerNorm.from_tensors(tensors, f"{HEAD_PREFIX}scorer.norm", eps)
        self.scorer_proj = Conv1x1.from_rows(tensors, f"{HEAD_PREFIX}scorer.proj")
        self.scorer_out = Conv1x1.from_rows(tensors, f"{HEAD_PREFIX}scorer.out")
        self.hidden, self.length, self.markers = config.encoder.hidden_size, length, MARKER_SLOTS

    def input_names(self) -> list[str]:
        return self.encoder.input_names()[:2] + ["type_vectors", "marker_selector"] + self.encoder.input_names()[2:]

    def forward(self, embeddings: torch.Tensor, global_mask: torch.Tensor, type_vectors: torch.Tensor,
                marker_selector: torch.Tensor, local_mask: torch.Tensor | None = None) -> torch.Tensor:
        expect_shape("type_vectors", type_vectors, (1, self.hidden, 1, self.length))
        expect_shape("marker_selector", marker_selector, (1, self.length, 1, self.markers))
        x = self.encoder.encode(embeddings, global_mask, local_mask) + type_vectors  # (1, C, 1, L)
        for layer in self.head_layers:
            x = layer(x, global_mask)  # (1, C, 1, L)
        hidden = torch.relu(self.scorer_proj(self.scorer_norm(x)))  # (1, S, 1, L)
        scores = self.scorer_out(hidden)  # (1, 1, 1, L)
        return torch.einsum("bkhq,bchk->bchq", marker_selector, scores)  # (1, 1, 1, M)


class BC1SMLPBlock(nn.Module):
    """One encoder layer's FFN sub-block with its norm and residual: x + ffn(mlp_norm(x))."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int, index: int = 0):
        super().__init__()
        layer = encoder_layer(config, tensors, index, length)
        self.mlp_norm, self.mlp = layer.mlp_norm, layer.mlp
        self.hidden, self.length = config.encoder.hidden_size, length

    def input_names(self) -> list[str]:
        return ["hidden_states"]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        expect_shape("hidden_states", hidden_states, (1, self.hidden, 1, self.length))
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))  # (1, C, 1, L)


class BC1SLayerBlock(nn.Module):
    """One full encoder layer; its mask is the one its layer type uses."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int, index: int = 0):
        super().__init__()
        self.layer = encoder_layer(config, tensors, index, length)
        self.mask_name = "local_mask" if config.encoder.layer_types[index] == "sliding_attention" else "global_mask"
        self.hidden, self.length = config.encoder.hidden_size, length

    def input_names(self) -> list[str]:
        return ["hidden_states", self.mask_name]

    def forward(self, hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        expect_shape("hidden_states", hidden_states, (1, self.hidden, 1, self.length))
        expect_shape(self.mask_name, mask, (1, self.length, 1, self.length))
        return self.layer(hidden_states, mask)  # (1, C, 1, L)
