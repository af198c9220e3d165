"""Orion direct-ANE constraints a Core ML package cannot violate: catalogued (so the Orion list is complete) with
the reason they do not apply, and no check."""

from __future__ import annotations

from .registry import Orion, documented
from .sources import SRC_ORION

documented("ANE-R28-io-alphabetical",
           statement="Program inputs and outputs are ordered alphabetically by name.",
           source=SRC_ORION,
           orion=Orion("not applicable", "Core ML binds inputs and outputs by name; the order in a package does not "
                                         "matter."))
documented("ANE-R29-min-surface",
           statement="Every I/O tensor occupies at least about 49 KB.",
           source=SRC_ORION,
           orion=Orion("not applicable", "Core ML allocates and pads the I/O surfaces itself; a small tensor such as "
                                         "the (1, 1, 1, 32) option logits is legal."))
documented("ANE-R30-uniform-outputs",
           statement="All outputs of a program have the same size.",
           source=SRC_ORION,
           orion=Orion("not applicable", "Core ML programs may return outputs of different sizes; it lays them out."))
documented("ANE-R31-compile-budget",
           statement="At most about 119 ANE compiles per process.",
           source=SRC_ORION,
           orion=Orion("not applicable", "One package is compiled once per load; the budget matters to delta-"
                                         "compilation or per-step training loops, not to a single Core ML package."))
