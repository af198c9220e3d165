"""A MIL graph pass: a slice of a slice is one slice.

Why: torch traces `x[:, :, a:b, c:d]` as one `aten::slice` per sliced axis, and coremltools converts each into its
own `slice_by_index`. Between the two, the first slice's whole output is written and read back; on the windowed
layout's edge pieces (model/bc1s/windowed_attention.py: the last r columns of the previous tile, for all tiles at once)
that is as much traffic as the piece itself. One `slice_by_index` takes begin/end on every axis, so the chain
`slice_by_index(slice_by_index(x))` becomes one op that reads x once and writes the final piece.

Merged only when it is exactly the same selection: both slices have static shapes and constant arguments, unit
strides and no squeezed axes, and the first slice's output feeds nothing else (not a block output). Every bound is
resolved against the static shape first (masks, negative indices, ends past the axis), so the merged op has plain
non-negative begin/end and no masks.
"""

from __future__ import annotations

from .mil.walk import rewrite_each


def _axis_bounds(op) -> list[tuple[int, int]] | None:
    """[(start, stop)] per axis of a static, unit-stride, unsqueezed slice_by_index; None if not that."""
    shape = op.x.shape
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    rank = len(shape)
    values = {}
    for name in ("begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask"):
        var = op.inputs.get(name)
        if var is None:
            values[name] = None
            continue
        if var.val is None:
            return None  # a runtime argument
        values[name] = [v.item() if hasattr(v, "item") else v for v in var.val.reshape(-1)]
    if values["stride"] is not None and any(s != 1 for s in values["stride"]):
        return None
    if values["squeeze_mask"] is not None and any(values["squeeze_mask"]):
        return None
    begin_mask = values["begin_mask"] or [False] * rank
    end_mask = values["end_mask"] or [False] * rank
    bounds = []
    for axis, size in enumerate(shape):
        start, stop, _ = slice(None if begin_mask[axis] else int(values["begin"][axis]),
                               None if end_mask[axis] else int(values["end"][axis])).indices(size)
        bounds.append((start, max(start, stop)))
    return bounds


def merge_slices(program) -> int:
    """Merge every chain of two slice_by_index ops in the program (nested blocks included); returns how many."""
    return rewrite_each(program, "slice_by_index", _merge_into_parent)


def _merge_into_parent(op, block) -> bool:
    """Replace `op` and the slice it reads by one slice of the first slice's input, if they are plain slices."""
    from coremltools.converters.mil.mil import Builder as mb

    first = op.x.op
    if first is None or first.op_type != "slice_by_index" or first.enclosing_block is not block:
        return False
    if len(first.outputs[0].child_ops) != 1 or first.outputs[0] in block.outputs:
        return False
    outer, inner_bounds = _axis_bounds(first), _axis_bounds(op)
    if outer is None or inner_bounds is None:
        return False
    begin = [o_start + i_start for (o_start, _), (i_start, _) in zip(outer, inner_bounds)]
    end = [o_start + i_stop for (o_start, _), (_, i_stop) in zip(outer, inner_bounds)]
    with block:
        new = mb.slice_by_index(x=first.x, begin=begin, end=end, before_op=op, name=op.name + "_merged")
    block.replace_uses_of_var_after_op(anchor_op=op, old_var=op.outputs[0], new_var=new)
    block.remove_ops([op, first])
    return True
