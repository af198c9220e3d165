"""What each probe kind exports: the torch module, its example inputs and its I/O contract.

BC1S kinds (fixed shapes, FP16 I/O): `mlp` and `layer` (one block), `encoder` (embedding norm through final norm;
works for encoder-only checkpoints), `embedding` (the encoder, mean pooling and L2 normalisation: a sentence
embedder, model/bc1s/embedding.py), `body` (the whole on-device part). `baseline` is the original B x L x C model
exported the usual way (token ids in, embedding gather, SDPA, enumerated sequence lengths), kept to show why it is
a poor ANE target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from ..checkpoint import Checkpoint
from ..core.buckets import BUCKET_LENGTHS, MARKER_SLOTS
from ..core.errors import HarnessError
from ..core.limits import MAX_DIMENSION
from ..model.bc1s.embedding import BC1SSentenceEmbedder
from ..model.bc1s.lora import LoraSpec
from ..model.bc1s.models import BC1SBody, BC1SLayerBlock, BC1SMLPBlock, bc1s_encoder
from ..model.window_tiles import DENSE, AttentionLayout, LayoutError

KINDS = ("mlp", "layer", "encoder", "embedding", "body", "baseline")
BC1S_KINDS = ("mlp", "layer", "encoder", "embedding", "body")


@dataclass(frozen=True)
class TensorContract:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "float16" | "int32"
    meaning: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "meaning": self.meaning}


@dataclass
class ExportSpec:
    kind: str
    length: int
    module: nn.Module
    inputs: list[TensorContract]
    outputs: list[TensorContract]
    enumerated_lengths: tuple[int, ...] = ()  # baseline only: the sequence lengths its flexible input accepts
    notes: list[str] = field(default_factory=list)
    lora: LoraSpec | None = None
    rebuild: Callable[[int], "ExportSpec"] | None = None  # the same export at another length (convert.py traces short)
    attention: dict | None = None  # AttentionLayout.to_json(L, r) of BC1S kinds with sliding layers
    reference_graph: bool = False  # the reference-run layout: converted without the passes added after that run
    fp16_scale: dict | None = None  # the residual-stream rescaling applied (model/bc1s/stream_scale.py), if any

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """Zero-valued tracing inputs of the contract's shapes (values never matter for tracing these graphs)."""
        return tuple(torch.zeros(c.shape, dtype=torch.int32 if c.dtype == "int32" else torch.float32)
                     for c in self.inputs)


def _bc1s_contract(name: str, c: int, length: int, window_shape: tuple[int, ...] | None = None) -> TensorContract:
    meanings = {
        "hidden_states": ("(1, C, 1, L) hidden states entering the block", (1, c, 1, length)),
        "embeddings": ("(1, C, 1, L) token embedding rows looked up on the host; padding columns hold the pad row",
                       (1, c, 1, length)),
        "global_mask": (("(1, L, 1, L) additive mask [0, key, 0, query] for full-attention layers: 0 or -1e4, "
                         "equal in every query column (ModernBERT graphs read column 0 as a key bias)"),
                        (1, length, 1, length)),
        "local_mask": ("(1, L, 1, L) additive mask [0, key, 0, query] for sliding-window layers: 0 or -1e4",
                       (1, length, 1, length)),
        "window_mask": (("(1, T+2r, nT, T) additive tile-local mask [0, window key, tile, query in tile] for "
                         "sliding-window layers (windowed layout): 0 or -1e4"), window_shape),
        "type_vectors": ("(1, C, 1, L) token-type embedding rows (question/option/marker), zero at padding",
                         (1, c, 1, length)),
        "marker_selector": (f"(1, L, 1, {MARKER_SLOTS}) one-hot: [0, position, 0, slot] = 1 reads that token's score",
                            (1, length, 1, MARKER_SLOTS)),
        "pooling": ("(1, L, 1, 1) mean-pooling weights: 1/n at the n valid token columns, 0 at padding",
                    (1, length, 1, 1)),
    }
    meaning, shape = meanings[name]
    return TensorContract(name, shape, "float16", meaning)


