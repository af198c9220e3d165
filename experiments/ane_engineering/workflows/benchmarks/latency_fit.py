"""The evidence logic of benchmarks/latency_fit.py: the cross-chip latency model (placement/chip_fit.py) fitted on
every countable public point, checked by leave-one-chip-out and leave-one-source-out, compared with ANEForge's
cost-model form, with the device-state band and the ANE/GPU routing per chip.

Reads the public points (placement/public_latencies.json) and the program counts (benchmarks/evidence/
latency_counts.json, written by benchmarks/latency_counts.py); converts nothing. Predictions, not measurements.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ...core.json_documents import read_json
from ...core.provenance import REPOSITORY_ROOT, harness_fingerprint, machine, tool_versions
from ...placement import chip_fit, crossover, public_latencies
from ...placement.chips import load_chips
from ...placement.regions import stated_regions

COUNTS_PATH = REPOSITORY_ROOT / "benchmarks" / "evidence" / "latency_counts.json"
ROUTING_GRID = tuple(range(64, 1025, 32))
BAND_QUANTILES = (0.1, 0.9)


def load_counts(path: Path | str = COUNTS_PATH) -> dict:
    document = read_json(path, {"type": "object", "required": ["format", "programs"],
                                "properties": {"format": {"const": chip_fit.COUNTS_FORMAT}}}, chip_fit.ChipFitError)
    return document


def point_rows(document: dict, counts: dict, chips: dict) -> list[dict]:
    """One row per countable public point: its features on its chip, what it is and whether it is fitted."""
    rows = []
    for point in document["points"]:
        if point["counted_as"] is None:
            continue
        key = chip_fit.program_key(point["counted_as"])
        if key not in counts["programs"]:
            raise chip_fit.ChipFitError(f"no counts for {key} (point {point['id']}); rerun "
                                        "benchmarks/latency_counts.py")
        program = chip_fit.program_at(counts["programs"][key], point["length"])
        program["attention_heads"] = public_latencies.model_dims(point["counted_as"]["model"], document)[
            "num_attention_heads"]
        stated = point["graph"].get("regions")
        crossings = (stated_regions(stated)["crossings"] if stated is not None
                     else program["regions"]["crossings"])
        rows.append({"id": point["id"], "series": point["series"], "source": point["source"], "chip": point["chip"],
                     "graph_kind": point["graph"]["kind"], "length": point["length"], "scope": point["scope"],
                     "fit": point["fit"], "measured_ms": point["measured_ms"], "program": key,
                     "crossings": crossings, "state": point.get("state", "warm"),
                     "features": chip_fit.features(program, chips[point["chip"]], point["scope"], crossings)})
    return rows


def aneforge_form(rows: list[dict]) -> dict:
    """ANEForge's cost-model form, overhead + scale * max(FLOPs / peak, bytes / bandwidth) per program (sbryngelson/
    ANEForge docs/cross-chip.md), its two constants fitted the same way, and its leave-one-chip-out errors."""
    from scipy.optimize import lsq_linear

    def roof(row):
        f = row["features"]
        return max(f["compute"], f["weights"] + f["resident"] + f["spill"])

    def solve(train):
        design = np.array([[1.0 / r["measured_ms"], roof(r) / r["measured_ms"]] for r in train])
        return lsq_linear(design, np.ones(len(train)), bounds=(0, np.inf)).x

    held = []
    for chip in sorted({r["chip"] for r in rows}):
        overhead, scale = solve([r for r in rows if r["chip"] != chip and r["fit"]])
        for row in (r for r in rows if r["chip"] == chip):
            predicted = overhead + scale * roof(row)
            held.append({"id": row["id"], "chip": chip, "graph_kind": row["graph_kind"],
                         "relative_error": predicted / row["measured_ms"] - 1.0})
    overhead, scale = solve([r for r in rows if r["fit"]])
    masked = [r for r in held if r["graph_kind"] == public_latencies.MASKED_BC1S]
    return {"form": "overhead_ms + scale * max(FLOPs / peak, unfused bytes / bandwidth)",
            "source": "sbryngelson/ANEForge docs/cross-chip.md ('t = overhead + max(flops/peak, bytes/bw) per fused "
                      "program'), fitted here on the same points",
            "overhead_ms": float(overhead), "scale": float(scale),
            "leave_one_chip_out": {"masked_bc1s": chip_fit.error_summary(masked),
                                   "other_graphs": chip_fit.error_summary([r for r in held if r not in masked])}}


def summaries(records: list[dict], rows_by_id: dict, key: str) -> dict:
    """Held-out error summaries: our graph's kind (overall and per chip/source) and the other graphs."""
    masked = [r for r in records if rows_by_id[r["id"]]["graph_kind"] == public_latencies.MASKED_BC1S]
    other = [r for r in records if r not in masked]
    return {"masked_bc1s": chip_fit.error_summary(masked),
            "masked_bc1s_by_" + key: {g: chip_fit.error_summary([r for r in masked if r[key] == g])
                                      for g in sorted({r[key] for r in masked})},
            "other_graphs": chip_fit.error_summary(other),
            "other_graphs_by_point": {r["id"]: r["relative_error"] for r in other}}


