"""The BC1S export models, built from the same tensors as the reference by the BC1S rules of ANE_MATH.md.

Everything the host prepares arrives as an input of fixed shape (bucket length L, hidden C, marker slots M):

    embeddings      (1, C, 1, L)  token embedding rows looked up on the host (padding columns: pad-token row)
    global_mask     (1, L, 1, L)  additive, [0, key, 0, query]: 0 visible, -1e4 hidden (full-attention layers)
    local_mask      (1, L, 1, L)  additive, same layout, sliding-window layers (dense layout, when the model has any)
    window_mask     (1, W, nT, T) additive tile-local mask of sliding-window layers (windowed layout; W = T + 2r,
                                  nT = ceil(L / T): model/window_tiles.py)
    type_vectors    (1, C, 1, L)  token-type embedding rows (question / option / marker), zero at padding
    marker_selector (1, L, 1, M)  one-hot: [0, position, 0, slot] = 1 reads the score at `position` into `slot`

No gather and no embedding lookup happens inside: both push work off the ANE.
"""

from __future__ import annotations

import torch
from torch import nn

from ...checkpoint.config import BertEncoderConfig, ModelConfig
from ...checkpoint.tensors import HEAD_PREFIX
from ...core.buckets import MARKER_SLOTS
from ..layers import ModelInputError
from ..window_tiles import DENSE, AttentionLayout, LayoutError, WindowTiles
from .attention import KeyBiasChannel, SingleHeadAttention, key_bias
from .bert import BC1SBertEncoder, BertBC1SLayer
from .conv import Conv1x1
from .ffn import GeGLUConv, ReluConv
from .layer import BC1SLayer
from .lora import LoraSpec, layer_slices
from .markers import active_slots, select_columns
from .norm import ChannelLayerNorm
from .reference_attention import ReferenceRunAttention, ReferenceRunLayer, RopeHalves
from .rope import HeadRotation, RopeTables
from .shapes import expect_shape
from .windowed_attention import WindowTiling


class RopeCache:
    """One RopeTables per (base, heads, head size) for a fixed length, one HeadRotation per (heads, head size) and
    one KeyBiasChannel, shared by every layer that uses them, so the package holds each constant once (and no
    weight blob is shared by coincidence: see reweight)."""

    def __init__(self, length: int):
        self.length, self.tables, self.rotations, self.halves = length, {}, {}, {}
        self.key_bias_channel = KeyBiasChannel(length)

    def get_halves(self, theta: float, head_dim: int, num_heads: int) -> RopeHalves:
        """The split-RoPE tables of the reference-run layout (reference_attention.py), one per base."""
        key = (theta, head_dim, num_heads)
        if key not in self.halves:
            self.halves[key] = RopeHalves(theta, head_dim, num_heads, self.length)
        return self.halves[key]

    def get(self, theta: float, head_dim: int, num_heads: int, tiles: WindowTiles | None = None) -> RopeTables:
        """tiles: the tables laid out like a windowed export's sliding layers."""
        key = (theta, head_dim, num_heads, tiles)
        if key not in self.tables:
            rotation = self.rotations.setdefault((num_heads, head_dim), HeadRotation(num_heads, head_dim))
            self.tables[key] = RopeTables(theta, head_dim, num_heads, self.length, rotation, tiles)
        return self.tables[key]


def window_tiling(config: ModelConfig, length: int, attention: AttentionLayout) -> WindowTiling | None:
    """The shared tiling of a windowed export's sliding layers; None for the dense layout."""
    if not attention.windowed:
        return None
    enc = config.encoder
    if not enc.has_sliding_layers:
        raise LayoutError("the windowed attention layout tiles sliding-window layers; this checkpoint has none "
                          "(export it with the dense layout)")
    return WindowTiling(attention.tiles(length, enc.window_radius), enc.hidden_size, enc.head_dim)


