"""The roofline latency floor of a counted program on one chip (compute at the FP16 peak, bytes at the ANE's
bandwidth; cost_model.py's docstring defines the terms), set beside a measurement, and the check of the counted
reference-run programs against the reference run's timings (core/reference_run.json)."""

from __future__ import annotations

from ..core import reference_run
from .chips import chip_key, effective_peak, load_chips


def latency_floor(cost: dict, chip: dict) -> dict:
    """Roofline times of a program_cost() result on one chip (see the module docstring for each field)."""
    peak_tflops, assumed = effective_peak(chip)
    peak = peak_tflops * 1e12
    bandwidth = chip["ane_bandwidth_gbs"] * 1e9
    totals = cost["totals"]
    compute_ms = totals["flops"] / peak * 1e3
    memory_ms = totals["compulsory_bytes"] / bandwidth * 1e3
    unfused_ms = totals["unfused_bytes"] / bandwidth * 1e3
    by_category = {}
    for name, bucket in cost["by_category"].items():
        if not bucket["ops"]:
            continue
        c, m = bucket["flops"] / peak * 1e3, bucket["bytes"] / bandwidth * 1e3
        by_category[name] = {"compute_ms": c, "memory_ms": m, "roofline_ms": max(c, m),
                             "bound": "compute" if c >= m else "memory"}
    category_sum = sum(v["roofline_ms"] for v in by_category.values())
    for value in by_category.values():
        value["share"] = value["roofline_ms"] / category_sum if category_sum else None
    result = {
        "peak_fp16_tflops": peak_tflops,
        "peak_is_assumed": assumed,
        "ane_bandwidth_gbs": chip["ane_bandwidth_gbs"],
        "compute_ms": compute_ms,
        "memory_ms": memory_ms,
        "floor_ms": max(compute_ms, memory_ms),
        "bound": "compute" if compute_ms >= memory_ms else "memory",
        "unfused_memory_ms": unfused_ms,
        "unfused_floor_ms": max(compute_ms, unfused_ms),
        "unfused_bound": "compute" if compute_ms >= unfused_ms else "memory",
        "no_overlap_ms": compute_ms + unfused_ms,
        "by_category": by_category,
        "category_roofline_sum_ms": category_sum,
        "labels": {
            "floor_ms": "lower bound: max(FLOPs / peak FP16, compulsory bytes (weights once + I/O) / bandwidth)",
            "unfused_floor_ms": "estimate, not a bound: max(FLOPs / peak, bytes if every op round-trips memory)",
            "no_overlap_ms": "pessimistic estimate: compute + unfused memory time, nothing overlapped",
            "by_category": "each category's own roofline time (max of its compute and unfused memory time)",
        },
    }
    lxl = cost.get("lxl")
    if lxl:
        tensor_ops = lxl["tensor_ops"]
        c, m = tensor_ops["flops"] / peak * 1e3, tensor_ops["bytes"] / bandwidth * 1e3
        result["lxl_tensor_ops_roofline_ms"] = max(c, m)
        result["lxl_tensor_ops_share_of_category_sum"] = max(c, m) / category_sum if category_sum else None
    if chip.get("peak_fp16_tflops_if_int8_counted") and chip["peak_fp16_tflops_if_int8_counted"] != chip[
            "peak_fp16_tflops"]:
        alt_compute = totals["flops"] / (chip["peak_fp16_tflops_if_int8_counted"] * 1e12) * 1e3
        result["if_tops_were_int8_counted"] = {
            "peak_fp16_tflops": chip["peak_fp16_tflops_if_int8_counted"], "compute_ms": alt_compute,
            "floor_ms": max(alt_compute, memory_ms), "unfused_floor_ms": max(alt_compute, unfused_ms)}
    return result


def floor_beside(measured_ms: float, cost: dict, chip: dict) -> dict:
    """A measurement shown beside its floors: measured / floor ratios (>= 1 unless the model is wrong)."""
    floor = latency_floor(cost, chip)
    return {"measured_ms": measured_ms, "floor_ms": floor["floor_ms"], "bound": floor["bound"],
            "ratio_to_floor": measured_ms / floor["floor_ms"],
            "unfused_floor_ms": floor["unfused_floor_ms"],
            "ratio_to_unfused_floor": measured_ms / floor["unfused_floor_ms"]}


def reference_model_mismatches(model_config: dict | None, reference: dict | None = None) -> list[str]:
    """How a package's model config (manifest["model_config"]) differs from the reference run's model; [] if it
    has the same dimensions, so the reference timings may be set beside its floors."""
    if not model_config:
        return ["no model config"]
    reference = reference or reference_run.load()
    problems = []
    for section in ("encoder", "head"):
        for field, expected in reference["model"][section].items():
            actual = (model_config.get(section) or {}).get(field)
            if actual != expected:
                problems.append(f"{section}.{field} = {actual!r}, reference {expected!r}")
    return problems


def reference_check(costs_by_length: dict[int, dict], chips: dict | None = None,
                    reference: dict | None = None) -> dict:
    """Measured / floor ratios of the reference run's timings against the body cost at the same length.

    Full-path measurements include host work the body package does not contain; `host_overhead_ms` is the L96
    full-path minus body-alone difference, and `ratio_without_l96_host_overhead` subtracts it (the host work grows
    with L, e.g. the masks, so that ratio still over-states the body's share)."""
    chips = chips or load_chips()
    reference = reference or reference_run.load()
    chip_name = reference["machine"]["chip"]
    chip = chips[chip_key(chip_name)]
    measurements = reference["timings"]["measurements"]
    by_id = {m["id"]: m for m in measurements}
    host_overhead = None
    if "L96-full-path" in by_id and "L96-body" in by_id:
        host_overhead = by_id["L96-full-path"]["p50_ms"] - by_id["L96-body"]["p50_ms"]
    rows = []
    for measurement in measurements:
        cost = costs_by_length.get(measurement["length"])
        if cost is None:
            continue
        row = {**measurement, **floor_beside(measurement["p50_ms"], cost, chip)}
        floor = latency_floor(cost, chip)
        alt = floor.get("if_tops_were_int8_counted")
        if alt:
            row["ratio_to_floor_if_tops_were_int8_counted"] = measurement["p50_ms"] / alt["floor_ms"]
        if measurement["scope"] == "full_path" and host_overhead is not None:
            body_estimate = measurement["p50_ms"] - host_overhead
            row["host_overhead_ms"] = host_overhead
            row["ratio_without_l96_host_overhead"] = body_estimate / floor["floor_ms"]
            row["unfused_ratio_without_l96_host_overhead"] = body_estimate / floor["unfused_floor_ms"]
        row["compute_ms"], row["memory_ms"] = floor["compute_ms"], floor["memory_ms"]
        row["unfused_memory_ms"] = floor["unfused_memory_ms"]
        rows.append(row)
    return {"citation": reference_run.citation(reference), "chip": chip_name, "chip_figures": {
        k: chip[k] for k in ("peak_fp16_tflops", "ane_bandwidth_gbs", "fp16_basis", "bandwidth_source")},
        "rows": rows}
