"""Offline built-in sources, written deterministically in Hugging Face layout and loaded by the ordinary path.

- `builtin:tiny`: small dimensions, the full architecture (global and sliding encoder layers, decision head,
  scorer, action head, calibration) and the byte-level tokenizer. Its decisions have clear margins on the fixture
  questions: random weights from a fixed seed, except the two last decision maps, which carry the committed
  minimum-norm fit (builtin_tiny_fit.json, applied by builtin_fit.py). The fit and the measurement of its margins
  need the reference model, a later stage: they live in validation/margins.py, and the tests re-measure the margins.
- `builtin:mmbert-base-shape`: mmBERT-base dimensions (22 layers, 768 hidden, 12 heads, GeGLU 1152, vocab
  256,000) with random weights, for timing and memory work. No margin search: its decisions mean nothing.
- `builtin:mmbert-outlier` and `builtin:tiny-outlier`: stress sources, the dimensions of mmbert-base-shape and tiny
  with a massive activation planted at the [CLS] position (builtin_outlier.py; the `massive_activation` section of
  their config.json says its magnitude, dims and onset layer). mmbert-outlier plants the published place, onset and
  magnitude; tiny-outlier the same magnitude in dims and an onset scaled to tiny's width and depth
  (round(d * 128 / 768), round(11 * 6 / 22)), and, like tiny, a committed margin fit of its two last decision maps
  made for its planted weights (builtin_tiny_outlier_fit.json). Other strengths:
  `python -m experiments.ane_engineering.stress_source` (margin-fitted when written).

Directories are cached under $ANE_ENGINEERING_CACHE (default ~/.cache/ane-engineering) keyed by a fingerprint of
the code that determines their bytes, written to a temporary sibling and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from ..core.errors import HarnessError
from ..core.json_documents import read_json
from .builtin_fit import FIT_PATH, FIT_SCHEMA, apply_fit
from .builtin_outlier import MASSIVE_ACTIVATION_KEY, plant_massive_activation, planted_spec
from .config import ModelConfig, head_config_to_json, parse_config
from .tensors import expected_tensors, require_host_memory
from .tokenizer import BYTE_SPECIALS, BYTE_VOCAB_SIZE, build_byte_tokenizer

BUILTIN_SEED = 0
ATTENTION_QK_GAIN = 2.5  # scale of the Q and K rows of every Wqkv draw (see random_tensors)
PAD, CLS, SEP, MARK = (BYTE_SPECIALS.index(t) for t in BYTE_SPECIALS)


def _head_section(layers: int, heads: int, intermediate: int, scorer: int) -> dict:
    return {
        "format_version": 1, "num_layers": layers, "num_attention_heads": heads, "intermediate_size": intermediate,
        "activation": "relu", "rope_theta": 160000.0, "num_token_types": 3, "scorer_hidden_size": scorer,
        "max_markers": 32, "marker_token_id": MARK, "cls_token_id": CLS, "sep_token_id": SEP, "output_decimals": 4,
        "action_head": {"hidden_size": 64, "actions": ["answer", "review", "abstain"], "activation": "gelu"},
        "calibration": {"temperature": {"choice": 1.5, "score": 2.0, "noul": 1.25}, "none_logit": 0.5},
    }


def _encoder_section(vocab: int, hidden: int, layers: int, heads: int, intermediate: int) -> dict:
    theta = 160000.0  # the multilingual checkpoint uses 160000 for both global and local RoPE
    return {
        "architectures": ["ModernBertModel"], "model_type": "modernbert",
        "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
        "intermediate_size": intermediate, "hidden_activation": "gelu", "max_position_embeddings": 8192,
        "local_attention": 128, "global_attn_every_n_layers": 3,
        "layer_types": ["sliding_attention" if i % 3 else "full_attention" for i in range(layers)],
        "global_rope_theta": theta, "local_rope_theta": theta,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": theta},
                            "sliding_attention": {"rope_type": "default", "rope_theta": theta}},
        "norm_eps": 1e-5, "norm_bias": False, "attention_bias": False, "mlp_bias": False,
        "pad_token_id": PAD, "cls_token_id": CLS, "sep_token_id": SEP, "bos_token_id": CLS, "eos_token_id": SEP,
    }


_TINY = {**_encoder_section(BYTE_VOCAB_SIZE, 128, 6, 2, 192), "decision_head": _head_section(2, 2, 256, 320)}
_MMBERT = {**_encoder_section(256000, 768, 22, 12, 1152), "decision_head": _head_section(2, 12, 1152, 256)}
# The published massive activation of the real mmBERT weights (builtin_outlier.py has the source and the planting).
PUBLISHED_OUTLIER = {"magnitude": 14000.0, "dims": [468, 488, 530, 580, 614], "onset_layer": 11,
                     "source": "john-rocky/coreai-model-zoo knowledge/laya-multilingual-port.md: |h| 1.37e4 (256 "
                               "tokens) to 1.40e4 (512 tokens) at [CLS], dims 468/488/530/580/614, from layer 11 on"}
TINY_OUTLIER = {**PUBLISHED_OUTLIER, "dims": [round(d * 128 / 768) for d in PUBLISHED_OUTLIER["dims"]],
                "onset_layer": round(11 * 6 / 22),
                "source": "the published mmBERT activation with dims and onset scaled to tiny's width and depth"}
# Built-ins whose two last decision maps carry a committed margin fit (fit_margins.py writes them).
FITS = {"tiny": FIT_PATH, "tiny-outlier": FIT_PATH.with_name("builtin_tiny_outlier_fit.json")}
BUILTINS = {
    "tiny": _TINY,
    "mmbert-base-shape": _MMBERT,
    "tiny-outlier": {**_TINY, MASSIVE_ACTIVATION_KEY: TINY_OUTLIER},
    "mmbert-outlier": {**_MMBERT, MASSIVE_ACTIVATION_KEY: PUBLISHED_OUTLIER},
}


def random_tensors(config: ModelConfig, seed: int, prefix: str = "") -> dict[str, torch.Tensor]:
    """Scaled-normal weights that keep activations O(1) through the residual stream; deterministic per seed.
    Only the tensors whose names start with `prefix` (e.g. the decision head's), drawn in sorted name order."""
    rng = np.random.Generator(np.random.PCG64(seed))
    depth = config.encoder.num_hidden_layers + (config.head.num_layers if config.head else 0)
    tensors = {}
    for name, shape in sorted(item for item in expected_tensors(config).items() if item[0].startswith(prefix)):
        if name.endswith("norm.weight"):
            value = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif name.endswith(".bias"):
            value = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        elif "embeddings" in name:
            value = rng.standard_normal(shape, dtype=np.float32)
        else:
            fan_in = shape[1]
            gain = np.ones((shape[0], 1), dtype=np.float32)
            if name.endswith(("attn.Wo.weight", "mlp.Wo.weight")):
                gain[:] = (2.0 * depth) ** -0.5  # residual branches: keep the stream's scale bounded
            elif name.endswith("attn.Wqkv.weight"):
                # Sharper attention than a plain 1/sqrt(fan_in) draw: tokens then read distinct context, so the
                # markers of different options carry different features (near-identical ones would make every
                # decision a near-tie that only a noise-amplifying scorer could separate).
                gain[: 2 * shape[1]] = ATTENTION_QK_GAIN
            value = (gain / np.sqrt(fan_in)) * rng.standard_normal(shape, dtype=np.float32)
        tensors[name] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    return tensors


def _write(directory: Path, raw_config: dict, tensors: dict, meta: dict) -> None:
    (directory / "config.json").write_text(json.dumps(raw_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    build_byte_tokenizer().save(str(directory / "tokenizer.json"))
    (directory / "builtin.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")


class UnknownSourceError(HarnessError):
    """A --source name that names no built-in source."""


def build_builtin(name: str, directory: Path) -> dict:
    """Write built-in source `name` into `directory` (must be empty); returns what was chosen and measured."""
    if name not in BUILTINS:
        raise UnknownSourceError(f"unknown built-in source 'builtin:{name}'; this builder writes "
                                 f"{', '.join(f'builtin:{known}' for known in BUILTINS)}")
    return build_from_config(BUILTINS[name], directory, f"builtin:{name}", {"name": name}, fit=FITS.get(name))


def base_tensors(raw: dict, label: str) -> tuple:
    """(config, tensors) of config `raw` before any margin fit: the seeded random draw with the massive activation its
    `massive_activation` section plants (if any). What a margin fit is made for (fit_margins.py)."""
    config = parse_config(raw, label)
    require_host_memory(config, label)
    tensors = random_tensors(config, BUILTIN_SEED)
    if MASSIVE_ACTIVATION_KEY in raw:
        tensors = plant_massive_activation(config, planted_spec(raw, config, label), tensors, CLS)
    return config, tensors


def build_from_config(raw: dict, directory: Path, label: str, meta: dict, fit: Path | None = None,
                      finish=None) -> dict:
    """Write the seeded random checkpoint of config `raw` into `directory`, with the massive activation its
    `massive_activation` section plants (if any) and, with `fit`, a committed margin fit (builtin_fit.py) made for
    those weights. `finish(config, tensors) -> (tensors, record)`, if given, edits the tensors last (stress_source's
    margin fit); its record goes into builtin.json."""
    config, tensors = base_tensors(raw, label)
    config_json = {**raw, "decision_head": head_config_to_json(config.head)}
    meta = {**meta, "seed": BUILTIN_SEED}
    if MASSIVE_ACTIVATION_KEY in raw:
        meta[MASSIVE_ACTIVATION_KEY] = planted_spec(raw, config, label)
    if fit is not None:
        fitted = read_json(fit, FIT_SCHEMA)
        tensors = apply_fit(tensors, fitted)
        meta.update(fit=fit.name, margins_when_fitted=fitted["margins_when_fitted"])
    if finish is not None:
        tensors, record = finish(config, tensors)
        meta.update(record)
    _write(directory, config_json, tensors, meta)
    return meta


def builder_fingerprint(name: str) -> str:
    """Hash of every source file that decides the bytes of built-in `name` (and, for tiny, its seed)."""
    here = Path(__file__).resolve().parent
    files = [here / f for f in ("builtin.py", "config.py", "config_fields.py", "modernbert_config.py", "bert_config.py",
                                "tensors.py", "tokenizer.py")]
    if MASSIVE_ACTIVATION_KEY in BUILTINS[name]:
        files.append(here / "builtin_outlier.py")
    if name in FITS:
        files += [here / "builtin_fit.py", FITS[name]]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(json.dumps(BUILTINS[name], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("ANE_ENGINEERING_CACHE", Path.home() / ".cache" / "ane-engineering"))


def materialize_cached(directory_name: str, build) -> Path:
    """cache_root()/builtin/`directory_name`, written by build(staging directory) on first use; concurrent builders
    race safely to one rename. The name carries a fingerprint of everything that decides the bytes."""
    target = cache_root() / "builtin" / directory_name
    if (target / "builtin.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "builtin.json").is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
