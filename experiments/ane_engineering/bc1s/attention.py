"""ANE principle: split attention into single heads that stay 4D, with explicit einsums the ANE runs natively.

Per layer: Q, K, V are three 1x1 convs (the rows of Wqkv); Q is scaled by head_dim^-0.5; K is transposed once to
(1, L, 1, C) so each head's keys are a last-axis slice. Per head h and half j (RoPE halves, see rope.py):

    scores (1, Lk, 1, Lq) = sum_j einsum('bchq,bkhc->bkhq', q_hj (1, D/2, 1, Lq), k_hj (1, Lk, 1, D/2)) + mask
    weights = softmax(scores, dim=1)                       # over the key axis
    out_h (1, D, 1, Lq) = einsum('bkhq,bchk->bchq', weights, v_h (1, D, 1, Lk))

The output projection is applied per head on Wo's matching input columns and summed, which equals Wo applied to the
concatenated heads without ever building the concat (concat is on the direct-ANE list of things to avoid).
"""

from __future__ import annotations

import torch
from torch import nn

from .conv import Conv1x1
from .rope import RopeHalves


class SingleHeadAttention(nn.Module):
    def __init__(self, tensors: dict, prefix: str, num_heads: int, hidden: int, theta: float, length: int):
        super().__init__()
        self.num_heads, self.head_dim, self.length = num_heads, hidden // num_heads, length
        self.q = Conv1x1.from_rows(tensors, f"{prefix}.Wqkv", slice(0, hidden))
        self.k = Conv1x1.from_rows(tensors, f"{prefix}.Wqkv", slice(hidden, 2 * hidden))
        self.v = Conv1x1.from_rows(tensors, f"{prefix}.Wqkv", slice(2 * hidden, 3 * hidden))
        d = self.head_dim
        self.out = nn.ModuleList(
            Conv1x1.from_columns(tensors, f"{prefix}.Wo", slice(h * d, (h + 1) * d), with_bias=(h == 0))
            for h in range(num_heads))
        self.rope = RopeHalves(theta, d, length)
        self.scale = d ** -0.5

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        d, half = self.head_dim, self.head_dim // 2
        q = self.q(x) * self.scale  # (1, C, 1, L)
        k = self.k(x).permute(0, 3, 2, 1)  # (1, L, 1, C): the one K transpose
        v = self.v(x)  # (1, C, 1, L)
        out = None
        for h in range(self.num_heads):
            base = h * d
            q1, q2 = self.rope.rotate_query(q[:, base:base + half], q[:, base + half:base + d])  # (1, D/2, 1, L) x2
            k1, k2 = self.rope.rotate_key(k[..., base:base + half], k[..., base + half:base + d])  # (1, L, 1, D/2) x2
            scores = torch.einsum("bchq,bkhc->bkhq", q1, k1)  # (1, Lk, 1, Lq)
            scores = scores + torch.einsum("bchq,bkhc->bkhq", q2, k2)  # (1, Lk, 1, Lq)
            weights = (scores + mask).softmax(dim=1)  # (1, Lk, 1, Lq)
            head = torch.einsum("bkhq,bchk->bchq", weights, v[:, base:base + d])  # (1, D, 1, Lq)
            projected = self.out[h](head)  # (1, C, 1, L)
            out = projected if out is None else out + projected  # (1, C, 1, L)
        return out
