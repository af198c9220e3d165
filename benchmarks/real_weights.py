"""Evidence: the whole chain on real pretrained weights (sentence-transformers/all-MiniLM-L6-v2), as embeddings and
under the built-in decision head. The evidence logic is experiments/ane_engineering/workflows/benchmarks/
real_weights.py (its docstring lists the stages).

    python benchmarks/real_weights.py --output benchmarks/evidence/real-weights-minilm

Refuses an existing output; works in a staging sibling renamed at the end (a failed run is kept as
<output>.failed-<time>). Commit the JSON, Markdown and PNG files (the .mlpackage directories are large and
regenerable).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering import benchmark, golden, probe, sweep, validate  # noqa: E402
from experiments.ane_engineering.core.cli import run_main  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.real_weights import real_weights_evidence  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel sweep candidates")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    commands = {"probe": probe.main, "golden": golden.main, "validate": validate.main, "sweep": sweep.main,
                "benchmark": benchmark.main}
    return real_weights_evidence(output, commands, args.jobs)


if __name__ == "__main__":
    sys.exit(run_main(main))
