"""Benchmark: the `execute` command's start, beside `python -c pass`.

Exports the builtin:tiny body at L96 with the probe, then times fresh processes of `python -c pass`, `execute
--help`, `execute --describe` of that package and the same description with the ML frameworks importable,
`--repeats` rounds, and writes their medians with every sample. The evidence logic is
experiments/ane_engineering/workflows/benchmarks/execute_startup.py.

    python benchmarks/execute_startup.py --output benchmarks/evidence/execute_startup.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence
from experiments.ane_engineering.core.staging import check_output
from experiments.ane_engineering.workflows.benchmarks.execute_startup import (
    LENGTH,
    check_repeats,
    startup_evidence,
    summary,
)
from experiments.ane_engineering.workflows.benchmarks.steps import (
    command_argv,
    run_command,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    parser.add_argument("--repeats", type=int, default=7, help="rounds of every command (default 7)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    check_repeats(args.repeats)  # before the export
    with tempfile.TemporaryDirectory() as scratch:
        package = Path(scratch) / "body"
        run_command(command_argv("probe", "--kind", "body", "--length", str(LENGTH), "--source", "builtin:tiny",
                                 "--output", str(package), "--quiet"), "exporting the builtin:tiny body")
        evidence = startup_evidence(package, args.repeats, progress=lambda line: print(line, flush=True))
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
