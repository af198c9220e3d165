"""Running the harness's commands from tests, and the one check of a refusal.

In this process a command runs through run_main, as the shell would see it; in a fresh interpreter it imports this
checkout (PYTHONPATH names the repository these tests live in), wherever the checkout is and whatever the caller's
working directory. A refusal is exit status 2 with exactly one `error: ` line and no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from experiments.ane_engineering.core.cli import run_main

REPO = Path(__file__).resolve().parent.parent


def refused(main, argv: list, capsys, *needles: str, output: Path | None = None, alone: bool = False,
            max_chars: int | None = None) -> str:
    """Run `main(argv)` through run_main; it must exit 2 with one `error: ` line holding every needle and no
    traceback. With `output`, nothing may be left at that path or beside it; with `alone`, stderr holds nothing but
    that line; with `max_chars`, the line is shorter than that. Returns the error line."""
    before = set(output.parent.iterdir()) if output is not None else None
    status = run_main(main, argv)
    err = capsys.readouterr().err
    line = one_error_line(status, err)
    for needle in needles:
        assert needle in line, line
    assert not alone or not err.replace(line, "").strip(), err
    assert max_chars is None or len(line) < max_chars, line
    if output is not None:
        assert not output.exists() and set(output.parent.iterdir()) == before, sorted(output.parent.iterdir())
    return line


def one_error_line(status: int, stderr: str) -> str:
    """The single `error: ` line of a refusal (exit status 2, no traceback)."""
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert status == 2 and len(lines) == 1 and "Traceback" not in stderr, (status, stderr)
    return lines[0]


def command_env(base: dict | None = None, **overrides: str) -> dict[str, str]:
    """`base` (default os.environ) with this checkout first on PYTHONPATH, then `overrides`."""
    base = dict(os.environ if base is None else base)
    path = os.pathsep.join([str(REPO)] + ([base["PYTHONPATH"]] if base.get("PYTHONPATH") else []))
    return {**base, "PYTHONPATH": path, **overrides}


def python(*args, env: dict | None = None, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """`python *args` in a fresh interpreter importing this checkout; output captured as text."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env=command_env() if env is None else env, **kwargs)


def run_command(command: str, *args, **kwargs) -> subprocess.CompletedProcess:
    """`python -m experiments.ane_engineering.<command> *args` in a fresh interpreter (see python())."""
    return python("-m", f"experiments.ane_engineering.{command}", *args, **kwargs)


def refused_process(result: subprocess.CompletedProcess, *needles: str) -> str:
    """A finished command process refused: exit 2, one `error: ` line holding every needle, no traceback."""
    line = one_error_line(result.returncode, result.stderr)
    for needle in needles:
        assert needle in line, line
    return line
