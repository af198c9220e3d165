"""Shared command-line plumbing: refusing existing outputs, atomic writes, clean errors."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

from . import stop
from .errors import HarnessError
from .staging import check_output, ordinary_permissions, publish


class UsageError(HarnessError):
    """A request the command refuses; printed without a traceback, exit status 2."""


@contextmanager
def atomic_file(path: Path, inputs: Iterable[Path | None] = ()):
    """Yield a temporary sibling path; publish it as `path` only if the block succeeds (and `path` is still free)."""
    path = check_output(path, inputs)
    stop.check()
    with stop.scratch(lambda: _temporary_sibling(path)) as temporary:  # removed at the end unless published
        ordinary_permissions(temporary, 0o666)
        yield temporary
        publish(temporary, path)


def _temporary_sibling(path: Path) -> str:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    return temporary


def write_evidence(path: Path, evidence: dict) -> None:
    """An evidence document as indented JSON, published atomically at `path` (refused if it exists)."""
    with atomic_file(path) as temporary:
        temporary.write_text(json.dumps(evidence, indent=1) + "\n", encoding="utf-8")


def run_main(main, argv=None) -> int:
    """Run a command's main(argv). A HarnessError (a deliberate refusal) or an OSError (a file the command cannot
    read or write) becomes one line on stderr and exit status 2; anything else is a bug and keeps its traceback.
    A stop request (SIGTERM, SIGINT) ends it with 128 + signal number and nothing published, whatever it was doing
    and whatever exception the stop turned into on its way out (core/stop.py)."""
    with stop.command() as finish:
        try:
            try:
                status = main(argv) or 0
            except (HarnessError, OSError) as error:
                if stop.requested() is None:
                    print(f"error: {error}", file=sys.stderr)
                status = 2
            except stop.StopRequested:
                raise
            except BaseException:
                if stop.requested() is None:
                    raise  # a bug (or argparse's own exit): as it is
                status = None  # e.g. a library that turned the stop into an error of its own
        except stop.StopRequested:  # also one that arrived while an error was being reported
            status = None
        return finish(status)
