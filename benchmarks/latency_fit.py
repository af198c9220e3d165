"""Benchmark: the cross-chip latency model fitted on every countable public Neural Engine timing, with each term's
uncertainty, leave-one-chip-out and leave-one-source-out errors, ANEForge's cost-model form for comparison, the
device-state band, and the predicted ANE request against the public GPU (MLX) curve on every chip that has one.

Reads experiments/ane_engineering/placement/public_latencies.json and the counts written by
benchmarks/latency_counts.py (evidence logic: experiments/ane_engineering/workflows/benchmarks/latency_fit.py).
Converts nothing; seconds. Predictions, not measurements.

    python benchmarks/latency_fit.py --output benchmarks/evidence/latency_fit.json

Refuses an existing output file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.latency_fit import COUNTS_PATH, fit_evidence  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    parser.add_argument("--counts", type=Path, default=COUNTS_PATH, help="latency_counts evidence (default: committed)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    evidence = fit_evidence(args.counts)
    for name in ("leave_one_chip_out", "leave_one_source_out"):
        summary = evidence[name]["summary"]["masked_bc1s"]
        print(f"{name}, masked BC1S: median |error| {summary['median_absolute_relative_error']:.1%}, worst "
              f"{summary['max_absolute_relative_error']:.1%} over {summary['points']} points", file=sys.stderr)
    write_evidence(output, evidence)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
