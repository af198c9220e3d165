"""Recording activation ranges of the FP32 BC1S body for the FP16 range analysis (fp16_range.py): forward hooks and
the attention observer that keep, per tensor site, the largest |value| over valid and over all token columns, the
per-channel maxima and the layer-norm statistics. What the ranges mean (verdicts, cliffs, evidence) is fp16_range.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..core.buckets import MASK_BIAS
from ..model.bc1s.bert import BertBC1SLayer
from ..model.bc1s.ffn import GeGLUConv
from ..model.bc1s.models import BC1SBody
from ..model.bc1s.norm import ChannelLayerNorm

VISIBLE_FLOOR = MASK_BIAS + 20.0  # a visible score below this is as suppressed as a masked key


def column_max_abs(tensor: torch.Tensor, valid: torch.Tensor, axis: int) -> tuple[float, float]:
    """(max |value| over valid token columns, over all columns); `axis` is the token axis, `valid` a (L,) bool."""
    others = [d for d in range(tensor.dim()) if d != axis]
    per_column = tensor.detach().abs().amax(dim=others)  # (L,); NaN propagates
    return _masked_max(per_column, valid), _masked_max(per_column, torch.ones_like(valid))


def _masked_max(values: torch.Tensor, keep: torch.Tensor) -> float:
    """Max of `values` where `keep`, treating NaN as inf (a non-finite value is an overflow), or 0.0 if none kept."""
    if not bool(keep.any()):
        return 0.0
    picked = values[keep].double()
    if bool(torch.isnan(picked).any()):
        return math.inf
    return float(picked.max())


def norm_stats(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per column of a (1, C, 1, L) norm input: variance, max (x - mean)^2, sum (x - mean)^2 -- each (L,), in FP64."""
    x = x.detach().double()
    centered = x - x.mean(dim=1, keepdim=True)  # (1, C, 1, L)
    squared = centered * centered
    return {"variance": squared.mean(dim=1).reshape(-1), "max_sq_dev": squared.amax(dim=1).reshape(-1),
            "sum_sq_dev": squared.sum(dim=1).reshape(-1)}


@dataclass
class _Max:
    valid: float = 0.0
    all: float = 0.0
    where_valid: dict | None = None
    where_all: dict | None = None

    def update(self, valid: float, every: float, where: dict) -> None:
        if valid > self.valid or (math.isinf(valid) and self.where_valid is None):
            self.valid, self.where_valid = valid, where
        if every > self.all or (math.isinf(every) and self.where_all is None):
            self.all, self.where_all = every, where


@dataclass
class _Site:
    kind: str  # activation | norm_input | scores | logits
    order: int
    values: _Max = field(default_factory=_Max)
    extra: dict[str, _Max] = field(default_factory=dict)  # norm: variance / max_sq_dev / sum_sq_dev
    min_visible: float = math.inf  # scores only
    max_visible: float = -math.inf
    below_floor: int = 0
    spread_valid: float = -math.inf
    spread_all: float = -math.inf
    where_spread: dict | None = None
    channels: torch.Tensor | None = None  # (C,) largest |value| per channel over valid tokens (channel-layout sites)
    min_variance: float = math.inf  # norm inputs: smallest per-token variance over valid tokens


