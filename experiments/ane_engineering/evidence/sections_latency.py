"""ANE_BENCHMARKS.md sections of the latency predictor: the leave-one-out band of the calibration, the out-of-sample
check against public Neural Engine latencies (benchmarks/evidence/predict_check.json), the crossover against an MLX
curve (benchmarks/evidence/crossover_mmbert_base_shape.json), and the calibration re-derived on the restored
reference-run layout (benchmarks/evidence/cost_calibration_reference_run_layout.json). Every figure is a field of
those files (ledger.py)."""

from __future__ import annotations

from pathlib import Path

from .ledger import Evidence, Ledger
from .report import harness_label, link, open_if_present

CHECK_FILE = "predict_check.json"
CROSSOVER_FILE = "crossover_mmbert_base_shape.json"
RECALIBRATION_FILE = "cost_calibration_reference_run_layout.json"


def section_loo(ev: Evidence) -> list[str]:
    cal = ("calibration",)
    lines = ["### Leave-one-out residuals of the calibration", "",
             (f"{ev.fig('label')}. Each calibration point predicted by the fit to the other points (evidence "
              f"{link(ev)}, {harness_label(ev)}). {ev.fig(*cal, 'band', 'basis')}."), "",
             "| held out | scope | fitted on | measured (ms) | predicted (ms) | measured / predicted |",
             "|---|---|---|---|---|---|"]
    for i, row in enumerate(ev.value(*cal, "leave_one_out")):
        at = (*cal, "leave_one_out", i)
        fitted = ", ".join(ev.fig(*at, "fitted_on", j) for j in range(len(row["fitted_on"])))
        if row["identifiable"]:
            lines.append(f"| {ev.fig(*at, 'id')} | {ev.fig(*at, 'scope')} | {fitted} | "
                         f"{ev.fig(*at, 'measured_ms', fmt='.3f')} | {ev.fig(*at, 'predicted_ms', fmt='.3f')} | "
                         f"{ev.fig(*at, 'ratio_measured_to_predicted', fmt='.3f')} |")
        else:
            lines.append(f"| {ev.fig(*at, 'id')} | {ev.fig(*at, 'scope')} | {fitted} | "
                         f"{ev.fig(*at, 'measured_ms', fmt='.3f')} | not identifiable: {ev.fig(*at, 'why')} | - |")
    lines += ["", (f"Band: **x {ev.fig(*cal, 'band', 'low_ratio', fmt='.3f')} to x "
                   f"{ev.fig(*cal, 'band', 'high_ratio', fmt='.3f')}** of a prediction, from "
                   f"{ev.fig(*cal, 'band', 'points', fmt='d')} predictable points. What the model does not see:"), ""]
    lines += [f"- {ev.fig('not_modelled', i)}" for i in range(len(ev.value("not_modelled")))]
    return lines + [""]


