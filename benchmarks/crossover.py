"""Benchmark: the bucket length above which the predicted Neural Engine request of builtin:mmbert-base-shape is
slower than an MLX latency curve (the reference run's MLX figure, placement/public_latencies.json), on the reference
run's chip.

Converts the dense body at three lengths and evaluates every grid length by the exact quadratic identity of
dense-family programs (placement/crossover.py; evidence logic: experiments/ane_engineering/workflows/benchmarks/
predict_check.py `crossover_evidence`). A prediction, not a measurement.

    python benchmarks/crossover.py --output benchmarks/evidence/crossover_mmbert_base_shape.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.predict_check import crossover_evidence  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    evidence = crossover_evidence(progress=lambda line: print(line, file=sys.stderr, flush=True))
    for layout, row in evidence["crossover"]["layouts"].items():
        print(f"{layout}: crossover at L{row['crossover_length']}, ANE faster up to L{row['ane_faster_up_to']}",
              file=sys.stderr)
    write_evidence(output, evidence)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
