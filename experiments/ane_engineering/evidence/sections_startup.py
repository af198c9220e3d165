"""ANE_BENCHMARKS.md section of the `execute` command's start (benchmarks/evidence/execute_startup.json): fresh
processes of `python -c pass`, `execute --help`, `execute --describe` of a small package and that description with
the ML frameworks importable, medians of interleaved rounds. Every figure is a field of that file (ledger.py)."""

from __future__ import annotations

from .ledger import Evidence

FILE = "execute_startup.json"


def quietness(ev: Evidence) -> str:
    """Whether the run had the machine to itself: a one-minute load average below one per core, before and after
    (the build machines are shared; under load, wall times are not those of a quiet machine)."""
    load = ev.value("load_average_1_5_15")
    if max(load["before"][0], load["after"][0]) < ev.value("machine", "cpu_count"):
        return "below one per core, a quiet machine"
    return "the build machine was shared, so these are not the timings of a quiet machine"


def section_execute_startup(ev: Evidence) -> list[str]:
    from .report import harness_label, link

    load = ("load_average_1_5_15",)
    lines = ["### Start of the `execute` command", "",
             ("Wall time from spawn to exit of fresh processes on the machine the file names, and their CPU time "
              "(user + system), "
              f"{ev.fig('repeats', fmt='d')} rounds, every command once per round after one untimed warm-up. The "
              "command refuses the ML frameworks coremltools probes at import (torch, scikit-learn, transformers, "
              "...: `core/lean_imports.py`) and imports numba only when an array needs its kernels; the last row is "
              "the same description through the library, where coremltools imports them. The package is the "
              f"`builtin:tiny` body (content hash `{ev.value('package', 'content_hash')[:16]}`). "
              f"One-minute load average {ev.fig(*load, 'before', 0, fmt='.2f')} before and "
              f"{ev.fig(*load, 'after', 0, fmt='.2f')} after on {ev.fig('machine', 'cpu_count', fmt='d')} cores: "
              f"{quietness(ev)}. Evidence {link(ev)}, {harness_label(ev)}."), "",
             "| command | median s | min s | max s | median over `python -c pass` s | median CPU s |",
             "|---|---|---|---|---|---|"]
    for key in ev.value("commands"):
        at = ("commands", key)
        lines.append(f"| {ev.fig(*at, 'command')} | "
                     f"{ev.fig(*at, 'median_seconds', fmt='.2f')} | {ev.fig(*at, 'min_seconds', fmt='.2f')} | "
                     f"{ev.fig(*at, 'max_seconds', fmt='.2f')} | "
                     f"{ev.fig(*at, 'median_over_python_pass_seconds', fmt='.2f')} | "
                     f"{ev.fig(*at, 'median_cpu_seconds', fmt='.2f')} |")
    return lines + [""]


def sections(ledger, root) -> list[str]:
    """The startup section when its evidence file is present under `root` (benchmarks/evidence)."""
    path = root / FILE
    return section_execute_startup(ledger.open(path)) if path.is_file() else []