class RangeRecorder:
    """Holds the running maxima per site while hooks fire; one question at a time (set_question)."""

    def __init__(self):
        self.sites: dict[str, _Site] = {}
        self.valid: torch.Tensor | None = None  # (L,) bool: real token columns
        self.active_slots: torch.Tensor | None = None  # (M,) bool: marker slots of real options
        self.where: dict = {}
        self.attention_observations = 0

    def set_question(self, valid: torch.Tensor, active_slots: torch.Tensor, where: dict) -> None:
        self.valid, self.active_slots, self.where = valid, active_slots, where

    def _site(self, name: str, kind: str) -> _Site:
        if name not in self.sites:
            self.sites[name] = _Site(kind, len(self.sites))
        return self.sites[name]

    def columns(self, width: int) -> torch.Tensor:
        """The (width,) bool of columns that reach a read-out: valid tokens of an L-wide tensor, active marker slots
        of an M-wide one (the last head layer and the scorer compute the marker columns only: model/bc1s/markers.py)."""
        if width == len(self.valid):
            return self.valid
        if width == len(self.active_slots):
            return self.active_slots
        raise ValueError(f"a site {width} columns wide is neither the bucket ({len(self.valid)}) nor the marker "
                         f"slots ({len(self.active_slots)})")

    def activation(self, name: str, *tensors: torch.Tensor, axis: int = 3) -> None:
        """One site made of one or more tensors (e.g. both RoPE halves), all with the token axis `axis`."""
        pairs = [column_max_abs(tensor, self.columns(tensor.shape[axis]), axis) for tensor in tensors]
        site = self._site(name, "activation")
        site.values.update(max(p[0] for p in pairs), max(p[1] for p in pairs), self.where)
        if axis == 3 and len(tensors) == 1:
            self._channels(site, tensors[0])

    def _channels(self, site: "_Site", tensor: torch.Tensor) -> None:
        """Running per-channel max |value| over valid token columns of a (1, C, 1, L) tensor (NaN counts as inf)."""
        columns = self.columns(tensor.shape[-1])
        if tensor.dim() != 4 or not bool(columns.any()):
            return
        per_channel = tensor.detach()[..., columns].abs().amax(dim=(0, 2, 3)).double()  # (C,)
        per_channel = torch.nan_to_num(per_channel, nan=math.inf)
        site.channels = per_channel if site.channels is None else torch.maximum(site.channels, per_channel)

    def logits(self, name: str, tensor: torch.Tensor) -> None:
        valid, every = column_max_abs(tensor, self.active_slots, 3)
        self._site(name, "logits").values.update(valid, every, self.where)

    def norm_input(self, name: str, x: torch.Tensor) -> None:
        site = self._site(name, "norm_input")
        columns = self.columns(x.shape[3])
        valid, every = column_max_abs(x, columns, 3)
        site.values.update(valid, every, self.where)
        everything = torch.ones_like(columns)
        self._channels(site, x)
        for key, per_column in norm_stats(x).items():
            per_column = torch.where(torch.isfinite(per_column), per_column, torch.full_like(per_column, math.inf))
            site.extra.setdefault(key, _Max()).update(_masked_max(per_column, columns),
                                                     _masked_max(per_column, everything), self.where)
            if key == "variance" and bool(columns.any()):
                site.min_variance = min(site.min_variance, float(per_column[columns].min()))

    def _read_max_abs(self, s: torch.Tensor, read: torch.Tensor) -> tuple[float, float]:
        """(max |s| over read entries, over all entries) of a (Lk, Lq) score-layout tensor."""
        magnitude = s.abs()  # NaN stays NaN: _masked_max turns it into inf
        per_query_read = torch.where(read, magnitude, torch.zeros_like(magnitude)).amax(dim=0)  # (Lq,)
        queries = self.columns(s.shape[1])
        return (_masked_max(per_query_read, queries),
                _masked_max(magnitude.amax(dim=0), torch.ones_like(queries)))

    def scores(self, name: str, scores: torch.Tensor, mask: torch.Tensor) -> None:
        """scores (1, Lk, 1, Lq) before the mask; mask the additive (1, Lk, 1, Lq) bias of this layer."""
        s, visible = scores.detach()[0, :, 0, :], (mask[0, :, 0, :] == 0)  # (Lk, Lq)
        query_valid = self.columns(s.shape[1])  # (Lq,): valid tokens, or active slots for selected queries
        read = torch.logical_and(visible, query_valid[None, :])  # entries that reach a valid token's output
        site = self._site(name, "scores")
        site.values.update(*self._read_max_abs(s, read), self.where)
        if bool(read.any()):
            low = float(torch.where(read, s, torch.full_like(s, math.inf)).amin())
            site.min_visible = min(site.min_visible, low)
            site.max_visible = max(site.max_visible, float(torch.where(read, s, torch.full_like(s, -math.inf)).amax()))
            if low < VISIBLE_FLOOR:
                site.below_floor += int(torch.logical_and(read, s < VISIBLE_FLOOR).sum())
        # spread per query row: largest masked score minus largest visible score (rows with a masked key only)
        neg_inf = torch.full_like(s, -math.inf)
        top_visible = torch.where(visible, s, neg_inf).amax(dim=0).double()  # (Lq,)
        top_masked = torch.where(visible, neg_inf, s).amax(dim=0).double()  # (Lq,)
        has_masked = torch.logical_not(visible).any(dim=0)
        spread = top_masked - top_visible  # (Lq,)
        for keep, attr in ((torch.logical_and(has_masked, query_valid), "spread_valid"), (has_masked, "spread_all")):
            if bool(keep.any()):
                value = float(spread[keep].max())
                if value > getattr(site, attr):
                    setattr(site, attr, value)
                    if attr == "spread_valid":
                        site.where_spread = self.where


