"""Render ANE_BENCHMARKS.md from evidence JSON: no hand-typed numbers.

Every figure is printed from a field of an evidence file, and every section links the file it came from with
its SHA256 and the hashes that file records (package, source weights, harness). tests/test_render.py checks that
each number in a rendered report appears in the evidence files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _link(root: Path, path: Path) -> str:
    relative = path.relative_to(root).as_posix()
    return f"[{relative}]({relative}) (sha256 `{_sha(path)[:16]}`)"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _num(value, digits: int = 5) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def section_probe(root: Path) -> list[str]:
    probes = sorted(root.glob("packages/*/probe.json"), key=lambda p: json.loads(p.read_text())["length"])
    if not probes:
        return []
    lines = ["## Export and placement (probe)", "",
             "Static ANE rules are a prediction (no Core ML compute plan runs off macOS); the layout check compares "
             "the BC1S model with the reference in FP32.", "",
             "| bucket | non-constant ops | static violations | warnings | layout max abs | convert (s) | evidence |",
             "|---|---|---|---|---|---|---|"]
    for path in probes:
        probe = json.loads(path.read_text())
        static = probe["placement"]["static"]
        lines.append(f"| {probe['length']} | {probe['mil_ops']['non_constant']} | {static['violations']} | "
                     f"{static['warnings']} | {_num(probe['layout_check']['max_abs'], 3)} | "
                     f"{probe['export']['convert_seconds']:.1f} | {_link(root, path)} |")
    first = json.loads(probes[0].read_text())
    lines += ["", f"Source weights `{first['source']['weights_sha256'][:16]}`, harness `{first['harness']['sha256'][:16]}`.", ""]
    return lines


def section_validation(root: Path) -> list[str]:
    path = root / "validation.json"
    report = _load(path)
    if report is None:
        return []
    gate = report["gates"]["probability_error_max"]
    lines = ["## Validation against FP32 golden outputs", "",
             f"Backend `{report['backend']['backend']}` ({report['backend'].get('mode', '-')}); gate: every argmax "
             f"matches, probability errors <= {gate}, finite, token usage unchanged, "
             f"{report['gates']['repeats']} repeated calls identical. Evidence: {_link(root, path)}; passed: "
             f"**{report['passed']}**.", "",
             "| bucket | passed / evaluated | skipped (unvalidated) | max calibrated err | max action prob err | "
             "max option-logit err | max action-logit err | repeats identical |",
             "|---|---|---|---|---|---|---|---|"]
    for length, summary in report["summary"].items():
        lines.append(f"| {length} | {summary['passed_questions']}/{summary['evaluated']} | {len(summary['skipped'])} | "
                     f"{_num(summary['max_calibrated_error'])} | {_num(summary['max_action_probability_error'])} | "
                     f"{_num(summary['max_option_logit_error'])} | {_num(summary['max_action_logit_error'])} | "
                     f"{summary['repeats']['identical']} |")
    if report.get("cross_bucket"):
        cross = report["cross_bucket"]
        lines += ["", f"Cross-bucket consistency: {cross['questions_in_several_buckets']} questions fit several "
                      f"buckets, {len(cross['disagreements'])} disagreements."]
    return lines + [""]


def section_sweep(root: Path) -> list[str]:
    path = root / "sweep" / "sweep.json"
    if not path.is_file():
        return []
    from ..palettize.sweep_report import markdown_table

    sweep = json.loads(path.read_text())
    table = markdown_table(sweep, evidence_name=path.relative_to(root).as_posix())
    png = root / "sweep" / "sweep.png"
    lines = ["## Palettization sweep", "", f"Evidence: {_link(root, path)}.", "", table]
    if png.is_file():
        lines += [f"![size against error]({png.relative_to(root).as_posix()})", ""]
    return lines


def section_benchmarks(root: Path) -> list[str]:
    files = sorted((root / "benchmarks").glob("*.json")) if (root / "benchmarks").is_dir() else []
    if not files:
        return []
    lines = ["## Timings", "",
             "Measured on the backend named in each row. The `mil` backend is the project's numpy executor on the "
             "build machine's CPU, not the Neural Engine: its timings show relative cost only. The cost-model floor "
             "is the predicted minimum on the named chip's Neural Engine.", "",
             "| evidence | bucket | backend | load (s) | body p50 / p95 (ms) | full path p50 / p95 (ms) | request | "
             "floor M3 Max (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    pairs = []
    for path in files:
        bench = json.loads(path.read_text())
        comp, full = bench["component"]["timing"], bench["full_path"]["timing"]
        floor = floor_ms(bench.get("cost_model"), "M3 Max")
        lines.append(f"| {_link(root, path)} | {bench['length']} | {bench['backend']['backend']} | "
                     f"{bench['package']['load_seconds']:.3f} | {_ms(comp['p50_ms'])} / {_ms(comp['p95_ms'])} | "
                     f"{_ms(full['p50_ms'])} / {_ms(full['p95_ms'])} | {bench['full_path']['question']} "
                     f"({bench['full_path']['tokens']} tokens) | {_ms(floor)} |")
        if "vs" in bench:
            pairs.append((path, bench))
    for path, bench in pairs:
        vs = bench["vs"]
        second = (vs["second"].get("compression") or {})
        lines += ["", f"Paired in one process ({_link(root, path)}): second candidate "
                      f"W{second.get('bits', '-')} {second.get('mode', '-')} group {second.get('group_size', '-')} "
                      f"over the FP16 package, per-pair time ratio p50 {vs['component']['ratio']['p50']:.3f} "
                      f"(p05 {vs['component']['ratio']['p05']:.3f}, p95 {vs['component']['ratio']['p95']:.3f}) for "
                      f"the body and {vs['full_path']['ratio']['p50']:.3f} for the full path."]
    return lines + [""]


def floor_ms(cost: dict | None, chip: str) -> float | None:
    """The cost model's strict latency floor on `chip` (a prediction, shown beside measurements)."""
    if not cost or chip not in cost.get("floors", {}):
        return None
    return cost["floors"][chip]["floor_ms"]


def section_range(root: Path) -> list[str]:
    path = root / "fp16_range.json"
    report = _load(path)
    if report is None:
        return []
    from .fp16_range import summary_lines

    return ["## FP16 range", "", f"Evidence: {_link(root, path)}.", "", *summary_lines(report), ""]


def render_directory(root: Path, title: str = "ANE benchmarks") -> str:
    """The report for one reproduce directory (or any directory laid out the same way)."""
    root = Path(root)
    header = [f"# {title}", "",
              "Rendered from the evidence JSON files linked in each section; nothing here is typed by hand. "
              "Regenerate with `python -m experiments.ane_engineering.reproduce`.", ""]
    body = section_probe(root) + section_validation(root) + section_sweep(root) + section_benchmarks(root) \
        + section_range(root)
    return "\n".join(header + body).rstrip() + "\n"
