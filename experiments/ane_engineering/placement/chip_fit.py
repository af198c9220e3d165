"""A latency model fitted across chips on every public Neural Engine timing, and checked on chips (and sources) it
never saw.

Each term is a physical quantity of the counted program at the chip's own figures (chips.json), times a fitted
dimensionless (or per-op, per-crossing, per-request) coefficient:

    compute    = k_compute * FLOPs / peak_fp16                     compute at the chip's FP16 rate
    memory     = k_weights * weight bytes / bandwidth              weights streamed once per call
               + k_resident * (B, C, 1, L) activation bytes / bandwidth
               + k_spill * spilled L x L bytes / bandwidth         what an attention layer moves past on-chip SRAM
    body_ms    = (compute^p + memory^p)^(1/p)                      the two overlap: p = 1 adds them, a large p is
                                                                   the roofline's max (p is fitted)
               + k_op * non-constant ops                           dispatch and synchronisation per op
               + k_crossing * crossings                            hand-overs between ANE regions and other devices
    request_ms = body_ms + k_host                                  host preparation and read-out per request

- Activation bytes are the unfused traffic of the program (cost_model: every op reads its operands and writes its
  result), split in two. L x L bytes are the traffic of the ops that read or write an L x L tensor (cost_model's
  `lxl` tensor ops); one attention layer (all its heads, which are independent and scheduled side by side) moves
  lxl_bytes / layers of them. Past the chip's SRAM (sram_mb) a layer's L x L working set cannot stay on chip: the
  share 1 - SRAM / (layer bytes) of its traffic spills to memory (0 while it fits). The rest of the activation
  traffic, the (B, C, 1, L) tensors, is the resident term.
- Crossings come from the static placement (regions.py) or, for a public graph, from the region count its source
  states. When no fitted point has more than one region the crossing coefficient cannot be fitted; it is then the
  sourced prior of public_latencies.json (`priors.crossing_ms`), said so in the fit.
- k_host applies to request-scope points only (host embedding look-up, masks, the host head).

The fit minimises relative residuals (the question asked of the model is relative) with every coefficient >= 0 and
1 <= p <= P_MAX (scipy.optimize.least_squares); each coefficient's standard error comes from the residual variance
and the Jacobian at the solution. A
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
OVERLAP = "overlap"  # the exponent p of (compute^p + memory^p)^(1/p)
PARAMETERS = TERMS + (OVERLAP,)
P_MAX = 16.0
MEMORY_TERMS = ("weights", "resident", "spill")
TERM_UNITS = {"compute": "x FLOPs / peak", "weights": "x weight bytes / bandwidth",
              "resident": "x resident activation bytes / bandwidth", "spill": "x spilled L x L bytes / bandwidth",
              "per_op": "us per non-constant op", "crossing": "ms per crossing", "host": "ms per request",
              OVERLAP: "exponent p: 1 adds compute and memory, large is their max"}
SUMMARY = ("compute = k_compute x FLOPs / peak; memory = k_weights x weight bytes / bandwidth + k_resident x "
           "(B, C, 1, L) activation bytes / bandwidth + k_spill x the L x L bytes of an attention layer past the "
           "chip's SRAM / bandwidth; body = (compute^p + memory^p)^(1/p) + k_op x ops + k_crossing x crossings; "
           "request = body + k_host")
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
    layers = max(program["attention_blocks"] // max(program.get("attention_heads") or 1, 1), 1)
    per_layer = lxl / layers
    spill_share = max(0.0, 1.0 - sram / per_layer) if per_layer > 0 else 0.0
    crossings = program["regions"]["crossings"] if crossings is None else crossings
    return {"compute": program["flops"] / peak * 1e3, "weights": program["weight_bytes"] / bandwidth * 1e3,
            "resident": (activation - lxl) / bandwidth * 1e3 + lxl * (1 - spill_share) / bandwidth * 1e3,
            "spill": lxl * spill_share / bandwidth * 1e3, "per_op": program["non_constant_ops"] / 1e3,
            "crossing": float(crossings), "host": 1.0 if scope == "request" else 0.0,
            "_spill_share": spill_share, "_layer_mb": per_layer / 1e6}


def _overlapped(coefficients: dict, feature: dict) -> tuple[float, float, float]:
    compute = coefficients["compute"] * feature["compute"]
    memory = sum(coefficients[t] * feature[t] for t in MEMORY_TERMS)
    p = coefficients[OVERLAP]
    if compute <= 0 or memory <= 0:
        return compute, memory, compute + memory
    top = max(compute, memory)
    return compute, memory, top * ((compute / top) ** p + (memory / top) ** p) ** (1.0 / p)


def predict(coefficients: dict, feature: dict) -> float:
    overlapped = _overlapped(coefficients, feature)[2]
    return overlapped + sum(coefficients[t] * feature[t] for t in ("per_op", "crossing", "host"))


def terms_ms(coefficients: dict, feature: dict) -> dict:
    """Each term's milliseconds; `overlap` (<= 0) is what running compute and memory side by side saves, so the
    terms add up to the prediction."""
    compute, memory, overlapped = _overlapped(coefficients, feature)
    out = {t: coefficients[t] * feature[t] for t in TERMS}
    out[OVERLAP] = overlapped - compute - memory
    return out


def fit(rows: list[dict], prior_crossing_ms: float) -> dict:
    """Coefficients from rows ({"features", "measured_ms"}) by bounded least squares on relative residuals, with
    standard errors. The crossing coefficient is fixed to the prior when no row has a crossing; a term that is zero
    in every row is not identifiable and fixed at 0."""
    from scipy.optimize import least_squares

    if not rows:
        raise ChipFitError("no points to fit")
    fixed = {}
    if not any(r["features"]["crossing"] for r in rows):
        fixed["crossing"] = prior_crossing_ms
    identifiable = [t for t in TERMS if t not in fixed and any(r["features"][t] for r in rows)]
    fixed.update({t: 0.0 for t in TERMS if t not in fixed and t not in identifiable})
    free = identifiable + [OVERLAP]
    measured = np.array([r["measured_ms"] for r in rows])

    def residuals(theta):
        coefficients = {**fixed, **dict(zip(free, theta))}
        return np.array([predict(coefficients, r["features"]) for r in rows]) / measured - 1.0

    # start: every term's share of the median point, overlap between sum and max
    start = np.array([0.5] * len(identifiable) + [2.0])
    lower = np.zeros(len(free))
    lower[-1] = 1.0
    upper = np.full(len(free), np.inf)
    upper[-1] = P_MAX
    result = least_squares(residuals, start, bounds=(lower, upper), x_scale="jac")
    theta = np.where(result.x - lower < 1e-9, lower, result.x)  # a coefficient on its bound is the bound
    coefficients = {**fixed, **dict(zip(free, map(float, theta)))}
    residual = result.fun
    dof = len(rows) - len(free)
    errors = {t: None for t in PARAMETERS}
    if dof > 0:
        variance = float(residual @ residual) / dof
        active = [i for i, value in enumerate(theta) if lower[i] < value < upper[i]]  # at a bound: no spread
        if active:
            jac = result.jac[:, active]
            cov = variance * np.linalg.pinv(jac.T @ jac)
            for k, i in enumerate(active):
                errors[free[i]] = float(math.sqrt(max(cov[k, k], 0.0)))

    def status(term):
        if term == "crossing" and "crossing" not in free and prior_crossing_ms and fixed["crossing"]:
            return "fixed to the sourced prior (no fitted point has a crossing)"
        if term not in free:
            return "not identifiable (zero in every fitted point)"
        value = coefficients[term]
        if value <= (1.0 if term == OVERLAP else 0.0) or (term == OVERLAP and value >= P_MAX):
            return "at its bound"
        return "fitted"

    return {"coefficients": coefficients, "standard_errors": errors, "status": {t: status(t) for t in PARAMETERS},
            "points": len(rows), "degrees_of_freedom": dof,
            "rms_relative_residual": float(np.sqrt(np.mean(residual ** 2)))}


def describe(coefficients: dict, errors: dict) -> dict:
    """Coefficients in their reporting units (per-op in microseconds: the feature counts thousands of ops) with their
    standard errors."""
    return {t: {"value": coefficients[t], "standard_error": errors.get(t), "unit": TERM_UNITS[t]} for t in PARAMETERS}


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
