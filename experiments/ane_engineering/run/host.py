"""The host side after the device call, in FP32: action head, calibration and public formatting.

Given the raw option logits of one question (whatever produced them: the reference model or a package), this
module is the single definition of what the user sees, so the reference and every candidate are finished identically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..checkpoint.config import QUESTION_KINDS, DecisionHeadConfig
from ..checkpoint.tensors import ACTION_FEATURES, HEAD_PREFIX
from ..core.errors import HarnessError
from ..package.inputs.questions import NONE_DECISION, EncodedQuestion


class NonFiniteOutputError(HarnessError):
    """A package produced NaN or Inf where a value was needed. FP16 overflow shows up this way: validation records
    it as a failed finite gate, every other caller refuses to return a result."""


def non_finite_summary(values) -> str | None:
    """None when every value is finite, else how many are NaN, +Inf and -Inf."""
    values = np.asarray(values)
    if np.isfinite(values).all():
        return None
    return (f"{int(np.isnan(values).sum())} NaN, {int(np.isposinf(values).sum())} +Inf, "
            f"{int(np.isneginf(values).sum())} -Inf of {values.size} values")


def require_finite(values, what: str) -> None:
    problem = non_finite_summary(values)
    if problem:
        raise NonFiniteOutputError(f"{what}: {problem}")


@dataclass
class Decision:
    question_id: str
    kind: str
    option_logits: list[float]  # raw, active options only, FP32
    calibrated: list[float]  # calibrated probabilities (noul: options then 'none')
    action_logits: list[float]
    action_probabilities: list[float]
    decision_index: int  # index into `calibrated` (noul: n_options means 'none')
    action_index: int
    num_tokens: int
    public: dict  # rounded, user-facing output

    def to_json(self) -> dict:
        return dict(self.__dict__)


def softmax(values: np.ndarray) -> np.ndarray:
    shifted = values - values.max()
    exp = np.exp(shifted)
    return exp / exp.sum()


def action_features(option_logits: np.ndarray, kind: str, max_markers: int) -> np.ndarray:
    """Features of softmax(raw option logits), in the order of ACTION_FEATURES."""
    n = option_logits.shape[0]
    probs = softmax(option_logits.astype(np.float64))
    top = np.sort(probs)[::-1]
    entropy = float(-(probs * np.log(np.clip(probs, 1e-30, None))).sum())
    features = [top[0], top[1], top[0] - top[1], entropy / math.log(n), n / max_markers,
                *(1.0 if kind == k else 0.0 for k in QUESTION_KINDS)]
    assert len(features) == len(ACTION_FEATURES)
    return np.asarray(features, dtype=np.float32)


class DecisionHost:
    """Finishes a question from its raw option logits: FP32 action head (erf GELU), calibration, formatting."""

    def __init__(self, head: DecisionHeadConfig, tensors: dict):
        self.head = head
        p = f"{HEAD_PREFIX}action."
        self.fc1_w, self.fc1_b = tensors[p + "fc1.weight"].double(), tensors[p + "fc1.bias"].double()
        self.fc2_w, self.fc2_b = tensors[p + "fc2.weight"].double(), tensors[p + "fc2.bias"].double()

    def action_logits(self, features: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(features.astype(np.float64))
        hidden = F.gelu(x @ self.fc1_w.T + self.fc1_b)  # exact erf GELU
        return (hidden @ self.fc2_w.T + self.fc2_b).float().numpy()

    def calibrate(self, option_logits: np.ndarray, kind: str) -> np.ndarray:
        scaled = option_logits.astype(np.float64) / self.head.calibration.temperature[kind]
        if kind == "noul":
            scaled = np.append(scaled, self.head.calibration.none_logit)
        return softmax(scaled).astype(np.float32)

    def finish(self, encoded: EncodedQuestion, slot_logits: np.ndarray) -> Decision:
        """`slot_logits` holds all marker slots (inactive ones ignored); returns the full decision record."""
        question = encoded.question
        n = len(question.options)
        option_logits = np.asarray(slot_logits, dtype=np.float32)[:n]
        require_finite(option_logits, f"question {question.id!r}: option logits")
        calibrated = self.calibrate(option_logits, question.kind)
        action_logits = self.action_logits(action_features(option_logits, question.kind, self.head.max_markers))
        action_probs = softmax(action_logits.astype(np.float64)).astype(np.float32)
        decision_index = int(np.argmax(calibrated))
        action_index = int(np.argmax(action_probs))
        return Decision(
            question_id=question.id, kind=question.kind, option_logits=option_logits.tolist(),
            calibrated=calibrated.tolist(), action_logits=action_logits.tolist(),
            action_probabilities=action_probs.tolist(), decision_index=decision_index, action_index=action_index,
            num_tokens=encoded.num_tokens,
            public=self.format_public(encoded, calibrated, action_probs, decision_index, action_index),
        )

    def format_public(self, encoded: EncodedQuestion, calibrated: np.ndarray, action_probs: np.ndarray,
                      decision_index: int, action_index: int) -> dict:
        question, decimals = encoded.question, self.head.output_decimals
        labels = list(question.options) + ([NONE_DECISION] if question.kind == "noul" else [])
        public = {
            "id": question.id,
            "kind": question.kind,
            "decision": labels[decision_index],
            "probabilities": {label: round(float(p), decimals) for label, p in zip(labels, calibrated)},
            "action": self.head.action_head.actions[action_index],
            "action_probabilities": {a: round(float(p), decimals)
                                     for a, p in zip(self.head.action_head.actions, action_probs)},
            "tokens": encoded.num_tokens,
        }
        if question.kind == "score":
            public["expected_score"] = round(float(np.dot(calibrated, question.points)), decimals)
        return public
