"""Normalisation: layer_norm."""

from __future__ import annotations

import numpy as np

from ..numerics import norm_axes
from ..registry import register


@register("layer_norm")
def op_layer_norm(node, args, num):
    x = num.f(args["x"])
    axes = norm_axes(args.get("axes"), x.ndim)
    eps = num.f(args["epsilon"]) if "epsilon" in args else num.c(1e-5)
    mean = num.mean(x, axes)
    d = num.r(x - mean)
    var = num.mean(num.r(d * d), axes)
    inv = num.fn(lambda v: 1.0 / np.sqrt(v), num.r(var + eps))  # 1 / sqrt(Var[x] + epsilon)
    y = num.r(d * inv)
    norm_shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
    if args.get("gamma") is not None:
        y = num.r(y * num.f(args["gamma"]).reshape(norm_shape))
    if args.get("beta") is not None:
        y = y + num.f(args["beta"]).reshape(norm_shape)
    return y
