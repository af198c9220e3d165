"""Shared command-line plumbing: refusing existing outputs, atomic writes, clean errors."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

from .errors import HarnessError
from .staging import check_output, ordinary_permissions, publish


class UsageError(HarnessError):
    """A request the command refuses; printed without a traceback, exit status 2."""


@contextmanager
def atomic_file(path: Path, inputs: Iterable[Path | None] = ()):
    """Yield a temporary sibling path; publish it as `path` only if the block succeeds (and `path` is still free)."""
    path = check_output(path, inputs)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    temporary = Path(temporary)
    ordinary_permissions(temporary, 0o666)
    try:
        yield temporary
        publish(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_evidence(path: Path, evidence: dict) -> None:
    """An evidence document as indented JSON, published atomically at `path` (refused if it exists)."""
    with atomic_file(path) as temporary:
        temporary.write_text(json.dumps(evidence, indent=1) + "\n", encoding="utf-8")


def run_main(main, argv=None) -> int:
    """Run a command's main(argv). A HarnessError (a deliberate refusal) or an OSError (a file the command cannot
    read or write) becomes one line on stderr and exit status 2; anything else is a bug and keeps its traceback."""
    # SIGTERM becomes SystemExit so `finally` blocks run and staging directories are removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        return main(argv) or 0
    except (HarnessError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
