"""builtin:tiny's committed margin fit, applied when the built-in source is written.

builtin_tiny_fit.json holds new values for the two last decision maps (validation/margins.py makes it with the FP32
reference model, a later stage of the pipeline). Applying it here needs no model: the values replace the random
ones exactly (float32 in JSON), so every machine writes identical bytes, and a fit made for other base weights is
refused by their digest.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from ..core.json_documents import NUMBER, POSITIVE_INTEGER, SHA256, array_of, closed_object, open_object
from .tensors import HEAD_PREFIX

FIT_PATH = Path(__file__).with_name("builtin_tiny_fit.json")
FIT_SCHEMA = open_object({
    "base_tensors_sha256": SHA256,
    "tensors": {"type": "object", "additionalProperties": closed_object({"shape": array_of(POSITIVE_INTEGER, 1),
                                                                         "values": array_of(NUMBER, 1)})},
    "margins_when_fitted": closed_object({"min_decision_logit_gap": NUMBER, "min_action_logit_gap": NUMBER}),
}, {"target_gap": NUMBER})
FITTED = (f"{HEAD_PREFIX}scorer.out.weight", f"{HEAD_PREFIX}scorer.out.bias",
          f"{HEAD_PREFIX}action.fc2.weight", f"{HEAD_PREFIX}action.fc2.bias")


def tensors_digest(tensors: dict, exclude: tuple[str, ...] = FITTED) -> str:
    """SHA256 of every tensor but the fitted ones: the base weights a fit was made for."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        if name not in exclude:
            digest.update(name.encode() + b"\0" + tensors[name].numpy().astype("<f4").tobytes())
    return digest.hexdigest()


def apply_fit(tensors: dict, fitted: dict) -> dict:
    """Replace the fitted tensors; refuses a fit made for other base weights."""
    if fitted["base_tensors_sha256"] != tensors_digest(tensors):
        raise RuntimeError("a committed margin fit was made for other base weights; regenerate it with "
                           "`python -m experiments.ane_engineering.fit_margins --source builtin:<name>`")
    out = dict(tensors)
    for name, entry in fitted["tensors"].items():
        value = torch.tensor(entry["values"], dtype=torch.float32).reshape(entry["shape"])
        if tuple(value.shape) != tuple(tensors[name].shape):
            raise RuntimeError(f"{FIT_PATH.name}: tensor '{name}' has shape {entry['shape']}, expected "
                               f"{list(tensors[name].shape)}")
        out[name] = value
    return out
