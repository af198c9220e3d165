"""Shape changes that keep every element: transpose, reshape, reshape_like, expand_dims, squeeze, flatten2d.

Semantics are coremltools' op definitions (iOS15 tensor_transformation.py and its iOS16-18 versions); reshape
resolves 0 (copy from x, right-aligned as iOS17) and -1 when the declared output shape is not known.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_bool, as_int, as_ints


@register("transpose")
def op_transpose(node, args, num):
    return np.transpose(args["x"], as_ints(args["perm"]))


@register("reshape")
def op_reshape(node, args, num):
    x = np.asarray(args["x"])
    shape = node.output_shapes[0]
    if shape is None:  # resolve 0 (copy from x, right-aligned as iOS17) and -1 ourselves
        target = as_ints(args["shape"])
        rev_in = list(x.shape)[::-1]
        rev = target[::-1]
        for i, t in enumerate(rev):
            if t == 0:
                rev[i] = rev_in[i] if i < len(rev_in) else 1
        shape = tuple(rev[::-1])
    return x.reshape(shape)


@register("reshape_like", since="iOS16")
def op_reshape_like(node, args, num):
    shape = []
    for ref, begin, end, end_mask in zip(args["ref_tensors"], args["begins"], args["ends"], args["end_masks"]):
        dims = np.asarray(ref).shape
        shape += list(dims[as_int(begin):] if as_bool(end_mask) else dims[as_int(begin):as_int(end)])
    return np.asarray(args["x"]).reshape(shape)


@register("expand_dims")
def op_expand_dims(node, args, num):
    x = np.asarray(args["x"])
    axes = as_ints(args["axes"])
    out_rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a + out_rank if a < 0 else a for a in axes):
        shape.insert(a, 1)
    return x.reshape(shape)


@register("squeeze")
def op_squeeze(node, args, num):
    x = np.asarray(args["x"])
    if args.get("axes") is None:
        y = np.squeeze(x)
    else:
        y = np.squeeze(x, axis=tuple(as_ints(args["axes"])))
    return y if y.shape != () or x.ndim == 0 else y.reshape(1)  # MIL keeps a squeezed-to-scalar tensor rank 1


@register("flatten2d")
def op_flatten2d(node, args, num):
    x = np.asarray(args["x"])
    axis = as_int(args.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
