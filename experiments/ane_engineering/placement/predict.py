"""Predicted Neural Engine latency of one counted program on the chips of the table: the cross-chip fit
(chip_fit.py, its coefficients from benchmarks/evidence/latency_fit.json), with its band, the device-state band, the
ANE regions the static placement splits the program into, the nearest public points and their fitted/held-out
status, and the route against a public GPU curve where one exists for this model on that chip.

    predicted_body_ms    = the fitted terms (compute, weights, resident and spilled activations, per op, crossings)
    predicted_request_ms = predicted_body_ms + the fitted per-request host term

Uncertainty is reported beside every number, never folded into it:

- band: measured / predicted over the public points of this harness's graph kind, each predicted by the fit that
  never saw its chip (leave-one-chip-out), as its 10% to 90% range times the prediction.
- device_state: the burst and sustained states a public source observed (ratios to its warm median): a warm median
  on a quiet machine can be that much faster early in a run, or slower once the device settles.
- assumed: chip figures that are a stated assumption (chips.json assumed_peak_fp16_tflops, assumed SRAM).

NOT_MODELLED lists what the model does not see. Every output here is a prediction, not a measurement.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..core.errors import HarnessError
from ..core.json_documents import read_json
from ..core.provenance import REPOSITORY_ROOT
from . import chip_fit, public_latencies
from .chips import chip_key, effective_peak, load_chips

FORMAT = "ane-engineering/prediction/2"
FIT_PATH = REPOSITORY_ROOT / "benchmarks" / "evidence" / "latency_fit.json"
NEAREST = 3
NOT_MODELLED = (
    "fusion beyond the residency rule: the model charges (B, C, 1, L) activation traffic with one fitted share and "
    "spills an attention block's L x L traffic past the chip's SRAM; the compiler's real tiling is not seen",
    "row padding: the Neural Engine pads each row of a tensor's last axis to 64 bytes; the byte counts use the dense "
    "element count",
    "the host's CPU work of a request is one fitted constant (host); it does not grow with the length or the machine",
    "device state and power state: a prediction is a warm median on a quiet machine on AC power; device_state gives "
    "the burst/sustained range one public source observed, and no public battery or low-power timing exists",
    "graph: the prediction is for the program given (this harness's export); another port's graph of the same model "
    "has other op counts and traffic, and Core AI (torch.export) graphs were fitted beside Core ML ones",
    "chips without any public point (every chip but the M3 Max, M4, M4 Pro and M4 Max) rely on the chip figures "
    "alone: the per-op and host terms are the fitted ones of the other generations",
)


class PredictionError(HarnessError):
    """A prediction the model cannot make (unknown chip, missing or malformed fit evidence)."""


def load_fit(path: Path | str = FIT_PATH) -> dict:
    """The latency-fit evidence (benchmarks/latency_fit.py); refuses a missing or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise PredictionError(f"{path}: no latency-fit evidence; write it with "
                              "`python benchmarks/latency_fit.py --output <path>`")
    schema = {"type": "object", "required": ["format", "fit", "band", "points", "device_state"],
              "properties": {"format": {"const": chip_fit.FORMAT},
                             "fit": {"type": "object", "required": ["coefficients"],
                                     "properties": {"coefficients": {
                                         "type": "object", "required": list(chip_fit.TERMS),
                                         "additionalProperties": {"type": "number", "minimum": 0}}}}}}
    return read_json(path, schema, PredictionError)


def resolve_chips(names: list[str] | None, chips: dict | None = None) -> list[str]:
    """Table keys of the requested chips (all when none); refuses an unknown one naming the known ones."""
    chips = chips or load_chips()
    if not names:
        return list(chips)
    keys = []
    for name in names:
        key = name if name in chips else chip_key(name)
        if key not in chips:
            raise PredictionError(f"unknown chip {name!r}; known chips: {', '.join(chips)}")
        keys.append(key)
    return keys


