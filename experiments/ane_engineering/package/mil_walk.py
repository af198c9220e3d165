"""Walk every op of a PyMIL program, nested blocks included, and apply one local rewrite: the loop both graph passes
(slice_merge.py, layer_norm_gamma.py) share."""

from __future__ import annotations

from collections.abc import Callable


def rewrite_each(program, op_type: str, rewrite: Callable) -> int:
    """Call rewrite(op, block) on every op of `op_type` still in its block (inner blocks first); it returns True
    when it replaced the op. Returns how many it replaced."""
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