def encoder_layer(config: ModelConfig, tensors: dict, index: int, length: int,
                  ropes: RopeCache | None = None, tiling: WindowTiling | None = None,
                  reference: bool = False) -> nn.Module:
    """reference: the reference-run layout's attention (reference_attention.py), masked in every layer."""
    enc = config.encoder
    if enc.family == BertEncoderConfig.family:
        return BertBC1SLayer(config, tensors, index)
    ropes = ropes or RopeCache(length)
    prefix = f"layers.{index}"
    sliding = enc.layer_types[index] == "sliding_attention"
    ffn = GeGLUConv(tensors, f"{prefix}.mlp", enc.intermediate_size, enc.gelu_approximation)
    if reference:
        rope = ropes.get_halves(enc.rope_theta(enc.layer_types[index]), enc.head_dim, enc.num_attention_heads)
        attention = ReferenceRunAttention(tensors, f"{prefix}.attn", enc.num_attention_heads, enc.hidden_size, rope,
                                          length)
        return ReferenceRunLayer(tensors, prefix, enc.norm_eps, attention, ffn)
    tiles = tiling.tiles if sliding and tiling is not None else None
    rope = ropes.get(enc.rope_theta(enc.layer_types[index]), enc.head_dim, enc.num_attention_heads, tiles)
    attention = SingleHeadAttention(tensors, f"{prefix}.attn", enc.num_attention_heads, enc.hidden_size, rope, length,
                                    tiling if sliding else None, None if sliding else ropes.key_bias_channel)
    return BC1SLayer(tensors, prefix, enc.norm_eps, attention, ffn)


