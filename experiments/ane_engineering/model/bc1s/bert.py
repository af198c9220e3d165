"""The BERT encoder in (1, C, 1, L): the same tensors as model/bert_reference.py under the same ANE rules.

Host (package/inputs/device_inputs.py): word + token-type + absolute position rows, summed for the tokens of the request
(the tables stay on the host). Device: embedding LayerNorm, then per post-LN layer

    x = LayerNorm(x + Wo(concat_h attention_h(x)))        # Q, K, V, Wo: 1x1 convs with biases
    x = LayerNorm(x + W2(gelu_erf(W1 x)))                 # 1x1 convs with biases

Attention per head h, with Q's rows pre-scaled by head_dim^-0.5 (folded into the conv weights and bias) and K
transposed once to (1, L, 1, C):

    scores (1, Lk, 1, Lq) = einsum('bchq,bkhc->bkhq', q_h (1, D, 1, Lq), k_h (1, Lk, 1, D)) + mask
    out_h  (1, D, 1, Lq)  = einsum('bkhq,bchk->bchq', softmax(scores, dim=1), v_h (1, D, 1, Lk))

No RoPE (positions enter through the embedding table), no window (every layer sees every valid key), no final norm.
Channel LayerNorms keep the checkpoint's epsilon (1e-12 for MiniLM; see ANE_MATH.md section 11 for FP16).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...checkpoint.bert_tensors import bert_layer_prefix
from ...checkpoint.config import ModelConfig
from ..layers import ModelInputError
from .conv import Conv1x1
from .norm import ChannelLayerNorm
from .shapes import expect_shape


class BertHeadAttention(nn.Module):
    def __init__(self, tensors: dict, prefix: str, num_heads: int, hidden: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden // num_heads
        scale = self.head_dim ** -0.5
        query = f"{prefix}.attention.self.query"
        self.q = Conv1x1(tensors[f"{query}.weight"] * scale, tensors[f"{query}.bias"] * scale)
        self.k = Conv1x1.from_rows(tensors, f"{prefix}.attention.self.key")
        self.v = Conv1x1.from_rows(tensors, f"{prefix}.attention.self.value")
        self.out = Conv1x1.from_rows(tensors, f"{prefix}.attention.output.dense")
        # Analysis only (evidence/fp16_range.py), as in attention.py: None while exporting.
        self.observer = None

    def _observe(self, kind: str, name: str, *tensors, **details) -> None:
        if self.observer is not None and not torch.jit.is_tracing():
            self.observer(kind, name, *tensors, **details)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        d = self.head_dim
        q, k, v = self.q(x), self.k(x), self.v(x)  # (1, C, 1, L) each; Q pre-scaled
        self._observe("activation", "q", q)
        self._observe("activation", "k", k)
        self._observe("activation", "v", v)
        k = k.permute(0, 3, 2, 1)  # (1, L, 1, C): the one K transpose
        qs, ks, vs = q.split(d, dim=1), k.split(d, dim=3), v.split(d, dim=1)  # H x (1, D, 1, L) / (1, L, 1, D)
        heads = []
        for h in range(self.num_heads):
            scores = torch.einsum("bchq,bkhc->bkhq", qs[h], ks[h])  # (1, Lk, 1, Lq)
            self._observe("scores", "scores", scores, mask)
            weights = (scores + mask).softmax(dim=1)  # (1, Lk, 1, Lq)
            heads.append(torch.einsum("bkhq,bchk->bchq", weights, vs[h]))  # (1, D, 1, Lq)
            self._observe("activation", "heads", heads[-1])
        concatenated = torch.cat(heads, dim=1)  # (1, C, 1, L)
        self._observe("activation", "concat", concatenated)
        return self.out(concatenated)  # (1, C, 1, L)


class GeluConv(nn.Module):
    """BERT's FFN: W1 (intermediate) -> erf GELU -> W2 (output), both with biases."""

    def __init__(self, tensors: dict, prefix: str):
        super().__init__()
        self.input = Conv1x1.from_rows(tensors, f"{prefix}.intermediate.dense")
        self.output = Conv1x1.from_rows(tensors, f"{prefix}.output.dense")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(F.gelu(self.input(x)))  # (1, C, 1, L)


class BertBC1SLayer(nn.Module):
    """Post-LN: x = attn_norm(x + attn(x, mask)); x = mlp_norm(x + mlp(x))."""

    def __init__(self, config: ModelConfig, tensors: dict, index: int):
        super().__init__()
        enc, prefix = config.encoder, bert_layer_prefix(index)
        self.attn = BertHeadAttention(tensors, prefix, enc.num_attention_heads, enc.hidden_size)
        self.attn_norm = ChannelLayerNorm.from_tensors(tensors, f"{prefix}.attention.output.LayerNorm",
                                                       enc.layer_norm_eps)
        self.mlp = GeluConv(tensors, prefix)
        self.mlp_norm = ChannelLayerNorm.from_tensors(tensors, f"{prefix}.output.LayerNorm", enc.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lora: dict | None = None) -> torch.Tensor:
        x = self.attn_norm(x + self.attn(x, mask))  # (1, C, 1, L)
        return self.mlp_norm(x + self.mlp(x))  # (1, C, 1, L)


class BC1SBertEncoder(nn.Module):
    """Embedding LayerNorm -> every post-LN layer. The interface of BC1SEncoder (models.py), without LoRA."""

    has_local = False
    lora = None

    def __init__(self, config: ModelConfig, tensors: dict, length: int):
        super().__init__()
        enc = config.encoder
        self.hidden, self.length = enc.hidden_size, length
        if length > enc.max_position_embeddings:
            raise ModelInputError(f"length {length} exceeds the {enc.max_position_embeddings} absolute positions "
                                  "(max_position_embeddings) of this BERT encoder")
        self.layer_types = enc.layer_types
        self.embedding_norm = ChannelLayerNorm.from_tensors(tensors, "embeddings.LayerNorm", enc.layer_norm_eps)
        self.layers = nn.ModuleList(BertBC1SLayer(config, tensors, n) for n in range(enc.num_hidden_layers))

    def input_names(self) -> list[str]:
        return ["embeddings", "global_mask"]

    def lora_shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def layer_lora(self, inputs: dict, index: int) -> None:
        return None

    def encode(self, inputs: dict[str, torch.Tensor], keys: torch.Tensor | None = None) -> torch.Tensor:
        """`keys` (a ModernBERT key bias) is not used: BERT layers add the global mask itself."""
        c, length = self.hidden, self.length
        expect_shape("embeddings", inputs["embeddings"], (1, c, 1, length))
        expect_shape("global_mask", inputs["global_mask"], (1, length, 1, length))
        x = self.embedding_norm(inputs["embeddings"])  # (1, C, 1, L)
        for layer in self.layers:
            x = layer(x, inputs["global_mask"])  # (1, C, 1, L)
        return x  # (1, C, 1, L): each layer ends in a LayerNorm

    def forward(self, embeddings: torch.Tensor, global_mask: torch.Tensor) -> torch.Tensor:
        return self.encode({"embeddings": embeddings, "global_mask": global_mask})  # (1, C, 1, L)
