"""Control flow: cond and while_loop, whose nested blocks the executor compiles and hands over as `node.blocks`
(callables: run_block(input values) -> output values). Semantics of coremltools' defs/iOS15/control_flow.py:
cond runs its first block if `pred` is true, else its second (both take no inputs); while_loop feeds `loop_vars`
to its condition block (one bool output) and, while that is true, to its body block, whose outputs become the
next loop_vars; the op returns the last loop_vars.

Every loop is bounded (LoopBudget, in `node.cache["loop_budget"]`, one per executor and reset for each run): one
run may take at most `iterations` body iterations, all loops counted (nested loops too), and a loop's values may
not grow past `value_bytes` (core/limits.py: MAX_LOOP_ITERATIONS, value_bound). A loop that never ends, or
that doubles a tensor each time round, is refused with the loop named instead of running until memory runs out.
"""

from __future__ import annotations

import numpy as np

from ....core.errors import HarnessError
from ..registry import register
from .common import as_bool


class LoopLimitError(HarnessError):
    """A while_loop that ran past the iterations or the memory one run may take."""


class LoopBudget:
    """The while_loop iterations one run may still take and the bytes a loop's values may hold."""

    def __init__(self, iterations: int, value_bytes: int):
        if iterations < 1:
            raise ValueError(f"a loop budget needs at least 1 iteration, got {iterations}")
        self.iterations, self.value_bytes, self.left = int(iterations), int(value_bytes), int(iterations)

    def reset(self) -> None:
        self.left = self.iterations

    def spend(self, node, done: int, values: list) -> None:
        """Account for one more iteration of `node`'s body, whose values are now `values`."""
        self.left -= 1
        if self.left < 0:
            raise LoopLimitError(f"{node.where()} did not end within the {self.iterations} loop iterations one run "
                                 "may take (execute --max-loop-iterations raises the cap)")
        held = sum(v.nbytes for v in values if isinstance(v, np.ndarray))
        if held > self.value_bytes:
            raise LoopLimitError(f"{node.where()}: its loop values hold {held} bytes after {done} iterations, more "
                                 f"than the {self.value_bytes} a loop may hold (a loop that grows without end?)")


@register("cond")
def op_cond(node, args, num):
    true_block, false_block = node.blocks
    return tuple((true_block if as_bool(args["pred"]) else false_block)([]))


@register("while_loop")
def op_while_loop(node, args, num):
    condition, body = node.blocks
    budget: LoopBudget = node.cache["loop_budget"]
    values = list(args["loop_vars"])
    done = 0
    while as_bool(condition(values)[0]):
        values = body(values)
        done += 1
        budget.spend(node, done, values)
    return tuple(values)
