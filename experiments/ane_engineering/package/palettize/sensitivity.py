"""Per-weight sensitivities for weighted palettization: the diagonal Fisher information of the package's own output.

Which model: the FP32 BC1S torch module the package was exported from (package/kinds.py `build_export_spec`, the
same kind and length), not the B x L x C reference. Its conv weights are the package's conv consts one for one --
same layout, Q's head_dim^-0.5 already folded in, same padding and masks -- so a sensitivity needs no re-derived
layout transform, and each const is matched by name (the converter names a const after its parameter path) and
checked by value (the const is the FP16 rounding of the parameter).

What loss: at the FP32 weights the loss "output against the FP32 reference" has zero gradient (it is at its
minimum); its curvature is what matters, and for a log-likelihood that curvature is the Fisher information, whose
diagonal is the expected squared gradient of the model's own loss with targets drawn from the model's own output
distribution (SqueezeLLM's sensitivity; coremltools' SKMPalettizer uses squared gradients of a loss the same way).
Then sum_i F_ii (w_i - q_i)^2 is the second-order estimate of the output loss a quantisation q causes, and that is
the objective the exact weighted k-means minimises.

- decisions (kind "body"): the softmax over a question's active option logits (what the host's calibration and
  action head read). F_ii = sum_y p_y (d log p_y / d w_i)^2, exactly, one backward pass per option.
- embeddings (kind "embedding"): the unit embedding e with a Gaussian output model; a target t ~ N(e, I) gives
  the loss gradient v^T J with v ~ N(0, I), so E[(v^T J)_i^2] = (J^T J)_ii, the sensitivity of |de|^2, which bounds
  every similarity change. `draws` seeded projections per text (Hutchinson's estimator of the diagonal).

Calibration inputs come from a committed fixture per task, disjoint from every golden and held-out set
(tests/package/inputs/test_texts.py); inputs longer than the bucket are skipped and counted, never truncated.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import torch

from ...core.errors import HarnessError
from ...core.torch_threads import single_torch_thread
from ..inputs.device_inputs import body_inputs, embedding_inputs
from ..inputs.questions import CALIBRATION_QUESTIONS_PATH, encode_question, load_questions
from ..inputs.texts import CALIBRATION_TEXTS_PATH, load_text_fixture, token_ids

WEIGHTINGS = ("none", "fisher")
EMBEDDING_DRAWS = 8  # random output projections per calibration text
SEED = 0


class SensitivityError(HarnessError):
    pass


def default_calibration(kind: str) -> Path:
    if kind == "body":
        return CALIBRATION_QUESTIONS_PATH
    if kind == "embedding":
        return CALIBRATION_TEXTS_PATH
    raise SensitivityError(f"Fisher weighting is defined for body (decisions) and embedding packages, not {kind!r}")


def const_name(parameter: str) -> str:
    """The const the converter makes of a torch parameter: dots to underscores, FP16 suffix."""
    return parameter.replace(".", "_") + "_to_fp16"


def _conv_weights(module: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in module.named_parameters() if name.endswith(".weight") and p.dim() == 4}


def _decision_fisher(module, checkpoint, calibration: Path, length: int, params: list, accumulate, say) -> dict:
    questions = load_questions(calibration)
    config, tensors = checkpoint.config, checkpoint.tensors
    tokenizer = checkpoint.require_tokenizer("Fisher sensitivities")
    used, skipped, backward = 0, [], 0
    for number, question in enumerate(questions, start=1):
        encoded = encode_question(tokenizer, config.head, question)
        if encoded.num_tokens > length:
            skipped.append(question.id)
            continue
        inputs = {k: torch.from_numpy(v) for k, v in body_inputs(config, tensors, encoded.input_ids,
                                                                  encoded.token_types, encoded.marker_positions,
                                                                  length).items()}
        logits = module(**inputs).reshape(-1)[: len(question.options)]  # (n_options,)
        log_p = torch.log_softmax(logits.double(), dim=0)  # (n_options,)
        p = log_p.detach().exp()
        for y in range(log_p.numel()):
            grads = torch.autograd.grad(log_p[y], params, retain_graph=y + 1 < log_p.numel())
            accumulate(grads, float(p[y]))
            backward += 1
        used += 1
        say(f"Fisher: question {number}/{len(questions)}")
    return {"inputs": used, "skipped": skipped, "backward_passes": backward,
            "loss": "cross-entropy of the option softmax, labels weighted by the FP32 model's own probabilities"}


def _embedding_fisher(module, checkpoint, calibration: Path, length: int, params: list, accumulate, say) -> dict:
    texts = load_text_fixture(calibration)
    config, tensors = checkpoint.config, checkpoint.tensors
    tokenizer = checkpoint.require_tokenizer("Fisher sensitivities")
    generator = torch.Generator().manual_seed(SEED)
    used, skipped, backward = 0, [], 0
    for number, text in enumerate(texts, start=1):
        ids = token_ids(tokenizer, text.text)
        if len(ids) > length:
            skipped.append(text.id)
            continue
        inputs = {k: torch.from_numpy(v) for k, v in embedding_inputs(config, tensors, ids, length).items()}
        embedding = module(**inputs).reshape(-1)  # (C,)
        for draw in range(EMBEDDING_DRAWS):
            v = torch.randn(embedding.shape, generator=generator)  # (C,)
            grads = torch.autograd.grad((embedding * v).sum(), params, retain_graph=draw + 1 < EMBEDDING_DRAWS)
            accumulate(grads, 1.0 / EMBEDDING_DRAWS)
            backward += 1
        used += 1
        say(f"Fisher: text {number}/{len(texts)}")
    return {"inputs": used, "skipped": skipped, "backward_passes": backward, "draws_per_input": EMBEDDING_DRAWS,
            "seed": SEED, "loss": "Gaussian log-likelihood of the unit embedding, targets drawn from N(e, I)"}


def _fp16_digest(value: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(value, dtype=np.float16)).tobytes()).hexdigest()


METADATA_KEY = "ane_engineering_sensitivities"  # the one safetensors metadata entry (see Sensitivities.save)


class Sensitivities:
    """Per-const sensitivity arrays (the const's shape), looked up by `__call__(const_name, value)` as
    fast_palettizer's `sensitivities` hook wants; a const that is not a conv weight of the module gets None.
    Each array carries the SHA-256 of the FP16 weight it belongs to, checked at lookup. `save`/`load` keep them in a
    safetensors file (a sweep computes them once for all its candidates)."""

    def __init__(self, arrays: dict[str, np.ndarray], digests: dict[str, str], record: dict):
        self.arrays, self.digests, self.record, self.used, self.unweighted = arrays, digests, record, set(), set()

    def __call__(self, name: str, value: np.ndarray):
        if name not in self.arrays:
            self.unweighted.add(name)
            return None
        array = self.arrays[name]
        if value.shape != array.shape or _fp16_digest(value) != self.digests[name]:
            raise SensitivityError(f"{name}: the package's weight is not the FP16 rounding of the source parameter "
                                   "it is named after; the package was exported from other weights")
        self.used.add(name)
        return array

    def save(self, path: Path) -> str:
        """Write the arrays (float32) with the digests and record as metadata; returns the file's SHA-256.

        One metadata entry, not two: safetensors writes its metadata map in no fixed order, so two entries made the
        same sensitivities give files of different bytes (and hashes) from run to run."""
        import json

        from safetensors.numpy import save_file

        record = {k: v for k, v in self.record.items() if k != "seconds"}  # the file holds no measured time
        save_file({k: v.astype(np.float32) for k, v in self.arrays.items()}, str(path),
                  metadata={METADATA_KEY: json.dumps({"digests": self.digests, "record": record}, sort_keys=True)})
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    @classmethod
    def load(cls, path: Path) -> "Sensitivities":
        import json

        from safetensors import safe_open
        from safetensors.numpy import load_file

        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata()
        stored = json.loads(metadata[METADATA_KEY])
        record = stored["record"]
        record["file_sha256"] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return cls(load_file(str(path)), stored["digests"], record)


def fisher_sensitivities(checkpoint, kind: str, length: int, calibration: Path | None = None,
                         progress=None) -> Sensitivities:
    """Diagonal Fisher sensitivities of every conv weight of the `kind` module at `length` over `calibration`."""
    from ..kinds import build_export_spec

    calibration = Path(calibration or default_calibration(kind))
    default_calibration(kind)  # refuses kinds without a task loss
    say = progress or (lambda message: None)
    started = time.perf_counter()
    module = build_export_spec(checkpoint, kind, length).module.float().eval()
    weights = _conv_weights(module)
    for p in module.parameters():
        p.requires_grad_(False)
    params = list(weights.values())
    for p in params:
        p.requires_grad_(True)
    sums = [torch.zeros_like(p, dtype=torch.float64) for p in params]

    def accumulate(grads, scale: float):
        for total, g in zip(sums, grads):
            total.add_(g.double().square(), alpha=scale)

    try:
        run = _decision_fisher if kind == "body" else _embedding_fisher
        with single_torch_thread():  # many small ops: one thread is faster on a shared 2-core machine
            info = run(module, checkpoint, calibration, length, params, accumulate, say)
    finally:
        for p in params:
            p.requires_grad_(False)
    if not info["inputs"]:
        raise SensitivityError(f"{calibration}: no calibration input fits the bucket of {length} tokens")
    arrays = {const_name(name): s.numpy().astype(np.float32) for name, s in zip(weights, sums)}
    digests = {const_name(name): _fp16_digest(p.detach().numpy()) for name, p in weights.items()}
    record = {"method": "fisher", "model": "FP32 BC1S module of the package's kind and length",
              "calibration": {"path": calibration.name,
                              "sha256": hashlib.sha256(calibration.read_bytes()).hexdigest(), **info},
              "seconds": time.perf_counter() - started}
    return Sensitivities(arrays, digests, record)
