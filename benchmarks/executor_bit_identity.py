"""Evidence: restructuring the `mil` executor changed no output bit.

Re-exports the committed builtin:tiny reproduce run's packages (body L96, L192, L1024 and palettized L96 candidates),
checks each against the committed manifest's content hash, then runs `validate --backend mil` on them with the
executor of a reference commit and with that of the restructured commit (both extracted with `git archive`), every
executor call hashed, and compares the two runs field by field. The evidence logic is
experiments/ane_engineering/workflows/benchmarks/executor_bit_identity.py.

    python benchmarks/executor_bit_identity.py --work /tmp/bit-identity \\
        --output benchmarks/evidence/executor_bit_identity.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.executor_bit_identity import (  # noqa: E402
    bit_identity_evidence,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", default="48ff4e9", help="commit whose executor is the reference (default: "
                        "main before the split of the executor's ops module)")
    parser.add_argument("--restructured", default="HEAD", help="commit whose executor is compared (default HEAD)")
    parser.add_argument("--work", required=True, type=Path, help="new scratch directory (packages, trees, "
                        "validation files)")
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    parser.add_argument("--packages-from", type=Path, help="--work of an earlier run: reuse its exported packages")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    work = check_output(args.work)
    evidence = bit_identity_evidence(args.reference, args.restructured, work, args.packages_from,
                                     progress=lambda line: print(line, file=sys.stderr, flush=True))
    write_evidence(output, evidence)
    print(f"{output}: identical={evidence['identical']}")
    return 0 if evidence["identical"] else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