def head_layer(config: ModelConfig, tensors: dict, index: int, length: int, ropes: RopeCache,
               reference: bool = False) -> BC1SLayer:
    enc, head = config.encoder, config.head
    prefix = f"{HEAD_PREFIX}layers.{index}"
    if reference:
        rope = ropes.get_halves(head.rope_theta, enc.hidden_size // head.num_attention_heads, head.num_attention_heads)
        attention = ReferenceRunAttention(tensors, f"{prefix}.attn", head.num_attention_heads, enc.hidden_size, rope,
                                          length)
        return ReferenceRunLayer(tensors, prefix, enc.norm_eps, attention, ReluConv(tensors, f"{prefix}.mlp"))
    rope = ropes.get(head.rope_theta, enc.hidden_size // head.num_attention_heads, head.num_attention_heads)
    attention = SingleHeadAttention(tensors, f"{prefix}.attn", head.num_attention_heads, enc.hidden_size, rope, length,
                                    key_bias_channel=ropes.key_bias_channel)
    return BC1SLayer(tensors, prefix, enc.norm_eps, attention, ReluConv(tensors, f"{prefix}.mlp"))


def bind_inputs(names: list[str], args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
    """Inputs by name, whether given positionally (tracing uses input_names() order) or by keyword."""
    if len(args) > len(names):
        raise TypeError(f"expected at most {len(names)} inputs {names}, got {len(args)}")
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"input {name!r} given twice")
        values[name] = value
    missing = [n for n in names if n not in values]
    extra = sorted(set(values) - set(names))
    if missing or extra:
        raise TypeError(f"inputs missing {missing} / unexpected {extra}; this model takes {names}")
    return values


class BC1SEncoder(nn.Module):
    """Embedding norm -> all encoder layers -> final norm. Works for an encoder-only ModernBERT checkpoint.
    With a LoraSpec, the Q/K/V projections of every layer also take adapter inputs (lora.py)."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int, ropes: RopeCache | None = None,
                 lora: LoraSpec | None = None, lora_layers: int | None = None, attention: AttentionLayout = DENSE):
        super().__init__()
        enc = config.encoder
        ropes = ropes or RopeCache(length)
        self.hidden, self.length = enc.hidden_size, length
        self.layer_types = enc.layer_types
        self.has_local = enc.has_sliding_layers
        self.attention = attention
        self.reference = attention.reference_run  # masks added in every layer (reference_attention.py)
        if self.reference and lora is not None:
            raise LayoutError("the reference-run attention layout takes no LoRA inputs")
        tiling = window_tiling(config, length, attention)
        self.tiling = tiling  # windowed layout: the residual stream is tiled through each run of sliding layers
        self.local_mask_name = "window_mask" if tiling is not None else "local_mask"
        self.local_mask_shape = tiling.tiles.mask_shape() if tiling is not None else (1, length, 1, length)
        self.embedding_norm = ChannelLayerNorm.from_tensors(tensors, "embeddings.norm", enc.norm_eps)
        self.layers = nn.ModuleList(encoder_layer(config, tensors, n, length, ropes, tiling, self.reference)
                                    for n in range(enc.num_hidden_layers))
        self.final_norm = ChannelLayerNorm.from_tensors(tensors, "final_norm", enc.norm_eps)
        self.lora = lora
        self.lora_layers = lora_layers or enc.num_hidden_layers  # layers sharing the stacked adapter inputs

    def input_names(self) -> list[str]:
        names = ["embeddings", "global_mask"] + ([self.local_mask_name] if self.has_local else [])
        return names + (self.lora.input_names() if self.lora else [])

    def lora_shapes(self) -> dict[str, tuple[int, ...]]:
        if not self.lora:
            return {}
        stacked = self.lora_layers * self.lora.rank
        return {name: (1, stacked, 1, self.hidden) if name.endswith("_A") else (1, self.hidden, 1, stacked)
                for name in self.lora.input_names()}

    def layer_lora(self, inputs: dict, index: int) -> dict | None:
        return layer_slices(inputs, self.lora, index) if self.lora else None

    def encode(self, inputs: dict[str, torch.Tensor], keys: torch.Tensor | None = None) -> torch.Tensor:
        """keys: the key bias (1, L, 1, 1) if the caller has sliced it already (one slice op per graph)."""
        c, length = self.hidden, self.length
        expect_shape("embeddings", inputs["embeddings"], (1, c, 1, length))
        expect_shape("global_mask", inputs["global_mask"], (1, length, 1, length))
        if self.has_local:
            expect_shape(self.local_mask_name, inputs[self.local_mask_name], self.local_mask_shape)
        for name, shape in self.lora_shapes().items():
            expect_shape(name, inputs[name], shape)
        x = self.embedding_norm(inputs["embeddings"])  # (1, C, 1, L)
        if keys is None and not self.reference:
            keys = key_bias(inputs["global_mask"])  # (1, L, 1, 1): full-attention layers fold it into their scores
        tiled = False  # windowed layout: sliding layers take and return tiles (1, C, nT, T)
        for n, (layer, layer_type) in enumerate(zip(self.layers, self.layer_types)):
            sliding = layer_type == "sliding_attention"
            if self.tiling is not None and sliding != tiled:  # one reshape per run of sliding layers, each way
                x = self.tiling.queries(x) if sliding else self.tiling.untile(x)  # (1, C, nT, T) / (1, C, 1, L)
                tiled = sliding
            mask = inputs[self.local_mask_name] if sliding else (inputs["global_mask"] if self.reference else keys)
            x = layer(x, mask, self.layer_lora(inputs, n))  # (1, C, 1, L) or (1, C, nT, T)
        if tiled:
            x = self.tiling.untile(x)  # (1, C, 1, L)
        return self.final_norm(x)  # (1, C, 1, L)

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        return self.encode(bind_inputs(self.input_names(), args, kwargs))  # (1, C, 1, L)


def bc1s_encoder(config: ModelConfig, tensors: dict, length: int, ropes: RopeCache | None = None,
                 lora: LoraSpec | None = None, lora_layers: int | None = None,
                 attention: AttentionLayout = DENSE) -> nn.Module:
    """The BC1S encoder of the family config.json names: ModernBERT (BC1SEncoder) or BERT (bert.py)."""
    if config.encoder.family != BertEncoderConfig.family:
        return BC1SEncoder(config, tensors, length, ropes, lora, lora_layers, attention)
    if attention.reference_run:
        raise LayoutError("the reference-run attention layout is ModernBERT's (split RoPE); a BERT encoder has none")
    window_tiling(config, length, attention)  # refuses a windowed layout: BERT has no sliding layers
    if lora is not None and not config.encoder.supports_lora:
        raise ModelInputError("LoRA inputs are implemented for ModernBERT encoders (their fused Wqkv rows); this "
                              "checkpoint is a BERT encoder")
    return BC1SBertEncoder(config, tensors, length)


class BC1SBody(nn.Module):
    """The whole on-device part: encoder, token types, decision-head layers, scorer, one-hot marker read-out.
    With a LoraSpec, every transformer layer (encoder layers, then head layers) takes adapter inputs."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int, lora: LoraSpec | None = None,
                 attention: AttentionLayout = DENSE):
        super().__init__()
        if config.head is None:
            raise ModelInputError("kind 'body' needs a decision head; this checkpoint is encoder-only (use "
                                  "kind 'encoder')")
        if config.head.max_markers != MARKER_SLOTS:
            raise ModelInputError(f"decision_head.max_markers is {config.head.max_markers}; the graph keeps "
                                  f"{MARKER_SLOTS} slots")
        ropes = RopeCache(length)
        self.key_bias_channel = ropes.key_bias_channel  # its row of ones per position also counts the active slots
        total_layers = config.encoder.num_hidden_layers + config.head.num_layers
        self.encoder = bc1s_encoder(config, tensors, length, ropes, lora, total_layers, attention)
        self.reference = attention.reference_run
        self.head_layers = nn.ModuleList(head_layer(config, tensors, n, length, ropes, self.reference)
                                         for n in range(config.head.num_layers))
        eps = config.encoder.norm_eps
        self.scorer_norm = ChannelLayerNorm.from_tensors(tensors, f"{HEAD_PREFIX}scorer.norm", eps)
        self.scorer_proj = Conv1x1.from_rows(tensors, f"{HEAD_PREFIX}scorer.proj")
        self.scorer_out = Conv1x1(tensors[f"{HEAD_PREFIX}scorer.out.weight"])  # bias added per slot, below
        # The scorer's one-element output bias, repeated over the marker slots and added after the read-out (equal
        # for every selected slot): a constant of MARKER_SLOTS elements is stored as a weight blob, where a
        # one-element constant would be written inline into the program text and pin it to one checkpoint.
        bias = tensors[f"{HEAD_PREFIX}scorer.out.bias"].reshape(1, 1, 1, 1)
        self.slot_bias = nn.Parameter(bias.expand(1, 1, 1, MARKER_SLOTS).clone(), requires_grad=False)  # (1, 1, 1, M)
        self.hidden, self.length, self.markers = config.encoder.hidden_size, length, MARKER_SLOTS
        self.num_encoder_layers = config.encoder.num_hidden_layers

    def input_names(self) -> list[str]:
        names = self.encoder.input_names()
        base = [n for n in names if not n.startswith("lora_")]
        return base[:2] + ["type_vectors", "marker_selector"] + base[2:] + [n for n in names if n.startswith("lora_")]

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        inputs = bind_inputs(self.input_names(), args, kwargs)
        expect_shape("type_vectors", inputs["type_vectors"], (1, self.hidden, 1, self.length))
        expect_shape("marker_selector", inputs["marker_selector"], (1, self.length, 1, self.markers))
        if self.reference:
            return self._reference_forward(inputs)
        keys = key_bias(inputs["global_mask"])  # (1, L, 1, 1), shared by the encoder's and the head's layers
        x = self.encoder.encode(inputs, keys) + inputs["type_vectors"]  # (1, C, 1, L)
        selector = inputs["marker_selector"]  # (1, L, 1, M)
        last = len(self.head_layers) - 1
        for n, layer in enumerate(self.head_layers):
            # The last layer computes only the marker columns (markers.py): (1, C, 1, M); the others all L.
            x = layer(x, keys, self.encoder.layer_lora(inputs, self.num_encoder_layers + n),
                      selector if n == last else None)
        if last < 0:
            x = select_columns(selector, x)  # (1, C, 1, M): no head layer, read out before the scorer
        hidden = torch.relu(self.scorer_proj(self.scorer_norm(x)))  # (1, S, 1, M)
        scores = self.scorer_out(hidden)  # (1, 1, 1, M), without the output bias
        # An unused slot reads nothing: 0 + bias, as when the read-out came last.
        return scores * active_slots(selector, self.key_bias_channel.position_ones) + self.slot_bias  # (1, 1, 1, M)

    def _reference_forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The reference-run layout: every head layer on all L columns with the full mask, the scorer on L, then
        the one-hot marker read-out einsum (an unused slot reads nothing: 0 + bias)."""
        x = self.encoder.encode(inputs) + inputs["type_vectors"]  # (1, C, 1, L)
        for layer in self.head_layers:
            x = layer(x, inputs["global_mask"])  # (1, C, 1, L)
        hidden = torch.relu(self.scorer_proj(self.scorer_norm(x)))  # (1, S, 1, L)
        scores = self.scorer_out(hidden)  # (1, 1, 1, L), without the output bias
        picked = torch.einsum("bkhq,bchk->bchq", inputs["marker_selector"], scores)  # (1, 1, 1, M)
        return picked + self.slot_bias  # (1, 1, 1, M)


class BC1SMLPBlock(nn.Module):
    """One encoder layer's FFN sub-block with its norm and residual: x + ffn(mlp_norm(x)) (pre-LN, ModernBERT) or
    mlp_norm(x + ffn(x)) (post-LN, BERT)."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int, index: int = 0):
        super().__init__()
        layer = encoder_layer(config, tensors, index, length)
        self.mlp_norm, self.mlp = layer.mlp_norm, layer.mlp
        self.post_norm = config.encoder.post_norm
        self.hidden, self.length = config.encoder.hidden_size, length

    def input_names(self) -> list[str]:
        return ["hidden_states"]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        expect_shape("hidden_states", hidden_states, (1, self.hidden, 1, self.length))
        if self.post_norm:
            return self.mlp_norm(hidden_states + self.mlp(hidden_states))  # (1, C, 1, L)
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))  # (1, C, 1, L)


