"""Benchmark: coremltools' k-means against the project's exact k-means, W8/W6/W4, on one full-size body, one run.

Each palettization runs in a fresh process, back to back, so time and peak RSS are each process's own; then every
group's squared error against the FP16 weights is compared. Goal: ours at most 1/10 of coremltools' time at W8,
with per-group SSE no worse (ties allowed). The evidence logic is experiments/ane_engineering/workflows/benchmarks/
palettize_kmeans.py.

    python benchmarks/palettize_kmeans.py --package DIR \
        --output benchmarks/evidence/palettize_kmeans_mmbert_base_shape.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.arguments import comma_list, integer  # noqa: E402
from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.palettize_kmeans import (  # noqa: E402
    palettize_kmeans_evidence,
    summary,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="FP16 probe export of the full-size body")
    parser.add_argument("--bits", default="8,6,4", type=comma_list("--bits", integer("--bits"), (8, 6, 4)),
                        help="comma-separated bit widths (default %(default)s)")
    parser.add_argument("--workers", type=integer("--workers", 1), default=2, help="k-means workers (default 2)")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output, [args.package])
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        evidence = palettize_kmeans_evidence(args.package, args.bits, args.workers, Path(scratch), output.parent)
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
