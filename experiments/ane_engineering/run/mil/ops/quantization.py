"""Activation quantization (iOS17 quantize / dequantize) and the iOS18 sparse compression constexprs
(constexpr_lut_to_sparse, constexpr_sparse_blockwise_shift_scale).

- quantize: clip(round_half_even(input / scale) + zero_point) to the output dtype's range (int8 or uint8);
  dequantize: scale * (input - zero_point). A vector scale / zero_point lies along `axis`; a scalar applies to all
  (coremltools' quantize_by_scale_and_zp / dequantize definitions, numpy's round-half-to-even `np.around`).
- constexpr_lut_to_sparse: the palettized non-zero indices are looked up in the lut (as constexpr_lut_to_dense,
  over the dense layout given by the mask); outputs the mask (repeated along vector_axis for vector palettes) and
  the looked-up non-zero values in row-major order. constexpr_sparse_blockwise_shift_scale: the same with the
  blockwise shift-scale. Both reuse the constexpr family's dense handlers, so they decompress the same way.

Numerics: quantize divides and rounds in float32 in both modes (its result is an integer; fp16-strict rounds the
quotient to fp16 first); dequantize computes in the mode's dtype and rounds once.
"""

from __future__ import annotations

import numpy as np

from ..registry import OPS, register
from .common import as_axis


def _along(param, rank: int, args) -> np.ndarray:
    p = np.asarray(param)
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    axis = as_axis(args["axis"], rank)
    return p.reshape([-1 if d == axis else 1 for d in range(rank)])


@register("quantize", since="iOS17")
def op_quantize(node, args, num):
    x = num.f(args["input"])
    dtype = node.output_dtypes[0]
    q = num.r(x / num.f(_along(args["scale"], x.ndim, args)))
    q = np.around(q.astype(np.float32))
    if args.get("zero_point") is not None:
        q = q + _along(args["zero_point"], x.ndim, args).astype(np.float32)
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


@register("dequantize", since="iOS17")
def op_dequantize(node, args, num):
    q = np.asarray(args["input"])
    scale = num.f(_along(args["scale"], q.ndim, args))
    values = q.astype(scale.dtype)
    if args.get("zero_point") is not None:
        values = num.r(values - _along(args["zero_point"], q.ndim, args).astype(scale.dtype))
    return values * scale


def _dense(node, nonzero, mask):
    return OPS["constexpr_sparse_to_dense"].handler(node, {"nonzero_data": nonzero, "mask": mask}, None)


@register("constexpr_lut_to_sparse", since="iOS18")
def op_constexpr_lut_to_sparse(node, args, num):
    mask = np.asarray(args["indices_mask"])
    indices = _dense(node, np.asarray(args["indices_nonzero_data"]), mask)
    lut_args = {"indices": indices, "lut": args["lut"]}
    if args.get("vector_axis") is not None:
        lut_args["vector_axis"] = args["vector_axis"]
    dense = OPS["constexpr_lut_to_dense"].handler(node, lut_args, num)
    lut = np.asarray(args["lut"])
    if args.get("vector_axis") is not None and lut.shape[-1] > 1:
        mask = np.repeat(mask, lut.shape[-1], axis=as_axis(args["vector_axis"], mask.ndim))
    return mask, dense[mask != 0].reshape(-1)


@register("constexpr_sparse_blockwise_shift_scale", since="iOS18")
def op_constexpr_sparse_blockwise_shift_scale(node, args, num):
    mask = np.asarray(args["data_mask"])
    data = _dense(node, np.asarray(args["nonzero_data"]), mask)
    shift_args = {"data": data, "scale": args["scale"]}
    if args.get("offset") is not None:
        shift_args["offset"] = args["offset"]
    dense = OPS["constexpr_blockwise_shift_scale"].handler(node, shift_args, num)
    return mask, dense[mask != 0].reshape(-1)
