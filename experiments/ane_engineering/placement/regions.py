"""ANE regions of a program: where the static placement (static_check.py) splits it into several Neural Engine
programs with other devices' work in between.

Core ML counts device transitions in program order (the compute plan's view; laya-apple's methodology and manifests
report the same count). Here: the non-constant ops of the "main" function in program order, each predicted on or
off the ANE by the rule catalogue; a region is a maximal run of ANE ops, an island a maximal run of ops kept off it.
Each crossing between an ANE region and an island is a hand-over the latency model charges (chip_fit.py): an island
between two regions costs two crossings, one at either end of the program costs one. The split is named by the ops
on each side of every crossing. A prediction from static rules, not a compute plan.
"""

from __future__ import annotations

from ..package.mil.tensors import is_const_like
from ..package.mil.walk import walk_operations

LABEL = "prediction (static rules in program order; not a Core ML compute plan)"


def runs(on_ane: list[bool]) -> list[tuple[bool, int, int]]:
    """Maximal runs of equal placement: (on the ANE, first index, last index)."""
    out = []
    for i, flag in enumerate(on_ane):
        if out and out[-1][0] == flag:
            out[-1] = (flag, out[-1][1], i)
        else:
            out.append((flag, i, i))
    return out


def split(names: list[str], types: list[str], off: set[str]) -> dict:
    """Regions, islands and crossings of ops in program order (`names`, `types`), `off` the ops kept off the ANE."""
    on_ane = [name not in off for name in names]
    parts = runs(on_ane)
    regions = [p for p in parts if p[0]]
    islands = [p for p in parts if not p[0]]
    crossings = []
    for before, after in zip(parts, parts[1:]):
        last, first = before[2], after[1]
        crossings.append({"after": names[last], "after_type": types[last], "before": names[first],
                          "before_type": types[first], "into": "ANE" if after[0] else "off-ANE"})
    return {"label": LABEL, "ops": len(names), "off_ane_ops": len(names) - sum(on_ane),
            "regions": len(regions), "islands": len(islands), "crossings": len(crossings),
            "split": [{"ops": p[2] - p[1] + 1, "first": names[p[1]], "last": names[p[2]],
                       "off_ane_types": sorted({types[i] for i in range(p[1], p[2] + 1)})} for p in islands],
            "crossing_ops": crossings}


def program_regions(program, spec=None) -> dict:
    """The static placement's regions of a PyMIL program (static_check.check_program decides each op)."""
    from .static_check import check_program

    report = check_program(program, spec)
    ops = [op for op in walk_operations(program) if not is_const_like(op.op_type)]
    return split([op.name for op in ops], [op.op_type for op in ops], set(report["predicted_off_ane"]))


def stated_regions(regions: int) -> dict:
    """The split a source states only by its region count (e.g. a card's 'ANE regions' column): regions - 1 islands,
    each entered and left, the program starting and ending on the ANE."""
    return {"label": "stated by the source (region count only)", "regions": regions, "islands": regions - 1,
            "crossings": 2 * (regions - 1), "split": [], "crossing_ops": []}
