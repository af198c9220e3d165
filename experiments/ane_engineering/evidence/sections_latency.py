"""ANE_BENCHMARKS.md sections of the latency predictor: the cross-chip fit on public timings with its held-out chips and
sources, the device-state band and the ANE/GPU routing per chip (benchmarks/evidence/latency_fit.json), and the
calibration re-derived on the restored reference-run layout (benchmarks/evidence/
cost_calibration_reference_run_layout.json). Every figure is a field of those files (ledger.py)."""

from __future__ import annotations

from pathlib import Path

from .ledger import Evidence, Ledger
from .report import harness_label, link, open_if_present

FIT_FILE = "latency_fit.json"
RECALIBRATION_FILE = "cost_calibration_reference_run_layout.json"
ROUTING_LENGTHS = (64, 128, 256, 384, 512, 768, 1024)  # rows shown of each routing grid (the file has every 32)


def _summary_cells(ev: Evidence, *at) -> str:
    if ev.value(*at) is None:
        return "- | - | -"
    return (f"{ev.fig(*at, 'points', fmt='d')} | {ev.fig(*at, 'median_absolute_relative_error', fmt='.1%')} | "
            f"{ev.fig(*at, 'max_absolute_relative_error', fmt='.1%')}")


def section_fit(ev: Evidence) -> list[str]:
    lines = ["## Latency on every chip: a model fitted across public timings, checked on chips it never saw", "",
             (f"{ev.fig('label')}. Evidence {link(ev)}, {harness_label(ev)}; the public points and their sources "
              "(repository, file, commit, statistic, scope, graph) are "
              "`experiments/ane_engineering/placement/public_latencies.json`, the counted programs "
              "`benchmarks/evidence/latency_counts.json`. Model: " + ev.fig("model", "about")), "",
             "| term | coefficient | standard error | unit | status |", "|---|---|---|---|---|"]
    for term in ev.value("fit", "coefficients_described"):
        at = ("fit", "coefficients_described", term)
        error = ev.fig(*at, "standard_error", fmt=".3g") if ev.value(*at, "standard_error") is not None else "-"
        lines.append(f"| {term} | {ev.fig(*at, 'value', fmt='.4g')} | {error} | {ev.fig(*at, 'unit')} | "
                     f"{ev.fig('fit', 'status', term)} |")
    lines += ["", (f"Fitted on {ev.fig('fit', 'points', fmt='d')} points "
                   f"({ev.fig('fit', 'degrees_of_freedom', fmt='d')} degrees of freedom), RMS relative residual "
                   f"{ev.fig('fit', 'rms_relative_residual', fmt='.1%')}."), ""]
    for name, key, title in (("leave_one_chip_out", "chip", "chip"), ("leave_one_source_out", "source", "source")):
        summary = (name, "summary")
        lines += [f"### Held out by {title}: every point predicted by a fit that never saw its {title}", "",
                  f"| {title} (masked BC1S, this harness's graph kind) | points | median abs error | worst abs error |",
                  "|---|---|---|---|", f"| **all** | {_summary_cells(ev, *summary, 'masked_bc1s')} |"]
        for group in ev.value(*summary, f"masked_bc1s_by_{key}"):
            lines.append(f"| {group} | {_summary_cells(ev, *summary, f'masked_bc1s_by_{key}', group)} |")
        lines.append(f"| other graphs (Core AI, labelled) | {_summary_cells(ev, *summary, 'other_graphs')} |")
        lines.append("")
    form = ("aneforge_form",)
    held = (*form, "leave_one_chip_out", "masked_bc1s")
    lines += [(f"For comparison, ANEForge's cost-model form ({ev.fig(*form, 'form')}; {ev.fig(*form, 'source')}) "
               f"held out by chip: masked BC1S median abs error "
               f"{ev.fig(*held, 'median_absolute_relative_error', fmt='.1%')}, "
               f"worst {ev.fig(*held, 'max_absolute_relative_error', fmt='.1%')}."),
              "", "| point | chip | L | scope | graph | measured (ms) | fitted | in-sample (ms) | chip held out (ms) | "
              "error | source held out | ", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(ev.value("points")):
        at = ("points", i)
        lines.append(f"| {ev.fig(*at, 'id')} | {ev.fig(*at, 'chip')} | {ev.fig(*at, 'length', fmt='d')} | "
                     f"{ev.fig(*at, 'scope')} | {ev.fig(*at, 'graph_kind')} | "
                     f"{ev.fig(*at, 'measured_ms', fmt='.2f')} | "
                     f"{'fitted' if row['fitted'] else 'checked only'} | {ev.fig(*at, 'in_sample_ms', fmt='.2f')} | "
                     f"{ev.fig(*at, 'leave_one_chip_out_ms', fmt='.2f')} | "
                     f"{ev.fig(*at, 'leave_one_chip_out_error', fmt='+.1%')} | "
                     f"{ev.fig(*at, 'leave_one_source_out_error', fmt='+.1%')} |")
    lines += ["", "Public points this harness cannot count (not predicted, kept labelled):", ""]
    for i, _ in enumerate(ev.value("not_counted")):
        at = ("not_counted", i)
        lines.append(f"- {ev.fig(*at, 'id')} ({ev.fig(*at, 'chip')}, {ev.fig(*at, 'graph_kind')}, "
                     f"{ev.fig(*at, 'measured_ms', fmt='.1f')} ms): {ev.fig(*at, 'why')}")
    check = ("regions_check",)
    if ev.value(*check, "checked"):
        lines += ["", (f"Regions: {ev.fig(*check, 'split')} ({ev.fig(*check, 'crossings', fmt='d')} crossings) against "
                       f"{ev.fig(*check, 'one_region')}: measured x {ev.fig(*check, 'measured_ratio', fmt='.2f')} "
                       f"(+{ev.fig(*check, 'measured_extra_ms', fmt='.2f')} ms); predicted x "
                       f"{ev.fig(*check, 'in_sample_ratio', fmt='.2f')} with the crossing term fitted on every "
                       "point, x "
                       f"{ev.fig(*check, 'source_held_out_ratio', fmt='.2f')} "
                       f"(+{ev.fig(*check, 'source_held_out_extra_ms', fmt='.2f')} ms) with the card held out (the "
                       "crossing cost is then the sourced prior).")]
    band = ("band",)
    lines += ["", (f"Band of a prediction: x {ev.fig(*band, 'low_ratio', fmt='.3f')} to x "
                   f"{ev.fig(*band, 'high_ratio', fmt='.3f')} ({ev.fig(*band, 'basis')}; min x "
                   f"{ev.fig(*band, 'min_ratio', fmt='.3f')}, max x {ev.fig(*band, 'max_ratio', fmt='.3f')})."), ""]
    for i, observation in enumerate(ev.value("device_state", "observations")):
        at = ("device_state", "observations", i)
        if "burst_ratio" in observation:
            lines.append(f"Device state ({ev.fig(*at, 'id')}, {ev.fig(*at, 'chip')}): burst "
                         f"{ev.fig(*at, 'burst_ms', fmt='.2f')} ms and sustained "
                         f"{ev.fig(*at, 'sustained_ms', fmt='.2f')} "
                         f"ms against a warm median of {ev.fig(*at, 'warm_median_ms', fmt='.2f')} ms: x "
                         f"{ev.fig(*at, 'burst_ratio', fmt='.2f')} to x {ev.fig(*at, 'sustained_ratio', fmt='.2f')} "
                         f"of a prediction. {ev.fig(*at, 'what')}. {ev.fig('device_state', 'rule')}; power state: "
                         f"{ev.fig('device_state', 'power_state')}.")
    return lines + [""]


def section_routing(ev: Evidence) -> list[str]:
    lines = ["### Routing: the predicted ANE request against public GPU (MLX) curves, per chip", "",
             ("Per chip with a public GPU timing of a counted model: the predicted request of this harness's "
              "reference-run-layout export (the graph kind the public ports run) against the GPU curve, with the "
              "public ANE timing where one exists. A route a runtime can act on; a prediction, not a measurement."
              + (f" Rule: {ev.fig('routing', 0, 'rule')}." if ev.value("routing") else "")), ""]
    for i, entry in enumerate(ev.value("routing")):
        at = ("routing", i)
        lines.append(f"**{ev.fig(*at, 'chip')}, {ev.fig(*at, 'model')}** against {ev.fig(*at, 'gpu_curve')} "
                     f"({ev.fig(*at, 'framework')}): ANE predicted faster up to "
                     + (f"L{ev.fig(*at, 'ane_faster_up_to', fmt='d')}" if entry["ane_faster_up_to"] else "no length")
                     + ", GPU from " + (f"L{ev.fig(*at, 'crossover_length', fmt='d')}" if entry["crossover_length"]
                                        else "no length on the grid") + ".")
        lines += ["", "| L | predicted ANE request (ms) | public ANE (ms) | GPU curve (ms) | route |",
                  "|---|---|---|---|---|"]
        for j, row in enumerate(entry["rows"]):
            if row["length"] not in ROUTING_LENGTHS:
                continue
            r = (*at, "rows", j)
            public = ev.fig(*r, "public_ane_ms", fmt=".2f") if row["public_ane_ms"] is not None else "-"
            lines.append(f"| {ev.fig(*r, 'length', fmt='d')} | {ev.fig(*r, 'ane_request_ms', fmt='.2f')} | {public} | "
                         f"{ev.fig(*r, 'mlx_ms', fmt='.2f')} | {'ANE' if row['ane_faster'] else 'GPU'} |")
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
    lines += ["", (f"Re-derived parameters: per-op {ev.fig('fit', 'derived', 'per_op_us', fmt='.3f')} us, "
                   f"traffic factor {ev.fig('fit', 'parameters', 'traffic_factor', fmt='.3f')} (committed: per-op "
                   f"{ev.fig('comparison', 'committed_per_op_us', fmt='.3f')} us, traffic factor "
                   f"{ev.fig('comparison', 'committed_traffic_factor', fmt='.3f')})."), ""]
    return lines


def sections(ledger: Ledger, root: Path) -> list[str]:
    """The latency sections whose evidence exists under `root` (benchmarks/evidence)."""
    lines = []
    fitted = open_if_present(ledger, Path(root) / FIT_FILE)
    if fitted is not None:
        lines += section_fit(fitted) + section_routing(fitted)
    recal = open_if_present(ledger, Path(root) / RECALIBRATION_FILE)
    if recal is not None:
        lines += section_recalibration(recal)
    return lines
