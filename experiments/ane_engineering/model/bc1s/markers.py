"""ANE principle: no gather on the device; a one-hot einsum reads positions out.

The decision is read at the marker positions only: marker_selector (1, L, 1, M) is one-hot, [0, position, 0, slot]
= 1 (an unused slot's column is all zero). The body moves this read-out as early as it is exact: before the last
decision-head layer, whose outputs nobody reads except at the markers. That layer still takes keys and values from
all L positions, but its queries, its FFN and the scorer run on M columns instead of L (ANE_MATH.md section 16).
Each selected value is one input times 1 plus exact zeros, so the read-out itself is exact.
"""

from __future__ import annotations

import torch


def select_columns(selector: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x (1, C, 1, L), selector (1, L, 1, M) -> (1, C, 1, M): column `slot` is x at the slot's position (0 if the
    slot is unused)."""
    return torch.einsum("bkhq,bchk->bchq", selector, x)  # (1, C, 1, M)


def active_slots(selector: torch.Tensor, position_ones: torch.Tensor) -> torch.Tensor:
    """(1, L, 1, M) -> (1, 1, 1, M): 1 for a slot that reads a position, 0 for an unused one. A read-out of a row
    of ones (1, 1, 1, L), so the sum is an einsum like every other read-out."""
    return select_columns(selector, position_ones)  # (1, 1, 1, M)