def band(records: list[dict], rows_by_id: dict) -> dict:
    """The prediction band: quantiles of measured / predicted over the held-out points of our graph's kind."""
    ratios = sorted(r["measured_ms"] / r["predicted_ms"] for r in records
                    if rows_by_id[r["id"]]["graph_kind"] == public_latencies.MASKED_BC1S
                    and rows_by_id[r["id"]]["fit"])
    low, high = (float(np.quantile(ratios, q)) for q in BAND_QUANTILES)
    return {"low_ratio": low, "high_ratio": high, "points": len(ratios), "min_ratio": ratios[0],
            "max_ratio": ratios[-1], "quantiles": list(BAND_QUANTILES),
            "basis": (f"measured / predicted over the {len(ratios)} masked-BC1S points, each predicted by the fit that "
                      f"never saw its chip: the band is its {BAND_QUANTILES[0]:.0%} to {BAND_QUANTILES[1]:.0%} range "
                      "times the prediction (min and max given beside it)")}


def device_state(document: dict) -> dict:
    """Burst against sustained state, as public sources observed it, as ratios to the warm median they measured."""
    states = []
    points = {p["id"]: p for p in document["points"]}
    for observation in document["observations"]:
        if "burst_ms" not in observation:
            continue
        median = points.get("granite-m4-1region-L128")
        entry = {**observation}
        if median is not None and observation["source"] == median["source"]:
            entry["warm_median_ms"] = median["measured_ms"]
            entry["burst_ratio"] = observation["burst_ms"] / median["measured_ms"]
            entry["sustained_ratio"] = observation["sustained_ms"] / median["measured_ms"]
        states.append(entry)
    return {"observations": states,
            "power_state": ("no public ANE timing on battery or in low-power mode was found; every source that states "
                            "its power state measured on AC (laya-apple, ANEForge)"),
            "rule": ("a prediction is a warm median of a quiet machine; the device-state band scales it by the burst "
                     "and sustained ratios observed (one graph on one chip: granite on a base M4, Core AI)")}


def routing(fitted: dict, counts: dict, document: dict, chips: dict) -> list[dict]:
    """Per chip with a public GPU curve of a counted model: the predicted ANE request against the curve on a grid."""
    out = []
    for curve in document["gpu_curves"]:
        key = chip_fit.program_key({"model": curve["model"], "kind": "body", "layout": "reference-run"})
        if key not in counts["programs"]:
            continue
        points = sorted((p["length"], p["ms"]) for p in curve["points"])
        predicted = {}
        for length in ROUTING_GRID:
            program = chip_fit.program_at(counts["programs"][key], length)
            program["attention_heads"] = public_latencies.model_dims(curve["model"], document)["num_attention_heads"]
            predicted[length] = chip_fit.predict(fitted["coefficients"],
                                                 chip_fit.features(program, chips[curve["chip"]], "request"))
        measured = {p["length"]: p["measured_ms"] for p in document["points"]
                    if p["chip"] == curve["chip"] and (p["counted_as"] or {}).get("model") == curve["model"]
                    and p["scope"] == "request" and p["fit"]}
        result = crossover.crossover(predicted, points)
        for row in result["rows"]:
            row["public_ane_ms"] = measured.get(row["length"])
        out.append({"chip": curve["chip"], "model": curve["model"], "gpu_curve": curve["id"],
                    "framework": curve["framework"], "program": key, **result})
    return out


GRANITE_PAIR = ("granite-m4-1region", "granite-m4-13region")


