"""ANE_BENCHMARKS.md sections of the full-size evidence files under benchmarks/evidence (one `section_x(ev)` per
file, listed in FULL_SIZE_SECTIONS): export, cost model, calibration, long attention, executor, k-means, reweight,
FP16 range. Facts from outside the project (the reference run) are printed from core/reference_run.json."""

from __future__ import annotations

from ..core import reference_run
from ..core.provenance import REPOSITORY_ROOT
from .ledger import Evidence, ReportError
from .report import harness_label, link

REFERENCE_RUN_FILE = reference_run.PATH.relative_to(REPOSITORY_ROOT).as_posix()  # where a repository keeps it


def section_full_export(ev: Evidence) -> list[str]:
    lines = ["### Export (probe) at full size", "",
             (f"Each export in a fresh process; evidence {link(ev)}, {harness_label(ev)}. Goal: at most "
             f"{ev.fig('goal', 'convert_seconds_max')} s and {ev.fig('goal', 'peak_rss_bytes_max', fmt='/GiB:.0f')} "
             f"GiB per conversion on a {ev.fig('machine', 'cpu_count', fmt='d')}-core machine."), "",
             ("| bucket | trace + convert (s) | save (s) | peak RSS (GiB) | non-constant ops | static violations | "
             "layout max abs | package |"), "|---|---|---|---|---|---|---|---|"]
    for index, run in enumerate(ev.value("runs")):
        row = ("runs", index)
        lines.append(f"| {ev.fig(*row, 'length', fmt='d')} | {ev.fig(*row, 'convert_seconds', fmt='.1f')} | "
                     f"{ev.fig(*row, 'save_seconds', fmt='.1f')} | {ev.fig(*row, 'peak_rss_gib', fmt='.2f')} | "
                     f"{ev.fig(*row, 'non_constant_ops', fmt='d')} | {ev.fig(*row, 'static_violations', fmt='d')} | "
                     f"{ev.fig(*row, 'layout_max_abs', fmt='num3')} | `{run['package_sha256'][:12]}` |")
    return lines + [""]


def section_cost_model(ev: Evidence) -> list[str]:
    check = ("reference_check",)
    chip = ev.value(*check, "chip")
    lines = ["### Cost model and the reference run", "",
             (f"{ev.fig('label')}. Evidence {link(ev)}, {harness_label(ev)}. Chip figures and their sources are in the "
             "evidence (`chips`); the floor is max(FLOPs / peak FP16 rate, bytes every call must move / bandwidth); "
             "the unfused estimate assumes every op round-trips memory."), "",
             (f"| bucket | GFLOP | compulsory MB | unfused MB | floor {chip} (ms) | bound | unfused estimate (ms) | "
             "L x L einsum share of FLOPs | L x L ops share of bytes |"), "|---|---|---|---|---|---|---|---|---|"]
    for index, summary in enumerate(ev.value("summary")):
        if summary["chip"] != chip:
            continue
        row = ("summary", index)
        lines.append(f"| {ev.fig(*row, 'length', fmt='d')} | {ev.fig(*row, 'gflops', fmt='.2f')} | "
                     f"{ev.fig(*row, 'compulsory_mb', fmt='.1f')} | {ev.fig(*row, 'unfused_mb', fmt='.1f')} | "
                     f"{ev.fig(*row, 'floor_ms', fmt='.3f')} | {ev.fig(*row, 'bound')} | "
                     f"{ev.fig(*row, 'unfused_floor_ms', fmt='.3f')} | "
                     f"{ev.fig(*row, 'lxl_einsum_flops_share', fmt='.3f')} | "
                     f"{ev.fig(*row, 'lxl_tensor_ops_bytes_share', fmt='.3f')} |")
    return lines + [""] + _reference_run_lines(ev)


