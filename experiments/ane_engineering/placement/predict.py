"""Predicted Neural Engine latency of one counted program on the chips of the table, with the band its fit implies.

A prediction is the calibrated cost model (calibration.py) applied to a program_cost() result:

    predicted_body_ms    = floor_ms + per_op_ms + traffic_ms        (the terms, calibration.terms)
    predicted_request_ms = predicted_body_ms + boundary_ms

on each chip of chips.json with the parameters fitted to the reference run (M3 Max). Two kinds of uncertainty are
reported beside every number, never folded into it:

- band: the leave-one-out ratios measured / predicted over the calibration points (`leave_one_out`). Each point is
  predicted by a fit to the other points; a point whose removal leaves the two parameters unidentifiable (the two L96
  points share one program, so without the L1024 point the per-op and per-byte terms are collinear) is reported as
  such and gives no ratio. The band is [lowest ratio, highest ratio] (and 1) times the prediction. It rests on the
  few points the reference run has, all of one chip and one graph: it does not measure the error of a transfer to
  another chip, graph or length, which the out-of-sample check (benchmarks/predict_check.py) does.
- assumed: chip figures the prediction used that are a stated assumption, not a sourced figure (chips.json
  assumed_peak_fp16_tflops), and the per-op / per-byte parameters, which were only fitted on the M3 Max.

NOT_MODELLED lists what the model does not see. Every output here is a prediction, not a measurement.
"""

from __future__ import annotations

import numpy as np

from . import calibration
from .chips import chip_key, effective_peak, load_chips

FORMAT = "ane-engineering/prediction/1"
NOT_MODELLED = (
    "fusion: the device fuses chains of ops and keeps tiles in on-chip SRAM; the model charges a fitted share "
    "(traffic_factor) of every op's unfused activation traffic instead, the same share for every graph",
    "row padding: the Neural Engine pads each row of a tensor's last axis to 64 bytes; the byte counts use the "
    "dense element count, so short last axes (e.g. a 32-slot output, L x L scores at small L) cost more than counted",
    "SRAM residency past ~32 MB: weights and activations above the on-chip SRAM (about 32 MB measured on the M4, "
    "chips.json sram) spill to DRAM; the model has one bandwidth per chip and no cliff",
    "the host's CPU work of a request (tokenising, embedding look-up, masks, the FP32 action head): no term; "
    "predicted_request_ms adds only the inputs and outputs crossing the boundary once",
    "chip transfer: per_op_ms and traffic_factor were fitted on the M3 Max only and are applied unchanged to every "
    "chip with that chip's peak and bandwidth",
    "graph: the prediction is for the program given (this harness's export); another port's graph of the same "
    "model has other op counts and traffic",
)


class PredictionError(calibration.CalibrationError):
    """A prediction the model cannot make (unknown chip, unusable calibration)."""


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


def _design(points: list[dict], chip: str, chips: dict) -> tuple[np.ndarray, np.ndarray]:
    """Relative least-squares system of calibration.fit: rows (columns per parameter) / measured, targets."""
    zero = {name: 0.0 for name in calibration.PARAMETERS}
    rows, targets = [], []
    for point in points:
        base = calibration.predict(point, chip, zero, chips)
        rows.append([(calibration.predict(point, chip, {**zero, name: 1.0}, chips) - base) / point["measured_ms"]
                     for name in calibration.PARAMETERS])
        targets.append((point["measured_ms"] - base) / point["measured_ms"])
    return np.array(rows), np.array(targets)


def leave_one_out(fit: dict | None = None, chips: dict | None = None) -> list[dict]:
    """Each calibration point predicted by the fit to the others: its ratio measured / predicted, or why not."""
    fit = fit or calibration.load_calibration()
    chips = chips or load_chips()
    points, chip = fit["points"], fit["chip"]
    rows = []
    for i, point in enumerate(points):
        rest = points[:i] + points[i + 1:]
        design, targets = _design(rest, chip, chips)
        record = {"id": point["id"], "length": point["length"], "scope": point["scope"],
                  "measured_ms": point["measured_ms"], "fitted_on": [p["id"] for p in rest]}
        if np.linalg.matrix_rank(design) < len(calibration.PARAMETERS):
            rows.append({**record, "identifiable": False,
                         "why": ("the remaining points share one program (same counts), so the per-op and per-byte "
                                 "terms cannot be told apart without this point")})
            continue
        solution = np.linalg.lstsq(design, targets, rcond=None)[0]
        parameters = {name: float(v) for name, v in zip(calibration.PARAMETERS, solution)}
        predicted = calibration.predict(point, chip, parameters, chips)
        rows.append({**record, "identifiable": True, "parameters": parameters, "predicted_ms": predicted,
                     "ratio_measured_to_predicted": point["measured_ms"] / predicted,
                     "relative_error": predicted / point["measured_ms"] - 1.0})
    return rows


