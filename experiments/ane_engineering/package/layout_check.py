"""The probe's PyTorch layout check: the BC1S module of a kind vs the reference B x L x C model, both FP32.

Never a model against itself: the two sides are built independently from the checkpoint tensors (the reference
with nn.Linear/nn.LayerNorm/rotate_half in B x L x C, the BC1S side with 1x1 convs, channel norms and per-head
einsums in (1, C, 1, L)). Inputs are padded (fewer valid tokens than the bucket) so masks are exercised.
"""

from __future__ import annotations

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core import tolerances
from ..core.errors import HarnessError
from ..model.encoders import reference_encoder
from ..model.masks import additive_bc1s
from ..model.reference import ReferenceDecisionModel
from ..model.window_tiles import AttentionLayout, additive_window
from .inputs.device_inputs import body_inputs, embedding_inputs, encoder_inputs
from .kinds import ExportSpec

MAX_BODY_QUESTIONS = 5  # the longest question that fits (sliding windows engaged) and the first few others
# Entries of the random adapter used when a package takes LoRA inputs: small, so that B A moves Wqkv by a small
# fraction, as a realistic fine-tuning delta does. (Much larger deltas still agree, but FP32 re-association of
# W x + B(A x) against (W + BA) x is then amplified by the model beyond the logit bound; see
# tests/model/bc1s/test_lora.py.)
ADAPTER_SCALE = 0.01


class LayoutCheckError(HarnessError):
    """The layout check cannot be run for this request."""


def _to_blc(x: torch.Tensor) -> torch.Tensor:
    return x[:, :, 0, :].transpose(1, 2)  # (1, C, 1, L) -> (1, L, C)


def _valid(length: int) -> tuple[int, torch.Tensor]:
    n = max(1, length - length // 4)  # leave a quarter of the bucket as padding
    valid = torch.zeros(1, length, dtype=torch.bool)
    valid[0, :n] = True
    return n, valid


def _block_check(checkpoint: Checkpoint, spec: ExportSpec, layer_index: int) -> dict:
    length, c = spec.length, checkpoint.config.encoder.hidden_size
    reference = reference_encoder(checkpoint.config, checkpoint.tensors).eval().layers[layer_index]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, c, 1, length, generator=generator)  # (1, C, 1, L)
    n, valid = _valid(length)
    with torch.no_grad():
        if spec.kind == "mlp":
            ours = spec.module(x)
            if checkpoint.config.encoder.post_norm:  # post-LN (BERT's reference): LayerNorm(x + W2 gelu(W1 x))
                theirs = reference.output_norm(_to_blc(x) + reference.output(torch.nn.functional.gelu(
                    reference.intermediate(_to_blc(x)))))
            else:
                theirs = _to_blc(x) + reference.mlp(reference.mlp_norm(_to_blc(x)))
        else:
            layer_type = checkpoint.config.encoder.layer_types[layer_index]
            window = checkpoint.config.encoder.window_radius if layer_type == "sliding_attention" else None
            tiles = AttentionLayout.from_json(spec.attention).tiles(length, window) if window is not None else None
            mask = additive_window(tiles, n) if tiles is not None else additive_bc1s(valid, window)
            ours = spec.module(x, mask)
            theirs = reference(_to_blc(x), valid)
    diff = (_to_blc(ours) - theirs)[0, :n].abs().max().item()
    return {"inputs": f"random N(0,1) hidden states, {n} valid of {length}, layer {layer_index}",
            "max_abs": diff, "tolerance": tolerances.BC1S_LAYER_ABS}


def _adapter_inputs(checkpoint: Checkpoint, spec: ExportSpec) -> tuple[Checkpoint, dict]:
    """With LoRA inputs: a random adapter for the package and the reference with that adapter merged in."""
    if spec.lora is None:
        return checkpoint, {}
    from .inputs.adapter import device_inputs, merge, random_adapter

    adapter = random_adapter(checkpoint.config, spec.lora, spec.kind, seed=0, scale=ADAPTER_SCALE)
    inputs = device_inputs(checkpoint.config, adapter, spec.kind)
    return merge(checkpoint, adapter, spec.kind), {k: torch.from_numpy(v).float() for k, v in inputs.items()}


