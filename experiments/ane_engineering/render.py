"""`python -m experiments.ane_engineering.render`: render the repository's ANE_BENCHMARKS.md (and the committed
reproduce run's) from committed evidence (evidence/render.py); `--check` re-reads every printed figure from the file
and JSON path it was rendered from and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .core.cli import UsageError, run_main
from .core.staging import replace_text
from .evidence.ledger import check_report
from .evidence.render import EVIDENCE_DIR, REPOSITORY, reports


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.render",
                                     description="Render the repository's ANE_BENCHMARKS.md (and the committed "
                                                 "reproduce run's) from committed evidence.")
    parser.add_argument("--repo", type=Path, default=REPOSITORY)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a report differs from a fresh render, or if any figure in it is not the "
                             "field of the evidence file it was rendered from")
    args = parser.parse_args(argv)
    if not (args.repo / EVIDENCE_DIR).is_dir():
        raise UsageError(f"--repo {args.repo}: no {EVIDENCE_DIR}/ directory there; give the repository's root")
    problems = []
    for target, root, rendered in reports(args.repo):
        if not args.check:
            replace_text(target, rendered.text)
            print(f"wrote {target} ({len(rendered.figures)} figures)")
            continue
        committed = target.read_text(encoding="utf-8") if target.is_file() else ""
        if committed != rendered.text:
            problems.append(f"{target} differs from a fresh render: run {parser.prog}")
        problems += [f"{target}: {problem}" for problem in check_report(committed, rendered.figures, root)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(run_main(main))
