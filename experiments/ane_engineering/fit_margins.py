"""`python -m experiments.ane_engineering.fit_margins --source SOURCE` (builtin:tiny, builtin:tiny-outlier or
builtin:minilm-decision): the committed margin fit of a built-in decision source (validation/margins.py `fit`).

Every random weight of the built-in decision head is kept except `decision_head.scorer.out` and
`decision_head.action.fc2`, which get the smallest correction that puts every fixture question's winner
FIT_TARGET_GAP ahead in the calibrated-logit and action-logit spaces (calibrated logits within +-FIT_LOGIT_BOUND):
on builtin:tiny's random encoder with the byte-level tokenizer (builtin:tiny-outlier: the same with its planted massive
activation, checkpoint/builtin_tiny_outlier_fit.json), or on the real all-MiniLM-L6-v2 encoder with its
WordPiece tokenizer. Writes the source's fit file (checkpoint/builtin_tiny_fit.json or
checkpoint/minilm_decision_fit.json) with the margins it measured afterwards; the tests re-measure them. Refuses,
writing nothing, when the fit cannot reach MIN_DECISION_MARGIN.
"""

from __future__ import annotations

import argparse
import json
import sys

from .checkpoint.builtin_fit import apply_fit
from .core.cli import UsageError, run_main
from .core.staging import replace_text
from .validation.margins import MIN_DECISION_MARGIN, decision_margins, fit

SOURCES = ("builtin:tiny", "builtin:tiny-outlier", "builtin:minilm-decision")


def _tiny():
    from .checkpoint.builtin import BUILTIN_SEED, BUILTINS, random_tensors
    from .checkpoint.builtin_fit import FIT_PATH
    from .checkpoint.config import parse_config

    config = parse_config(BUILTINS["tiny"])
    return config, random_tensors(config, BUILTIN_SEED), None, FIT_PATH


def _tiny_outlier():
    """The stress source's planted base weights (checkpoint/builtin_outlier.py), fitted like builtin:tiny's."""
    from .checkpoint.builtin import BUILTINS, FITS, base_tensors

    config, tensors = base_tensors(BUILTINS["tiny-outlier"], "builtin:tiny-outlier")
    return config, tensors, None, FITS["tiny-outlier"]


def _minilm():
    from .checkpoint.minilm_decision import ENCODER_SOURCE, FIT_PATH, base_tensors
    from .checkpoint.packaged import resolve_packaged
    from .checkpoint.tokenizer import load_tokenizer

    encoder_dir = resolve_packaged(ENCODER_SOURCE)
    config, _, tensors = base_tensors(encoder_dir)
    return config, tensors, load_tokenizer(encoder_dir / "tokenizer.json"), FIT_PATH


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.fit_margins", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, choices=SOURCES, help="the built-in decision source to fit")
    args = parser.parse_args(argv)
    config, tensors, tokenizer, fit_path = {"builtin:tiny": _tiny, "builtin:tiny-outlier": _tiny_outlier,
                                            "builtin:minilm-decision": _minilm}[args.source]()
    fitted = fit(config, tensors, tokenizer)
    margins = decision_margins(config, apply_fit(tensors, fitted), tokenizer)
    gaps = {k: margins[k] for k in ("min_decision_logit_gap", "min_action_logit_gap")}
    if min(gaps.values()) < MIN_DECISION_MARGIN:
        raise UsageError(f"the fit reaches margins {gaps}, below {MIN_DECISION_MARGIN}; not writing {fit_path}")
    fitted["margins_when_fitted"] = gaps
    replace_text(fit_path, json.dumps(fitted, indent=1) + "\n")
    print(f"wrote {fit_path}: {margins}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