def program_of(cost: dict, heads: int | None = None) -> dict:
    """The fit's view of a program_cost() result: totals, L x L bytes, attention blocks (per head) and the heads of a
    layer, and regions (a program counted without its regions is taken as one ANE region, and says so)."""
    totals = cost["totals"]
    lxl = cost.get("lxl") or {}
    blocks = sum(group["blocks"] for group in (lxl.get("blocks_by_mask") or {}).values())
    regions = cost.get("regions") or {"label": "not counted: taken as one ANE region", "regions": 1, "islands": 0,
                                      "crossings": 0, "split": [], "crossing_ops": []}
    return {**{f: totals[f] for f in chip_fit.FIELDS if f != "lxl_bytes"},
            "lxl_bytes": (lxl.get("tensor_ops") or {}).get("bytes", 0), "attention_blocks": blocks,
            "attention_heads": heads, "regions": regions}


def _scaled(value: float, band: dict) -> list[float]:
    return [value * band["low_ratio"], value * band["high_ratio"]]


def _state(value: float, device_state: dict) -> dict | None:
    for observation in device_state["observations"]:
        if "burst_ratio" in observation:
            return {"burst_ms": value * observation["burst_ratio"],
                    "sustained_ms": value * observation["sustained_ratio"],
                    "basis": f"{observation['id']}: burst {observation['burst_ms']} ms and sustained "
                             f"{observation['sustained_ms']} ms against a warm median of "
                             f"{observation['warm_median_ms']} ms ({observation['model']}, chip {observation['chip']})"}
    return None


def predict_cost(cost: dict, chip_keys: list[str] | None = None, fit: dict | None = None,
                 chips: dict | None = None, heads: int | None = None) -> dict[str, dict]:
    """{chip key: prediction} for one program_cost() result; `heads` (attention heads per layer) groups the
    attention blocks into layers for the SRAM rule (unknown: each head is taken as its own layer, and said so)."""
    fit = fit or load_fit()
    chips = chips or load_chips()
    program = program_of(cost, heads)
    coefficients = fit["fit"]["coefficients"]
    out = {}
    for key in resolve_chips(chip_keys, chips):
        figures = chips[key]
        body_features = chip_fit.features(program, figures, "body")
        terms = chip_fit.terms_ms(coefficients, body_features)
        body = sum(terms.values())
        host = coefficients["host"]
        request = body + host
        peak, peak_assumed = effective_peak(figures)
        assumed = []
        if peak_assumed:
            assumed.append(f"peak_fp16_tflops {peak}: {figures['assumed_peak_basis']}")
        if not figures["sram_source"].startswith("measured"):
            assumed.append(f"sram_mb {figures['sram_mb']}: {figures['sram_source']}")
        if not heads:
            assumed.append("attention heads per layer unknown: each head is taken as its own layer for the SRAM rule "
                           "(less spill predicted)")
        if key not in fit.get("chips", {}):
            assumed.append("no public point on this chip: the prediction rests on its chip figures and the terms "
                           "fitted on the other chips")
        out[key] = {
            "chip": key, "name": figures["name"], "predicted_body_ms": body, "predicted_request_ms": request,
            "terms_ms": {**{t: v for t, v in terms.items() if t != "host"}, "host": host},
            "overlapped": {"p": coefficients[chip_fit.OVERLAP],
                           "what": "compute and memory terms run side by side: (compute^p + memory^p)^(1/p)"},
            "band": {"body_ms": _scaled(body, fit["band"]), "request_ms": _scaled(request, fit["band"])},
            "device_state": {"body_ms": _state(body, fit["device_state"]),
                             "request_ms": _state(request, fit["device_state"])},
            "attention_spill_share": body_features["_spill_share"],
            "chip_figures": chip_fit.chip_figures(key, chips), "assumed": assumed,
        }
    return out


def _distance(point: dict, chip: str, model: str | None, length: int, crossings: int) -> tuple:
    return (point["chip"] != chip, point["program"].split("|")[0] != model if model else True,
            abs(math.log2(point["length"] / length)), point["crossings"] != crossings, point["id"])


