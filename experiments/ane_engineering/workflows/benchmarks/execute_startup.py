"""Benchmark evidence: how long the `execute` command takes to start, beside an empty Python process.

Commands, each a fresh process, timed wall clock from spawn to exit, repeated `repeats` times in rounds (every
command once per round, in the same order), so a change of the machine's load falls on all of them alike:
- `python -c pass`: the interpreter alone, the floor under any command;
- `execute --help`;
- `execute --describe` of a small package (the builtin:tiny body at L96, exported by the probe first);
- the same description with the ML frameworks importable (the command's library called directly, as a user's
  process would, without the command's `refuse_frameworks`): what importing torch & co. through coremltools costs.
The evidence records every sample (wall time, and CPU time: user + system of the process and its children) and their
medians, min and max, the machine's load average before and after (the build machines are shared: wall times under
load are not those of a quiet machine; CPU time is what a quiet machine's wall time approaches for these
single-threaded starts), the package's content hash and the harness that ran.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ...core.provenance import harness_fingerprint, machine, tool_versions
from .steps import BenchmarkError, checkout_env, command_argv, last_error_line

FORMAT = "ane-engineering/evidence/execute-startup/1"
LENGTH = 96
# The description through the library, in a process where torch & co. may be imported (what the command avoids).
LIBRARY_DESCRIBE = ("import sys; from experiments.ane_engineering.core.cli import run_main; "
                    "from experiments.ane_engineering.execute import main; sys.exit(run_main(main, sys.argv[1:]))")


def commands(package: Path) -> list[tuple[str, str, list[str]]]:
    """(key, what it is, argv after the interpreter) of every timed command."""
    describe = ["--package", str(package), "--describe"]
    return [
        ("python_pass", "python -c pass", ["-c", "pass"]),
        ("execute_help", "execute --help", command_argv("execute", "--help")),
        ("execute_describe", "execute --describe (builtin:tiny body, L96)", command_argv("execute", *describe)),
        ("describe_frameworks_importable", "the same description through the library, torch & co. importable",
         ["-c", LIBRARY_DESCRIBE, *describe]),
    ]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str], what: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the process and its children) of one run of `argv`."""
    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=checkout_env(), check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise BenchmarkError(f"{what} failed (exit {done.returncode}): {last_error_line(done.stderr)}")
    return seconds, _children_cpu() - cpu


def summary_of(samples: list[tuple[float, float]]) -> dict:
    wall, cpu = [s[0] for s in samples], [s[1] for s in samples]
    return {"median_seconds": round(statistics.median(wall), 3), "min_seconds": round(min(wall), 3),
            "max_seconds": round(max(wall), 3), "median_cpu_seconds": round(statistics.median(cpu), 3),
            "samples_seconds": [round(s, 3) for s in wall], "samples_cpu_seconds": [round(s, 3) for s in cpu]}


def check_repeats(repeats: int) -> int:
    if repeats < 1:
        raise BenchmarkError(f"--repeats must be at least 1, got {repeats}")
    return repeats


def startup_evidence(package_dir: Path, repeats: int, progress: Callable[[str], None] = lambda line: None) -> dict:
    """Time every command `repeats` times on the exported package directory `package_dir` (its manifest names the
    package's content hash)."""
    check_repeats(repeats)
    manifest = json.loads((package_dir / "manifest.json").read_text(encoding="utf-8"))
    harness = harness_fingerprint()
    timed = commands(package_dir)
    for key, what, argv in timed:  # one untimed warm-up each: file caches and numba's cache as a user meets them
        time_once(argv, what)
    load_before = os.getloadavg()
    samples: dict[str, list[tuple[float, float]]] = {key: [] for key, _, _ in timed}
    for round_index in range(repeats):
        for key, what, argv in timed:
            samples[key].append(time_once(argv, what))
        progress(f"round {round_index + 1}/{repeats}: " + ", ".join(f"{k} {v[-1][0]:.2f} s (CPU {v[-1][1]:.2f} s)"
                                                                    for k, v in samples.items()))
    load_after = os.getloadavg()
    rows = {key: {"command": what, **summary_of(samples[key])} for key, what, _ in timed}
    floor = rows["python_pass"]["median_seconds"]
    for row in rows.values():
        row["median_over_python_pass_seconds"] = round(row["median_seconds"] - floor, 3)
    return {
        "format": FORMAT,
        "benchmark": "wall and CPU time from spawn to exit of fresh processes: python -c pass, execute --help, execute "
                     "--describe of a small package, and that description with the ML frameworks importable",
        "package": {"source": "builtin:tiny", "kind": manifest.get("kind"), "length": manifest.get("length"),
                    "content_hash": manifest["package"]["content_hash"]["sha256"],
                    "manifest_sha256": manifest.get("manifest_sha256")},
        "repeats": repeats,
        "order": "rounds: every command once per round, in the order listed, after one untimed warm-up each",
        "commands": rows,
        "load_average_1_5_15": {"before": [round(x, 2) for x in load_before],
                                "after": [round(x, 2) for x in load_after]},
        "machine": machine(), "tools": tool_versions(), "harness": harness,
    }


def summary(evidence: dict) -> str:
    return "; ".join(f"{row['command']}: median {row['median_seconds']:.2f} s"
                     for row in evidence["commands"].values())