def _encoder_check(checkpoint: Checkpoint, spec: ExportSpec) -> dict:
    config, length = checkpoint.config, spec.length
    n, valid = _valid(length)
    ids = torch.randint(0, config.encoder.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
    merged, extra = _adapter_inputs(checkpoint, spec)
    reference = reference_encoder(config, merged.tensors).eval()
    inputs = {k: torch.from_numpy(v) for k, v in encoder_inputs(config, checkpoint.tensors, ids[0].tolist(), length,
                                                                    AttentionLayout.from_json(spec.attention)).items()}
    inputs.update(extra)
    with torch.no_grad():
        ours = _to_blc(spec.module(**inputs))[0, :n]
        theirs = reference(reference.embed(ids), torch.ones(1, n, dtype=torch.bool))[0]
    return {"inputs": f"{n} random token ids in a bucket of {length}", "max_abs": (ours - theirs).abs().max().item(),
            "tolerance": tolerances.BC1S_ENCODER_ABS}


def _embedding_check(checkpoint: Checkpoint, spec: ExportSpec) -> dict:
    from ..model.sentence_embedder import ReferenceEmbedder

    config, length = checkpoint.config, spec.length
    n, _ = _valid(length)
    ids = torch.randint(0, config.encoder.vocab_size, (n,), generator=torch.Generator().manual_seed(0)).tolist()
    inputs = {k: torch.from_numpy(v) for k, v in embedding_inputs(config, checkpoint.tensors, ids, length,
                                                                      AttentionLayout.from_json(spec.attention)).items()}
    with torch.no_grad():
        ours = spec.module(**inputs).reshape(-1).numpy()  # (C,)
    theirs, _ = ReferenceEmbedder(checkpoint).embed(ids)
    return {"inputs": f"{n} random token ids in a bucket of {length} (pooled, normalised embedding)",
            "max_abs": float(np.abs(ours - theirs).max()), "tolerance": tolerances.BC1S_EMBEDDING_ABS}


def _body_check(checkpoint: Checkpoint, module, length: int, spec: ExportSpec | None = None) -> dict:
    from .inputs.questions import encode_question, load_questions

    tokenizer = checkpoint.require_tokenizer("the body layout check")
    merged, extra = _adapter_inputs(checkpoint, spec) if spec is not None else (checkpoint, {})
    reference = ReferenceDecisionModel(checkpoint.config, merged.tensors).eval()
    encoded_all = [encode_question(tokenizer, checkpoint.config.head, q) for q in load_questions()]
    fitting = [e for e in encoded_all if e.num_tokens <= length]
    chosen = fitting[:MAX_BODY_QUESTIONS - 1]
    longest = max(fitting, key=lambda e: e.num_tokens, default=None)
    if longest is not None and longest not in chosen:
        chosen.append(longest)
    worst, used = 0.0, []
    layout = AttentionLayout.from_json(spec.attention if spec is not None else None)
    for encoded in chosen:
        inputs = body_inputs(checkpoint.config, checkpoint.tensors, encoded.input_ids, encoded.token_types,
                             encoded.marker_positions, length, layout)
        ids = torch.tensor([encoded.input_ids])
        k = len(encoded.marker_positions)
        with torch.no_grad():
            ours = module(**{name: torch.from_numpy(v) for name, v in inputs.items()}, **extra)[0, 0, 0, :k]
            theirs = reference(ids, torch.ones_like(ids, dtype=torch.bool), torch.tensor([encoded.token_types]),
                               torch.tensor([list(encoded.marker_positions)]), torch.ones(1, k, dtype=torch.bool))[0]
        worst = max(worst, (ours - theirs).abs().max().item())
        used.append(encoded.question.id)
    if not used:
        raise LayoutCheckError(f"no fixture question fits length {length} for the body layout check")
    return {"inputs": f"fixture questions {used} (option logits)", "max_abs": worst,
            "tolerance": tolerances.BC1S_LOGITS_ABS}


def layout_check(checkpoint: Checkpoint, spec: ExportSpec, layer_index: int = 0) -> dict:
    if spec.kind in ("mlp", "layer"):
        result = _block_check(checkpoint, spec, layer_index)
    elif spec.kind == "encoder":
        result = _encoder_check(checkpoint, spec)
    elif spec.kind == "embedding":
        result = _embedding_check(checkpoint, spec)
    elif spec.kind == "body":
        result = _body_check(checkpoint, spec.module, spec.length, spec)
    else:  # baseline: check the BC1S model this baseline stands beside
        from ..model.bc1s.models import BC1SBody, bc1s_encoder

        if checkpoint.config.head is not None:
            result = _body_check(checkpoint, BC1SBody(checkpoint.config, checkpoint.tensors, spec.length).eval(),
                                 spec.length)
        else:
            encoder = bc1s_encoder(checkpoint.config, checkpoint.tensors, spec.length).eval()
            result = _encoder_check(checkpoint, ExportSpec("encoder", spec.length, encoder, [], []))
        result["note"] = "baseline kind: the BC1S counterpart at this length against the reference"
    result["compared"] = f"BC1S {spec.kind} (FP32, (1, C, 1, L)) vs reference (FP32, B x L x C)"
    if spec.lora is not None:
        result["adapter"] = "random adapter (seed 0) as inputs vs the reference with it merged into Wqkv"
    result["passed"] = bool(np.isfinite(result["max_abs"]) and result["max_abs"] <= result["tolerance"])
    return result
