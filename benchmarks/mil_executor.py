"""Benchmark: the `mil` executor against the BC1S torch FP32 forward, same package, same inputs, one run.

Both run alternately call by call in one process (so machine load hits both alike) on the full-size body; the
executor's own peak RSS is measured in a separate process that loads only the package. Goal: executor time at most
2x torch FP32, peak RSS at most 2 GB. The evidence logic is experiments/ane_engineering/workflows/benchmarks/
mil_executor.py.

    python benchmarks/mil_executor.py --package DIR --output benchmarks/evidence/mil_executor_mmbert_base_shape.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.mil_executor import (  # noqa: E402
    mil_executor_evidence,
    summary,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="probe export of the body (full size)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating executor/torch calls after one warm-up "
                        "(default: %(default)s)")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output, [args.package])
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        evidence = mil_executor_evidence(args.package, args.rounds, Path(scratch), output.parent)
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
