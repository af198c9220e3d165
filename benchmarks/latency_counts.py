"""Benchmark: count every program the public Neural Engine timings are counted as (the inputs of the cross-chip fit).

For each distinct `counted_as` of experiments/ane_engineering/placement/public_latencies.json (model, export kind,
layout), converts the export at three anchor lengths exactly as `probe` would (nothing written but the evidence) and
records its totals, L x L tensor-op bytes, attention blocks and static ANE regions (evidence logic:
experiments/ane_engineering/workflows/benchmarks/latency_counts.py). Converts full-size models with coremltools:
tens of minutes on two cores. Counts, not measurements.

    python benchmarks/latency_counts.py --output benchmarks/evidence/latency_counts.json

Refuses an existing output file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.latency_counts import counts_evidence  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    evidence = counts_evidence(progress=lambda line: print(line, file=sys.stderr, flush=True))
    for key, program in evidence["programs"].items():
        print(f"{key}: {program['anchors'][str(evidence['anchors'][0])]['totals']['non_constant_ops']} ops",
              file=sys.stderr)
    write_evidence(output, evidence)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
