"""ANE_BENCHMARKS.md section of coremltools' op suite run in every offset of one stride: the assembly
(benchmarks/evidence/executor_conformance_offsets.json: each offset's counts, the coverage check, the failures left)
and, for each of its inputs (executor_conformance_offset<K>.json, and any rerun of whole test files), its opsets,
exclusions and failures. Every figure is a field of those files (ledger.py)."""

from __future__ import annotations

from .ledger import Evidence

ASSEMBLY = "executor_conformance_offsets.json"
COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def _tensorflow(ev: Evidence) -> str:
    """Whether coremltools could run its TensorFlow-referenced cases (recorded by runs since the field exists)."""
    if "suite_dependencies" not in ev.data:
        return ""
    if ev.value("suite_dependencies", "tensorflow") is None:
        return "; TensorFlow not installed (coremltools skips the cases it computes expected values with)"
    return (f"; TensorFlow {ev.fig('suite_dependencies', 'tensorflow')} installed (coremltools computes some cases' "
            "expected values with it)")


def section_source_detail(ev: Evidence, name: str) -> list[str]:
    from .report import harness_label, link

    lines = [f"#### `{name}`: offset {ev.fig('selection', 'sample_offset', fmt='d')} of every "
             f"{ev.fig('selection', 'sample_every', fmt='d')}th case", "",
             (f"Test files run: {ev.fig('files', fmt='len')}; macOS version reported to coremltools: "
              f"{ev.fig('selection', 'macos_version_reported')}; wall time {ev.fig('wall_seconds', fmt='.0f')} s "
              f"(files run at once: {ev.fig('jobs', fmt='d')}){_tensorflow(ev)}. Evidence {link(ev)}, "
              f"{harness_label(ev)}."), "",
             "| opset | passed | failed | skipped | xfailed | not sampled |", "|---|---|---|---|---|---|"]
    for opset in ev.value("per_opset"):
        row = ("per_opset", opset)
        lines.append(f"| `{opset}` | {ev.fig(*row, 'passed', fmt='d')} | {ev.fig(*row, 'failed', fmt='d')} | "
                     f"{ev.fig(*row, 'skipped', fmt='d')} | {ev.fig(*row, 'xfailed', fmt='d')} | "
                     f"{ev.fig(*row, 'not_sampled', fmt='d')} |")
    lines += ["", "Exclusions (skips), by reason:", ""]
    for i, exclusion in enumerate(ev.value("exclusions")):
        lines.append(f"- `{exclusion['reason']}`: {ev.fig('exclusions', i, 'cases', fmt='d')} cases")
    failures = ev.value("failures")
    lines += ["", f"Failures: {ev.fig('failures', fmt='len')}" + (":" if failures else ".")]
    if failures:
        lines.append("")
        lines += [f"- `{failure['case']}`: `{failure['reason'][:160]}`" for failure in failures]
    return lines + [""]


def section_assembly(ev: Evidence) -> list[str]:
    from .report import harness_label, link

    offsets = list(ev.value("offsets"))
    lines = ["### coremltools' op suite through the mil executor: every case, in offsets", "",
             ("coremltools ships its op tests (`ops/tests/iOS14`..`iOS18`); on Linux they skip the prediction. The "
              "plugin `run/mil/coremltools_suite.py` answers it with the executor (stateful and picture cases through "
              "the predict shim) and keeps coremltools' own expected outputs and tolerances. The cases are taken per "
              "test function in pytest's collection order; offset K of a stride N runs the cases at index K, K+N, "
              f"K+2N ... (`--sample-offset`). Stride {ev.fig('stride', fmt='d')}, macOS "
              f"{ev.fig('macos_version_reported')} reported to coremltools (its cases marked `Bug fixed in macOS "
              "15.2` run). The backends are coremltools' defaults: ML programs in FP16 for iOS15..iOS18 and "
              "neuralnetwork FP32, which the plugin skips (not an ML program); coremltools collects its FP32 ML "
              "program cases only with `INCLUDE_MIL_FP32_UNIT_TESTS=1`, which these runs do not set."), "",
             (f"Coverage, checked when the offsets were assembled: {ev.fig('coverage', 'cases', fmt='d')} cases of "
              f"{ev.fig('coverage', 'test_files', fmt='d')} test files, each collected alike at every offset and "
              f"run at exactly one ({ev.fig('coverage', 'cases_run', fmt='d')} run). Unexplained failures (failed "
              f"or error; the explained cases are the exclusions, skips with a reason): "
              f"{ev.fig('unexplained_failures', fmt='d')}. Evidence {link(ev)}, {harness_label(ev)}."), "",
             "| offset | passed | failed | errors | skipped | xfailed | xpassed | unexplained failures |",
             "|---|---|---|---|---|---|---|---|"]
    for k in offsets:
        counts = " | ".join(ev.fig("offsets", k, "total", key, fmt="d") for key in COUNTS)
        lines.append(f"| {ev.fig('offsets', k, 'sample_offset', fmt='d')} | {counts} | "
                     f"{ev.fig('offsets', k, 'unexplained_failures', fmt='d')} |")
    lines.append("| all | " + " | ".join(ev.fig("total", key, fmt="d") for key in COUNTS) +
                 f" | {ev.fig('unexplained_failures', fmt='d')} |")
    reasons = sorted({reason for k in offsets for reason in ev.value("offsets", k, "exclusions")})
    lines += ["", "Exclusions (skips) by reason and offset:", "",
              "| reason | " + " | ".join(f"offset {ev.fig('offsets', k, 'sample_offset', fmt='d')}" for k in offsets)
              + " |",
              "|---|" + "---|" * len(offsets)]
    for reason in reasons:
        cells = [ev.fig("offsets", k, "exclusions", reason, fmt="d")
                 if reason in ev.value("offsets", k, "exclusions") else "-" for k in offsets]
        lines.append(f"| `{reason[:150]}` | " + " | ".join(cells) + " |")
    left = [(k, i) for k in offsets for i, _ in enumerate(ev.value("offsets", k, "failures"))]
    if left:
        lines += ["", "Failures left:", ""]
        lines += [f"- offset {ev.fig('offsets', k, 'sample_offset', fmt='d')}: "
                  f"`{ev.value('offsets', k, 'failures', i, 'case')}`: "
                  f"`{ev.value('offsets', k, 'failures', i, 'reason')[:160]}`" for k, i in left]
    sources = ev.value("sources")
    reruns = [s for i, s in enumerate(sources) if any(t["sample_offset"] == s["sample_offset"] for t in sources[:i])]
    if reruns:
        lines += ["", "Test files run again after a fix (their counts replace the first run's at that offset): "
                  + "; ".join(f"`{s['file']}`" for s in reruns) + "."]
    return lines + [""]


def sections(ledger, root) -> list[str]:
    """The assembly and each of its inputs' detail, when the assembly is present under `root`."""
    path = root / ASSEMBLY
    if not path.is_file():
        return []
    ev = ledger.open(path)
    lines = section_assembly(ev)
    for source in ev.value("sources"):
        source_path = root / source["file"]
        if source_path.is_file():
            lines += section_source_detail(ledger.open(source_path), source["file"])
        else:
            lines += [f"(input `{source['file']}` of the assembly is missing)", ""]
    return lines
