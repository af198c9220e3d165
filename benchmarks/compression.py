"""Evidence: compression that keeps its promise -- exact k-means weighted and not, grouped along both axes, beside
coremltools' own k-means, the mixed-bit walk, every candidate under the unchanged gates on the golden and a held-out
set (experiments/ane_engineering/workflows/compression_evidence.py says what each directory holds).

    nice python benchmarks/compression.py --set real-weights --output benchmarks/evidence/compression-minilm
    nice python benchmarks/compression.py --set builtin-tiny --output benchmarks/evidence/compression-builtin-tiny

Commit the JSON, Markdown and PNG files (the .mlpackage directories are large and regenerable). Refuses an existing
output; works in a staging sibling renamed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering import golden, probe, sweep  # noqa: E402
from experiments.ane_engineering.core.cli import run_main  # noqa: E402
from experiments.ane_engineering.workflows.compression_evidence import (  # noqa: E402
    BUILTIN_TINY,
    REAL_WEIGHTS,
    run_compression_evidence,
)

SETS = {"real-weights": REAL_WEIGHTS, "builtin-tiny": BUILTIN_TINY}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), required=True, help="which sources and families")
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    parser.add_argument("--bits", default="8,6,4", help="bit widths of the grid and the walk (default 8,6,4)")
    parser.add_argument("--group-sizes", default="32", help="group sizes of the grid (default 32)")
    parser.add_argument("--group-axes", default="input,output",
                        help="grouping axes of the exact grid; the first is the mixed-bit walk's "
                             "(default input,output)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel candidates")
    parser.add_argument("--executor", choices=("local", "ray"), default="local", help="where candidates run")
    args = parser.parse_args(argv)
    return run_compression_evidence(args.output, SETS[args.set], {"probe": probe.main, "golden": golden.main,
                                                                  "sweep": sweep.main},
                                    args.bits, args.group_sizes, args.jobs, args.executor, args.group_axes)


if __name__ == "__main__":
    sys.exit(run_main(main))
