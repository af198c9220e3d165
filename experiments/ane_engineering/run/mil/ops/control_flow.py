"""Control flow: cond and while_loop, whose nested blocks the executor compiles and hands over as `node.blocks`
(callables: run_block(input values) -> output values). Semantics of coremltools' defs/iOS15/control_flow.py:
cond runs its first block if `pred` is true, else its second (both take no inputs); while_loop feeds `loop_vars`
to its condition block (one bool output) and, while that is true, to its body block, whose outputs become the
next loop_vars; the op returns the last loop_vars."""

from __future__ import annotations

from ..registry import register
from .common import as_bool


@register("cond")
def op_cond(node, args, num):
    true_block, false_block = node.blocks
    return tuple((true_block if as_bool(args["pred"]) else false_block)([]))


@register("while_loop")
def op_while_loop(node, args, num):
    condition, body = node.blocks
    values = list(args["loop_vars"])
    while as_bool(condition(values)[0]):
        values = body(values)
    return tuple(values)