def _lora_contracts(module, spec: LoraSpec) -> list[TensorContract]:
    meanings = {"A": "stacked LoRA A of every layer (layer n: rows n*R..n*R+R-1), (1, N*R, 1, C)",
                "B": "stacked (alpha/R)-scaled LoRA B in the package's row order (layer n: columns "
                     "n*R..), (1, C, 1, N*R)"}
    return [TensorContract(name, shape, "float16", f"{name.split('_')[1]}: " + meanings[name[-1]])
            for name, shape in module.lora_shapes().items()]


class ExportSpecError(HarnessError):
    """An export request (kind, length, layer, LoRA) this checkpoint cannot be exported as."""


SCALED_KINDS = ("encoder", "embedding", "body")  # kinds whose residual stream --fp16-scale rescales


def build_export_spec(checkpoint: Checkpoint, kind: str, length: int, layer_index: int = 0,
                      lora: LoraSpec | None = None, attention: AttentionLayout = DENSE,
                      fp16_scale: int | None = None) -> ExportSpec:
    """fp16_scale: K to rescale the residual stream by 2^-K (model/bc1s/stream_scale.py), None to leave it."""
    if kind not in KINDS:
        raise ExportSpecError(f"unknown kind {kind!r}; choose from {KINDS}")
    if lora is not None and kind not in ("encoder", "body"):
        raise ExportSpecError(f"LoRA inputs are exported for kinds encoder and body, not {kind!r}")
    if length < 1:
        raise ExportSpecError(f"--length must be positive, got {length}")
    config = checkpoint.config
    if length > MAX_DIMENSION:
        raise ExportSpecError(f"--length {length} exceeds {MAX_DIMENSION}, the largest tensor dimension Core ML loads")
    if length > config.encoder.max_position_embeddings:
        raise ExportSpecError(f"--length {length}: {checkpoint.source} takes at most "
                              f"{config.encoder.max_position_embeddings} tokens (max_position_embeddings), so it has "
                              f"no bucket of {length}; export a length <= {config.encoder.max_position_embeddings}")
    if kind in ("mlp", "layer") and not 0 <= layer_index < config.encoder.num_hidden_layers:
        raise ExportSpecError(f"--layer-index {layer_index} outside 0..{config.encoder.num_hidden_layers - 1}")
    if lora is not None and not config.encoder.supports_lora:
        raise ExportSpecError("LoRA inputs are implemented for ModernBERT encoders (their fused Wqkv rows); "
                              f"{checkpoint.source} is a BERT encoder")
    if attention.windowed and kind in ("mlp", "baseline"):
        raise ExportSpecError(f"kind {kind!r} has no attention layout to choose; export it without "
                              "--attention windowed")
    if fp16_scale is not None and kind not in SCALED_KINDS:
        raise ExportSpecError("--fp16-scale rescales the residual stream of kinds "
                              f"{', '.join(SCALED_KINDS)}, not {kind!r}")
    try:
        spec = _bc1s_spec(checkpoint, kind, length, layer_index, lora, attention, fp16_scale)
    except LayoutError as error:
        raise ExportSpecError(f"{checkpoint.source}: {error}") from error
    if fp16_scale is not None:
        from ..model.bc1s.stream_scale import StreamScaleError, scale_residual_stream

        try:
            spec.fp16_scale = scale_residual_stream(spec.module, fp16_scale)
        except StreamScaleError as error:
            raise ExportSpecError(f"{checkpoint.source}: {error}") from error
    return spec


