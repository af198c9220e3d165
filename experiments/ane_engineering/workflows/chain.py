"""A chain of stages run in order, each logged with its time and exit status: what `reproduce`, the compression
evidence and the real-weights evidence share. A failing stage stops the chain and says why; the log is the run's
record (reproduce.json, compression.json, real_weights.json)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from ..core import stop
from ..core.cli import UsageError, run_main
from ..core.errors import HarnessError
from ..core.staging import publish


class StageFailed(HarnessError):
    pass


class Chain:
    """Stages in order; `label` prefixes the progress lines (one when a stage starts, one when it ends)."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.log = total, label, []

    def stage(self, name: str, function, *args, **kwargs):
        index = len(self.log) + 1
        print(f"[{self.label} {index}/{self.total}] {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            value = function(*args, **kwargs)
        except Exception as error:  # the chain stops here and says why
            self.log.append({"stage": name, "status": "failed", "seconds": time.perf_counter() - started,
                             "error": f"{error.__class__.__name__}: {error}",
                             "traceback": traceback.format_exc(limit=8)})
            raise StageFailed(f"stage '{name}' failed: {error.__class__.__name__}: {error}") from error
        seconds = time.perf_counter() - started
        self.log.append({"stage": name, "status": "ok", "seconds": seconds})
        print(f"[{self.label} {index}/{self.total}] {name}: done in {seconds:.1f} s", file=sys.stderr, flush=True)
        return value

    def command(self, name: str, main, argv: list[str], expect_pass: bool = True) -> int:
        """One command's main() as a stage; exit 2 (refused) stops the chain, exit 1 (gates failed) is recorded in
        the log and stops it only when the stage must pass."""
        status = self.stage(name, run_command, main, argv, expect_pass)
        self.log[-1]["exit_status"] = status
        return status


def run_command(main, argv: list[str], expect_pass: bool = True) -> int:
    status = run_main(main, argv)  # nested: a stop request propagates out of it
    if status == 2 or (expect_pass and status != 0):
        raise StageFailed(f"{main.__module__} exited with status {status}")
    return status


def build_in_staging(output: Path, build, suffix: str) -> int:
    """Run `build(staging)` in a staging sibling of `output` (which check_output has already refused if it
    exists) and publish it as `output` when it completes: 0. A stage that fails keeps the partial evidence as
    `<output>.failed-<time>` for a look and returns 1; a crash keeps it too and propagates; a stop request
    (core/stop.py) removes it and propagates."""
    staging = output.parent / f".{output.name}.{suffix}-partial"
    if staging.exists():
        raise UsageError(f"{staging} exists (another run into {output}, or left from a crash); remove it")

    def keep_failed() -> Path:
        failed = output.parent / f"{output.name}.failed-{time.strftime('%Y%m%d-%H%M%S')}"
        os.rename(staging, failed)
        return failed

    with stop.scratch(lambda: (staging.mkdir(), staging)[1]):
        try:
            build(staging)
        except StageFailed as error:
            if stop.requested() is not None:
                raise stop.StopRequested(stop.requested()) from None
            print(f"error: {error}\nThe partial evidence is kept in {keep_failed()}.", file=sys.stderr)
            return 1
        except stop.StopRequested:
            raise
        except BaseException:
            keep_failed()
            raise
        publish(staging, output)
    return 0
