"""The tensor layout of a checkpoint: encoder names exactly as transformers saves them, plus the decision head.

ModernBERT encoder tensors may carry the `model.` prefix of masked-LM checkpoints; then the masked-LM head tensors
(`head.*`, `decoder.*`) are expected too and ignored. BERT-family encoders have their own names, prefix and ignored
tensors (bert_tensors.py). Decision-head tensors live under `decision_head.`. Anything missing, unexpected or of
the wrong shape is refused by name; every ignored tensor is listed with the reason (`ignored_tensors`).
"""

from __future__ import annotations

import math

from ..core.errors import HarnessError
from ..core.limits import FLOAT32_BYTES, physical_memory_bytes
from .bert_config import BertEncoderConfig
from .bert_tensors import BERT_PREFIX, bert_ignored, expected_bert_tensors
from .config import ConfigError, ModelConfig

HEAD_PREFIX = "decision_head."
MLM_PREFIX = "model."
# Masked-LM head tensors that ride along in `ModernBertForMaskedLM` checkpoints and are not part of this model.
MLM_HEAD_TENSORS = ("head.dense.weight", "head.dense.bias", "head.norm.weight", "head.norm.bias",
                    "decoder.weight", "decoder.bias")
# Features of softmax(raw option logits) fed to the action head; run/host.py computes them in this order.
ACTION_FEATURES = ("p_top1", "p_top2", "margin", "normalized_entropy", "option_fraction",
                   "kind_choice", "kind_score", "kind_noul")


class CheckpointError(HarnessError):
    """A checkpoint that does not match its config: names the tensor and what is wrong."""


def _norm(names: dict, prefix: str, size: int, with_bias: bool) -> None:
    names[f"{prefix}.weight"] = (size,)
    if with_bias:
        names[f"{prefix}.bias"] = (size,)


def _dense(names: dict, prefix: str, out: int, inp: int, with_bias: bool) -> None:
    names[f"{prefix}.weight"] = (out, inp)
    if with_bias:
        names[f"{prefix}.bias"] = (out,)