def _reference_run_lines(cost: Evidence) -> list[str]:
    """The reference run's timings (from core/reference_run.json) beside the floors the cost-model evidence set them
    by."""
    ref = cost.ledger.open(cost.ledger.root / REFERENCE_RUN_FILE)
    measurements = {m["id"]: i for i, m in enumerate(ref.value("timings", "measurements"))}
    machine, software = ("machine",), ("software",)
    tools = ", ".join(f"{name} {ref.fig(*software, name)}" for name in ref.value(*software))
    lines = [(f"The {ref.fig('provenance', 'citation')} (Apple {ref.fig(*machine, 'chip')}, {ref.fig(*machine, 'os')}, "
             f"{tools}; not measured by this project; its figures: {link(ref)}), beside the floor:"), "",
             "| measurement | measured (ms) | floor (ms) | measured / floor | measured / unfused estimate |",
             "|---|---|---|---|---|"]
    for index, row in enumerate(cost.value("reference_check", "rows")):
        measured = ("timings", "measurements", measurements[row["id"]])
        if ref.value(*measured, "p50_ms") != row["measured_ms"]:
            raise ReportError(f"{cost.name} sets {row['measured_ms']} ms beside the floor for {row['id']}, but "
                              f"{ref.name} says {ref.value(*measured, 'p50_ms')} ms: rerun benchmarks/cost_model.py")
        at = ("reference_check", "rows", index)
        lines.append(f"| {ref.fig(*measured, 'what')} | {ref.fig(*measured, 'p50_ms', fmt='.3f')} | "
                     f"{cost.fig(*at, 'floor_ms', fmt='.3f')} | {cost.fig(*at, 'ratio_to_floor', fmt='.2f')} | "
                     f"{cost.fig(*at, 'ratio_to_unfused_floor', fmt='.2f')} |")
    bxlxc, bc1s = ("placement", "bxlxc_export"), ("placement", "bc1s_export")
    mlx = ("timings", "mlx")
    lines += ["", (f"Also reported by that run: {ref.fig(*bxlxc, 'what')} put all {ref.fig(*bxlxc, 'on_cpu', fmt='d')} "
                  f"assigned ops on the CPU; {ref.fig(*bc1s, 'what')} put all {ref.fig(*bc1s, 'on_ane', fmt='d')} "
                  f"non-constant ops on the ANE; its layout check ({ref.fig('layout_check', 'what')}) differed by at "
                  f"most {ref.fig('layout_check', 'max_abs', fmt='num3')}; {ref.fig(*mlx, 'what')}: "
                  f"{ref.fig(*mlx, 'p50_ms', fmt='.2f')} ms."), ""]
    return lines


def section_executor(ev: Evidence) -> list[str]:
    alone = ("executor_alone",)
    return ["### The mil executor at full size", "",
            (f"Body at L{ev.fig('package', 'length', fmt='d')}, synthetic inputs, executor and BC1S torch FP32 forward "
            f"alternating in one process ({ev.fig('rounds', fmt='d')} rounds). Evidence {link(ev)}, "
            f"{harness_label(ev)}."), "",
            ("| mil p50 (s) | torch FP32 p50 (s) | ratio p50 | executor alone: peak RSS (GB) | load (s) | "
            "max option-logit difference |"), "|---|---|---|---|---|---|",
            (f"| {ev.fig('mil_p50_seconds', fmt='.2f')} | {ev.fig('torch_p50_seconds', fmt='.2f')} | "
            f"{ev.fig('ratio_p50', fmt='.2f')} | {ev.fig(*alone, 'peak_rss_gb', fmt='.2f')} | "
            f"{ev.fig(*alone, 'load_seconds', fmt='.1f')} | {ev.fig('max_option_logit_difference', fmt='num4')} |"),
            "", (f"Goal: ratio at most {ev.fig('goal', 'time_ratio_max')}, peak RSS at most "
                f"{ev.fig('goal', 'peak_rss_bytes_max', fmt='/GB:.0f')} GB."), ""]


def section_kmeans(ev: Evidence) -> list[str]:
    lines = ["### Palettization: coremltools k-means against the exact k-means", "",
             (f"Full-size body, {ev.fig('workers', fmt='d')} workers, both implementations in fresh processes back to "
             f"back. Evidence {link(ev)}, {harness_label(ev)}."), "",
             ("| bits | group size | exact (s) | coremltools (s) | speed-up | exact peak RSS | coremltools peak RSS | "
             "groups not worse / groups | per-group SSE ratio max | total SSE ratio |"),
             "|---|---|---|---|---|---|---|---|---|---|"]

    def rss(*entry):
        if "peak_rss_gib" in ev.value(*entry):
            return f"{ev.fig(*entry, 'peak_rss_gib', fmt='.2f')} GiB"
        return f"{ev.fig(*entry, 'peak_rss_bytes', fmt='d')} B"

    for index in range(len(ev.value("runs"))):
        run = ("runs", index)
        exact, ct = (*run, "exact"), (*run, "coremltools")
        lines.append(f"| {ev.fig(*run, 'bits', fmt='d')} | {ev.fig(*exact, 'stats', 'group_size', fmt='d')} | "
                     f"{ev.fig(*exact, 'palettize_seconds', fmt='.1f')} | "
                     f"{ev.fig(*ct, 'palettize_seconds', fmt='.1f')} | {ev.fig(*run, 'speedup', fmt='.1f')} | "
                     f"{rss(*exact)} | {rss(*ct)} | "
                     f"{ev.fig(*run, 'sse', 'not_worse', fmt='d')}/{ev.fig(*run, 'sse', 'groups', fmt='d')} | "
                     f"{ev.fig(*run, 'sse', 'ratio_max', fmt='.6f')} | "
                     f"{ev.fig(*run, 'sse', 'total_ratio', fmt='.6f')} |")
    return lines + [""]


