"""Helpers for tests that need checkpoints: raw config variants, random tensors, Hugging Face-layout directories.

Everything here writes exactly what a user's checkpoint directory would hold (config.json, model.safetensors,
optional tokenizer.json), so the tests load it through the ordinary `load_checkpoint(str(directory))` path.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from experiments.ane_engineering.checkpoint.builtin import BUILTINS, random_tensors
from experiments.ane_engineering.checkpoint.config import ModelConfig, parse_config
from experiments.ane_engineering.checkpoint.tokenizer import build_byte_tokenizer

# Small but complete: 4 layers (global, sliding, sliding, global), head_dim 32, a window that masks at L=96.
SMALL_ENCODER = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=2, intermediate_size=96,
                     local_attention=32)
SMALL_HEAD = dict(num_layers=1, num_attention_heads=2, intermediate_size=128, scorer_hidden_size=64)
_THETA_SLOTS = {"global_rope_theta": "full_attention", "local_rope_theta": "sliding_attention"}


def layer_types(num_layers: int, every: int) -> list[str]:
    return ["sliding_attention" if i % every else "full_attention" for i in range(num_layers)]


def config_variant(base: str = "tiny", *, head: dict | None = None, drop_head: bool = False, **overrides) -> dict:
    """A deep copy of BUILTINS[base] with encoder `overrides` and decision-head overrides `head`.

    Keeps the copy self-consistent: changing num_hidden_layers / global_attn_every_n_layers recomputes
    layer_types (unless given), and a RoPE base override updates the legacy key and rope_parameters together.
    """
    raw = copy.deepcopy(BUILTINS[base])
    thetas = {key: overrides.pop(key) for key in list(overrides) if key in _THETA_SLOTS}
    raw.update(overrides)
    if "layer_types" not in overrides and {"num_hidden_layers", "global_attn_every_n_layers"} & overrides.keys():
        raw["layer_types"] = layer_types(raw["num_hidden_layers"], raw["global_attn_every_n_layers"])
    for key, value in thetas.items():
        raw[key] = value
        raw["rope_parameters"][_THETA_SLOTS[key]]["rope_theta"] = value
    if drop_head:
        del raw["decision_head"]
    elif head:
        raw["decision_head"].update(head)
    return raw


def small_config(*, head: dict | None = None, **overrides) -> dict:
    """config_variant of tiny at test size (hidden 64, 4 layers, local_attention 32, one head layer)."""
    return config_variant("tiny", head={**SMALL_HEAD, **(head or {})}, **{**SMALL_ENCODER, **overrides})


def checkpoint_tensors(raw: dict, seed: int = 0, bias_scale: float = 1.0) -> dict[str, torch.Tensor]:
    """random_tensors(parse_config(raw), seed), with every bias multiplied by `bias_scale` (to make them matter)."""
    tensors = random_tensors(parse_config(raw), seed)
    if bias_scale != 1.0:
        tensors = {name: value * bias_scale if name.endswith(".bias") else value for name, value in tensors.items()}
    return tensors


def config_and_tensors(raw: dict, seed: int = 0, bias_scale: float = 1.0) -> tuple[ModelConfig, dict]:
    return parse_config(raw), checkpoint_tensors(raw, seed, bias_scale)


def write_checkpoint(directory: Path, raw: dict, tensors: dict, tokenizer: bool = False) -> Path:
    """Write config.json + model.safetensors (+ the byte-level tokenizer.json) in Hugging Face layout."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    save_file({name: value.contiguous() for name, value in tensors.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    if tokenizer:
        build_byte_tokenizer().save(str(directory / "tokenizer.json"))
    return directory


def write_random_checkpoint(directory: Path, raw: dict | None = None, seed: int = 0, tokenizer: bool = False,
                            bias_scale: float = 1.0) -> Path:
    raw = small_config() if raw is None else raw
    return write_checkpoint(directory, raw, checkpoint_tensors(raw, seed, bias_scale), tokenizer)


def randomize_transformers_model(model, seed: int, dense_std: float | None = None) -> None:
    """Non-trivial weights for a transformers model: dense N(0, dense_std^2) (default 1.5^2 / fan_in), embeddings
    N(0, 1), norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "norm" in name.lower() and name.endswith("weight"):
                parameter.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias"):
                parameter.copy_(0.1 * noise)
            elif "embeddings" in name:
                parameter.copy_(noise)
            else:
                parameter.copy_((1.5 / parameter.shape[1] ** 0.5 if dense_std is None else dense_std) * noise)


def assert_margins_match_the_fit(config, measured: dict, recorded: dict) -> None:
    """Re-measured decision margins (decision.margins.decision_margins) equal the ones recorded when the fit was made
    (on another machine) within the FP32 cross-machine tolerance (core/tolerances.py; a gap is the difference of two
    values, each within the tolerance at its scale)."""
    from experiments.ane_engineering.core import tolerances

    scales = measured["scales"]
    shape = tolerances.decision_model_rounding(config, scales["max_tokens"])
    allowed = {
        "min_decision_logit_gap": 2 * tolerances.fp32_cross_machine_abs(scales["max_abs_calibrated_logit"], **shape),
        "min_action_logit_gap": 2 * tolerances.fp32_cross_machine_abs(
            scales["max_abs_action_logit"], shape["depth"] + tolerances.ACTION_HEAD_STAGES, shape["contraction"]),
    }
    for name, tolerance in allowed.items():
        assert abs(measured[name] - recorded[name]) <= tolerance, (name, measured[name], recorded[name], tolerance)