def section_checks(ev: Evidence) -> list[str]:
    lines = ["### Out of sample: public Neural Engine latencies the model was not fitted to", "",
             ("Each point is a public timing of an encoder body of known shape (the file, commit and figure are in the "
              "evidence; the data file is `experiments/ane_engineering/placement/public_latencies.json`, apart from "
              "the calibration's points). The body this harness would export for that shape is counted and predicted "
              "on the point's chip, in the layout the calibration was fitted on (`reference-run`) and in the current "
              "`dense` layout. The public graphs are the ports' own, not this harness's."), "",
             "| point | chip | L | measured (ms) | layout | predicted (ms) | error | inside band |",
             "|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(ev.value("checks")):
        at = ("checks", i)
        lines.append(f"| {ev.fig(*at, 'id')} | {ev.fig(*at, 'chip')} | {ev.fig(*at, 'length', fmt='d')} | "
                     f"{ev.fig(*at, 'measured_ms', fmt='.2f')} | {ev.fig(*at, 'layout')} | "
                     f"{ev.fig(*at, 'predicted_ms', fmt='.2f')} | {ev.fig(*at, 'relative_error', fmt='+.1%')} | "
                     f"{'yes' if row['inside_band'] else 'no'} |")
    lines += ["", "| layout | points | median error | median abs error | max abs error | inside band |",
              "|---|---|---|---|---|---|"]
    for layout in ev.value("summary"):
        at = ("summary", layout)
        lines.append(f"| {layout} | {ev.fig(*at, 'points', fmt='d')} | "
                     f"{ev.fig(*at, 'median_relative_error', fmt='+.1%')} | "
                     f"{ev.fig(*at, 'median_absolute_relative_error', fmt='.1%')} | "
                     f"{ev.fig(*at, 'max_absolute_relative_error', fmt='.1%')} | "
                     f"{ev.fig(*at, 'inside_band', fmt='d')} |")
    lines.append("")
    if "findings" in ev.data:
        lines += [f"- {ev.fig('findings', i)}" for i in range(len(ev.value("findings")))] + [""]
    lines += [("Reading the misses: each row's terms are in the evidence (`checks[].terms`). Where a chip other than "
               "the calibration's is over-predicted while the floor alone (the weights once at the chip's measured "
               "streaming bandwidth) is already close to the measurement, the excess is the traffic term: the model "
               "charges intermediate activations at the chip's weight-streaming bandwidth, fitted as one share on the "
               "M3 Max, while intermediates that stay in on-chip SRAM need not slow down with a lower DRAM figure. "
               "That is a structural limit that would hold for unseen chips too; it is stated here and not fitted "
               "away, because only the M3 Max has calibration measurements."), ""]
    return lines


def _length(ev: Evidence, *path) -> str:
    return f"L{ev.fig(*path, fmt='d')}" if ev.value(*path) is not None else "none on the grid"


def section_crossover(ev: Evidence) -> list[str]:
    cross = ("crossover",)
    lines = ["### Crossover: where the predicted Neural Engine request loses to MLX", "",
             f"{ev.fig('label')}. Evidence {link(ev)}, {harness_label(ev)}.", ""]
    for layout in ev.value(*cross, "layouts"):
        at = (*cross, "layouts", layout)
        curve = ", ".join(f"L{ev.fig(*at, 'mlx_curve', j, 'length', fmt='d')} "
                          f"{ev.fig(*at, 'mlx_curve', j, 'ms', fmt='.2f')} ms"
                          for j in range(len(ev.value(*at, "mlx_curve"))))
        counted = ", ".join(f"L{ev.fig(*at, 'counted_at', j, fmt='d')}"
                            for j in range(len(ev.value(*at, "counted_at"))))
        slower = ", ".join(f"L{ev.fig(*at, 'ane_slower_at', j, fmt='d')}"
                           for j in range(len(ev.value(*at, "ane_slower_at"))))
        lines.append(f"`{ev.value(*cross, 'source')}`, {layout} layout, on the {ev.fig(*cross, 'chip')}, against the "
                     f"MLX curve ({curve}). {ev.fig(*at, 'rule')}. **Crossover "
                     f"{_length(ev, *at, 'crossover_length')}**; Neural Engine predicted faster up to "
                     f"{_length(ev, *at, 'ane_faster_up_to')}; not faster at {slower or 'no length'}. Totals counted "
                     f"exactly at {counted} and evaluated by the quadratic identity in between.")
        lines += ["", "| L | predicted ANE request (ms) | MLX curve (ms) | ANE faster |", "|---|---|---|---|"]
        for j, row in enumerate(ev.value(*at, "rows")):
            r = (*at, "rows", j)
            lines.append(f"| {ev.fig(*r, 'length', fmt='d')} | {ev.fig(*r, 'ane_request_ms', fmt='.2f')} | "
                         f"{ev.fig(*r, 'mlx_ms', fmt='.2f')} | {'yes' if row['ane_faster'] else 'no'} |")
        lines.append("")
    return lines


def section_recalibration(ev: Evidence) -> list[str]:
    lines = ["### The reference-run layout re-exported, and the calibration re-derived on it", "",
             (f"Evidence {link(ev)}, {harness_label(ev)}. {ev.fig('comparison', 'summary')}"), "",
             ("| bucket | committed program | re-exported program | same | same with the committed day's date stamp | "
              "exported by harness | committed ops | re-exported ops |"),
             "|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(ev.value("comparison", "programs")):
        at = ("comparison", "programs", i)
        lines.append(f"| {ev.fig(*at, 'length', fmt='d')} | `{row['committed_sha256'][:12]}` | "
                     f"`{row['reexported_sha256'][:12]}` | {'yes' if row['identical'] else 'no'} | "
                     f"{'yes' if row['identical_as_of_committed_date'] else 'no'} | "
                     f"`{row['export_harness_sha256'][:12]}` | "
                     f"{ev.fig(*at, 'committed_ops', fmt='d')} | {ev.fig(*at, 'reexported_ops', fmt='d')} |")
    lines += ["", (f"Re-derived parameters: per-op {ev.fig('fit', 'derived', 'per_op_us', fmt='.3f')} us, traffic "
                   f"factor {ev.fig('fit', 'parameters', 'traffic_factor', fmt='.3f')} (committed: per-op "
                   f"{ev.fig('comparison', 'committed_per_op_us', fmt='.3f')} us, traffic factor "
                   f"{ev.fig('comparison', 'committed_traffic_factor', fmt='.3f')})."), ""]
    return lines


def sections(ledger: Ledger, root: Path) -> list[str]:
    """The latency sections whose evidence exists under `root` (benchmarks/evidence)."""
    lines = []
    check = open_if_present(ledger, Path(root) / CHECK_FILE)
    if check is not None:
        lines += ["## Latency you can check: predictions against measurements they were not fitted to", ""]
        lines += section_loo(check) + section_checks(check)
    cross = open_if_present(ledger, Path(root) / CROSSOVER_FILE)
    if cross is not None:
        lines += section_crossover(cross)
    recal = open_if_present(ledger, Path(root) / RECALIBRATION_FILE)
    if recal is not None:
        lines += section_recalibration(recal)
    return lines