class BC1SLayerBlock(nn.Module):
    """One full encoder layer; its mask is the one its layer type uses."""

    def __init__(self, config: ModelConfig, tensors: dict, length: int, index: int = 0,
                 attention: AttentionLayout = DENSE):
        super().__init__()
        sliding = config.encoder.layer_types[index] == "sliding_attention"
        tiling = window_tiling(config, length, attention) if sliding else None
        self.reference = attention.reference_run
        self.layer = encoder_layer(config, tensors, index, length, tiling=tiling, reference=self.reference)
        self.tiling = tiling  # a sliding layer of the windowed layout works in tiles
        self.mask_name = ("window_mask" if tiling is not None else "local_mask") if sliding else "global_mask"
        self.mask_shape = tiling.tiles.mask_shape() if tiling is not None else (1, length, 1, length)
        self.hidden, self.length, self.config = config.encoder.hidden_size, length, config

    def input_names(self) -> list[str]:
        return ["hidden_states", self.mask_name]

    def forward(self, hidden_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        expect_shape("hidden_states", hidden_states, (1, self.hidden, 1, self.length))
        expect_shape(self.mask_name, mask, self.mask_shape)
        if self.mask_name == "global_mask" and isinstance(self.layer, BC1SLayer) and not self.reference:
            mask = key_bias(mask)  # (1, L, 1, 1): ModernBERT's layers fold it into the scores; BERT's add the mask
        if self.tiling is not None:
            return self.tiling.untile(self.layer(self.tiling.queries(hidden_states), mask))  # (1, C, 1, L)
        return self.layer(hidden_states, mask)  # (1, C, 1, L)
