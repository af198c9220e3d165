"""Rules on the values the Neural Engine computes: a published numeric cliff that the measured headroom says the
program can reach. They read `ctx.measured["headroom"]` (run/mil/headroom.py's report on the golden inputs, as the
probe measures it) and find nothing without a measurement. Their errors are program errors, not placement
predictions (`placement=False`): the op still runs on the Neural Engine, with a wrong value."""

from __future__ import annotations

from ...core.gates import HEADROOM_MIN
from .context import CheckContext, finding
from .registry import Finding, rule
from .sources import SRC_ANEFORGE_CLIFFS


@rule("ANE-R32-slice-cliff",
      statement="On pre-A16 Neural Engines, no width-offset slice (a nonzero begin on the last axis) reads values "
                "that can exceed the width-offset slice cliff: measured on the golden inputs, the largest |value| of "
                "the sliced input times the headroom gate (core/gates.py HEADROOM_MIN) stays within the cliff.",
      source=SRC_ANEFORGE_CLIFFS,
      severity="error",
      placement=False,
      note="The cliff value and which ops are width-offset slices come from the measured headroom report "
           "(run/mil/cliffs.py decides it from op semantics); the report lists width-offset slices only when it was "
           "measured for a family that has the cliff (pre-A16). The source measured it absent on A16/M5.")
def check_slice_cliff(ctx: CheckContext, rule_id: str) -> list[Finding]:
    headroom = ctx.measured.get("headroom") or {}
    ops = {op.name: op for op in ctx.non_constant_ops}
    worst: dict[str, dict] = {}
    for entry in headroom.get("width_offset_slices", []):
        peak = entry.get("input_max_abs")
        over = peak is None or peak * HEADROOM_MIN > entry["cliff_value"]  # None: a non-finite input
        if over and entry["op"] in ops:
            known = worst.get(entry["op"])
            if known is None or (peak is None
                                 or (known["input_max_abs"] is not None and peak > known["input_max_abs"])):
                worst[entry["op"]] = entry
    found = []
    for name, entry in worst.items():
        peak = entry.get("input_max_abs")
        value = "non-finite values" if peak is None else f"|value| up to {peak:g}"
        found.append(finding(rule_id, ops[name],
                             f"slices at a nonzero last-axis offset an input with {value} on the golden inputs; "
                             f"the pre-A16 cliff turns |x| > {entry['cliff_value']:g} into +/-inf "
                             f"(headroom gate {HEADROOM_MIN:g}x)"))
    return found
