"""The `reference-run` attention layout: the masked dense graph with split RoPE that the reference run measured.

It is the per-head attention of this harness before the leaner layouts (git history: experiments/ane_engineering/
bc1s/attention.py and bc1s/rope.py at commit 48ff4e9), kept exportable at any length because the calibrated cost
model was fitted to the reference run's timings of this graph (placement/calibration.py), and a calibration can only
be re-derived, and compared with public measurements of that kind of graph, on the graph it describes.

Q and K rows are reordered half-major -- every head's first RoPE half, then every head's second half -- a pure row
permutation (exact), so RoPE rotates all heads of a layer with two slices and no rotate_half:

    first'  = first * cos - second * sin,    second' = second * cos + first * sin

Per head h, the score is the sum of the two halves' dot products, and every layer (full or sliding) adds its
(1, L, 1, L) mask:

    scores (1, Lk, 1, Lq) = einsum(q_h1, k_h1) + einsum(q_h2, k_h2) + mask
                                                # q_hj (1, D/2, 1, Lq), k_hj (1, Lk, 1, D/2)
    out_h  (1, D, 1, Lq)  = einsum(softmax(scores, dim=1), v_h)

Every query column is computed (no marker-column shortcut in the last head layer; the body reads the markers out
after the scorer with the one-hot einsum). LoRA inputs are not implemented for this layout.
"""

from __future__ import annotations

import torch
from torch import nn

from ..rope import half_tables
from .conv import Conv1x1
from .layer import BC1SLayer


def half_major_rows(num_heads: int, head_dim: int) -> torch.Tensor:
    """Row order of Q/K: [h0 first half, h1 first half, ..., h0 second half, h1 second half, ...]."""
    half = head_dim // 2
    firsts = [h * head_dim + i for h in range(num_heads) for i in range(half)]
    seconds = [h * head_dim + half + i for h in range(num_heads) for i in range(half)]
    return torch.tensor(firsts + seconds)


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


class ReferenceRunAttention(nn.Module):
    """Single-head attention of the reference-run layout; mask (1, L, 1, L) in every layer."""

    def __init__(self, tensors: dict, prefix: str, num_heads: int, hidden: int, rope: RopeHalves, length: int):
        super().__init__()
        self.num_heads, self.head_dim, self.length = num_heads, hidden // num_heads, length
        d = self.head_dim
        order = half_major_rows(num_heads, d)
        weight, bias = tensors[f"{prefix}.Wqkv.weight"], tensors.get(f"{prefix}.Wqkv.bias")
        scale = d ** -0.5

        def rows(block: int, permute: bool, factor: float = 1.0) -> Conv1x1:
            w = weight[block * hidden:(block + 1) * hidden]
            b = None if bias is None else bias[block * hidden:(block + 1) * hidden]
            if permute:
                w, b = w.index_select(0, order), None if b is None else b.index_select(0, order)
            return Conv1x1(w * factor, None if b is None else b * factor)

        self.q = rows(0, permute=True, factor=scale)
        self.k = rows(1, permute=True)
        self.v = rows(2, permute=False)
        self.out = Conv1x1.from_rows(tensors, f"{prefix}.Wo")
        self.rope = rope  # shared by every layer with the same RoPE base
        self.observer = None  # the range analysis (evidence/fp16_range.py) does not instrument this layout

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lora: dict | None = None,
                selector: torch.Tensor | None = None) -> torch.Tensor:
        """x (1, C, 1, L), mask (1, L, 1, L) -> (1, C, 1, L)."""
        if lora or selector is not None:
            raise ValueError("the reference-run layout has no LoRA inputs and computes every query column")
        d, half = self.head_dim, self.head_dim // 2
        all_half = self.num_heads * half
        q, k, v = self.q(x), self.k(x), self.v(x)  # (1, C, 1, L) each; Q half-major and pre-scaled, K half-major
        k = k.permute(0, 3, 2, 1)  # (1, L, 1, C): the one K transpose
        q1, q2 = self.rope.rotate_query(q[:, :all_half], q[:, all_half:])  # (1, H*D/2, 1, L) x2
        k1, k2 = self.rope.rotate_key(k[..., :all_half], k[..., all_half:])  # (1, L, 1, H*D/2) x2
        q1s, q2s = q1.split(half, dim=1), q2.split(half, dim=1)  # H x (1, D/2, 1, L)
        k1s, k2s = k1.split(half, dim=3), k2.split(half, dim=3)  # H x (1, L, 1, D/2)
        vs = v.split(d, dim=1)  # H x (1, D, 1, L)
        heads = []
        for h in range(self.num_heads):
            first = torch.einsum("bchq,bkhc->bkhq", q1s[h], k1s[h])  # (1, Lk, 1, Lq)
            second = torch.einsum("bchq,bkhc->bkhq", q2s[h], k2s[h])  # (1, Lk, 1, Lq)
            scores = first + second  # (1, Lk, 1, Lq)
            weights = (scores + mask).softmax(dim=1)  # (1, Lk, 1, Lq)
            heads.append(torch.einsum("bkhq,bchk->bchq", weights, vs[h]))  # (1, D, 1, Lq)
        concatenated = torch.cat(heads, dim=1)  # (1, C, 1, L)
        return self.out(concatenated)  # (1, C, 1, L)


class ReferenceRunLayer(BC1SLayer):
    """BC1SLayer of the reference-run layout: the same sub-blocks, written as that run's graph wrote them (the traced
    variable names become the program's names, so the program text matches the committed calibration's)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lora: dict | None = None,
                selector: torch.Tensor | None = None) -> torch.Tensor:
        if selector is not None:
            raise ValueError("the reference-run layout computes every query column")
        x = x + self.attn(self.attn_norm(x), mask, lora)  # (1, C, 1, L)
        return x + self.mlp(self.mlp_norm(x))  # (1, C, 1, L)