def nearest_points(fit: dict, chip: str, model: str | None, length: int, count: int = NEAREST,
                   crossings: int = 0) -> list[dict]:
    """The public points nearest a prediction (same chip first, then the same model, the nearest length, the same
    number of crossings), each with whether the fit used it and how well the fit that never saw its chip predicted
    it."""
    ranked = sorted(fit["points"], key=lambda p: _distance(p, chip, model, length, crossings))[:count]
    return [{"id": p["id"], "chip": p["chip"], "length": p["length"], "scope": p["scope"], "crossings": p["crossings"],
             "graph_kind": p["graph_kind"], "measured_ms": p["measured_ms"],
             "status": "fitted" if p["fitted"] else "checked only (not fitted)",
             "in_sample_error": p["in_sample_error"],
             "held_out_error": p["leave_one_chip_out_error"],
             "held_out": f"predicted {p['leave_one_chip_out_ms']:.3f} ms by the fit that never saw {p['chip']}"}
            for p in ranked]


def matching_model(dims: dict | None, document: dict | None = None) -> str | None:
    """The counted public model with these encoder dimensions (hidden, layers, heads, intermediate), if any."""
    if not dims:
        return None
    document = document or public_latencies.load()
    for model in sorted({(p["counted_as"] or {}).get("model") for p in document["points"]} - {None}):
        if public_latencies.model_dims(model, document) == dims:
            return model
    return None


def route(prediction: dict, model: str | None, length: int, document: dict | None = None) -> dict | None:
    """The predicted ANE request against the public GPU curve of the same model on the same chip, at `length`."""
    from .crossover import mlx_ms

    if model is None:
        return None
    document = document or public_latencies.load()
    try:
        curve = public_latencies.gpu_curve(model, prediction["chip"], document)
    except public_latencies.PublicLatencyError:
        return None
    gpu = mlx_ms(curve, length)
    ane = prediction["predicted_request_ms"]
    low, high = prediction["band"]["request_ms"]
    return {"gpu_curve": [{"length": x, "ms": y} for x, y in curve], "gpu_ms": gpu, "ane_request_ms": ane,
            "route": "ane" if ane < gpu else "gpu",
            "decided_by_band": high < gpu or low > gpu,
            "rule": "ane when the predicted request is faster than the GPU curve at this length (piecewise linear "
                    "through its public points); decided_by_band: the whole band is on one side"}


def report(cost: dict, program: dict, chip_keys: list[str] | None = None, fit: dict | None = None,
           chips: dict | None = None, dims: dict | None = None) -> dict:
    """The whole prediction document: what was counted, its regions, per-chip predictions with bands, the nearest
    public points, the GPU route, the fit's coefficients and limits."""
    fit = fit or load_fit()
    chips = chips or load_chips()
    document = public_latencies.load()
    model = matching_model(dims, document)
    length = program.get("length") or cost.get("length")
    rows = predict_cost(cost, chip_keys, fit, chips, (dims or {}).get("num_attention_heads"))
    regions = program_of(cost, None)["regions"]
    for key, row in rows.items():
        row["nearest_points"] = (nearest_points(fit, key, model, length, crossings=regions["crossings"])
                                 if length else [])
        row["route"] = route(row, model, length, document) if length else None
    return {"format": FORMAT, "label": chip_fit.LABEL, "program": {**program, **counts(cost)},
            "regions": regions, "matching_public_model": model, "chips": rows,
            "band": fit["band"], "device_state": fit["device_state"],
            "fit": {"coefficients": fit["fit"]["coefficients_described"], "status": fit["fit"]["status"],
                    "evidence": str(FIT_PATH.relative_to(REPOSITORY_ROOT)),
                    "leave_one_chip_out": fit["leave_one_chip_out"]["summary"]["masked_bc1s"]},
            "not_modelled": list(NOT_MODELLED)}


def counts(cost: dict) -> dict:
    """The program figures a prediction rests on."""
    totals = cost["totals"]
    return {"non_constant_ops": totals["non_constant_ops"], "gflop": totals["flops"] / 1e9,
            "compulsory_mb": totals["compulsory_bytes"] / 1e6, "unfused_mb": totals["unfused_bytes"] / 1e6,
            "io_bytes": totals["io_bytes"]}
