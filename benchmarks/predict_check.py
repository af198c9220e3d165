"""Benchmark: the calibrated cost model against public Neural Engine latencies it was not fitted to (the crossover
against an MLX curve is benchmarks/crossover.py).

Counts the body this harness would export for each public check point's encoder config (a ModernBERT-large shape;
placement/public_latencies.json), predicts it on the point's chip, and reports per-point and median relative errors
(evidence logic: experiments/ane_engineering/workflows/benchmarks/predict_check.py). Converts with coremltools
(minutes at full size; nothing is written but the evidence). Predictions, not measurements.

    python benchmarks/predict_check.py --output benchmarks/evidence/predict_check.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.predict_check import predict_check_evidence  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    parser.add_argument("--identity-check", action="store_true",
                        help="also convert one interpolated length in full and compare it with the quadratic identity")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    evidence = predict_check_evidence(progress=lambda line: print(line, file=sys.stderr, flush=True),
                                      with_identity=args.identity_check)
    for layout, row in evidence["summary"].items():
        print(f"{layout}: median |relative error| {row['median_absolute_relative_error']:.1%} over {row['points']} "
              f"points ({row['inside_band']} inside the band)", file=sys.stderr)
    write_evidence(output, evidence)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
