"""`python -m experiments.ane_engineering.op_table --write | --check`: docs/EXECUTOR_OPS.md, the mil executor's
op x opset conformance table, generated from its registry (run/mil/op_table.py).
"""

from __future__ import annotations

import argparse
import sys

from .core.cli import run_main
from .core.staging import replace_text
from .run.mil.op_table import DOC, render


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.op_table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help=f"write {DOC.name}")
    action.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is stale: run python -m experiments.ane_engineering.op_table --write", file=sys.stderr)
            return 1
        return 0
    DOC.parent.mkdir(exist_ok=True)
    replace_text(DOC, text)
    print(f"{DOC}: written")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
