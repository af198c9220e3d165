"""`python -m experiments.ane_engineering.stress_source`: write a stress checkpoint of your own strength.

Starts from the config of `builtin:tiny-outlier` or `builtin:mmbert-outlier` (--base), replaces the fields of its
`massive_activation` section you give (magnitude, dims, onset layer, signs, marker channel), and writes the seeded
random checkpoint with that activation planted (checkpoint/builtin_outlier.py says how) to a new directory in
Hugging Face layout, which every command takes as `--source DIR`. The same config section in any directory's
config.json is what the builder reads. Unlike the built-in stress sources, the decision head's two last maps then get
builtin:tiny's kind of margin fit (validation/margins.py `fit`, on this checkpoint's FP32 reference: every fixture
question's winner at least FIT_TARGET_GAP ahead), so a flipped decision means the numerics, not a random near-tie;
--no-margin-fit keeps the random maps. Refuses an existing output.
Example: a magnitude past the Neural Engine's matmul cliff (32,752) in tiny dimensions:

    python -m experiments.ane_engineering.stress_source --base tiny-outlier --magnitude 40000 --output /tmp/tiny-40k
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .core.arguments import ArgumentValueError, comma_list, integer, positive_float
from .core.cli import run_main
from .core.staging import check_output, staged_directory

BASES = ("tiny-outlier", "mmbert-outlier")


def signs(text: str) -> list[int]:
    """An argparse type for --signs: comma-separated 1 / -1 (repeats allowed, unlike comma_list)."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part in ("1", "+1", "-1") for part in parts):
        raise ArgumentValueError(f"--signs {text!r}: give comma-separated 1 or -1, one per dim")
    return [-1 if part == "-1" else 1 for part in parts]


def fit_margins(config, tensors: dict) -> tuple[dict, dict]:
    """The margin fit of the decision head's two last maps on this checkpoint, refused below MIN_DECISION_MARGIN."""
    from .checkpoint.builtin_fit import apply_fit
    from .core.cli import UsageError
    from .validation.margins import MIN_DECISION_MARGIN, decision_margins, fit

    fitted = apply_fit(tensors, fit(config, tensors))
    margins = decision_margins(config, fitted)
    gaps = {k: margins[k] for k in ("min_decision_logit_gap", "min_action_logit_gap")}
    if min(gaps.values()) < MIN_DECISION_MARGIN:
        raise UsageError(f"the margin fit reaches {gaps}, below {MIN_DECISION_MARGIN}; use --no-margin-fit")
    return fitted, {"margin_fit": "validation/margins.py fit", "margins_when_fitted": gaps}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.stress_source", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", choices=BASES, default="tiny-outlier", help="built-in whose config is the start "
                        "(default tiny-outlier)")
    parser.add_argument("--magnitude", type=positive_float("--magnitude"), help="|h| at [CLS] in every planted dim")
    parser.add_argument("--dims", type=comma_list("--dims", integer("--dims", 0)), help="comma-separated channels")
    parser.add_argument("--onset-layer", type=integer("--onset-layer", 0),
                        help="0-based encoder layer whose MLP writes the activation")
    parser.add_argument("--signs", type=signs, help="+1 or -1 per dim, comma-separated (default all +1)")
    parser.add_argument("--marker-dim", type=integer("--marker-dim", 0),
                        help="channel that marks [CLS] (default hidden_size - 1)")
    parser.add_argument("--no-margin-fit", action="store_true", help="keep the random decision maps (no margin fit)")
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    return parser


def main(argv=None) -> int:
    from .checkpoint.builtin import BUILTINS, build_from_config
    from .checkpoint.builtin_outlier import MASSIVE_ACTIVATION_KEY

    args = build_parser().parse_args(argv)
    check_output(args.output)
    section = dict(BUILTINS[args.base][MASSIVE_ACTIVATION_KEY])
    given = {"magnitude": args.magnitude, "dims": args.dims, "onset_layer": args.onset_layer, "signs": args.signs,
             "marker_dim": args.marker_dim}
    section.update({key: value for key, value in given.items() if value is not None})
    if args.dims is not None and args.signs is None:
        section.pop("signs", None)
    section["source"] = (f"stress_source --base {args.base} with "
                         f"{', '.join(k for k, v in given.items() if v is not None) or 'its defaults'}")
    raw = {**BUILTINS[args.base], MASSIVE_ACTIVATION_KEY: section}
    with staged_directory(args.output) as staging:
        meta = build_from_config(raw, staging, str(args.output), {"name": f"stress_source:{args.base}"},
                                 finish=None if args.no_margin_fit else fit_margins)
    spec = meta[MASSIVE_ACTIVATION_KEY]
    fit = f", decision margins {meta['margins_when_fitted']}" if "margins_when_fitted" in meta else ""
    print(f"wrote {args.output}: {args.base} with |h| {spec['magnitude']:g} at [CLS] in dims {spec['dims']} from "
          f"layer {spec['onset_layer']} on{fit}; use it as --source {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
