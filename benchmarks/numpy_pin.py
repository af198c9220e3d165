"""Benchmark: the `convert` extra's NumPy pin, checked in two environments of this checkout.

Converts tiny ordinary torch models with plain coremltools and makes the project's own exports (builtin:tiny bodies
at L96/L192/L1024, dense and windowed, and one W8 k-means group-32 palettize candidate) with each interpreter, then
records which environment converts which model and whether the exports' content hashes are equal. The evidence logic
is experiments/ane_engineering/workflows/benchmarks/numpy_pin.py.

    python benchmarks/numpy_pin.py --unpinned-python /path/to/venv-numpy-2.4/bin/python \\
        --pinned-python /path/to/venv-pinned/bin/python --output benchmarks/evidence/numpy_pin.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence
from experiments.ane_engineering.core.staging import check_output
from experiments.ane_engineering.workflows.benchmarks.numpy_pin import (
    numpy_pin_evidence,
    summary,
)
from experiments.ane_engineering.workflows.benchmarks.steps import BenchmarkError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--unpinned-python", required=True, type=Path,
                        help="interpreter of an environment outside the pin (e.g. NumPy 2.4)")
    parser.add_argument("--pinned-python", required=True, type=Path,
                        help="interpreter of an environment installed from pyproject.toml (the pin)")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    for python in (args.unpinned_python, args.pinned_python):
        if not python.is_file():
            raise BenchmarkError(f"no interpreter at {python}")
    with tempfile.TemporaryDirectory() as scratch:
        evidence = numpy_pin_evidence(args.unpinned_python, args.pinned_python, Path(scratch),
                                      progress=lambda line: print(line, flush=True))
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
