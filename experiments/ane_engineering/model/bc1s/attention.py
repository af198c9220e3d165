"""ANE principle: split attention into single heads that stay 4D, with explicit einsums the ANE runs natively.

Per layer: Q, K, V are three 1x1 convs (the rows of Wqkv, in the checkpoint's head-major order). Q's rows are scaled
by head_dim^-0.5 (folded into the conv weights: exact for head_dim 64, a power of two, and within FP32 rounding
otherwise). RoPE rotates Q and K once per layer for all heads (rope.py), K is then transposed once to (1, L, 1, C).
Per head h, one score einsum over all D channels:

    scores (1, Lk, 1, Lq) = einsum('bchq,bkhc->bkhq', q_h (1, D, 1, Lq), k_h (1, Lk, 1, D)) + mask
    weights = softmax(scores, dim=1)                       # over the key axis
    out_h (1, D, 1, Lq) = einsum('bkhq,bchk->bchq', weights, v_h (1, D, 1, Lk))

The score is the sum over a head's D channels of q'k', whatever their order, so one contraction replaces the two
half-size einsums and their add (two L x L tensors fewer per head).

Full-attention layers fold their mask into the same contraction. Their mask depends on the key only (model/masks.py:
every query sees exactly the valid keys), so it is one key bias (1, Lk, 1, 1): a (D+1)-th channel of ones on q_h and
the key bias on k_h make the einsum add 1 * bias[k] to every score. The added term is exactly 0 for a visible key and
-1e4 for a hidden one, the same values the add wrote, and the L x L add (read scores and mask, write scores: 3 L x L
transfers per head) is gone (ANE_MATH.md section 16). Sliding-window layers keep their query-dependent mask as an add.
Sliding-window layers of a `windowed` export run the same per-head ops over query tiles and key windows instead
(windowed_attention.py). The heads are concatenated along channels and Wo is one 1x1 conv, exactly the original
projection. (Summing per-head projections would avoid the concat, which direct-ANE programs cannot express, but Core ML
runs concat on the ANE, and the H partial (1, C, 1, L) sums cost about a fifth of the memory traffic of a short bucket
in the cost model, plus H - 1 extra ops per layer.)
"""

from __future__ import annotations

import torch
from torch import nn

from ...core.buckets import MARKER_SLOTS
from .conv import Conv1x1
from .lora import low_rank_delta
from .markers import select_columns
from .rope import RopeTables
from .windowed_attention import WindowTiling, windowed_heads


