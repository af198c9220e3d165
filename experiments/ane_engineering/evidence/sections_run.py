"""ANE_BENCHMARKS.md sections of one reproduce-run directory (probe, validation, sweep, benchmarks, FP16 range):
each `section_x(ledger, root)` returns its lines, or [] when its evidence file is absent."""

from __future__ import annotations

from pathlib import Path

from ..core import reference_run
from ..placement.chips import chip_key
from .ledger import Ledger
from .report import link, open_if_present


def section_probe(ledger: Ledger, root: Path) -> list[str]:
    probes = sorted((ledger.open(p) for p in root.glob("packages/*/probe.json")), key=lambda ev: ev.value("length"))
    if not probes:
        return []
    lines = ["## Export and placement (probe)", "",
             ("Static ANE rules are a prediction (no Core ML compute plan runs off macOS); the layout check compares "
             "the BC1S model with the reference in FP32."), "",
             "| bucket | non-constant ops | static violations | warnings | layout max abs | convert (s) | evidence |",
             "|---|---|---|---|---|---|---|"]
    for ev in probes:
        lines.append(f"| {ev.fig('length', fmt='d')} | {ev.fig('mil_ops', 'non_constant', fmt='d')} | "
                     f"{ev.fig('placement', 'static', 'violations', fmt='d')} | "
                     f"{ev.fig('placement', 'static', 'warnings', fmt='d')} | "
                     f"{ev.fig('layout_check', 'max_abs', fmt='num3')} | "
                     f"{ev.fig('export', 'convert_seconds', fmt='.1f')} | {link(ev)} |")
    first = probes[0]
    lines += ["", (f"Source weights `{first.value('source', 'weights_sha256')[:16]}`, harness "
                  f"`{first.value('harness', 'sha256')[:16]}`."), ""]
    return lines


def section_validation(ledger: Ledger, root: Path) -> list[str]:
    ev = open_if_present(ledger, root / "validation.json")
    if ev is None:
        return []
    mode = ev.fig("backend", "mode") if "mode" in ev.value("backend") else "-"
    lines = ["## Validation against FP32 golden outputs", "",
             (f"Backend `{ev.value('backend', 'backend')}` ({mode}); gate: every argmax matches, probability errors <= "
             f"{ev.fig('gates', 'probability_error_max')}, finite, token usage unchanged, "
             f"{ev.fig('gates', 'repeats', fmt='d')} repeated calls identical. Evidence: {link(ev)}; passed: "
             f"**{ev.value('passed')}**."), "",
             ("| bucket | passed / evaluated | skipped (unvalidated) | max calibrated err | max action prob err | "
             "max option-logit err | max action-logit err | repeats identical |"),
             "|---|---|---|---|---|---|---|---|"]
    for length in ev.value("summary"):
        row = ("summary", length)
        lines.append(f"| {ev.fig(*row, 'length', fmt='d')} | "
                     f"{ev.fig(*row, 'passed_questions', fmt='d')}/{ev.fig(*row, 'evaluated', fmt='d')} | "
                     f"{ev.fig(*row, 'skipped', fmt='len')} | {ev.fig(*row, 'max_calibrated_error', fmt='num5')} | "
                     f"{ev.fig(*row, 'max_action_probability_error', fmt='num5')} | "
                     f"{ev.fig(*row, 'max_option_logit_error', fmt='num5')} | "
                     f"{ev.fig(*row, 'max_action_logit_error', fmt='num5')} | "
                     f"{ev.value(*row, 'repeats', 'identical')} |")
    if ev.value("cross_bucket"):
        lines += ["", (f"Cross-bucket consistency: {ev.fig('cross_bucket', 'questions_in_several_buckets', fmt='d')} "
                      f"questions fit several buckets, {ev.fig('cross_bucket', 'disagreements', fmt='len')} "
                      "disagreements.")]
    return lines + [""]


