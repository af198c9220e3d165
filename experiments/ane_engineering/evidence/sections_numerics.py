"""ANE_BENCHMARKS.md section of the Neural Engine numerics evidence: headroom per bucket and attention layout against
the published cliffs, and the decision errors under mil, mil-ane and mil-fp16-strict
(benchmarks/evidence/ane-numerics-*.json, written by benchmarks/ane_numerics.py). Every figure is a field of those
files (ledger.py); op names, which hold digits, are printed as code spans."""

from __future__ import annotations

from pathlib import Path

from .ledger import Evidence, Ledger

PATTERN = "ane-numerics-*.json"


def _op(ev: Evidence, *path) -> str:
    return f"`{ev.value(*path, 'op')}` ({ev.value(*path, 'type')}, {ev.value(*path, 'cliff')})"


def _scale(ev: Evidence, i: int) -> str:
    run = ev.value("runs", i)
    if run.get("fp16_scale", "none") == "none":
        return "none"
    k = ev.fig("runs", i, "exponent", fmt="d") if run.get("exponent") is not None else "-"
    return f"{run['fp16_scale']} ({k})"


def _headroom_rows(ev: Evidence) -> list[str]:
    lines = ["| bucket | layout | --fp16-scale (K) | questions | minimum headroom | tightest op (type, cliff) | its "
             "max abs value | tightest matmul-class op | tightest width-offset slice | ops measured | gate |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(ev.value("runs")):
        h = ("runs", i, "headroom")
        by_cliff = ev.value(*h, "by_cliff")

        def tightest(cliff: str) -> str:
            if cliff not in by_cliff:
                return "-"
            at = (*h, "by_cliff", cliff, "minimum")
            return f"{ev.fig(*at, 'headroom', fmt='.3g')} (`{ev.value(*at, 'op')}`)"

        lines.append(f"| {ev.fig('runs', i, 'length', fmt='d')} | {run['layout']} | {_scale(ev, i)} | "
                     f"{ev.fig(*h, 'inputs_measured', fmt='d')} | {ev.fig(*h, 'minimum_headroom', fmt='.3g')} | "
                     f"{_op(ev, *h, 'minimum')} | {ev.fig(*h, 'minimum', 'max_abs', fmt='.5g')} | "
                     f"{tightest('matmul_output')} | {tightest('width_offset_slice')} | "
                     f"{ev.fig(*h, 'ops_measured', fmt='d')} | {'pass' if ev.value(*h, 'passed') else 'FAIL'} |")
    return lines


def _error_rows(ev: Evidence) -> list[str]:
    lines = ["| bucket | layout | --fp16-scale (K) | backend | passed / evaluated | max calibrated error | max "
             "action-probability error | max option-logit error | max action-logit error | questions where a cliff "
             "fired | first cliff |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(ev.value("runs")):
        for backend in run["backends"]:
            b = ("runs", i, "backends", backend)
            first = ev.value(*b, "first_ane_cliff")
            cliff = "-" if first is None else f"`{first['op']}` ({first['type']}, {first['cliff']})"
            lines.append(f"| {ev.fig('runs', i, 'length', fmt='d')} | {run['layout']} | {_scale(ev, i)} | {backend} | "
                         f"{ev.fig(*b, 'passed_questions', fmt='d')} / {ev.fig(*b, 'evaluated', fmt='d')} | "
                         f"{ev.fig(*b, 'max_calibrated_error', fmt='num5')} | "
                         f"{ev.fig(*b, 'max_action_probability_error', fmt='num5')} | "
                         f"{ev.fig(*b, 'max_option_logit_error', fmt='num5')} | "
                         f"{ev.fig(*b, 'max_action_logit_error', fmt='num5')} | {ev.fig(*b, 'ane_cliffs', fmt='d')} | "
                         f"{cliff} |")
    return lines


def _file_section(ev: Evidence) -> list[str]:
    from .report import harness_label, link

    selection = ("Every golden question that fits the bucket" if ev.value("questions_per_bucket") is None else
                 f"At most {ev.fig('questions_per_bucket', fmt='d')} golden questions per bucket, evenly spaced")
    return [f"### `{ev.value('source', 'source')}`", "",
            (f"{selection}; " + (f"mil-fp16-strict on {ev.fig('strict_questions', fmt='d')} of them per run (its "
                                  "sequential FP16 sums take minutes per call)" if ev.value('strict_questions') else
                                  "mil-fp16-strict not run (its sequential FP16 sums take hours per call at this size)")
             + f". "
             f"Wall time {ev.fig('wall_seconds', fmt='.0f')} s. Evidence {link(ev)}, {harness_label(ev)}."), "",
            *_headroom_rows(ev), "", *_error_rows(ev), ""]


def section_numerics(ledger: Ledger, root: Path) -> list[str]:
    files = sorted(Path(root).glob(PATTERN))
    if not files:
        return []
    first = ledger.open(files[0])
    lines = ["## Neural Engine numerics: headroom to the published cliffs", "",
             ("Headroom = cliff / largest |output| of an op over the golden questions, measured op by op on the "
              "exported package with the mil executor (cliffs not applied); each op faces the matmul cliff if it is "
              "matmul-class, the pre-A16 width-offset slice cliff if it is such a slice, the FP16 maximum otherwise "
              "(`run/mil/ane_cliffs.json`, `run/mil/cliffs.py`). Validation fails below "
              f"{first.fig('gates', 'headroom_min', fmt='g')}x (`core/gates.py` HEADROOM_MIN). `mil-ane-*` runs the "
              "package with the cliffs of that chip family applied; it models published measurements of real "
              "Neural Engines on the CPU, it is not a device run."), ""]
    for path in files:
        lines += _file_section(ledger.open(path))
    return lines
