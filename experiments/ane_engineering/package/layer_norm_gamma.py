"""A MIL graph pass: a channel layer norm followed by a multiply with its weight is one layer_norm with gamma.

Why: BC1S normalises over the channel axis of (1, C, 1, S) (model/bc1s/norm.py) and multiplies by the weight as a
(1, C, 1, 1) constant. coremltools fuses the normalisation into `layer_norm(axes=[1])` but takes a weight into
the op only when it is rank 1, so the weight stays a separate `mul` that re-reads and re-writes the whole
(1, C, 1, S) tensor -- 2 C S values per norm, every norm of every layer. MIL's layer_norm takes `gamma` shaped
like the normalised axes, (C,) for axes [1], and computes exactly `normalised * gamma`: the same product, in one
op, with the weights untouched (so palettization and reweighting see the same tensors).

Fused only when it is that product: a layer_norm over the channel axis of a rank-4 tensor without gamma or beta,
read by nothing but a `mul` whose other operand is a constant read by nothing else, holding one value per channel
((1, C, 1, 1) or (C, 1, 1)). The (C,) gamma takes over that constant's name, so reweighting still finds the norm
weight it came from (package/reweight.py matches blobs by name; the shape differs only in unit dimensions).
"""

from __future__ import annotations

import numpy as np

from .mil.walk import rewrite_each


def _channel_weight(var, channels: int) -> np.ndarray | None:
    """The (C,) values of a constant that multiplies channel c by value c, else None."""
    value = var.val
    if value is None or var.shape is None:
        return None
    shape = tuple(var.shape)
    if shape not in ((1, channels, 1, 1), (channels, 1, 1)):
        return None
    return np.asarray(value).reshape(channels)


def fuse_layer_norm_gamma(program) -> int:
    """Fuse every layer_norm -> mul(weight) pair of the program (nested blocks included); returns how many."""
    return rewrite_each(program, "mul", _fuse_into_norm)


def _fuse_into_norm(op, block) -> bool:
    """Replace the multiply `op` and the layer_norm it reads by one layer_norm with gamma, if it is that product."""
    from coremltools.converters.mil.mil import Builder as mb

    for norm_var, weight_var in ((op.x, op.y), (op.y, op.x)):
        norm = norm_var.op
        if norm is None or norm.op_type != "layer_norm" or norm.enclosing_block is not block:
            continue
        shape = norm.x.shape
        if shape is None or len(shape) != 4 or not isinstance(shape[1], int):
            continue
        axes = norm.axes.val if norm.axes is not None else None
        if axes is None or [int(a) % 4 for a in np.asarray(axes).reshape(-1)] != [1]:
            continue
        if norm.gamma is not None or norm.beta is not None:
            continue
        if len(norm_var.child_ops) != 1 or norm_var in block.outputs:
            continue
        gamma = _channel_weight(weight_var, shape[1])
        weight_op = weight_var.op
        if gamma is None or weight_op is None or weight_op.op_type != "const" or len(weight_var.child_ops) != 1:
            continue
        epsilon = norm.epsilon.val if norm.epsilon is not None else None
        name = weight_var.name
        with block:
            channel_gamma = mb.const(val=gamma, name=name + "_channels", before_op=op)
            new = mb.layer_norm(x=norm.x, axes=[1], gamma=channel_gamma,
                                **({} if epsilon is None else {"epsilon": epsilon}),
                                before_op=op, name=op.name + "_layer_norm")
        block.replace_uses_of_var_after_op(anchor_op=op, old_var=op.outputs[0], new_var=new)
        block.remove_ops([op, norm, weight_op])
        channel_gamma.op.name = name  # the weight's own name: reweight maps blobs to tensors by it
        channel_gamma.set_name(name)
        return True
    return False
