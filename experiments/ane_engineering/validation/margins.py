"""Clear decision margins for `builtin:tiny`, so FP16 noise cannot flip a near-tie: the fit and its measurement.

Random weights give marker scores that differ by little, so some of the fixture questions are near-ties.
The fit below keeps every random weight except the two last linear maps that produce decisions, and gives those
the minimum-norm correction (a small FP64 quadratic program) that makes, for every fixture question:

- the gap between the winning and every other calibrated logit (noul: including the 'none' logit) at least
  FIT_TARGET_GAP: corrects `decision_head.scorer.out`;
- the same for the action logits, towards a target action per question ("review" for noul questions, "answer"
  otherwise; see action_targets): corrects `decision_head.action.fc2`;
- every calibrated option logit within +-FIT_LOGIT_BOUND, so probabilities stay informative.

The winning options stay what the random model picked; gaps already wide enough are left alone. The result is
committed as checkpoint/builtin_tiny_fit.json (float32 values, exact in JSON), which the builder applies
(checkpoint/builtin_fit.py) without running the model, so every machine writes identical bytes. The fit and the
margins it reaches (`decision_margins`, recorded as margins_when_fitted) come from the FP32 reference model, so they
live here, below the checkpoint stage; tests/checkpoint/test_loading.py re-measures them on every run and holds them
to MIN_DECISION_MARGIN and to the recorded values. Regenerate with `python -m experiments.ane_engineering.fit_margins
--source builtin:tiny` after changing the model or fixtures.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..checkpoint.builtin_fit import FITTED, tensors_digest
from ..checkpoint.config import ModelConfig
from ..checkpoint.tensors import HEAD_PREFIX
from ..checkpoint.tokenizer import build_byte_tokenizer
from ..model.reference import ReferenceDecisionModel
from ..package.inputs.questions import encode_question, load_questions
from ..run.host import DecisionHost, action_features

MIN_DECISION_MARGIN = 0.5  # logits: the smallest top-2 gap builtin:tiny must keep (README "Why builtin:tiny ...")
FIT_TARGET_GAP = 1.0  # twice MIN_DECISION_MARGIN: room for float32 rounding of the fitted weights
# Calibrated logits are also kept within +-FIT_LOGIT_BOUND, so probabilities are not all saturated at 0 and 1
# (saturation would hide errors from the probability gates).
FIT_LOGIT_BOUND = 6.0


def _marker_features(config: ModelConfig, tensors: dict, tokenizer=None):
    """Per fixture question: encoded question and scorer hidden features at its markers, FP64 (n_options, S).
    `tokenizer`: the source's (default: the built-ins' byte-level one)."""
    model = ReferenceDecisionModel(config, tensors).eval()
    tokenizer = tokenizer or build_byte_tokenizer()
    rows = []
    with torch.no_grad():
        for question in load_questions():
            encoded = encode_question(tokenizer, config.head, question)
            ids = torch.tensor([encoded.input_ids])
            valid = torch.ones_like(ids, dtype=torch.bool)
            hidden = model.scorer_features(ids, valid,
                                           torch.tensor([encoded.token_types]))[0, list(encoded.marker_positions)]
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
    # L-BFGS-B stops within a small fraction of the target; margins are re-measured after
    if shortfall > 0.01 * FIT_TARGET_GAP:
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


def decision_margins(config: ModelConfig, tensors: dict, tokenizer=None) -> dict:
    """Smallest top-2 gaps over the fixture questions, from the FP32 reference model (and, for tolerances, the
    largest magnitudes the gaps are differences of). `tokenizer`: the source's (default: the byte-level one)."""
    model = ReferenceDecisionModel(config, tensors).eval()
    host = DecisionHost(config.head, tensors)
    tokenizer = tokenizer or build_byte_tokenizer()
    gaps = {"min_decision_logit_gap": float("inf"), "min_action_logit_gap": float("inf")}
    scales = {"max_abs_calibrated_logit": 0.0, "max_abs_action_logit": 0.0, "max_tokens": 0}
    with torch.no_grad():
        for question in load_questions():
            encoded = encode_question(tokenizer, config.head, question)
            ids = torch.tensor([encoded.input_ids])
            scores = model.token_scores(ids, torch.ones_like(ids, dtype=torch.bool),
                                        torch.tensor([encoded.token_types]))
            decision = host.finish(encoded, scores[0, list(encoded.marker_positions)].numpy())
            temperature = config.head.calibration.temperature[question.kind]
            logits = np.asarray(decision.option_logits) / temperature
            if question.kind == "noul":
                logits = np.append(logits, config.head.calibration.none_logit)
            actions = np.asarray(decision.action_logits)
            gaps["min_decision_logit_gap"] = min(gaps["min_decision_logit_gap"],
                                                 float(np.diff(np.sort(logits)[-2:])[0]))
            gaps["min_action_logit_gap"] = min(gaps["min_action_logit_gap"], float(np.diff(np.sort(actions)[-2:])[0]))
            scales["max_abs_calibrated_logit"] = max(scales["max_abs_calibrated_logit"], float(np.abs(logits).max()))
            scales["max_abs_action_logit"] = max(scales["max_abs_action_logit"], float(np.abs(actions).max()))
            scales["max_tokens"] = max(scales["max_tokens"], encoded.num_tokens)
    return {**gaps, "scales": scales}
