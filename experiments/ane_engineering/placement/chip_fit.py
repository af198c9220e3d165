"""A latency model fitted across chips on every public Neural Engine timing, and checked on chips (and sources) it
never saw.

Each term is a physical quantity of the counted program at the chip's own figures (chips.json), times a fitted
dimensionless (or per-op, per-crossing, per-request) coefficient:

    body_ms    = k_compute * FLOPs / peak_fp16                     compute at the chip's FP16 rate
               + k_weights * weight bytes / bandwidth              weights streamed once per call
               + k_resident * (B, C, 1, L) activation bytes / bandwidth
               + k_spill * spilled L x L bytes / bandwidth         what an attention block moves past on-chip SRAM
               + k_op * non-constant ops                           dispatch and synchronisation per op
               + k_crossing * crossings                            hand-overs between ANE regions and other devices
    request_ms = body_ms + k_host                                  host preparation and read-out per request

- Activation bytes are the unfused traffic of the program (cost_model: every op reads its operands and writes its
  result), split in two. L x L bytes are the traffic of the ops that read or write an L x L tensor (cost_model's
  `lxl` tensor ops): one attention block (one layer) moves lxl_bytes / blocks of them. Past the chip's SRAM
  (sram_mb) that block cannot stay on chip: the share 1 - SRAM / (block bytes) of its traffic spills to memory
  (0 while a block fits). The rest of the activation traffic, the (B, C, 1, L) tensors, is the resident term.
- Crossings come from the static placement (regions.py) or, for a public graph, from the region count its source
  states. When no fitted point has more than one region the crossing coefficient cannot be fitted; it is then the
  sourced prior of public_latencies.json (`priors.crossing_ms`), said so in the fit.
- k_host applies to request-scope points only (host embedding look-up, masks, the host head).

The fit minimises relative residuals (the question asked of the model is relative) with every coefficient >= 0
(scipy.optimize.lsq_linear); each coefficient's standard error comes from the residual variance and the design. A
point's chip and source are held out in turn (`leave_one_out`): every held-out point is predicted by a fit that
never saw its chip (or its source). Predictions, not measurements.
"""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

import numpy as np

from ..core.errors import HarnessError
from .chips import effective_peak, load_chips

COUNTS_FORMAT = "ane-engineering/evidence/latency-counts/1"
FORMAT = "ane-engineering/evidence/latency-fit/1"
LABEL = "prediction (terms fitted across chips on public timings; not a measurement)"
TERMS = ("compute", "weights", "resident", "spill", "per_op", "crossing", "host")
TERM_UNITS = {"compute": "x FLOPs / peak", "weights": "x weight bytes / bandwidth",
              "resident": "x resident activation bytes / bandwidth", "spill": "x spilled L x L bytes / bandwidth",
              "per_op": "us per non-constant op", "crossing": "ms per crossing", "host": "ms per request"}
FIELDS = ("non_constant_ops", "flops", "weight_bytes", "unfused_bytes", "compulsory_bytes", "lxl_bytes")


class ChipFitError(HarnessError):
    """Counts or points the cross-chip fit cannot use."""


def program_key(counted: dict) -> str:
    return f"{counted['model']}|{counted['kind']}|{counted['layout']}"


def _lagrange(xs: list[int], ys: list[int], x: int) -> Fraction:
    total = Fraction(0)
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        term = Fraction(yi)
        for j, xj in enumerate(xs):
            if j != i:
                term *= Fraction(x - xj, xi - xj)
        total += term
    return total


def program_at(program: dict, length: int) -> dict:
    """The counts of a recorded program (latency_counts evidence: exact counts at three anchors) at `length`: exact
    at an anchor, else by the quadratic identity of dense-family programs (crossover.py). Regions and attention
    blocks do not depend on the length."""
    anchors = {int(k): v for k, v in program["anchors"].items()}
    first = anchors[min(anchors)]
    if length in anchors:
        out = {f: flat(anchors[length])[f] for f in FIELDS}
    else:
        xs = sorted(anchors)
        out = {}
        for field in FIELDS:
            value = _lagrange(xs, [flat(anchors[x])[field] for x in xs], length)
            if value.denominator != 1 or value < 0:
                raise ChipFitError(f"{program_key(program)}: {field} is not a quadratic in L over {xs}")
            out[field] = int(value)
    out["attention_blocks"] = first["attention_blocks"]
    out["regions"] = first["regions"]
    return out


def flat(anchor: dict) -> dict:
    """The FIELDS of one recorded anchor (totals, plus the L x L tensor-op bytes)."""
    return {**{f: anchor["totals"][f] for f in FIELDS if f != "lxl_bytes"}, "lxl_bytes": anchor["lxl_bytes"]}


