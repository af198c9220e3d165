"""Benchmark: a stress source whose planted massive activation is past the Neural Engine's matmul cliff, validated
with the Neural Engine numerics (`--backend mil-ane`) without rescaling and with `probe --fp16-scale auto`, at each
bucket and attention layout. Writes one evidence JSON (with the hashes of what produced it). The evidence logic is
experiments/ane_engineering/workflows/benchmarks/stress_rescale.py.

    python benchmarks/stress_rescale.py --magnitude 40000 --lengths 96,1024 \
        --output benchmarks/evidence/stress_rescale_tiny_outlier.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.arguments import comma_list, positive_float  # noqa: E402
from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.steps import parse_lengths  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.stress_rescale import stress_rescale_evidence  # noqa: E402

BACKENDS = ("mil", "mil-fp16-strict", "mil-ane")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", choices=("tiny-outlier", "mmbert-outlier"), default="tiny-outlier",
                        help="stress source config to start from (default: %(default)s)")
    parser.add_argument("--source", help="validate this source instead of building a stress source (e.g. "
                        "builtin:tiny or builtin:minilm-decision: rescaling must leave them passing)")
    parser.add_argument("--magnitude", type=positive_float("--magnitude"), default=40000.0,
                        help="planted |h| (default %(default)s, past the 32,752 matmul cliff)")
    parser.add_argument("--lengths", default="96,1024", help="comma-separated buckets (default: %(default)s)")
    parser.add_argument("--layouts", type=comma_list("--layouts", choices=("dense", "windowed")),
                        default=["dense", "windowed"], help="attention layouts (default: dense,windowed)")
    parser.add_argument("--tile", type=int, default=32, help="query tile of the windowed layout (default %(default)s)")
    parser.add_argument("--backends", type=comma_list("--backends", choices=BACKENDS), default=["mil-ane"],
                        help=f"validate backends, any of {','.join(BACKENDS)} (default: mil-ane)")
    parser.add_argument("--questions", type=comma_list("--questions"),
                        help="validate on these fixture question ids only (default: every one that fits)")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        evidence = stress_rescale_evidence(args.base, args.magnitude, parse_lengths(args.lengths), args.layouts,
                                           args.backends, Path(scratch), args.tile,
                                           progress=lambda line: print(line, file=sys.stderr, flush=True),
                                           source=args.source, question_ids=args.questions)
    write_evidence(output, evidence)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
