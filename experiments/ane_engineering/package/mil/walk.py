"""Walking a PyMIL program: every op in program order with nested blocks, and the rewrite loop of graph passes.

The one walker of the harness: the executor, the static rules, the cost model, the op counts of a probe and the
palettizer's content check all read programs through `walk_operations`; the graph passes (slice_merge.py,
layer_norm_gamma.py) rewrite them through `rewrite_each`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any


def walk_operations(source) -> Iterator[Any]:
    """Every op in program order, each op's nested blocks (cond, while_loop) right after it. `source`: a Program (its
    "main" function, or its only one), a Function or Block, or an iterable of ops."""
    functions = getattr(source, "functions", None)
    if functions is not None:
        source = functions["main"] if "main" in functions else next(iter(functions.values()))
    operations: Iterable = getattr(source, "operations", source)
    for op in operations:
        yield op
        for block in getattr(op, "blocks", None) or ():
            yield from walk_operations(block.operations)


def rewrite_each(program, op_type: str, rewrite: Callable) -> int:
    """Call rewrite(op, block) on every op of `op_type` still in its block, in every function (inner blocks first);
    it returns True when it replaced the op. Returns how many it replaced."""
    count = 0

    def visit(block) -> None:
        nonlocal count
        for op in list(block.operations):
            for inner in op.blocks:
                visit(inner)
            if op.op_type == op_type and op.enclosing_block is not None and rewrite(op, block):
                count += 1

    for function in program.functions.values():
        visit(function)
    return count