def _attention_observer(recorder: "RangeRecorder", prefix: str):
    """Records the intermediates SingleHeadAttention.forward reports (q, k, v, RoPE outputs, scores, heads, the
    concatenated heads): the real forward pass, not a re-implementation."""
    methods = {"activation": recorder.activation, "scores": recorder.scores}

    def observe(kind: str, name: str, *tensors, **details):
        recorder.attention_observations += 1
        methods[kind](f"{prefix}.attn.{name}", *tensors, **details)

    return observe


class _Detach:
    """A handle like torch's hook handles: .remove() takes the observer off the attention module."""

    def __init__(self, module):
        self.module = module

    def remove(self):
        self.module.observer = None


def instrument(body: BC1SBody, recorder: RangeRecorder) -> list:
    """Attach the recording hooks to `body`; returns the handles (call .remove() on each to detach)."""
    handles = []

    def on_output(module, name, fn):
        handles.append(module.register_forward_hook(lambda m, args, out: fn(name, out)))

    def on_input(module, name, fn):
        handles.append(module.register_forward_pre_hook(lambda m, args: fn(name, args[0])))

    def norm(module: nn.Module, name: str) -> None:
        if isinstance(module, ChannelLayerNorm):
            on_input(module, f"{name}.input", recorder.norm_input)
            on_output(module, name, recorder.activation)

    enc = body.encoder
    on_input(enc.embedding_norm, "embeddings", recorder.activation)
    norm(enc.embedding_norm, "embedding_norm")
    layers = [(f"encoder.{i}", layer) for i, layer in enumerate(enc.layers)]
    layers += [(f"head.{j}", layer) for j, layer in enumerate(body.head_layers)]
    if len(body.head_layers):
        on_input(body.head_layers[0], "head_input", recorder.activation)  # encoder output + type vectors
    for prefix, layer in layers:
        attn = layer.attn
        attn.observer = _attention_observer(recorder, prefix)
        handles.append(_Detach(attn))
        on_output(attn, f"{prefix}.attn.out", recorder.activation)
        norm(layer.attn_norm, f"{prefix}.attn_norm")  # nn.Identity in ModernBERT's encoder layer 0: nothing recorded
        if isinstance(layer, BertBC1SLayer):  # post-LN: each norm's input is the residual sum before it
            on_input(layer.attn_norm, f"{prefix}.attn_residual", recorder.activation)
            on_input(layer.mlp_norm, f"{prefix}.mlp_residual", recorder.activation)
        else:  # pre-LN: mlp_norm's input is the residual stream after attention, x + attn(attn_norm(x), mask)
            on_input(layer.mlp_norm, f"{prefix}.attn_residual", recorder.activation)
        norm(layer.mlp_norm, f"{prefix}.mlp_norm")
        mlp = layer.mlp
        on_output(mlp.input, f"{prefix}.mlp.input", recorder.activation)
        if isinstance(mlp, GeGLUConv):
            handles.append(mlp.input.register_forward_hook(
                lambda m, args, out, prefix=prefix, approx=mlp.approximate:
                recorder.activation(f"{prefix}.mlp.gelu", F.gelu(out, approximate=approx))))
            on_output(mlp.gate, f"{prefix}.mlp.gate", recorder.activation)
        on_input(mlp.output, f"{prefix}.mlp.product", recorder.activation)  # gelu(input) * gate, relu or gelu(input)
        on_output(mlp.output, f"{prefix}.mlp.out", recorder.activation)
        on_output(layer, f"{prefix}.residual", recorder.activation)
    if hasattr(enc, "final_norm"):  # BERT has none: every layer ends in a norm
        norm(enc.final_norm, "final_norm")
    norm(body.scorer_norm, "scorer.norm")
    on_output(body.scorer_proj, "scorer.proj", recorder.activation)  # before the ReLU
    on_input(body.scorer_out, "scorer.hidden", recorder.activation)  # after the ReLU
    on_output(body.scorer_out, "scorer.scores", recorder.activation)  # one score per token
    on_output(body, "option_logits", lambda name, out: recorder.logits(name, out))  # valid = active marker slots
    return handles