def features(program: dict, chip: dict, scope: str, crossings: int | None = None) -> dict:
    """Each term's physical quantity (ms at coefficient 1; per-op in thousands of ops) for a program on a chip."""
    peak = effective_peak(chip)[0] * 1e12
    bandwidth = chip["ane_bandwidth_gbs"] * 1e9
    sram = chip["sram_mb"] * 1e6
    activation = program["unfused_bytes"] - program["compulsory_bytes"]
    lxl = min(program["lxl_bytes"], activation)
    blocks = max(program["attention_blocks"], 1)
    per_block = lxl / blocks
    spill_share = max(0.0, 1.0 - sram / per_block) if per_block > 0 else 0.0
    crossings = program["regions"]["crossings"] if crossings is None else crossings
    return {"compute": program["flops"] / peak * 1e3, "weights": program["weight_bytes"] / bandwidth * 1e3,
            "resident": (activation - lxl) / bandwidth * 1e3 + lxl * (1 - spill_share) / bandwidth * 1e3,
            "spill": lxl * spill_share / bandwidth * 1e3, "per_op": program["non_constant_ops"] / 1e3,
            "crossing": float(crossings), "host": 1.0 if scope == "request" else 0.0,
            "_spill_share": spill_share, "_block_mb": per_block / 1e6}


def predict(coefficients: dict, feature: dict) -> float:
    return sum(coefficients[t] * feature[t] for t in TERMS)


def terms_ms(coefficients: dict, feature: dict) -> dict:
    return {t: coefficients[t] * feature[t] for t in TERMS}


def fit(rows: list[dict], prior_crossing_ms: float) -> dict:
    """Coefficients from rows ({"features", "measured_ms"}) by bounded least squares on relative residuals, with
    standard errors. The crossing coefficient is fixed to the prior when no row has a crossing."""
    from scipy.optimize import lsq_linear

    if not rows:
        raise ChipFitError("no points to fit")
    fixed = {}
    if not any(r["features"]["crossing"] for r in rows):
        fixed["crossing"] = prior_crossing_ms
    free = [t for t in TERMS if t not in fixed]
    identifiable = [t for t in free if any(r["features"][t] for r in rows)]
    fixed.update({t: 0.0 for t in free if t not in identifiable})
    design = np.array([[r["features"][t] / r["measured_ms"] for t in identifiable] for r in rows])
    offset = np.array([sum(fixed[t] * r["features"][t] for t in fixed) / r["measured_ms"] for r in rows])
    target = np.ones(len(rows)) - offset
    result = lsq_linear(design, target, bounds=(0.0, np.inf), method="bvls")
    coefficients = {**fixed, **dict(zip(identifiable, map(float, result.x)))}
    residual = design @ result.x - target
    dof = len(rows) - len(identifiable)
    errors = {t: None for t in TERMS}
    if dof > 0:
        variance = float(residual @ residual) / dof
        active = [i for i, value in enumerate(result.x) if value > 0]  # a coefficient at its bound has no spread
        if active:
            sub = design[:, active]
            cov = variance * np.linalg.pinv(sub.T @ sub)
            for j, i in enumerate(active):
                errors[identifiable[i]] = float(math.sqrt(max(cov[j, j], 0.0)))
    status = {t: ("fixed to the sourced prior (no fitted point has a crossing)" if t == "crossing" and t in fixed
                  and fixed[t] == prior_crossing_ms and prior_crossing_ms else
                  "not identifiable (zero in every fitted point)" if t not in identifiable else
                  "at its bound 0" if coefficients[t] == 0 else "fitted") for t in TERMS}
    return {"coefficients": coefficients, "standard_errors": errors, "status": status, "points": len(rows),
            "degrees_of_freedom": dof, "rms_relative_residual": float(np.sqrt(np.mean(residual ** 2)))}


def describe(coefficients: dict, errors: dict) -> dict:
    """Coefficients in their reporting units (per-op in microseconds) with their standard errors."""
    def scale(term, value):
        return None if value is None else value * (1.0 if term != "per_op" else 1.0)  # per_op rows are in 1e3 ops
    return {t: {"value": scale(t, coefficients[t]), "standard_error": scale(t, errors.get(t)), "unit": TERM_UNITS[t]}
            for t in TERMS}


def leave_one_out(rows: list[dict], key: str, prior_crossing_ms: float) -> list[dict]:
    """Every row predicted by the fit to the rows of other `key` values (chip, source): the held-out predictions."""
    out = []
    for group in sorted({r[key] for r in rows}):
        rest = [r for r in rows if r[key] != group and r["fit"]]
        held = [r for r in rows if r[key] == group]
        model = fit(rest, prior_crossing_ms)
        for row in held:
            predicted = predict(model["coefficients"], row["features"])
            out.append({"id": row["id"], key: group, "predicted_ms": predicted, "measured_ms": row["measured_ms"],
                        "relative_error": predicted / row["measured_ms"] - 1.0,
                        "fitted_on_points": len(rest), "coefficients": model["coefficients"],
                        "status": {t: s for t, s in model["status"].items() if s != "fitted"}})
    return out


def error_summary(records: list[dict]) -> dict | None:
    if not records:
        return None
    errors = [abs(r["relative_error"]) for r in records]
    return {"points": len(records), "median_absolute_relative_error": statistics.median(errors),
            "max_absolute_relative_error": max(errors),
            "median_relative_error": statistics.median(r["relative_error"] for r in records)}


def chip_figures(key: str, chips: dict | None = None) -> dict:
    chips = chips or load_chips()
    chip = chips[key]
    peak, assumed = effective_peak(chip)
    return {"peak_fp16_tflops": peak, "peak_is_assumed": assumed, "ane_bandwidth_gbs": chip["ane_bandwidth_gbs"],
            "sram_mb": chip["sram_mb"], "generation": chip["generation"]}
