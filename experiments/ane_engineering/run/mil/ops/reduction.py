"""Reductions: reduce_sum, reduce_mean (accumulated as the precision mode says), reduce_max, reduce_min."""

from __future__ import annotations

import numpy as np

from ..numerics import norm_axes
from ..registry import register
from .common import as_bool


@register("reduce_sum")
def op_reduce_sum(node, args, num):
    x = num.f(args["x"])
    return num.sum(x, args.get("axes"), keepdims=as_bool(args.get("keep_dims", False)))


@register("reduce_mean")
def op_reduce_mean(node, args, num):
    x = num.f(args["x"])
    return num.mean(x, args.get("axes"), keepdims=as_bool(args.get("keep_dims", False)))


@register("reduce_max")
def op_reduce_max(node, args, num):
    x = num.f(args["x"])
    axes = norm_axes(args.get("axes"), x.ndim)
    return np.max(x, axis=axes, keepdims=as_bool(args.get("keep_dims", False)))


@register("reduce_min")
def op_reduce_min(node, args, num):
    x = num.f(args["x"])
    axes = norm_axes(args.get("axes"), x.ndim)
    return np.min(x, axis=axes, keepdims=as_bool(args.get("keep_dims", False)))