def section_reweight(ev: Evidence) -> list[str]:
    warm = ("warm_in_one_process",)
    swaps = ", ".join(ev.fig(*warm, "reweight_seconds", i, fmt=".3f")
                      for i in range(len(ev.value(*warm, "reweight_seconds"))))
    median = ev.fig(*warm, "reweight_median_seconds", fmt=".3f")
    return ["### Delta weight update (reweight) against re-export", "",
            (f"A same-architecture checkpoint into the L{ev.fig('parent', 'length', fmt='d')} body. Evidence "
             f"{link(ev)}, {harness_label(ev)}. Identical to a fresh export: "
             f"**{ev.value('identical_to_fresh_export')}** ({ev.fig('blobs_rewritten', fmt='d')} blobs rewritten); the "
             f"in-process reweights identical to the in-process probe: "
             f"**{ev.value(*warm, 'reweights_identical_to_probe')}**."), "",
            "| | re-export (s) | reweight (s) | speed-up |", "|---|---|---|---|",
            (f"| fresh processes (commands) | {ev.fig('export_command_seconds', fmt='.1f')} | "
            f"{ev.fig('reweight_command_seconds', fmt='.2f')} | {ev.fig('speedup_commands', fmt='.1f')} |"),
            (f"| one process: convert + save | {ev.fig(*warm, 'convert_and_save_seconds', fmt='.1f')} | {median} | "
            f"{ev.fig(*warm, 'speedup_vs_convert_and_save', fmt='.1f')} |"),
            (f"| one process: whole probe | {ev.fig(*warm, 'probe_seconds', fmt='.1f')} | {median} | "
            f"{ev.fig(*warm, 'speedup_vs_probe', fmt='.1f')} |"), "",
            (f"In-process reweights (s): {swaps}; the median is used. Goal: at least "
            f"{ev.fig('goal', 'speedup_min', fmt='.0f')}x, judged {ev.fig('goal', 'judged_on')}: "
            f"**{'met' if ev.value('meets_goal') else 'not met'}**. The commands' ratio is bounded by what both pay: "
            "interpreter start, torch and coremltools imports, and the SHA256 of the checkpoint."), ""]


def section_full_range(ev: Evidence) -> list[str]:
    from .fp16_range import summary_lines

    return ["### FP16 range at full size", "", f"Evidence {link(ev)}, {harness_label(ev)}.", "", *summary_lines(ev), ""]