class KeyBiasChannel(nn.Module):
    """Appends the channel that folds a key-only mask into the score einsum: ones to q_h, the key bias to k_h.
    One instance per length is shared by every full-attention layer, so the package holds each ones row once: one
    per position, and one per marker slot for the last head layer's selected queries (markers.py)."""

    def __init__(self, length: int):
        super().__init__()
        self.register_buffer("position_ones", torch.ones(1, 1, 1, length))  # (1, 1, 1, L)
        self.register_buffer("slot_ones", torch.ones(1, 1, 1, MARKER_SLOTS))  # (1, 1, 1, M)

    def forward(self, q_h: torch.Tensor, k_h: torch.Tensor, key_bias: torch.Tensor,
                selected: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """q_h (1, D, 1, Lq), k_h (1, Lk, 1, D), key_bias (1, Lk, 1, 1) -> (1, D+1, 1, Lq), (1, Lk, 1, D+1);
        Lq = M for selected queries, else L."""
        ones = self.slot_ones if selected else self.position_ones  # (1, 1, 1, Lq)
        return torch.cat((q_h, ones), dim=1), torch.cat((k_h, key_bias), dim=3)


def key_bias(global_mask: torch.Tensor) -> torch.Tensor:
    """The key bias (1, L, 1, 1) of a full-attention mask (1, L, 1, L): its first query column. Every column is the
    same by construction (model/masks.py); the runtime refuses a global mask whose columns differ."""
    return global_mask[:, :, :, :1]  # (1, L, 1, 1)


def qk_row_order(num_heads: int, head_dim: int) -> torch.Tensor:
    """Row order of Q/K in the export: the checkpoint's own head-major order (head h: rows h*D..h*D+D-1, first
    RoPE half then second). LoRA B' rows follow it (package/inputs/adapter.py)."""
    return torch.arange(num_heads * head_dim)


class SingleHeadAttention(nn.Module):
    def __init__(self, tensors: dict, prefix: str, num_heads: int, hidden: int, rope: RopeTables, length: int,
                 tiling: WindowTiling | None = None, key_bias_channel: KeyBiasChannel | None = None):
        super().__init__()
        self.num_heads, self.head_dim, self.length = num_heads, hidden // num_heads, length
        d = self.head_dim
        weight, bias = tensors[f"{prefix}.Wqkv.weight"], tensors.get(f"{prefix}.Wqkv.bias")
        scale = d ** -0.5

        def rows(block: int, factor: float = 1.0) -> Conv1x1:
            w = weight[block * hidden:(block + 1) * hidden]
            b = None if bias is None else bias[block * hidden:(block + 1) * hidden]
            return Conv1x1(w * factor, None if b is None else b * factor)

        self.q = rows(0, factor=scale)
        self.k = rows(1)
        self.v = rows(2)
        self.out = Conv1x1.from_rows(tensors, f"{prefix}.Wo")
        self.rope = rope  # shared by every layer with the same RoPE base: one set of tables in the package
        self.tiling = tiling  # windowed layout (sliding layers): shared by every such layer; None = dense
        # Full-attention layers: the mask is a key bias (1, L, 1, 1) folded into the score einsum; None = add a mask.
        self.key_bias_channel = key_bias_channel
        # Analysis only (evidence/fp16_range.py): called with the intermediate tensors of a forward pass.
        # None while exporting, so the traced graph is unchanged.
        self.observer = None

    def _observe(self, kind: str, name: str, *tensors, **details) -> None:
        if self.observer is not None and not torch.jit.is_tracing():
            self.observer(kind, name, *tensors, **details)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lora: dict | None = None,
                selector: torch.Tensor | None = None) -> torch.Tensor:
        """x (1, C, 1, L), or tiles (1, C, nT, T) in a sliding layer of the windowed layout; mask: the key bias
        (1, L, 1, 1) of a full-attention layer, else the layer's additive mask ((1, L, 1, L) dense or (1, W, nT, T)
        windowed). selector (1, L, 1, M): queries only at the selected positions (markers.py), output (1, C, 1, M);
        full-attention layers only."""
        if selector is not None and (self.tiling is not None or self.key_bias_channel is None):
            raise ValueError("selected queries are implemented for full-attention layers")
        if self.tiling is not None:
            return self._windowed(x, mask, lora)
        queries = x if selector is None else select_columns(selector, x)  # (1, C, 1, Lq)
        q, k, v = self.q(queries), self.k(x), self.v(x)  # (1, C, 1, Lq) / (1, C, 1, L); Q pre-scaled
        if lora:  # adapters as inputs (lora.py): B' already in these rows' order and scale
            q = q + low_rank_delta(queries, *lora["q"]) if "q" in lora else q  # (1, C, 1, Lq)
            k = k + low_rank_delta(x, *lora["k"]) if "k" in lora else k  # (1, C, 1, L)
            v = v + low_rank_delta(x, *lora["v"]) if "v" in lora else v  # (1, C, 1, L)
        self._observe("activation", "q", q)
        self._observe("activation", "k", k)
        self._observe("activation", "v", v)
        q = self.rope(q) if selector is None else self.rope.at(q, selector)  # (1, C, 1, Lq), rotated
        k = self.rope(k)  # (1, C, 1, L), rotated
        self._observe("activation", "q_rope", q)
        self._observe("activation", "k_rope", k)
        concatenated = self._dense_heads(q, k, v, mask, selected=selector is not None)  # (1, C, 1, Lq)
        self._observe("activation", "concat", concatenated)
        return self.out(concatenated)  # (1, C, 1, Lq)

    def _windowed(self, x: torch.Tensor, mask: torch.Tensor, lora: dict | None) -> torch.Tensor:
        """A sliding-window layer of the windowed layout works in tiles (windowed_attention.py): x (1, C, nT, T),
        mask (1, W, nT, T) -> (1, C, nT, T)."""
        tiling = self.tiling
        q, k, v = self.q(x), self.k(x), self.v(x)  # (1, C, nT, T) each; Q pre-scaled
        if lora:  # the adapters' einsums work on (1, C, 1, L): their deltas are tiled like the input
            flat = tiling.untile(x)  # (1, C, 1, L)
            q = q + tiling.queries(low_rank_delta(flat, *lora["q"])) if "q" in lora else q  # (1, C, nT, T)
            k = k + tiling.queries(low_rank_delta(flat, *lora["k"])) if "k" in lora else k  # (1, C, nT, T)
            v = v + tiling.queries(low_rank_delta(flat, *lora["v"])) if "v" in lora else v  # (1, C, nT, T)
        observe = None
        if self.observer is not None:
            for name, tensor in (("q", q), ("k", k), ("v", v)):
                self._observe("activation", name, tiling.untile(tensor))

            def observe(kind, name, tensor):
                self._observe(kind, name, tiling.untile(tensor))
        q, k = self.rope(q), self.rope(k)  # (1, C, nT, T) each, rotated with tiled tables
        heads = windowed_heads(q, k, v, mask, tiling, self.head_dim, observe)  # (1, C, nT, T)
        self._observe("activation", "concat", tiling.untile(heads))
        return self.out(heads)  # (1, C, nT, T)

    def _dense_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     selected: bool = False) -> torch.Tensor:
        """q (1, C, 1, Lq), k and v (1, C, 1, L); Lq = M for selected queries. Returns the heads (1, C, 1, Lq)."""
        d = self.head_dim
        k = k.permute(0, 3, 2, 1)  # (1, L, 1, C): the one K transpose
        # One split per tensor (a single MIL op with H outputs) instead of H slices.
        qs, ks, vs = q.split(d, dim=1), k.split(d, dim=3), v.split(d, dim=1)  # H x (1, D, 1, L) / (1, L, 1, D)
        heads = []
        for q_h, k_h, v_h in zip(qs, ks, vs):
            if self.key_bias_channel is not None:  # full attention: the key bias rides in the contraction
                if self.observer is not None:
                    scores = torch.einsum("bchq,bkhc->bkhq", q_h, k_h)  # (1, Lk, 1, Lq): analysis only
                    self._observe("scores", "scores", scores, mask.expand(-1, -1, -1, scores.shape[3]))
                q_x, k_x = self.key_bias_channel(q_h, k_h, mask, selected)  # (1, D+1, 1, Lq) / (1, Lk, 1, D+1)
                weights = torch.einsum("bchq,bkhc->bkhq", q_x, k_x).softmax(dim=1)  # (1, Lk, 1, Lq)
                heads.append(torch.einsum("bkhq,bchk->bchq", weights, v_h))  # (1, D, 1, Lq)
                self._observe("activation", "heads", heads[-1])
                continue
            scores = torch.einsum("bchq,bkhc->bkhq", q_h, k_h)  # (1, Lk, 1, Lq)
            self._observe("scores", "scores", scores, mask)
            weights = (scores + mask).softmax(dim=1)  # (1, Lk, 1, Lq)
            heads.append(torch.einsum("bkhq,bchk->bchq", weights, v_h))  # (1, D, 1, Lq)
            self._observe("activation", "heads", heads[-1])
        return torch.cat(heads, dim=1)  # (1, C, 1, L)
