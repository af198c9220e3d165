"""What every benchmark shares: its refusal type, and running one harness command in a fresh process.

A fresh process imports the same checkout as the benchmark (PYTHONPATH names it first), so the harness fingerprint
the evidence records is that of the code that ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ...core.errors import HarnessError
from ...core.provenance import REPOSITORY_ROOT


class BenchmarkError(HarnessError):
    """A benchmark cannot run or a step of it failed; printed as one line, exit status 2."""


def checkout_env(root: Path = REPOSITORY_ROOT) -> dict[str, str]:
    """os.environ with `root` (a checkout holding experiments/) first on PYTHONPATH."""
    path = [str(root)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def last_error_line(stderr: str) -> str:
    """The child's `error: ` line if it printed one, else its last line: what the one-line refusal quotes."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    return (errors or lines or ["(no output)"])[-1]


def run_command(argv: list[str], what: str, *, ok: tuple[int, ...] = (0,), root: Path = REPOSITORY_ROOT,
                cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """`python *argv` in a fresh process importing `root`; (the finished process, wall seconds). An exit status
    outside `ok` is a BenchmarkError naming `what` and the child's error line."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=checkout_env(root), cwd=cwd)
    seconds = time.perf_counter() - started
    if done.returncode not in ok:
        raise BenchmarkError(f"{what} failed (exit {done.returncode}): {last_error_line(done.stderr)}")
    return done, seconds


def command_argv(command: str, *args: str) -> list[str]:
    """The argv of `python -m experiments.ane_engineering.<command> *args` (after the interpreter)."""
    return ["-m", f"experiments.ane_engineering.{command}", *args]


def parse_lengths(text: str) -> list[int]:
    """A comma-separated list of positive bucket lengths ("96,1024"), refused in one line otherwise."""
    try:
        lengths = [int(item) for item in text.split(",")]
    except ValueError:
        raise BenchmarkError(f"--lengths must be comma-separated integers, got {text!r}") from None
    if not lengths or any(n <= 0 for n in lengths) or len(set(lengths)) != len(lengths):
        raise BenchmarkError(f"--lengths must be distinct positive integers, got {text!r}")
    return lengths
