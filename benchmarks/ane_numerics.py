"""Benchmark: Neural Engine headroom per bucket and attention layout, and the decision error under the mil,
mil-ane (pre-A16 and A16 cliffs) and mil-fp16-strict backends, for one source. The evidence logic is
experiments/ane_engineering/workflows/benchmarks/ane_numerics.py.

    python benchmarks/ane_numerics.py --source builtin:minilm-decision --length 96 --length 192 --layout dense \\
        --questions 12 --strict-questions 2 --output benchmarks/evidence/ane-numerics-minilm-decision.json
    python benchmarks/ane_numerics.py --source builtin:mmbert-base-shape --length 96 --length 1024 \\
        --layout dense --layout windowed --questions 6 --output benchmarks/evidence/ane-numerics-mmbert-base-shape.json

Refuses an existing output file. Exit status 0 whatever the gates say: this is a measurement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.arguments import integer  # noqa: E402
from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.ane_numerics import ane_numerics_evidence, summary  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="checkpoint source, e.g. builtin:minilm-decision")
    parser.add_argument("--length", type=integer("--length", 1), action="append", required=True, help="bucket (repeat)")
    parser.add_argument("--layout", choices=("dense", "windowed"), action="append", help="attention layout (repeat; "
                        "default dense)")
    parser.add_argument("--questions", type=integer("--questions", 1), help="at most this many golden questions per "
                        "bucket, evenly spaced (default: every one that fits)")
    parser.add_argument("--strict-questions", type=integer("--strict-questions", 0), default=0,
                        help="questions per run for mil-fp16-strict (default 0: not run; it is slow)")
    parser.add_argument("--fp16-scale", action="append", dest="fp16_scales",
                        help="also export with probe --fp16-scale VALUE (auto or an exponent K; repeat); 'none' is the "
                             "unscaled package (default: none only)")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    scales = tuple(None if v == "none" else (v if v == "auto" else int(v)) for v in (args.fp16_scales or ["none"]))
    evidence = ane_numerics_evidence(args.source, args.length, args.layout or ["dense"], args.questions,
                                     args.strict_questions, progress=lambda line: print(line, flush=True),
                                     fp16_scales=scales)
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
