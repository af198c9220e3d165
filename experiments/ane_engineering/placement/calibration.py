"""A calibrated latency model: the roofline floor plus a per-op and a per-byte term, fitted to the reference run.

    body_ms    = floor_ms + per_op_ms * non_constant_ops + traffic_factor * activation_bytes / bandwidth
    request_ms = body_ms + boundary_ms

- floor_ms: roofline.latency_floor's lower bound, max(FLOPs / peak FP16, compulsory bytes / bandwidth), per chip
  (chips.json). Kept as the base: a prediction never drops below it.
- per_op_ms: a fixed cost per non-constant MIL op of the program (dispatch, synchronisation between ops). Fitted.
- activation_bytes = unfused_bytes - compulsory_bytes: the traffic an unfused schedule adds to the compulsory one
  (every intermediate written and read back). traffic_factor (dimensionless, fitted) is the share of it the device
  actually pays at the chip's bandwidth; the rest it keeps on chip. It is a fraction of bandwidth so the same fit
  transfers to another chip's figures (an assumption, like per_op_ms being the same on every chip).
- boundary_ms: the body's inputs and outputs crossing the CPU <-> Neural Engine boundary once, at the chip's
  bandwidth. Parameter-free. The host's CPU work in a request (tokenisation, embedding look-up, masks, the FP32
  action head) has NO term: the reference run measured it only as the L96 full-path minus body difference, and a
  third parameter would leave three measurements no residual to test. The fit therefore lands the L96 prediction
  between the body alone and the full path; its two L96 residuals show the host work the model lacks.

Two parameters from three measurements (one degree of freedom left). The three reference points
(core/reference_run.json) sit at only two lengths (L96 twice, L1024 once), so a least-squares fit reproduces the L1024
request exactly and the L1024 residual is in-sample and zero by construction; only the L96 pair tests the fit. Every
output is a prediction, not a measurement.

The fitted parameters live in one file, the calibration evidence (EVIDENCE_PATH) written by
benchmarks/cost_calibration.py from real exports of the dense builtin:mmbert-base-shape body; `load_calibration`
refuses a missing or malformed file. `fit` is the fit itself, used by that benchmark and by the tests (which refit
from the evidence's recorded inputs and compare).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import HarnessError
from ..core.json_documents import (
    NON_EMPTY_STRING,
    NON_NEGATIVE_INTEGER,
    NUMBER,
    POSITIVE_INTEGER,
    SHA256,
    array_of,
    closed_object,
    open_object,
    read_json,
)
from ..core.provenance import REPOSITORY_ROOT
from .chips import chip_key, load_chips
from .roofline import latency_floor

REPOSITORY = REPOSITORY_ROOT
EVIDENCE_PATH = REPOSITORY / "benchmarks" / "evidence" / "cost_calibration_mmbert_base_shape.json"
FORMAT = "ane-engineering/evidence/cost-calibration/1"
LABEL = "prediction (roofline floor + fitted per-op and per-byte terms; not a measurement)"
PARAMETERS = ("per_op_ms", "traffic_factor")
SCOPES = ("body", "full_path")


class CalibrationError(HarnessError):
    """Calibration evidence that is missing, malformed, or a fit the model cannot make."""


_NON_NEGATIVE = {"type": "number", "minimum": 0}
TOTALS = open_object({"non_constant_ops": NON_NEGATIVE_INTEGER, "flops": NON_NEGATIVE_INTEGER,
                      "compulsory_bytes": NON_NEGATIVE_INTEGER, "unfused_bytes": NON_NEGATIVE_INTEGER,
                      "io_bytes": closed_object({"inputs": NON_NEGATIVE_INTEGER, "outputs": NON_NEGATIVE_INTEGER})})
POINT = open_object({"id": NON_EMPTY_STRING, "length": POSITIVE_INTEGER, "scope": {"enum": list(SCOPES)},
                     "measured_ms": {"type": "number", "exclusiveMinimum": 0}, "totals": TOTALS,
                     "predicted_ms": NUMBER, "residual_ms": NUMBER, "relative_residual": NUMBER,
                     "program_sha256": SHA256})
SCHEMA = open_object({
    "format": {"const": FORMAT},
    "fit": open_object({"chip": NON_EMPTY_STRING,
                        "parameters": closed_object({name: _NON_NEGATIVE for name in PARAMETERS}),
                        "points": array_of(POINT, 3)}),
})


def load_calibration(path: Path | str = EVIDENCE_PATH) -> dict:
    """The fit of the calibration evidence: {"chip", "parameters", "points", ...}; refuses a missing or bad file."""
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"{path}: no calibration evidence; write it with "
                               "`python benchmarks/cost_calibration.py --output <path>`")
    return read_json(path, SCHEMA, CalibrationError)["fit"]


def _chip(chip: str, chips: dict | None) -> dict:
    chips = chips or load_chips()
    key = chip if chip in chips else chip_key(chip)
    if key not in chips:
        raise CalibrationError(f"unknown chip {chip!r}; chips.json has {', '.join(chips)}")
    return chips[key]


def terms(cost: dict, chip: str = "m3-max", parameters: dict | None = None, chips: dict | None = None) -> dict:
    """Each term of the prediction for a program_cost() result (ms): floor, per_op, traffic, boundary."""
    parameters = parameters if parameters is not None else load_calibration()["parameters"]
    figures = _chip(chip, chips)
    totals = cost["totals"]
    bandwidth = figures["ane_bandwidth_gbs"] * 1e9  # bytes/s
    activation_bytes = totals["unfused_bytes"] - totals["compulsory_bytes"]
    io_bytes = totals["io_bytes"]["inputs"] + totals["io_bytes"]["outputs"]
    floor = latency_floor({"totals": totals, "by_category": {}}, figures)["floor_ms"]
    return {"floor_ms": floor,
            "per_op_ms": parameters["per_op_ms"] * totals["non_constant_ops"],
            "traffic_ms": parameters["traffic_factor"] * activation_bytes / bandwidth * 1e3,
            "boundary_ms": io_bytes / bandwidth * 1e3}


def predict_body_ms(cost: dict, chip: str = "m3-max", parameters: dict | None = None,
                    chips: dict | None = None) -> float:
    """Predicted device time of one call of the program (floor + per-op + traffic terms), in ms."""
    t = terms(cost, chip, parameters, chips)
    return t["floor_ms"] + t["per_op_ms"] + t["traffic_ms"]


def predict_request_ms(cost: dict, chip: str = "m3-max", parameters: dict | None = None,
                       chips: dict | None = None) -> float:
    """Predicted whole request: the body plus its inputs and outputs crossing the boundary once (no host CPU term;
    see the module docstring), in ms."""
    t = terms(cost, chip, parameters, chips)
    return t["floor_ms"] + t["per_op_ms"] + t["traffic_ms"] + t["boundary_ms"]


def predict(point: dict, chip: str, parameters: dict, chips: dict | None = None) -> float:
    """The prediction for one reference point: body or request by its scope."""
    cost = {"totals": point["totals"]}
    if point["scope"] == "body":
        return predict_body_ms(cost, chip, parameters, chips)
    return predict_request_ms(cost, chip, parameters, chips)


def fit(points: list[dict], chip: str, chips: dict | None = None) -> dict:
    """Least squares on relative residuals for (per_op_ms, traffic_factor) over `points` (each: id, length, scope,
    measured_ms, totals). Relative, because the question asked of the model is relative (within x% of a
    measurement). Refuses fewer than len(PARAMETERS) + 1 points and a negative parameter (a negative cost per op
    or per byte means the model does not describe the measurements)."""
    if len(points) < len(PARAMETERS) + 1:
        raise CalibrationError(f"{len(points)} points cannot test a {len(PARAMETERS)}-parameter fit")
    zero = {name: 0.0 for name in PARAMETERS}
    rows, targets = [], []
    for point in points:
        base = predict(point, chip, zero, chips)
        columns = [predict(point, chip, {**zero, name: 1.0}, chips) - base
                   for name in PARAMETERS]  # the model is linear in its parameters: each column is one term at 1
        rows.append(np.array(columns) / point["measured_ms"])
        targets.append((point["measured_ms"] - base) / point["measured_ms"])
    solution, *_ = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)
    parameters = {name: float(value) for name, value in zip(PARAMETERS, solution)}
    negative = [name for name, value in parameters.items() if value < 0]
    if negative:
        raise CalibrationError(f"the fit gives a negative {', '.join(negative)} ({parameters}): the model does not "
                               "describe these measurements")
    return {"chip": chip, "parameters": parameters,
            "points": [{**point, **residual(point, chip, parameters, chips)} for point in points]}


def residual(point: dict, chip: str, parameters: dict, chips: dict | None = None) -> dict:
    predicted = predict(point, chip, parameters, chips)
    return {"predicted_ms": predicted, "residual_ms": predicted - point["measured_ms"],
            "relative_residual": predicted / point["measured_ms"] - 1.0}
