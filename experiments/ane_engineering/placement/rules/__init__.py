"""The ANE rules: the one home of the rules this harness checks exported programs against.

Each rule is registered with `@rule(...)` (registry.py) above its check, with its stable id, one-line statement,
public source (sources.py), severity and, for the Orion direct-ANE constraints, how they apply to Core ML packages.
The check modules group the rules by concept; importing this package registers them all, and `CATALOGUE` lists
them by number:

    layout.py          rank, (B, C, 1, S) form, dimension limits, row padding, batch, large copies, working set
    dynamic_shapes.py  symbolic dimensions, ranged and enumerated inputs, shape-computing ops
    op_types.py        the op allow-list (op_sets.py) and the op families predicted off the ANE
    op_forms.py        native einsums, softmax axis, dense-as-conv, dilation, GELU form, concat, baked weights
    precision.py       fp16 compute, casts, the fp16 interface, constants fp16 cannot hold
    numerics.py        published Neural Engine cliffs the measured headroom says the program can reach
    not_applicable.py  Orion constraints a Core ML package cannot violate (no check)

A new rule is one decorated check in the module of its concept. What the checks see is context.py;
placement/static_check.py runs the catalogue and labels the result as a prediction.
"""

from __future__ import annotations

# Importing the rule modules registers their rules (noqa: F401, the names are not used here).
from . import dynamic_shapes, layout, not_applicable, numerics, op_forms, op_types, precision  # noqa: F401
from .context import CheckContext, TensorRef
from .op_sets import ANE_OP_ALLOWLIST
from .registry import (
           ORION_STATUSES,
           RULES,
           SEVERITIES,
           Finding,
           Orion,
           Rule,
           catalogue,
           documented,
           rule,
)

CATALOGUE: tuple[Rule, ...] = catalogue()
CATALOGUE_BY_ID = {r.id: r for r in CATALOGUE}

__all__ = [
           "ANE_OP_ALLOWLIST",
           "CATALOGUE",
           "CATALOGUE_BY_ID",
           "ORION_STATUSES",
           "RULES",
           "SEVERITIES",
           "CheckContext",
           "Finding",
           "Orion",
           "Rule",
           "TensorRef",
           "catalogue",
           "documented",
           "rule",
]
