"""Benchmark: reweight against a full re-export, one run, full-size body (builtin:mmbert-base-shape).

A "fine-tuned" checkpoint of the same architecture (the base weights plus small noise) is written into a scratch
directory beside the output; the re-export and the reweight then run as commands in fresh processes and again in
one warm process, and the two resulting packages are compared by content hash. The goal is a speedup of at least
50x (in one process: convert + save against the median reweight). What is timed, and why, is described in
experiments/ane_engineering/workflows/benchmarks/reweight_vs_export.py, which holds the evidence logic.

    python benchmarks/reweight_vs_export.py --package DIR --output benchmarks/evidence/reweight_mmbert_base_shape.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.reweight_vs_export import (  # noqa: E402
    reweight_evidence,
    summary,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="probe export of the base checkpoint's body")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output, [args.package])
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        evidence = reweight_evidence(args.package, Path(scratch), output.parent,
                                     progress=lambda line: print(line, file=sys.stderr, flush=True))
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
