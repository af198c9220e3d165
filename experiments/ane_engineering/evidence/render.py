"""Render ANE_BENCHMARKS.md from evidence JSON: no hand-typed numbers.

Every figure is printed from a field of an evidence file, and every section links the file it came from with
its SHA256 and the hashes that file records (package, source weights, harness). tests/test_render.py checks that
each number in a rendered report appears in the evidence files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..json_documents import ANY_OBJECT, read_json


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


LINK_PREFIX = ""  # set by render_repository so links resolve from the repository root


def _link(root: Path, path: Path) -> str:
    relative = LINK_PREFIX + path.relative_to(root).as_posix()
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
    return read_json(path, ANY_OBJECT) if path.is_file() else None


def section_probe(root: Path) -> list[str]:
    probes = sorted(root.glob("packages/*/probe.json"), key=lambda p: read_json(p, ANY_OBJECT)["length"])
    if not probes:
        return []
    lines = ["## Export and placement (probe)", "",
             "Static ANE rules are a prediction (no Core ML compute plan runs off macOS); the layout check compares "
             "the BC1S model with the reference in FP32.", "",
             "| bucket | non-constant ops | static violations | warnings | layout max abs | convert (s) | evidence |",
             "|---|---|---|---|---|---|---|"]
    for path in probes:
        probe = read_json(path, ANY_OBJECT)
        static = probe["placement"]["static"]
        lines.append(f"| {probe['length']} | {probe['mil_ops']['non_constant']} | {static['violations']} | "
                     f"{static['warnings']} | {_num(probe['layout_check']['max_abs'], 3)} | "
                     f"{probe['export']['convert_seconds']:.1f} | {_link(root, path)} |")
    first = read_json(probes[0], ANY_OBJECT)
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

    sweep = read_json(path, ANY_OBJECT)
    table = markdown_table(sweep, evidence_name=path.relative_to(root).as_posix())
    png = root / "sweep" / "sweep.png"
    lines = ["## Palettization sweep", "", f"Evidence: {_link(root, path)}.", "", table]
    if png.is_file():
        lines += [f"![size against error]({LINK_PREFIX}{png.relative_to(root).as_posix()})", ""]
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
        bench = read_json(path, ANY_OBJECT)
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


# ---------------------------------------------------------------------------------------- repository report

def _evidence(root: Path, name: str) -> tuple[Path, dict] | None:
    path = root / name
    return (path, read_json(path, ANY_OBJECT)) if path.is_file() else None


def _harness(data: dict) -> str:
    harness = data.get("harness") or data.get("provenance", {}).get("harness") or {}
    return f"harness `{harness.get('sha256', '?')[:12]}`"


def section_full_export(repo: Path, found) -> list[str]:
    path, data = found
    lines = ["### Export (probe) at full size", "",
             f"Each export in a fresh process; evidence {_link(repo, path)}, {_harness(data)}. Goal: at most "
             f"{data['goal']['convert_seconds_max']} s and 3 GB per conversion on a 2-core machine.", "",
             "| bucket | trace + convert (s) | save (s) | peak RSS (GiB) | non-constant ops | static violations | "
             "layout max abs | package |", "|---|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        lines.append(f"| {run['length']} | {run['convert_seconds']:.1f} | {run['save_seconds']:.1f} | "
                     f"{run['peak_rss_gib']:.2f} | {run['non_constant_ops']} | {run['static_violations']} | "
                     f"{_num(run['layout_max_abs'], 3)} | `{run['package_sha256'][:12]}` |")
    return lines + [""]


def section_cost_model(repo: Path, found) -> list[str]:
    path, data = found
    check = data["reference_check"]
    lines = ["### Cost model and the reference run", "",
             f"{data['label']}. Evidence {_link(repo, path)}, {_harness(data)}. Chip figures and their sources are in "
             "the evidence (`chips`); the floor is max(FLOPs / peak FP16 rate, bytes every call must move / "
             "bandwidth); the unfused estimate assumes every op round-trips memory.", "",
             "| bucket | GFLOP | compulsory MB | unfused MB | floor M3 Max (ms) | bound | unfused estimate (ms) | "
             "L x L einsum share of FLOPs | L x L ops share of bytes |", "|---|---|---|---|---|---|---|---|---|"]
    for row in data["summary"]:
        if row["chip"] != check["chip"]:
            continue
        lines.append(f"| {row['length']} | {row['gflops']:.2f} | {row['compulsory_mb']:.1f} | {row['unfused_mb']:.1f} | "
                     f"{row['floor_ms']:.3f} | {row['bound']} | {row['unfused_floor_ms']:.3f} | "
                     f"{row['lxl_einsum_flops_share']:.3f} | {row['lxl_tensor_ops_bytes_share']:.3f} |")
    lines += ["", f"Reference run ({check['citation']}) beside the floor:", "",
              "| measurement | measured (ms) | floor (ms) | measured / floor | measured / unfused estimate |",
              "|---|---|---|---|---|"]
    for row in check["rows"]:
        lines.append(f"| {row['what']} | {row['measured_ms']:.3f} | {row['floor_ms']:.3f} | "
                     f"{row['ratio_to_floor']:.2f} | {row['ratio_to_unfused_floor']:.2f} |")
    return lines + [""]


def section_executor(repo: Path, found) -> list[str]:
    path, data = found
    alone = data["executor_alone"]
    return ["### The mil executor at full size", "",
            f"Body at L{data['package']['length']}, synthetic inputs, executor and BC1S torch FP32 forward alternating "
            f"in one process ({data['rounds']} rounds). Evidence {_link(repo, path)}, {_harness(data)}.", "",
            "| mil p50 (s) | torch FP32 p50 (s) | ratio p50 | executor alone: peak RSS (GB) | load (s) | "
            "max option-logit difference |", "|---|---|---|---|---|---|",
            f"| {data['mil_p50_seconds']:.2f} | {data['torch_p50_seconds']:.2f} | {data['ratio_p50']:.2f} | "
            f"{alone['peak_rss_gb']:.2f} | {alone['load_seconds']:.1f} | {_num(data['max_option_logit_difference'], 4)} |",
            "", f"Goal: ratio at most {data['goal']['time_ratio_max']}, peak RSS at most 2 GB.", ""]


def section_kmeans(repo: Path, found) -> list[str]:
    path, data = found
    lines = ["### Palettization: coremltools k-means against the exact k-means", "",
             f"Full-size body, group size 32, {data['workers']} workers, both implementations in fresh processes back "
             f"to back. Evidence {_link(repo, path)}, {_harness(data)}.", "",
             "| bits | exact (s) | coremltools (s) | speed-up | exact peak RSS | coremltools peak RSS | groups not worse "
             "/ groups | per-group SSE ratio max | total SSE ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        def rss(entry):
            return f"{entry['peak_rss_gib']:.2f} GiB" if "peak_rss_gib" in entry else f"{entry['peak_rss_bytes']} B"
        lines.append(f"| {run['bits']} | {run['exact']['palettize_seconds']:.1f} | "
                     f"{run['coremltools']['palettize_seconds']:.1f} | {run['speedup']:.1f} | {rss(run['exact'])} | "
                     f"{rss(run['coremltools'])} | {run['sse']['not_worse']}/{run['sse']['groups']} | "
                     f"{run['sse']['ratio_max']:.6f} | {run['sse']['total_ratio']:.6f} |")
    return lines + [""]


def section_reweight(repo: Path, found) -> list[str]:
    path, data = found
    warm = data["warm_in_one_process"]
    swaps = ", ".join(f"{seconds:.3f}" for seconds in warm["reweight_seconds"])
    return ["### Delta weight update (reweight) against re-export", "",
            f"A same-architecture checkpoint into the L{data['parent']['length']} body. Evidence {_link(repo, path)}, "
            f"{_harness(data)}. Identical to a fresh export: **{data['identical_to_fresh_export']}** "
            f"({data['blobs_rewritten']} blobs rewritten); the in-process reweights identical to the in-process probe: "
            f"**{warm['reweights_identical_to_probe']}**.", "",
            "| | re-export (s) | reweight (s) | speed-up |", "|---|---|---|---|",
            f"| fresh processes (commands) | {data['export_command_seconds']:.1f} | {data['reweight_command_seconds']:.2f} "
            f"| {data['speedup_commands']:.1f} |",
            f"| one process: convert + save | {warm['convert_and_save_seconds']:.1f} | "
            f"{warm['reweight_median_seconds']:.3f} | {warm['speedup_vs_convert_and_save']:.1f} |",
            f"| one process: whole probe | {warm['probe_seconds']:.1f} | {warm['reweight_median_seconds']:.3f} "
            f"| {warm['speedup_vs_probe']:.1f} |", "",
            f"In-process reweights (s): {swaps}; the median is used. Goal: at least {data['goal']['speedup_min']:.0f}x, "
            f"judged {data['goal']['judged_on']}: **{'met' if data['meets_goal'] else 'not met'}**. The commands' "
            "ratio is bounded by what both pay: interpreter start, torch and coremltools imports, and the SHA256 of "
            "the checkpoint.", ""]


def section_full_range(repo: Path, found) -> list[str]:
    from .fp16_range import summary_lines

    path, data = found
    return ["### FP16 range at full size", "", f"Evidence {_link(repo, path)}, {_harness(data)}.", "",
            *summary_lines(data), ""]


FULL_SIZE_SECTIONS = (
    ("probe_export_mmbert_base_shape.json", section_full_export),
    ("cost_model_mmbert_base_shape.json", section_cost_model),
    ("mil_executor_mmbert_base_shape.json", section_executor),
    ("palettize_kmeans_mmbert_base_shape.json", section_kmeans),
    ("reweight_mmbert_base_shape.json", section_reweight),
    ("fp16_range_mmbert_base_shape.json", section_full_range),
)
REPRODUCE_DIR = "reproduce-builtin-tiny"


def render_repository(repo: Path, evidence_dir: str = "benchmarks/evidence") -> str:
    """ANE_BENCHMARKS.md of the repository: full-size evidence, then the committed builtin:tiny reproduce run."""
    global LINK_PREFIX
    repo = Path(repo)
    root = repo / evidence_dir
    lines = ["# ANE benchmarks", "",
             "Rendered by `python -m experiments.ane_engineering.evidence.render` from the evidence JSON under "
             f"`{evidence_dir}/`; every figure links the file it came from, whose SHA256 is shown and which records "
             "the package, source and harness hashes that produced it. No number here is typed by hand. Figures "
             "measured with the `mil` backend are CPU timings of the project's reference executor on the Linux build "
             "machine (2 cores), not Neural Engine figures; cost-model floors are predictions.", "",
             "## Full-size model (`builtin:mmbert-base-shape`: mmBERT-base dimensions, random weights)", ""]
    for name, section in FULL_SIZE_SECTIONS:
        found = _evidence(root, name)
        lines += section(repo, found) if found else [f"(no `{name}` yet)", ""]
    reproduce_root = root / REPRODUCE_DIR
    if reproduce_root.is_dir():
        LINK_PREFIX = f"{evidence_dir}/{REPRODUCE_DIR}/"
        try:
            body = render_directory(reproduce_root, title="x").split("\n", 2)[2]
        finally:
            LINK_PREFIX = ""
        lines += ["## The reproduce chain on `builtin:tiny`", "",
                  f"The README's main command, run once with its evidence committed under `{evidence_dir}/{REPRODUCE_DIR}/`.",
                  "", body.replace("\n## ", "\n### ")]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m experiments.ane_engineering.evidence.render",
                                     description="Render the repository's ANE_BENCHMARKS.md from committed evidence.")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[3])
    parser.add_argument("--check", action="store_true", help="exit 1 if ANE_BENCHMARKS.md differs from a fresh render")
    args = parser.parse_args(argv)
    text = render_repository(args.repo)
    target = args.repo / "ANE_BENCHMARKS.md"
    if args.check:
        return 0 if target.read_text(encoding="utf-8") == text else 1
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
