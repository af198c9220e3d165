"""ANE_BENCHMARKS.md section of coremltools' op suite run in offsets of a stride (benchmarks/evidence/
executor_conformance.json and _rest.json: the first offset; executor_conformance_offset<K>.json: the others;
executor_conformance_offset0_failures_rerun.json: the first offset's failed test functions run again): one row of
counts per file, then each later file's opsets, exclusions and failures. Every figure is a field of those files
(ledger.py); the offset and the macOS version a file's run reported are printed from it (files written before the
plugin took them record neither: they ran the first offset with the plugin's default version)."""

from __future__ import annotations

from .ledger import Evidence

FIRST_OFFSET_FILES = ("executor_conformance.json", "executor_conformance_rest.json")
RERUN_FILE = "executor_conformance_offset0_failures_rerun.json"  # the first offset's failed functions, run again
# each later offset, and the files its time budget left out when run again (_rest)
OFFSET_FILES = (RERUN_FILE, *(f"executor_conformance_offset{k}{rest}.json" for k in range(1, 8)
                              for rest in ("", "_rest", "_failures_rerun")))
COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not_sampled")


def _offset(ev: Evidence) -> str:
    selection = ev.value("selection")
    return ev.fig("selection", "sample_offset", fmt="d") if "sample_offset" in selection else "first"


def _macos(ev: Evidence) -> str:
    selection = ev.value("selection")
    return ev.fig("selection", "macos_version_reported") if "macos_version_reported" in selection else "default"


def _row(ev: Evidence, name: str) -> str:
    counts = " | ".join(ev.fig("total", key, fmt="d") for key in COUNTS)
    return (f"| `{name}` | {_offset(ev)} | {_macos(ev)} | {ev.fig('files', fmt='len')} of "
            f"{ev.fig('selection', 'files_requested', fmt='len')} | {counts} | {ev.fig('wall_seconds', fmt='.0f')} |")


def section_offset_detail(ev: Evidence, name: str) -> list[str]:
    from .report import harness_label, link

    lines = [f"#### `{name}`: offset {_offset(ev)} of every {ev.fig('selection', 'sample_every', fmt='d')}th case", "",
             *([(f"Only the test functions with a failed case in `{ev.value('selection', 'functions_failing_in')}`, "
                 "with its stride and offset: the same cases, run again by the executor of this file's harness."), ""]
               if ev.value("selection").get("functions_failing_in") else []),
             (f"macOS version reported to coremltools: {_macos(ev)}; wall time {ev.fig('wall_seconds', fmt='.0f')} s "
              f"(files run at once: {ev.fig('jobs', fmt='d')}). Evidence {link(ev)}, {harness_label(ev)}."), "",
             "| opset | passed | failed | skipped | xfailed | not sampled |", "|---|---|---|---|---|---|"]
    for opset in ev.value("per_opset"):
        row = ("per_opset", opset)
        lines.append(f"| `{opset}` | {ev.fig(*row, 'passed', fmt='d')} | {ev.fig(*row, 'failed', fmt='d')} | "
                     f"{ev.fig(*row, 'skipped', fmt='d')} | {ev.fig(*row, 'xfailed', fmt='d')} | "
                     f"{ev.fig(*row, 'not_sampled', fmt='d')} |")
    not_run = ev.value("selection", "files_not_run_budget")
    if not_run:
        lines += ["", "Not started within the time budget (not run at this offset): "
                  + ", ".join(f"`{file}`" for file in not_run) + "."]
    lines += ["", "Exclusions (skips), by reason:", ""]
    for i, exclusion in enumerate(ev.value("exclusions")):
        lines.append(f"- `{exclusion['reason']}`: {ev.fig('exclusions', i, 'cases', fmt='d')} cases")
    failures = ev.value("failures")
    lines += ["", f"Failures: {ev.fig('failures', fmt='len')}" + (":" if failures else ".")]
    if failures:
        lines.append("")
        lines += [f"- `{failure['case']}`: `{failure['reason'][:160]}`" for failure in failures]
    return lines + [""]


def sections(ledger, root) -> list[str]:
    """The offsets table and each later offset's detail, for the files present under `root` (benchmarks/evidence)."""
    present = [(name, ledger.open(root / name)) for name in FIRST_OFFSET_FILES + OFFSET_FILES
               if (root / name).is_file()]
    later = [(name, ev) for name, ev in present if name in OFFSET_FILES]
    if not later:
        return []
    lines = ["### coremltools' op suite by offset", "",
             ("The suite's cases are taken per test function in pytest's collection order; offset K of a stride N "
              "runs the cases at index K, K+N, K+2N ... (`--sample-offset`, `run/mil/coremltools_suite.py`), so the "
              "offsets of one stride together hold every case once. A case of another offset counts as not sampled "
              "here. With macOS `15.2` reported, coremltools' cases marked `Bug fixed in macOS 15.2` run "
              "as well. Files a run's time budget left out are listed under its offset."), "",
             ("| file | offset | macOS reported | files | passed | failed | errors | skipped | xfailed | xpassed | "
              "not sampled | wall s |"), "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(ev, name) for name, ev in present]
    lines.append("")
    for name, ev in later:
        lines += section_offset_detail(ev, name)
    return lines