def section_calibration(ev: Evidence) -> list[str]:
    fit, model = ("fit",), ("model",)
    lines = ["### Calibrated cost model: fitted to the reference run", "",
             (f"{ev.fig('label')}. Evidence {link(ev)}, {harness_label(ev)}. Body = `floor + per_op_ms * ops + "
             "traffic_factor * (unfused - compulsory bytes) / bandwidth`; request = body + its inputs and outputs "
             "once across the boundary at the chip's bandwidth; the host's CPU work has no term. Fitted on the "
             f"{ev.fig(*fit, 'chip')} to the reference run's dense measurements only ({ev.fig('graph')}): "
             f"**{ev.fig(*fit, 'derived', 'per_op_us', fmt='.3f')} us per non-constant op** and **traffic factor "
             f"{ev.fig(*fit, 'parameters', 'traffic_factor', fmt='.3f')}** (activation traffic at "
             f"{ev.fig(*fit, 'derived', 'effective_activation_bandwidth_gbs', fmt='.0f')} GB/s); "
             f"{ev.fig(*model, 'parameters', fmt='d')} parameters from {ev.fig(*model, 'measurements', fmt='d')} "
             f"measurements, {ev.fig(*model, 'degrees_of_freedom', fmt='d')} degree of freedom left. "
             f"{ev.fig(*model, 'in_sample')}."), "",
             ("| measurement | scope | non-constant ops | measured (ms) | predicted (ms) | residual | floor (ms) | "
             "per-op (ms) | traffic (ms) | boundary (ms) | program |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for index, point in enumerate(ev.value(*fit, "points")):
        at, terms = (*fit, "points", index), (*fit, "points", index, "terms")
        lines.append(f"| {ev.fig(*at, 'id')} | {ev.fig(*at, 'scope')} | "
                     f"{ev.fig(*at, 'totals', 'non_constant_ops', fmt='d')} | {ev.fig(*at, 'measured_ms', fmt='.3f')} "
                     f"| {ev.fig(*at, 'predicted_ms', fmt='.3f')} | {ev.fig(*at, 'relative_residual', fmt='+.1%')} | "
                     f"{ev.fig(*terms, 'floor_ms', fmt='.3f')} | {ev.fig(*terms, 'per_op_ms', fmt='.3f')} | "
                     f"{ev.fig(*terms, 'traffic_ms', fmt='.3f')} | {ev.fig(*terms, 'boundary_ms', fmt='.3f')} | "
                     f"`{point['program_sha256'][:12]}` |")
    lines.append("")
    for index in range(len(ev.value(*model, "notes"))):
        lines.append(f"- {ev.fig(*model, 'notes', index)}")
    return lines + [""]


def section_long_attention(ev: Evidence) -> list[str]:
    chip, cmp = ev.value("chip"), ("comparison",)
    lines = ["### Long requests: dense against windowed local attention", "",
             (f"{ev.fig('label')}, by the calibrated model above (fitted to the reference run's dense graph, not tuned "
              f"on either layout here). Evidence {link(ev)}, {harness_label(ev)}; per-chip predictions are in the "
              "evidence (`by_chip`). Both layouts are the current export (ANE_MATH.md, from the per-head attention to "
              "where the L1024 bytes went): one score einsum per head with the full-attention layers' key bias folded "
              "into it, each norm weight inside its layer_norm op, the last head layer on the marker columns; the "
              "windowed layout runs the sliding-window layers in query tiles."), "",
             (f"| layout | bucket | predicted body {chip} (ms) | predicted request {chip} (ms) | GFLOP | compulsory MB "
              "| unfused MB | non-constant ops | package |"), "|---|---|---|---|---|---|---|---|---|"]
    for layout in ev.value("layouts"):
        for bucket in ev.value("layouts", layout, "buckets"):
            at = ("layouts", layout, "buckets", bucket)
            lines.append(f"| {layout} | {ev.fig(*at, 'length', fmt='d')} | "
                         f"{ev.fig(*at, 'predicted_body_ms', fmt='.2f')} | "
                         f"{ev.fig(*at, 'predicted_request_ms', fmt='.2f')} | {ev.fig(*at, 'gflop', fmt='.2f')} | "
                         f"{ev.fig(*at, 'compulsory_mb', fmt='.1f')} | {ev.fig(*at, 'unfused_mb', fmt='.1f')} | "
                         f"{ev.fig(*at, 'non_constant_ops', fmt='d')} | "
                         f"`{ev.value(*at, 'package', 'content_sha256')[:12]}` |")
    lines.append("")
    if ev.value("comparison") is not None:
        terms = (*cmp, "terms")
        if ev.value(*cmp, "below_mlx"):
            versus = f"{ev.fig(*cmp, 'below_mlx_ms', fmt='.2f')} ms below"
        else:
            versus = f"not below it: {ev.fig(*cmp, 'above_mlx_ms', fmt='.2f')} ms above"
        lines += [(f"Windowed request at L{ev.fig('layouts', 'windowed', 'buckets', '1024', 'length', fmt='d')} on the "
                   f"{ev.fig(*cmp, 'chip')}: **{ev.fig(*cmp, 'windowed_predicted_request_ms', fmt='.2f')} ms "
                   f"predicted** against MLX's {ev.fig(*cmp, 'mlx_p50_ms', fmt='.2f')} ms (ratio "
                   f"{ev.fig(*cmp, 'ratio_to_mlx', fmt='.3f')}), {versus}; the aim, "
                   f"{ev.fig(*cmp, 'aim_ratio_to_mlx', fmt='.1f')}x MLX = {ev.fig(*cmp, 'aim_ms', fmt='.2f')} ms, is "
                   f"{ev.fig(*cmp, 'above_aim_ms', fmt='.2f')} ms away. The windowed request is "
                   f"{ev.fig(*cmp, 'windowed_over_dense_predicted', fmt='.3f')}x the dense one. What bounds it: the "
                   f"roofline floor {ev.fig(*terms, 'floor_ms', fmt='.2f')} ms ({ev.fig(*cmp, 'floor_bound')}-bound), "
                   f"per-op {ev.fig(*terms, 'per_op_ms', fmt='.2f')} ms, activation traffic "
                   f"{ev.fig(*terms, 'traffic_ms', fmt='.2f')} ms "
                   f"({ev.fig(*cmp, 'terms_share', 'traffic_ms', fmt='.0%')} of it), boundary "
                   f"{ev.fig(*terms, 'boundary_ms', fmt='.2f')} ms. With no activation traffic at all the model's "
                   f"request would be {ev.fig(*cmp, 'no_traffic_ms', fmt='.2f')} ms: the traffic an unfused schedule "
                   "writes and reads back is what stands between this graph and the aim. Where it comes from at this "
                   "bucket (unfused MB per category; the windowed layers' tile contractions count as `other`, since "
                   "they make no L x L tensor):"), "",
                  "| category | dense MB | windowed MB | dense ops | windowed ops |", "|---|---|---|---|---|"]
        for category in ev.value(*cmp, "unfused_mb_by_category"):
            at = (*cmp, "unfused_mb_by_category", category)
            lines.append(f"| {category} | {ev.fig(*at, 'dense', fmt='.1f')} | {ev.fig(*at, 'windowed', fmt='.1f')} | "
                         f"{ev.fig(*at, 'ops_dense', fmt='d')} | {ev.fig(*at, 'ops_windowed', fmt='d')} |")
        lines.append("")
    if ev.data.get("tile_scan") is not None:
        scan = ("tile_scan",)
        lines += [(f"Tile size of the windowed layout (windowed body at L{ev.fig(*scan, 'length', fmt='d')}, "
                   f"{ev.fig(*scan, 'label')}): the lowest predicted body is at T = "
                   f"**{ev.fig(*scan, 'lowest_predicted_body_tile', fmt='d')}**; the default tile is "
                   f"{ev.fig(*scan, 'default_tile', fmt='d')} (ANE_MATH.md, choosing the tile size)."), "",
                  f"| tile | predicted body {chip} (ms) | predicted request {chip} (ms) | unfused MB | "
                  "non-constant ops |",
                  "|---|---|---|---|---|"]
        for tile in ev.value(*scan, "tiles"):
            at = (*scan, "tiles", tile)
            lines.append(f"| `{tile}` | {ev.fig(*at, 'predicted_body_ms', fmt='.2f')} | "
                         f"{ev.fig(*at, 'predicted_request_ms', fmt='.2f')} | {ev.fig(*at, 'unfused_mb', fmt='.1f')} | "
                         f"{ev.fig(*at, 'non_constant_ops', fmt='d')} |")
        lines.append("")
    if ev.value("mil_timing") is not None:
        mil = ("mil_timing",)
        lines += [(f"Measured on the `mil` executor (CPU, not the Neural Engine): windowed / dense body time at "
                   f"L{ev.fig(*mil, 'length', fmt='d')}, **{ev.fig('measured_mil_ratio', fmt='.3f')}** (median of "
                   f"{ev.fig(*mil, 'calls', fmt='d')} ABBA-interleaved pairs on a real "
                   f"{ev.fig(*mil, 'input', 'tokens', fmt='d')}-token request; dense p50 "
                   f"{ev.fig(*mil, 'dense', 'p50_ms', fmt='.0f')} ms, windowed p50 "
                   f"{ev.fig(*mil, 'windowed', 'p50_ms', fmt='.0f')} ms; option logits of the two layouts differ by at "
                   f"most {ev.fig(*mil, 'max_abs_logit_difference_active_slots', fmt='num4')})."), ""]
    return lines


FULL_SIZE_SECTIONS = (
    ("probe_export_mmbert_base_shape.json", section_full_export),
    ("cost_model_mmbert_base_shape.json", section_cost_model),
    ("cost_calibration_mmbert_base_shape.json", section_calibration),
    ("long_attention_mmbert_base_shape.json", section_long_attention),
    ("mil_executor_mmbert_base_shape.json", section_executor),
    ("palettize_kmeans_mmbert_base_shape.json", section_kmeans),
    ("reweight_mmbert_base_shape.json", section_reweight),
    ("fp16_range_mmbert_base_shape.json", section_full_range),
)