def section_sweep(ledger: Ledger, root: Path) -> list[str]:
    ev = open_if_present(ledger, root / "sweep" / "sweep.json")
    if ev is None:
        return []
    from .sweep_report import markdown_table

    table = markdown_table(ev, evidence_name=ev.path.relative_to(root).as_posix())
    png = root / "sweep" / "sweep.png"
    lines = ["## Palettization sweep", "", f"Evidence: {link(ev)}.", "", table]
    if png.is_file():
        lines += [f"![size against error]({png.resolve().relative_to(ledger.root).as_posix()})", ""]
    return lines


def section_benchmarks(ledger: Ledger, root: Path) -> list[str]:
    files = sorted((root / "benchmarks").glob("*.json")) if (root / "benchmarks").is_dir() else []
    if not files:
        return []
    chip = reference_run.chip()
    lines = ["## Timings", "",
             ("Measured on the backend named in each row. The `mil` backend is the project's numpy executor on the "
             "build machine's CPU, not the Neural Engine: its timings show relative cost only. The cost-model floor "
             "is the predicted minimum on the named chip's Neural Engine."), "",
             ("| evidence | bucket | backend | load (s) | body p50 / p95 (ms) | full path p50 / p95 (ms) | request | "
             f"floor {chip} (ms) |"),
             "|---|---|---|---|---|---|---|---|"]
    pairs = []
    for ev in (ledger.open(path) for path in files):
        comp, full = ("component", "timing"), ("full_path", "timing")
        floors = (ev.data.get("cost_model") or {}).get("floors", {})
        key = chip if chip in floors else chip_key(chip)  # evidence written before chips.json's lower-case keys
        floor = ev.fig("cost_model", "floors", key, "floor_ms", fmt=".3f") if key in floors else "-"
        lines.append(f"| {link(ev)} | {ev.fig('length', fmt='d')} | {ev.fig('backend', 'backend')} | "
                     f"{ev.fig('package', 'load_seconds', fmt='.3f')} | {ev.fig(*comp, 'p50_ms', fmt='.3f')} / "
                     f"{ev.fig(*comp, 'p95_ms', fmt='.3f')} | {ev.fig(*full, 'p50_ms', fmt='.3f')} / "
                     f"{ev.fig(*full, 'p95_ms', fmt='.3f')} | {ev.fig('full_path', 'question')} "
                     f"({ev.fig('full_path', 'tokens', fmt='d')} tokens) | {floor} |")
        if "vs" in ev.data:
            pairs.append(ev)
    for ev in pairs:
        second = ("vs", "second", "compression")
        if ev.value(*second):
            candidate = (f"W{ev.fig(*second, 'bits', fmt='d')} {ev.fig(*second, 'mode')} group "
                         f"{ev.fig(*second, 'group_size', fmt='d')}")
        else:
            candidate = "uncompressed"
        ratio = ("vs", "component", "ratio")
        lines += ["", (f"Paired in one process ({link(ev)}): second candidate {candidate} over the FP16 package, "
                      f"per-pair time ratio p50 {ev.fig(*ratio, 'p50', fmt='.3f')} (p05 "
                      f"{ev.fig(*ratio, 'p05', fmt='.3f')}, p95 {ev.fig(*ratio, 'p95', fmt='.3f')}) for the body and "
                      f"{ev.fig('vs', 'full_path', 'ratio', 'p50', fmt='.3f')} for the full path.")]
    return lines + [""]


def section_range(ledger: Ledger, root: Path) -> list[str]:
    ev = open_if_present(ledger, root / "fp16_range.json")
    if ev is None:
        return []
    from .fp16_range import summary_lines

    return ["## FP16 range", "", f"Evidence: {link(ev)}.", "", *summary_lines(ev), ""]


RUN_SECTIONS = (section_probe, section_validation, section_sweep, section_benchmarks, section_range)


def run_sections(ledger: Ledger, root: Path) -> list[str]:
    return [line for section in RUN_SECTIONS for line in section(ledger, Path(root))]