def _bc1s_spec(checkpoint: Checkpoint, kind: str, length: int, layer_index: int, lora: LoraSpec | None,
               attention: AttentionLayout, fp16_scale: int | None = None) -> ExportSpec:
    config, tensors = checkpoint.config, checkpoint.tensors
    c = config.encoder.hidden_size
    if kind == "mlp":
        module = BC1SMLPBlock(config, tensors, length, layer_index)
        out = TensorContract("hidden_states_out", (1, c, 1, length), "float16", "(1, C, 1, L) x + ffn(mlp_norm(x))")
    elif kind == "layer":
        module = BC1SLayerBlock(config, tensors, length, layer_index, attention)
        out = TensorContract("hidden_states_out", (1, c, 1, length), "float16", "(1, C, 1, L) output of the layer")
    elif kind == "encoder":
        module = bc1s_encoder(config, tensors, length, lora=lora, attention=attention)
        out = TensorContract("hidden_states", (1, c, 1, length), "float16",
                             "(1, C, 1, L) final-norm hidden states; padding columns are meaningless")
    elif kind == "embedding":
        module = BC1SSentenceEmbedder(config, tensors, length, attention)
        out = TensorContract("sentence_embedding", (1, c, 1, 1), "float16",
                             "(1, C, 1, 1) mean-pooled, L2-normalised final hidden states of the valid tokens")
    elif kind == "body":
        checkpoint.require_head("kind 'body'")
        module = BC1SBody(config, tensors, length, lora=lora, attention=attention)
        out = TensorContract("option_logits", (1, 1, 1, MARKER_SLOTS), "float16",
                             f"(1, 1, 1, {MARKER_SLOTS}) raw score per marker slot; the host masks inactive slots")
    else:
        return _baseline_spec(checkpoint, length)
    module = module.eval()
    has_local = config.encoder.has_sliding_layers
    tiles = attention.tiles(length, config.encoder.window_radius) if has_local else None
    window_shape = tiles.mask_shape() if tiles else None
    inputs = [_bc1s_contract(name, c, length, window_shape) for name in module.input_names()
              if not name.startswith("lora_")]
    if lora is not None:
        inputs += _lora_contracts(module.encoder if kind == "body" else module, lora)
    spec = ExportSpec(kind, length, module, inputs, [out], lora=lora, reference_graph=attention.reference_run)
    if kind != "mlp" and has_local:
        spec.attention = attention.to_json(length, config.encoder.window_radius)
    if not attention.windowed:
        # The windowed graph's reshapes and slices depend on the length: it is traced at full length.
        spec.rebuild = lambda other: build_export_spec(checkpoint, kind, other, layer_index, lora, attention,
                                                       fp16_scale=fp16_scale)
    return spec


class BaselineDecision(nn.Module):
    """The reference model as an ordinary export would take it: ids in, embedding gather, SDPA, gather read-out."""

    def __init__(self, checkpoint: Checkpoint):
        super().__init__()
        from ..model.encoders import reference_encoder
        from ..model.reference import ReferenceDecisionModel

        self.has_head = checkpoint.config.head is not None
        if self.has_head:
            self.model = ReferenceDecisionModel(checkpoint.config, checkpoint.tensors).eval()
        else:
            self.model = reference_encoder(checkpoint.config, checkpoint.tensors).eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        valid = attention_mask > 0  # (1, L)
        ids = input_ids.long()
        if not self.has_head:
            return self.model(self.model.embed(ids), valid, "sdpa")  # (1, L, C)
        token_types, marker_positions = rest
        scores = self.model.token_scores(ids, valid, token_types.long(), "sdpa")  # (1, L)
        return scores.gather(1, marker_positions.long())  # (1, M)


def _baseline_spec(checkpoint: Checkpoint, length: int) -> ExportSpec:
    module = BaselineDecision(checkpoint).eval()
    lengths = tuple(sorted({*BUCKET_LENGTHS, length}))
    inputs = [TensorContract("input_ids", (1, length), "int32", "(1, L) token ids (enumerated L)"),
              TensorContract("attention_mask", (1, length), "int32", "(1, L) 1 for tokens, 0 for padding")]
    if module.has_head:
        inputs += [TensorContract("token_types", (1, length), "int32", "(1, L) 0 question, 1 option, 2 marker"),
                   TensorContract("marker_positions", (1, MARKER_SLOTS), "int32", "(1, 32) token position per slot")]
        out = TensorContract("option_logits", (1, MARKER_SLOTS), "float16", "(1, 32) raw score per marker slot")
    else:
        out = TensorContract("hidden_states", (1, length, checkpoint.config.encoder.hidden_size), "float16",
                             "(1, L, C) final hidden states")
    return ExportSpec("baseline", length, module, inputs, [out], enumerated_lengths=lengths,
                      notes=["original B x L x C layout with enumerated sequence lengths, embedding gather and SDPA: "
                             "exported to show why it is a poor ANE target"])


def example_arrays(spec: ExportSpec) -> dict[str, np.ndarray]:
    return {c.name: t.numpy() for c, t in zip(spec.inputs, spec.example_inputs())}
