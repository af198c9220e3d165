"""Benchmark: coremltools' op suite over every offset of one stride, from the per-offset evidence files.

Reads the evidence of benchmarks/executor_conformance.py for offsets 0 .. N-1 of one stride (and, after them, any
rerun of whole test files at one of those offsets, which replaces those files' counts), checks that the offsets
together ran every case of the suite exactly once, and writes one evidence file with each offset's counts, its
failures left and its exclusions, and the SHA256 of every input. The evidence logic is
experiments/ane_engineering/workflows/benchmarks/suite_offsets.py.

    python benchmarks/executor_conformance_offsets.py benchmarks/evidence/executor_conformance_offset{0,1,2,3}.json \\
        --output benchmarks/evidence/executor_conformance_offsets.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence
from experiments.ane_engineering.core.staging import check_output
from experiments.ane_engineering.workflows.benchmarks.suite_offsets import (
    assemble,
    summary,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("evidence", nargs="+", type=Path,
                        help="executor_conformance evidence files, one per offset, then any reruns of whole files")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    evidence = assemble(args.evidence)
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
