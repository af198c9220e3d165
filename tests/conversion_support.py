"""Small packages converted with coremltools for tests: a builder (PyMIL) program saved as an .mlpackage, and the
builtin:tiny BC1S body traced and converted with coremltools' default pass pipeline (not the export's lean one).

Every function here converts: a test that calls one is marked slow (tests/slow_guard.py checks it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")


def save_program(prog, path: Path, target=ct.target.iOS17, precision=ct.precision.FLOAT16) -> Path:
    """`prog` converted to an ML Program at deployment `target` with `precision`, saved as the .mlpackage `path`."""
    model = ct.convert(prog, convert_to="mlprogram", compute_precision=precision, minimum_deployment_target=target,
                       skip_model_load=True)
    model.save(str(path))
    return Path(path)


def convert_tiny_body(checkpoint, length: int, target):
    """(BC1SBody of `checkpoint` at `length`, its MLModel): traced with zero inputs, FP16 inputs and option_logits."""
    from experiments.ane_engineering.model.bc1s.models import BC1SBody

    body = BC1SBody(checkpoint.config, checkpoint.tensors, length).eval()
    hidden = checkpoint.config.encoder.hidden_size
    shapes = {"embeddings": (1, hidden, 1, length), "global_mask": (1, length, 1, length),  # B, C|L, 1, L
              "type_vectors": (1, hidden, 1, length), "marker_selector": (1, length, 1, 32),
              "local_mask": (1, length, 1, length)}
    names = body.input_names()
    traced = torch.jit.trace(body, tuple(torch.zeros(shapes[n]) for n in names))
    model = ct.convert(traced, inputs=[ct.TensorType(name=n, shape=shapes[n], dtype=np.float16) for n in names],
                       outputs=[ct.TensorType(name="option_logits", dtype=np.float16)], convert_to="mlprogram",
                       compute_precision=ct.precision.FLOAT16, minimum_deployment_target=target, skip_model_load=True)
    return body, model