def band_from(loo: list[dict]) -> dict:
    """The multiplicative band the leave-one-out ratios imply: [min, max] of the ratios and 1."""
    ratios = [row["ratio_measured_to_predicted"] for row in loo if row.get("identifiable")]
    if not ratios:
        raise PredictionError("no calibration point is predictable by a fit to the others: no band")
    return {"low_ratio": min(ratios + [1.0]), "high_ratio": max(ratios + [1.0]), "points": len(ratios),
            "basis": ("leave-one-out over the calibration points: each predicted by the fit to the others; the band is "
                      "[lowest, highest] measured / predicted ratio (and 1) times the prediction. Same chip, graph and "
                      "two lengths as the fit: it does not cover chip, graph or length transfer "
                      "(see the out-of-sample check)")}


def predict_cost(cost: dict, chip_keys: list[str] | None = None, fit: dict | None = None,
                 chips: dict | None = None, band: dict | None = None) -> dict[str, dict]:
    """{chip key: prediction} for one program_cost() result (its "totals" are enough)."""
    fit = fit or calibration.load_calibration()
    chips = chips or load_chips()
    band = band or band_from(leave_one_out(fit, chips))
    out = {}
    for key in resolve_chips(chip_keys, chips):
        figures = chips[key]
        terms = calibration.terms({"totals": cost["totals"]}, key, fit["parameters"], chips)
        body = terms["floor_ms"] + terms["per_op_ms"] + terms["traffic_ms"]
        request = body + terms["boundary_ms"]
        peak, peak_assumed = effective_peak(figures)
        assumed = ["per_op_ms and traffic_factor fitted on the " + fit["chip"] + " only"]
        if peak_assumed:
            assumed.insert(0, f"peak_fp16_tflops {peak}: {figures['assumed_peak_basis']}")
        out[key] = {
            "chip": key, "name": figures["name"],
            "predicted_body_ms": body, "predicted_request_ms": request, "terms": terms,
            "band": {"body_ms": [body * band["low_ratio"], body * band["high_ratio"]],
                     "request_ms": [request * band["low_ratio"], request * band["high_ratio"]]},
            "chip_figures": {"peak_fp16_tflops": peak, "peak_is_assumed": peak_assumed,
                             "ane_bandwidth_gbs": figures["ane_bandwidth_gbs"]},
            "assumed": assumed,
        }
    return out


def counts(cost: dict) -> dict:
    """The program figures a prediction rests on."""
    totals = cost["totals"]
    return {"non_constant_ops": totals["non_constant_ops"], "gflop": totals["flops"] / 1e9,
            "compulsory_mb": totals["compulsory_bytes"] / 1e6, "unfused_mb": totals["unfused_bytes"] / 1e6,
            "io_bytes": totals["io_bytes"]}


def report(cost: dict, program: dict, chip_keys: list[str] | None = None, fit: dict | None = None,
           chips: dict | None = None) -> dict:
    """The whole prediction document: what was counted, per-chip predictions, band, calibration, limits."""
    fit = fit or calibration.load_calibration()
    chips = chips or load_chips()
    loo = leave_one_out(fit, chips)
    band = band_from(loo)
    return {"format": FORMAT, "label": calibration.LABEL, "program": {**program, **counts(cost)},
            "chips": predict_cost(cost, chip_keys, fit, chips, band),
            "band": band, "leave_one_out": loo,
            "calibration": {"chip": fit["chip"], "parameters": fit["parameters"],
                            "evidence": str(calibration.EVIDENCE_PATH.relative_to(calibration.REPOSITORY)),
                            "points": [p["id"] for p in fit["points"]]},
            "not_modelled": list(NOT_MODELLED)}
