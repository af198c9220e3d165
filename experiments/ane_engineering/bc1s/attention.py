"""ANE principle: split attention into single heads that stay 4D, with explicit einsums the ANE runs natively.

Per layer: Q, K, V are three 1x1 convs (the rows of Wqkv). Q and K rows are reordered half-major -- all heads'
first RoPE halves, then all second halves -- a pure row permutation (exact), so RoPE runs once per layer on two
slices (rope.py). Q's rows are also scaled by head_dim^-0.5 (folded into the conv weights: exact for head_dim 64,
a power of two, and within FP32 rounding otherwise). K is transposed once to (1, L, 1, C). Per head h:

    scores (1, Lk, 1, Lq) = einsum('bchq,bkhc->bkhq', q_h1, k_h1) + einsum('bchq,bkhc->bkhq', q_h2, k_h2) + mask
    weights = softmax(scores, dim=1)                       # over the key axis
    out_h (1, D, 1, Lq) = einsum('bkhq,bchk->bchq', weights, v_h (1, D, 1, Lk))

with q_hj (1, D/2, 1, Lq) and k_hj (1, Lk, 1, D/2). The heads are concatenated along channels and Wo is one 1x1 conv,
exactly the original projection. (Summing per-head projections would avoid the concat, which direct-ANE programs
cannot express, but Core ML runs concat on the ANE, and the H partial (1, C, 1, L) sums cost about a fifth of the
memory traffic of a short bucket in the cost model, plus H - 1 extra ops per layer.)
"""

from __future__ import annotations

import torch
from torch import nn

from .conv import Conv1x1
from .lora import low_rank_delta
from .rope import RopeHalves


def half_major_rows(num_heads: int, head_dim: int) -> torch.Tensor:
    """Row order of Q/K in the export: [h0 first half, h1 first half, ..., h0 second half, h1 second half, ...]."""
    half = head_dim // 2
    firsts = [h * head_dim + i for h in range(num_heads) for i in range(half)]
    seconds = [h * head_dim + half + i for h in range(num_heads) for i in range(half)]
    return torch.tensor(firsts + seconds)


class SingleHeadAttention(nn.Module):
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
        self.rope = rope  # shared by every layer with the same RoPE base: one set of tables in the package
        # Analysis only (evidence/fp16_range.py): called with the intermediate tensors of a forward pass.
        # None while exporting, so the traced graph is unchanged.
        self.observer = None

    def _observe(self, kind: str, name: str, *tensors, **details) -> None:
        if self.observer is not None and not torch.jit.is_tracing():
            self.observer(kind, name, *tensors, **details)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lora: dict | None = None) -> torch.Tensor:
        d, half = self.head_dim, self.head_dim // 2
        all_half = self.num_heads * half
        q, k, v = self.q(x), self.k(x), self.v(x)  # (1, C, 1, L) each; Q half-major and pre-scaled, K half-major
        if lora:  # adapters as inputs (lora.py): B' already in these rows' order and scale
            q = q + low_rank_delta(x, *lora["q"]) if "q" in lora else q  # (1, C, 1, L)
            k = k + low_rank_delta(x, *lora["k"]) if "k" in lora else k  # (1, C, 1, L)
            v = v + low_rank_delta(x, *lora["v"]) if "v" in lora else v  # (1, C, 1, L)
        self._observe("activation", "q", q)
        self._observe("activation", "k", k)
        self._observe("activation", "v", v)
        k = k.permute(0, 3, 2, 1)  # (1, L, 1, C): the one K transpose
        q1, q2 = self.rope.rotate_query(q[:, :all_half], q[:, all_half:])  # (1, H*D/2, 1, L) x2
        k1, k2 = self.rope.rotate_key(k[..., :all_half], k[..., all_half:])  # (1, L, 1, H*D/2) x2
        self._observe("activation", "q_rope", q1, q2)
        self._observe("activation", "k_rope", k1, k2, axis=1)
        # One split per tensor (a single MIL op with H outputs) instead of H slices.
        q1s, q2s = q1.split(half, dim=1), q2.split(half, dim=1)  # H x (1, D/2, 1, L)
        k1s, k2s = k1.split(half, dim=3), k2.split(half, dim=3)  # H x (1, L, 1, D/2)
        vs = v.split(d, dim=1)  # H x (1, D, 1, L)
        heads = []
        for h in range(self.num_heads):
            first = torch.einsum("bchq,bkhc->bkhq", q1s[h], k1s[h])  # (1, Lk, 1, Lq)
            second = torch.einsum("bchq,bkhc->bkhq", q2s[h], k2s[h])  # (1, Lk, 1, Lq)
            scores = first + second  # (1, Lk, 1, Lq)
            self._observe("score_parts", "score_halves", (first, second), mask)
            self._observe("scores", "scores", scores, mask)
            weights = (scores + mask).softmax(dim=1)  # (1, Lk, 1, Lq)
            heads.append(torch.einsum("bkhq,bchk->bchq", weights, vs[h]))  # (1, D, 1, Lq)
            self._observe("activation", "heads", heads[-1])
        concatenated = torch.cat(heads, dim=1)  # (1, C, 1, L)
        self._observe("activation", "concat", concatenated)
        return self.out(concatenated)  # (1, C, 1, L)