def regions_check(per_point: list[dict], series: tuple[str, str] = GRANITE_PAIR) -> dict:
    """The one public pair that times the same graph as one and as several ANE regions (the granite card): the
    measured ratio against the predicted one, in-sample and with the source held out (the crossing term then comes
    from the sourced prior, as no other source has a split graph)."""
    one = next((p for p in per_point if p["series"] == series[0]), None)
    split_ = next((p for p in per_point if p["series"] == series[1]), None)
    if one is None or split_ is None:
        return {"checked": False, "why": f"no points of {series}"}
    return {"checked": True, "one_region": one["id"], "split": split_["id"], "crossings": split_["crossings"],
            "measured_ratio": split_["measured_ms"] / one["measured_ms"],
            "in_sample_ratio": split_["in_sample_ms"] / one["in_sample_ms"],
            "source_held_out_ratio": split_["leave_one_source_out_ms"] / one["leave_one_source_out_ms"],
            "measured_extra_ms": split_["measured_ms"] - one["measured_ms"],
            "source_held_out_extra_ms": split_["leave_one_source_out_ms"] - one["leave_one_source_out_ms"]}


def fit_evidence(counts_path: Path | str = COUNTS_PATH) -> dict:
    chips = load_chips()
    document = public_latencies.load()
    counts = load_counts(counts_path)
    prior = document["priors"]["crossing_ms"]["value"]
    rows = point_rows(document, counts, chips)
    rows_by_id = {r["id"]: r for r in rows}
    fitted_rows = [r for r in rows if r["fit"]]
    fitted = chip_fit.fit(fitted_rows, prior)
    loco = chip_fit.leave_one_out(rows, "chip", prior)
    loso = chip_fit.leave_one_out(rows, "source", prior)
    loco_by_id, loso_by_id = {r["id"]: r for r in loco}, {r["id"]: r for r in loso}
    per_point = []
    for row in rows:
        in_sample = chip_fit.predict(fitted["coefficients"], row["features"])
        per_point.append({k: row[k] for k in ("id", "series", "source", "chip", "graph_kind", "length", "scope",
                                               "measured_ms", "crossings", "state", "program")}
                         | {"fitted": row["fit"], "in_sample_ms": in_sample,
                            "in_sample_error": in_sample / row["measured_ms"] - 1.0,
                            "leave_one_chip_out_ms": loco_by_id[row["id"]]["predicted_ms"],
                            "leave_one_chip_out_error": loco_by_id[row["id"]]["relative_error"],
                            "leave_one_source_out_ms": loso_by_id[row["id"]]["predicted_ms"],
                            "leave_one_source_out_error": loso_by_id[row["id"]]["relative_error"],
                            "terms_ms": chip_fit.terms_ms(fitted["coefficients"], row["features"]),
                            "spill_share": row["features"]["_spill_share"],
                            "attention_layer_mb": row["features"]["_layer_mb"]})
    not_counted = [{"id": p["id"], "chip": p["chip"], "graph_kind": p["graph"]["kind"], "length": p["length"],
                    "measured_ms": p["measured_ms"], "why": p["why_not_counted"]}
                   for p in document["points"] if p["counted_as"] is None]
    counts_file = Path(counts_path)
    return {
        "format": chip_fit.FORMAT, "label": chip_fit.LABEL,
        "benchmark": "latency model fitted across chips on public Neural Engine timings, checked on held-out chips",
        "model": {"body_ms": [f"{t}: {chip_fit.TERM_UNITS[t]}" for t in chip_fit.TERMS if t != "host"],
                  "request_ms": "body_ms + host (request-scope points only)",
                  "fit": "bounded least squares (>= 0) on relative residuals, scipy.optimize.lsq_linear",
                  "about": chip_fit.SUMMARY},
        "fit": {**fitted, "coefficients_described": chip_fit.describe(fitted["coefficients"],
                                                                       fitted["standard_errors"])},
        "points": per_point, "not_counted": not_counted,
        "leave_one_chip_out": {"records": loco, "summary": summaries(loco, rows_by_id, "chip")},
        "leave_one_source_out": {"records": loso, "summary": summaries(loso, rows_by_id, "source")},
        "regions_check": regions_check(per_point),
        "band": band(loco, rows_by_id), "device_state": device_state(document),
        "aneforge_form": aneforge_form(rows), "routing": routing(fitted, counts, document, chips),
        "chips": {key: chip_fit.chip_figures(key, chips) for key in sorted({r["chip"] for r in rows})},
        "inputs": {"public_latencies": "experiments/ane_engineering/placement/public_latencies.json",
                   "public_latencies_sha256": hashlib.sha256(public_latencies.PATH.read_bytes()).hexdigest(),
                   "counts": str(counts_file.relative_to(REPOSITORY_ROOT)) if counts_file.is_absolute()
                   and REPOSITORY_ROOT in counts_file.parents else str(counts_file),
                   "counts_sha256": hashlib.sha256(counts_file.read_bytes()).hexdigest(),
                   "prior_crossing_ms": document["priors"]["crossing_ms"]},
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }

