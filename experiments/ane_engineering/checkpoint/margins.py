"""Clear decision margins for `builtin:tiny`, so FP16 noise cannot flip a near-tie.

Random weights give marker scores that differ by little, so some of the 63 fixture questions are near-ties.
The fit below keeps every random weight except the two last linear maps that produce decisions, and gives those
the minimum-norm correction (a small FP64 quadratic program) that makes, for every fixture question:

- the gap between the winning and every other calibrated logit (noul: including the 'none' logit) at least
  FIT_TARGET_GAP: corrects `decision_head.scorer.out`;
- the same for the action logits, towards a target action per question ("review" for noul questions, "answer"
  otherwise; see action_targets): corrects `decision_head.action.fc2`;
- every calibrated option logit within +-FIT_LOGIT_BOUND, so probabilities stay informative.

The winning options stay what the random model picked; gaps already wide enough are left alone. The result is committed as builtin_tiny_fit.json (float32 values, exact in JSON),
so every machine writes identical bytes without re-running FP32 arithmetic whose last bits depend on the CPU.
Regenerate with `python -m experiments.ane_engineering.checkpoint.margins` after changing the model or fixtures.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..json_documents import NUMBER, POSITIVE_INTEGER, SHA256, array_of, closed_object, open_object
from .config import ModelConfig
from .tensors import HEAD_PREFIX

FIT_PATH = Path(__file__).with_name("builtin_tiny_fit.json")
FIT_SCHEMA = open_object({
    "base_tensors_sha256": SHA256,
    "tensors": {"type": "object", "additionalProperties": closed_object({"shape": array_of(POSITIVE_INTEGER, 1),
                                                                         "values": array_of(NUMBER, 1)})},
}, {"target_gap": NUMBER, "margins_when_fitted": {"type": "object"}})
FIT_TARGET_GAP = 1.0  # twice MIN_DECISION_MARGIN: room for float32 rounding of the fitted weights
# Calibrated logits are also kept within +-FIT_LOGIT_BOUND, so probabilities are not all saturated at 0 and 1
# (saturation would hide errors from the probability gates).
FIT_LOGIT_BOUND = 6.0
FITTED = (f"{HEAD_PREFIX}scorer.out.weight", f"{HEAD_PREFIX}scorer.out.bias",
          f"{HEAD_PREFIX}action.fc2.weight", f"{HEAD_PREFIX}action.fc2.bias")


def tensors_digest(tensors: dict, exclude: tuple[str, ...] = FITTED) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        if name not in exclude:
            digest.update(name.encode() + b"\0" + tensors[name].numpy().astype("<f4").tobytes())
    return digest.hexdigest()


def _marker_features(config: ModelConfig, tensors: dict, tokenizer=None):
    """Per fixture question: encoded question and scorer hidden features at its markers, FP64 (n_options, S).
    `tokenizer`: the source's (default: the built-ins' byte-level one)."""
    from ..decision.questions import encode_question, load_questions
    from ..model.reference import ReferenceDecisionModel
    from .tokenizer import build_byte_tokenizer

    model = ReferenceDecisionModel(config, tensors).eval()
    tokenizer = tokenizer or build_byte_tokenizer()
    rows = []
    with torch.no_grad():
        for question in load_questions():
            encoded = encode_question(tokenizer, config.head, question)
            ids = torch.tensor([encoded.input_ids])
            valid = torch.ones_like(ids, dtype=torch.bool)
            hidden = model.scorer_features(ids, valid, torch.tensor([encoded.token_types]))[0, list(encoded.marker_positions)]
            rows.append((encoded, hidden.double().numpy()))
    return rows


def _solve_min_norm(rows: list[np.ndarray], targets: list[float]) -> np.ndarray:
    """The smallest correction x with rows @ x >= targets, via its dual: min over lambda >= 0 of
    0.5 |A^T lambda|^2 - t . lambda, then x = A^T lambda (bound-constrained, solved by L-BFGS-B)."""
    from scipy.optimize import minimize

    matrix, rhs = np.asarray(rows), np.asarray(targets)
    gram = matrix @ matrix.T

    def objective(lam):
        return 0.5 * lam @ gram @ lam - rhs @ lam, gram @ lam - rhs

    result = minimize(objective, np.zeros(len(rhs)), jac=True, method="L-BFGS-B",
                      bounds=[(0.0, None)] * len(rhs), options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12})
    solution = matrix.T @ result.x
    shortfall = float((rhs - matrix @ solution).max())
    if shortfall > 0.01 * FIT_TARGET_GAP:  # L-BFGS-B stops within a small fraction of the target; margins are re-measured after
        raise RuntimeError(f"margin fit cannot meet its constraints (short by {shortfall:.3g}); "
                           "raise the scorer/action hidden sizes")
    return solution


def fit_scorer(config: ModelConfig, tensors: dict, features) -> tuple[np.ndarray, float]:
    """Correct scorer.out (w, b) so each question's calibrated top-2 gap is >= FIT_TARGET_GAP."""
    w = tensors[f"{HEAD_PREFIX}scorer.out.weight"].double().numpy()[0]
    b = float(tensors[f"{HEAD_PREFIX}scorer.out.bias"][0])
    none = config.head.calibration.none_logit
    rows, targets = [], []  # each row: coefficients of (dw, db) in a calibrated-logit gap
    for encoded, hidden in features:
        temperature = config.head.calibration.temperature[encoded.question.kind]
        calibrated = (hidden @ w + b) / temperature
        top = int(np.argmax(calibrated))
        none_wins = encoded.question.kind == "noul" and none > calibrated[top]
        for k in range(len(calibrated)):
            if none_wins:  # none - c_k >= gap
                rows.append(np.append(-hidden[k], -1.0) / temperature)
                targets.append(FIT_TARGET_GAP - (none - calibrated[k]))
            elif k != top:  # c_top - c_k >= gap
                rows.append(np.append(hidden[top] - hidden[k], 0.0) / temperature)
                targets.append(FIT_TARGET_GAP - (calibrated[top] - calibrated[k]))
        for k in range(len(calibrated)):  # -bound <= c_k <= bound
            rows.append(np.append(hidden[k], 1.0) / temperature)
            targets.append(-FIT_LOGIT_BOUND - calibrated[k])
            rows.append(-np.append(hidden[k], 1.0) / temperature)
            targets.append(calibrated[k] - FIT_LOGIT_BOUND)
        if encoded.question.kind == "noul" and not none_wins:  # c_top - none >= gap
            rows.append(np.append(hidden[top], 1.0) / temperature)
            targets.append(FIT_TARGET_GAP - (calibrated[top] - none))
    delta = _solve_min_norm(rows, targets)
    return w + delta[:-1], b + delta[-1]


def action_targets(kinds: list[str]) -> np.ndarray:
    """Target action per question: "review" (1) for noul questions, where no listed option may apply, and
    "answer" (0) otherwise. The kind enters the action head as an exact one-hot feature, so the two groups are far
    apart in feature space and separating them needs no large, noise-amplifying weights (a threshold on a
    continuous feature such as the top probability would have to split near-identical neighbours)."""
    return np.asarray([1 if kind == "noul" else 0 for kind in kinds])


def fit_action(config: ModelConfig, tensors: dict, features, w: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Correct action.fc2 (W, c) so each question's target action leads every other by >= FIT_TARGET_GAP."""
    from ..decision.host import action_features

    p = f"{HEAD_PREFIX}action."
    fc1_w, fc1_b = tensors[p + "fc1.weight"].double(), tensors[p + "fc1.bias"].double()
    weight, bias = tensors[p + "fc2.weight"].double().numpy(), tensors[p + "fc2.bias"].double().numpy()
    actions, hidden_size = weight.shape
    hidden = []
    for encoded, marker_hidden in features:
        logits = (marker_hidden @ w + b).astype(np.float32)
        f = action_features(logits, encoded.question.kind, config.head.max_markers)
        hidden.append(F.gelu(torch.from_numpy(f.astype(np.float64)) @ fc1_w.T + fc1_b).numpy())  # (H,)
    rows, targets = [], []
    for g, top in zip(hidden, action_targets([encoded.question.kind for encoded, _ in features])):
        scores = weight @ g + bias
        for j in range(actions):
            if j == top:
                continue
            row = np.zeros((actions, hidden_size + 1))
            row[top, :hidden_size], row[top, -1] = g, 1.0
            row[j, :hidden_size], row[j, -1] = -g, -1.0
            rows.append(row.ravel())
            targets.append(FIT_TARGET_GAP - (scores[top] - scores[j]))
    delta = _solve_min_norm(rows, targets).reshape(actions, hidden_size + 1)
    return weight + delta[:, :-1], bias + delta[:, -1]


def fit(config: ModelConfig, tensors: dict, tokenizer=None) -> dict:
    features = _marker_features(config, tensors, tokenizer)
    w, b = fit_scorer(config, tensors, features)
    weight, bias = fit_action(config, tensors, features, w, b)
    values = {FITTED[0]: w[None, :], FITTED[1]: np.array([b]), FITTED[2]: weight, FITTED[3]: bias}
    return {
        "base_tensors_sha256": tensors_digest(tensors),
        "target_gap": FIT_TARGET_GAP,
        "tensors": {name: {"shape": list(v.shape), "values": v.astype(np.float32).ravel().tolist()}
                    for name, v in values.items()},
    }


def apply_fit(tensors: dict, fitted: dict) -> dict:
    """Replace the fitted tensors; refuses a fit made for other base weights."""
    if fitted["base_tensors_sha256"] != tensors_digest(tensors):
        raise RuntimeError(f"{FIT_PATH.name} was fitted to other base weights; regenerate it with "
                           "`python -m experiments.ane_engineering.checkpoint.margins`")
    out = dict(tensors)
    for name, entry in fitted["tensors"].items():
        value = torch.tensor(entry["values"], dtype=torch.float32).reshape(entry["shape"])
        if tuple(value.shape) != tuple(tensors[name].shape):
            raise RuntimeError(f"{FIT_PATH.name}: tensor '{name}' has shape {entry['shape']}, expected {list(tensors[name].shape)}")
        out[name] = value
    return out


def main() -> None:
    from .builtin import BUILTINS, BUILTIN_SEED, decision_margins, random_tensors
    from .config import parse_config

    config = parse_config(BUILTINS["tiny"])
    tensors = random_tensors(config, BUILTIN_SEED)
    fitted = fit(config, tensors)
    margins = decision_margins(config, apply_fit(tensors, fitted))
    fitted["margins_when_fitted"] = margins
    FIT_PATH.write_text(json.dumps(fitted, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIT_PATH}: {margins}")


if __name__ == "__main__":
    main()
