"""`builtin:minilm-decision`: the real all-MiniLM-L6-v2 encoder with the built-in decision head on top.

The decision chain (golden, validate, palettization sweep, benchmark) needs a decision head, and no trained one
exists here. This source takes the encoder from the packaged source `all-minilm-l6-v2` unchanged (its trained
weights, config fields and tokenizer) and adds the deterministic decision head of the built-ins: random weights
from the built-in seed (checkpoint/builtin.py `random_tensors`), except `decision_head.scorer.out` and
`decision_head.action.fc2`, which carry the committed minimum-norm margin fit (minilm_decision_fit.json), made the
way builtin:tiny's is (validation/margins.py; README "Why builtin:tiny decisions have clear margins") on the real
encoder's features, with MiniLM's tokenizer. The head's layout tokens are MiniLM's own specials: [CLS], [SEP], and
[MASK] as the option marker.

What it measures: everything upstream of the head's last two maps runs on trained encoder weights (the FP16
ranges, palettization error and gates of the encoder are real); the decisions themselves mean nothing.

Written into the built-in cache like the other built-ins, keyed by a fingerprint of this builder, the fit and the
installed MiniLM files. Regenerate the fit with
`python -m experiments.ane_engineering.fit_margins --source builtin:minilm-decision` after changing the head, the
fixture or the encoder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..core.errors import HarnessError
from ..core.json_documents import read_json
from .builtin import BUILTIN_SEED, _head_section, materialize_cached, random_tensors
from .builtin_fit import FIT_SCHEMA, apply_fit
from .config import ModelConfig, head_config_to_json, parse_config
from .files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, read_config_json
from .loading import load_checkpoint_dir
from .packaged import resolve_packaged
from .tensors import HEAD_PREFIX

NAME = "minilm-decision"
ENCODER_SOURCE = "all-minilm-l6-v2"
FIT_PATH = Path(__file__).with_name("minilm_decision_fit.json")
# MiniLM's WordPiece specials (tokenizer.json added_tokens): [CLS] 101, [SEP] 102, [MASK] 103 as the option marker.
LAYOUT_TOKENS = {"cls_token_id": 101, "sep_token_id": 102, "marker_token_id": 103}
# Two head layers of 12 heads (head size 32, as the encoder's), ReLU FFN 768, scorer 384.
HEAD_DIMENSIONS = dict(layers=2, heads=12, intermediate=768, scorer=384)


class FitMissingError(HarnessError):
    """The committed fit is absent (a damaged checkout); the message says how to make it."""


def decision_raw_config(encoder_dir: Path) -> dict:
    """MiniLM's config.json with the decision_head section added (and checked by parse_config)."""
    raw = read_config_json(encoder_dir)
    head = {**_head_section(HEAD_DIMENSIONS["layers"], HEAD_DIMENSIONS["heads"], HEAD_DIMENSIONS["intermediate"],
                            HEAD_DIMENSIONS["scorer"]), **LAYOUT_TOKENS}
    return {**raw, "decision_head": head}


def base_tensors(encoder_dir: Path) -> tuple[ModelConfig, dict, dict[str, torch.Tensor]]:
    """(config, raw config, tensors): MiniLM's encoder tensors and the seeded random head, before the fit."""
    raw = decision_raw_config(encoder_dir)
    config = parse_config(raw)
    encoder = load_checkpoint_dir(encoder_dir, source=ENCODER_SOURCE)
    return config, raw, {**encoder.tensors, **random_tensors(config, BUILTIN_SEED, prefix=HEAD_PREFIX)}


def build(directory: Path) -> dict:
    encoder_dir = resolve_packaged(ENCODER_SOURCE)
    if not FIT_PATH.is_file():
        raise FitMissingError(f"{FIT_PATH} is missing; make it with `python -m experiments.ane_engineering.fit_margins "
                              "--source builtin:minilm-decision`")
    config, raw, tensors = base_tensors(encoder_dir)
    tensors = apply_fit(tensors, read_json(FIT_PATH, FIT_SCHEMA))
    raw = {**raw, "decision_head": head_config_to_json(config.head)}
    (directory / CONFIG_FILE).write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_file({name: value.contiguous() for name, value in tensors.items()}, str(directory / WEIGHTS_FILE),
              metadata={"format": "pt"})
    shutil.copyfile(encoder_dir / TOKENIZER_FILE, directory / TOKENIZER_FILE)
    meta = {"name": NAME, "seed": BUILTIN_SEED, "encoder_source": ENCODER_SOURCE,
            "encoder_files": _encoder_hashes(encoder_dir)}
    (directory / "builtin.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return meta


def _encoder_hashes(encoder_dir: Path) -> dict[str, str]:
    from .files import sha256_file

    return {name: sha256_file(encoder_dir / name) for name in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE)}


def fingerprint(encoder_dir: Path) -> str:
    """Hash of the builder's sources, the fit, and the installed MiniLM files: all that decides the bytes."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in [here / f
                 for f in ("minilm_decision.py", "builtin.py", "config.py", "config_fields.py", "modernbert_config.py",
                           "bert_config.py", "tensors.py",
                           "bert_tensors.py", "builtin_fit.py")] + [FIT_PATH]:
        digest.update(path.name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"missing"))
    digest.update(json.dumps(_encoder_hashes(encoder_dir), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def materialize() -> Path:
    encoder_dir = resolve_packaged(ENCODER_SOURCE)
    return materialize_cached(f"{NAME}-{fingerprint(encoder_dir)}", build)
