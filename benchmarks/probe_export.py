"""Benchmark: full-size (builtin:mmbert-base-shape) body exports at L96 and L1024 -- conversion time and peak RSS.

Each export runs in a fresh process (`python -m experiments.ane_engineering.probe`), so its peak RSS is its own;
the figures come from that run's probe.json. Writes one evidence JSON (with the hashes of what produced it).
Goal on a 2-core machine: each conversion at most 20 s and 3 GB. The evidence logic is
experiments/ane_engineering/workflows/benchmarks/probe_export.py.

    python benchmarks/probe_export.py --output artifacts/bench/probe_export.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.probe_export import probe_export_evidence  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.steps import parse_lengths  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="builtin:mmbert-base-shape", help="checkpoint to export (default: "
                        "%(default)s)")
    parser.add_argument("--lengths", default="96,1024", help="comma-separated bucket lengths (default: %(default)s)")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    args = parser.parse_args(argv)
    lengths = parse_lengths(args.lengths)
    output = check_output(args.output)
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        evidence = probe_export_evidence(args.source, lengths, Path(scratch),
                                         progress=lambda line: print(line, file=sys.stderr, flush=True))
    write_evidence(output, evidence)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
