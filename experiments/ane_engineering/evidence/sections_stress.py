"""ANE_BENCHMARKS.md section of the stress sources: a planted massive activation past the Neural Engine's matmul
cliff, validated with and without the exact FP16 rescaling (benchmarks/evidence/stress_rescale_*.json, written by
benchmarks/stress_rescale.py). Every figure is a field of those files (ledger.py); op names and reasons, which hold
digits, are printed as code spans."""

from __future__ import annotations

from pathlib import Path

from .ledger import Evidence, Ledger

PATTERN = "stress_rescale_*.json"


def _headroom(ev: Evidence, *path) -> str:
    if ev.value(*path) is None:
        return "-"
    return f"{ev.fig(*path, 'headroom', fmt='.3g')} (`{ev.value(*path, 'op')}`, {ev.value(*path, 'type')})"


def _validation_headroom(ev: Evidence, *path) -> str:
    record = ev.value(*path, "headroom")
    if not record or record.get("minimum_headroom") is None:
        return "-"
    return f"{ev.fig(*path, 'headroom', 'minimum_headroom', fmt='.3g')} (`{record['op']}`, {record['type']})"


def _file_section(ev: Evidence) -> list[str]:
    from .report import harness_label, link

    planted = ("stress_source", "massive_activation")
    if ev.value(*planted) is None:
        head = (f"Source: `{ev.value('stress_source', 'base')}` (no massive activation): rescaling must leave it "
                f"passing. Evidence {link(ev)}, {harness_label(ev)}.")
    else:
        head = None
    lines = [head or (f"Source: `{ev.value('stress_source', 'base')}` with |h| "
                      f"{ev.fig(*planted, 'magnitude', fmt='.0f')} at [CLS] in {ev.fig(*planted, 'dims', fmt='len')} "
                      f"dims from layer {ev.fig(*planted, 'onset_layer', fmt='d')} on, decision head margin-fitted "
                      "(smallest FP32 decision gap "
                      f"{ev.fig('stress_source', 'margins_when_fitted', 'min_decision_logit_gap', fmt='.2f')}). "
                      f"Evidence {link(ev)}, {harness_label(ev)}."), "",
             ("| bucket | layout | --fp16-scale | K | headroom before (op) | headroom after (op) | backend | passed | "
              "validation headroom (op) | questions passed | max calibrated error | max option-logit error | "
              "first reason |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(ev.value("runs")):
        k = ev.fig("runs", i, "exponent", fmt="d") if "exponent" in row else "-"
        before = _headroom(ev, "runs", i, "headroom_before") if "headroom_before" in row else "-"
        after = _headroom(ev, "runs", i, "headroom_after") if "headroom_after" in row else "-"
        for backend in row["validation"]:
            v = ("runs", i, "validation", backend)
            reason = ev.value(*v, "reasons")[0] if ev.value(*v, "reasons") else ""
            reason = reason if len(reason) <= 140 else reason[:137] + "..."
            lines.append(
                f"| {ev.fig('runs', i, 'length', fmt='d')} | {row['layout']} | {row['fp16_scale']} | {k} | {before} | "
                f"{after} | {backend} | {'yes' if ev.value(*v, 'passed') else 'no'} | {_validation_headroom(ev, *v)} | "
                f"{ev.fig(*v, 'passed_questions', fmt='d')} / {ev.fig(*v, 'evaluated', fmt='d')} | "
                f"{ev.fig(*v, 'max_calibrated_error', fmt='num5')} | "
                f"{ev.fig(*v, 'max_option_logit_error', fmt='num5')} | "
                + (f"`{reason}`" if reason else "") + " |")
    return lines + [""]


def section_stress(ledger: Ledger, root: Path) -> list[str]:
    files = sorted(Path(root).glob(PATTERN))
    if not files:
        return []
    lines = ["## Stress source: a massive activation past the matmul cliff, with and without rescaling", "",
             ("A planted massive activation (`checkpoint/builtin_outlier.py`) written by the onset layer's MLP output "
              "projection, a matmul-class op, so it meets the Neural Engine's matmul cliff; the headroom is the mil "
              "executor's measurement on the golden questions (`run/mil/headroom.py`, pre-A16 cliffs), the validation "
              "that of `validate --backend ...` against the FP32 golden; `--fp16-scale auto` is the exact rescaling "
              "argued in ANE_MATH.md (its FP16 rescaling section) with the K it chose. Without rescaling the package "
              "must fail closed; rescaled, it must pass every gate with headroom at least the gate's margin."), ""]
    for path in files:
        lines += _file_section(ledger.open(path))
    return lines
