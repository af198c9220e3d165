"""`python -m experiments.ane_engineering.fit_minilm_margins`: the margin fit of `builtin:minilm-decision`.

The same minimum-norm fit as builtin:tiny's (validation/margins.py `fit`): every random weight of the built-in
decision head is kept except `decision_head.scorer.out` and `decision_head.action.fc2`, which get the smallest
correction that puts every fixture question's winner FIT_TARGET_GAP ahead in the calibrated-logit and action-logit
spaces (calibrated logits within +-FIT_LOGIT_BOUND) -- here on the features of the real all-MiniLM-L6-v2 encoder,
with its WordPiece tokenizer. Writes checkpoint/minilm_decision_fit.json with the margins it measured afterwards;
the tests re-measure them (tests/test_real_weights.py).
"""

from __future__ import annotations

import json

from .checkpoint.builtin_fit import apply_fit
from .checkpoint.minilm_decision import ENCODER_SOURCE, FIT_PATH, base_tensors
from .checkpoint.packaged import resolve_packaged
from .checkpoint.tokenizer import load_tokenizer
from .validation.margins import MIN_DECISION_MARGIN, decision_margins, fit


def main() -> None:
    encoder_dir = resolve_packaged(ENCODER_SOURCE)
    config, _, tensors = base_tensors(encoder_dir)
    tokenizer = load_tokenizer(encoder_dir / "tokenizer.json")
    fitted = fit(config, tensors, tokenizer)
    margins = decision_margins(config, apply_fit(tensors, fitted), tokenizer)
    gaps = {k: margins[k] for k in ("min_decision_logit_gap", "min_action_logit_gap")}
    if min(gaps.values()) < MIN_DECISION_MARGIN:
        raise SystemExit(f"margins {gaps} fell below {MIN_DECISION_MARGIN}; not writing {FIT_PATH}")
    fitted["margins_when_fitted"] = gaps
    FIT_PATH.write_text(json.dumps(fitted, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIT_PATH}: {margins}")


if __name__ == "__main__":
    main()