def expected_encoder_tensors(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    if config.encoder.family == BertEncoderConfig.family:
        return expected_bert_tensors(config.encoder)
    enc = config.encoder
    c, i = enc.hidden_size, enc.intermediate_size
    names: dict[str, tuple[int, ...]] = {"embeddings.tok_embeddings.weight": (enc.vocab_size, c)}
    _norm(names, "embeddings.norm", c, enc.norm_bias)
    for n in range(enc.num_hidden_layers):
        if n > 0:  # layer 0 has an identity attention norm (the embedding norm precedes it)
            _norm(names, f"layers.{n}.attn_norm", c, enc.norm_bias)
        _dense(names, f"layers.{n}.attn.Wqkv", 3 * c, c, enc.attention_bias)
        _dense(names, f"layers.{n}.attn.Wo", c, c, enc.attention_bias)
        _norm(names, f"layers.{n}.mlp_norm", c, enc.norm_bias)
        _dense(names, f"layers.{n}.mlp.Wi", 2 * i, c, enc.mlp_bias)
        _dense(names, f"layers.{n}.mlp.Wo", c, i, enc.mlp_bias)
    _norm(names, "final_norm", c, enc.norm_bias)
    return names


def expected_head_tensors(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    enc, head = config.encoder, config.head
    if head is None:
        return {}
    c = enc.hidden_size
    names: dict[str, tuple[int, ...]] = {"type_embeddings.weight": (head.num_token_types, c)}
    for n in range(head.num_layers):
        _norm(names, f"layers.{n}.attn_norm", c, enc.norm_bias)
        _dense(names, f"layers.{n}.attn.Wqkv", 3 * c, c, enc.attention_bias)
        _dense(names, f"layers.{n}.attn.Wo", c, c, enc.attention_bias)
        _norm(names, f"layers.{n}.mlp_norm", c, enc.norm_bias)
        _dense(names, f"layers.{n}.mlp.Wi", head.intermediate_size, c, enc.mlp_bias)
        _dense(names, f"layers.{n}.mlp.Wo", c, head.intermediate_size, enc.mlp_bias)
    _norm(names, "scorer.norm", c, enc.norm_bias)
    _dense(names, "scorer.proj", head.scorer_hidden_size, c, True)
    _dense(names, "scorer.out", 1, head.scorer_hidden_size, True)
    _dense(names, "action.fc1", head.action_head.hidden_size, len(ACTION_FEATURES), True)
    _dense(names, "action.fc2", len(head.action_head.actions), head.action_head.hidden_size, True)
    return {HEAD_PREFIX + name: shape for name, shape in names.items()}


def expected_tensors(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Canonical names (no `model.` prefix) -> shapes."""
    return {**expected_encoder_tensors(config), **expected_head_tensors(config)}


def _prefix(config: ModelConfig) -> str:
    return BERT_PREFIX if config.encoder.family == BertEncoderConfig.family else MLM_PREFIX


def ignored_tensors(stored, config: ModelConfig) -> dict[str, str]:
    """{stored name: why it is ignored} for the tensors a checkpoint carries beside the model (heads, buffers)."""
    prefixed = any(name.startswith(_prefix(config)) for name in stored)
    if config.encoder.family == BertEncoderConfig.family:
        reasons = {name: bert_ignored(name, prefixed) for name in stored}
    else:
        reasons = {name: "masked-LM head (not part of the encoder)" if prefixed and name in MLM_HEAD_TENSORS
                   else None for name in stored}
    return {name: reason for name, reason in reasons.items() if reason is not None}


def require_host_memory(config: ModelConfig, where: str = "config.json") -> int:
    """The parameter count of `config`, refused before any tensor exists if its float32 weights (the form the harness
    holds them in) exceed this machine's physical memory (core/limits.py). The count walks the tensor names, which the
    schema's layer bound keeps to a few hundred thousand at most."""
    parameters = sum(math.prod(shape) for shape in expected_tensors(config).values())
    memory = physical_memory_bytes()
    if memory is not None and parameters * FLOAT32_BYTES > memory:
        raise ConfigError(f"{where}: the config implies {parameters:,} parameters, "
                          f"{parameters * FLOAT32_BYTES / 2**30:,.1f} GiB as float32, more than this machine's "
                          f"{memory / 2**30:,.1f} GiB of memory")
    return parameters


def canonicalize_names(stored: dict[str, tuple[int, ...]], config: ModelConfig) -> dict[str, str]:
    """Map stored tensor names to canonical names, checking the set and every shape.

    Returns {stored name: canonical name} for the tensors the model uses.
    """
    expected = expected_tensors(config)
    encoder_names = expected_encoder_tensors(config)
    prefix = _prefix(config)
    prefixed = any(name.startswith(prefix) for name in stored)
    ignored = ignored_tensors(stored, config)
    mapping: dict[str, str] = {}
    unexpected = []
    for name in stored:
        canonical = name
        if name in ignored:
            continue  # not part of the model (see ignored_tensors)
        if prefixed and name.startswith(prefix):
            canonical = name[len(prefix):]
            if canonical not in encoder_names:
                unexpected.append(name)
                continue
        elif canonical in encoder_names and prefixed:
            unexpected.append(name)  # a mix of prefixed and bare encoder names is ambiguous
            continue
        if canonical not in expected:
            unexpected.append(name)
            continue
        if canonical in mapping.values():
            raise CheckpointError(f"tensor '{canonical}' is stored twice")
        mapping[name] = canonical
    if unexpected:
        raise CheckpointError(f"unexpected tensor(s) in checkpoint: {', '.join(sorted(unexpected)[:8])}"
                              + (" ..." if len(unexpected) > 8 else ""))
    missing = sorted(set(expected) - set(mapping.values()))
    if missing:
        raise CheckpointError(f"missing tensor(s) in checkpoint: {', '.join(missing[:8])}"
                              + (" ..." if len(missing) > 8 else ""))
    for name, canonical in mapping.items():
        if tuple(stored[name]) != tuple(expected[canonical]):
            raise CheckpointError(f"tensor '{name}' has shape {list(stored[name])}, config implies "
                                  f"{list(expected[canonical])}")
    return mapping
