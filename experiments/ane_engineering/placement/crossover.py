"""Where a predicted Neural Engine request becomes slower than a GPU (MLX) latency curve.

- MLX curve: piecewise linear through the public points of one model on one chip (public_latencies.py), extended
  past the ends along the end segments; with a single point, proportional to the length (a line through the origin
  and the point). The curve is an input, stated with its points; it is not modelled.
- ANE side: the predicted request (predict.py, the cross-chip fit) at each bucket length. For a dense-family layout
  (dense, reference-run) every program total is a polynomial of degree <= 2 in L: each tensor's size is a product of
  channel sizes and at most two length axes (the L x L scores), and the op list does not depend on L. So the totals
  counted exactly at three lengths determine them at every length (`quadratic_totals`); tests check the identity
  against a direct count at a fourth length. A windowed program is not quadratic (its tile count is ceil(L / T)) and
  is counted length by length.
- crossover: the length from which on the predicted request is slower than the curve at every longer length, with
  the longest length where the Neural Engine is predicted faster: a runtime can route requests longer than that away.
"""

from __future__ import annotations

from fractions import Fraction

from ..core.errors import HarnessError

FIELDS = ("non_constant_ops", "flops", "activation_bytes_read", "activation_bytes_written", "weight_bytes",
          "unfused_bytes", "compulsory_bytes")


class CrossoverError(HarnessError):
    pass


def mlx_ms(curve: list[tuple[int, float]], length: int) -> float:
    """The MLX curve at `length` (module docstring)."""
    if not curve:
        raise CrossoverError("an MLX curve needs at least one point")
    if len(curve) == 1:
        (l0, ms0), = curve
        return ms0 * length / l0
    points = sorted(curve)
    segment = 0  # the segment containing `length`, or the end segment it extends
    while segment < len(points) - 2 and length > points[segment + 1][0]:
        segment += 1
    (l0, m0), (l1, m1) = points[segment], points[segment + 1]
    return m0 + (m1 - m0) * (length - l0) / (l1 - l0)


def _lagrange(xs: list[int], ys: list[int], x: int) -> Fraction:
    total = Fraction(0)
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        term = Fraction(yi)
        for j, xj in enumerate(xs):
            if j != i:
                term *= Fraction(x - xj, xi - xj)
        total += term
    return total


def quadratic_totals(costs: dict[int, dict], length: int) -> dict:
    """Program totals at `length` from exact counts at three lengths of the same dense-family export ({L: cost})."""
    if len(costs) != 3:
        raise CrossoverError(f"quadratic totals need counts at exactly three lengths, got {sorted(costs)}")
    xs = sorted(costs)
    totals = {}
    for field in FIELDS:
        value = _lagrange(xs, [costs[x]["totals"][field] for x in xs], length)
        if value.denominator != 1 or value < 0:
            raise CrossoverError(f"{field} is not a quadratic in L over {xs} (got {value} at L{length}): not a "
                                 "dense-family program")
        totals[field] = int(value)
    io = {}
    for side in ("inputs", "outputs"):
        value = _lagrange(xs, [costs[x]["totals"]["io_bytes"][side] for x in xs], length)
        io[side] = int(value)
    totals["io_bytes"] = io
    return {"totals": totals}


def crossover(predicted_request: dict[int, float], curve: list[tuple[int, float]]) -> dict:
    """Per length: predicted ANE request and the MLX curve; the length from which on the ANE is slower at every
    longer length of the grid (None when it is faster at the longest)."""
    rows = [{"length": length, "ane_request_ms": ms, "mlx_ms": mlx_ms(curve, length),
             "ane_faster": ms < mlx_ms(curve, length)} for length, ms in sorted(predicted_request.items())]
    faster = [row["length"] for row in rows if row["ane_faster"]]
    last_faster = faster[-1] if faster else None
    after = [row["length"] for row in rows if last_faster is None or row["length"] > last_faster]
    return {"rows": rows, "crossover_length": after[0] if after else None, "ane_faster_up_to": last_faster,
            "ane_slower_at": [row["length"] for row in rows if not row["ane_faster"]],
            "mlx_curve": [{"length": length, "ms": ms} for length, ms in curve],
            "rule": ("crossover_length: the smallest length from which on the predicted Neural Engine request is not "
                     "faster than the MLX curve at any longer length; ane_faster_up_to: the longest length where it "
                     "is faster; ane_slower_at lists every length where it is not (with a one-point MLX curve, "
                     "proportional to L, short lengths can fall there because the curve has no fixed cost)")}
