"""resample (iOS15/16/17) and affine (iOS15+): sample x [B, C, H, W] at arbitrary (w, h) points.

Semantics (coremltools' image_resizing.py; PyTorch's grid_sample, which its converter maps onto resample):
- coordinates [B, H2, W2, 2] hold (w, h). To pixel units per axis of size n: unnormalized as given;
  normalized_minus_one_to_one: (c + 1) / 2 * (n - 1) with align_corners, ((c + 1) * n - 1) / 2 without;
  normalized_zero_to_one: c * (n - 1) with align_corners, c * n - 0.5 without.
- padding_mode: constant (taps outside the image read padding_value), border (positions clamped to [0, n - 1]),
  reflection (reflected about the edge pixels 0 and n - 1: |1 2 3| -> 2 3 2 1 2 3 2 1), symmetric (reflected
  about the image borders -0.5 and n - 0.5, edges repeated: 3 2 1 1 2 3 3 2 1; PyTorch's reflection without
  align_corners, as coremltools' converter maps it).
- sampling_mode: bilinear (the four neighbours) or nearest (round half to even, as PyTorch's nearbyint).
- affine: output pixel (w, h) of an output_height x output_width grid in normalised [-1, 1] coordinates
  (linspace(-1, 1, n) with align_corners, (2i + 1) / n - 1 without; PyTorch's affine_grid), mapped by
  [a0 a1 a2; b0 b1 b2] (one row of transform_matrix per batch, or one for all), then resampled as above.

Numerics: positions and weights in float64, the weighted sum in float32, one rounding in both modes
(fp16-strict does not round the interpolation's inner steps: a documented simplification).
"""

from __future__ import annotations

import numpy as np

from ..registry import UnsupportedOpError, register
from .common import as_bool, as_int


def _to_pixels(c, n: int, mode: str, align: bool):
    if mode == "unnormalized":
        return c
    if mode == "normalized_minus_one_to_one":
        return (c + 1) / 2 * (n - 1) if align else ((c + 1) * n - 1) / 2
    if mode == "normalized_zero_to_one":
        return c * (n - 1) if align else c * n - 0.5
    raise UnsupportedOpError(f"resample coordinates_mode {mode!r}")


def _reflect(c, lo: float, hi: float):
    span = hi - lo
    if span <= 0:
        return np.zeros_like(c)
    d = np.abs(c - lo)
    flips = np.floor(d / span)
    extra = d - flips * span
    return np.where(flips % 2 == 0, lo + extra, hi - extra)


def _pad_positions(c, n: int, padding: str):
    if padding == "constant":
        return c
    if padding == "border":
        return np.clip(c, 0, n - 1)
    if padding == "reflection":
        return np.clip(_reflect(c, 0.0, n - 1.0), 0, n - 1)
    if padding == "symmetric":
        return np.clip(_reflect(c, -0.5, n - 0.5), 0, n - 1)
    raise UnsupportedOpError(f"resample padding_mode {padding!r}")


def resample(x, coords, sampling: str, padding: str, pad_value: float, coord_mode: str, align: bool):
    """x [B, C, H, W] float32, coords [B, H2, W2, 2] (w, h) -> [B, C, H2, W2] float32."""
    _, _, height, width = x.shape
    cw = _pad_positions(_to_pixels(np.asarray(coords[..., 0], np.float64), width, coord_mode, align), width, padding)
    ch = _pad_positions(_to_pixels(np.asarray(coords[..., 1], np.float64), height, coord_mode, align), height, padding)
    batch = np.arange(x.shape[0])[:, None, None]

    def tap(iy, ix):  # [B, H2, W2] integer positions -> [B, C, H2, W2]; outside the image: pad_value
        inside = (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
        vals = x[batch, :, np.clip(iy, 0, height - 1), np.clip(ix, 0, width - 1)]  # [B, H2, W2, C]
        vals = np.where(inside[..., None], vals, np.float32(pad_value))
        return np.moveaxis(vals, -1, 1)

    if sampling == "nearest":
        return tap(np.round(ch).astype(np.int64), np.round(cw).astype(np.int64))
    if sampling != "bilinear":
        raise UnsupportedOpError(f"resample sampling_mode {sampling!r}")
    y0, x0 = np.floor(ch).astype(np.int64), np.floor(cw).astype(np.int64)
    ty = (ch - y0).astype(np.float32)[:, None]
    tx = (cw - x0).astype(np.float32)[:, None]
    top = tap(y0, x0) * (1 - tx) + tap(y0, x0 + 1) * tx
    bottom = tap(y0 + 1, x0) * (1 - tx) + tap(y0 + 1, x0 + 1) * tx
    return top * (1 - ty) + bottom * ty


@register("resample")
def op_resample(node, args, num):
    return resample(np.asarray(num.f(args["x"]), np.float32), np.asarray(args["coordinates"], np.float64),
                    str(args["sampling_mode"]), str(args["padding_mode"]), float(np.asarray(args["padding_value"])),
                    str(args["coordinates_mode"]), as_bool(args["align_corners"]))


@register("affine")
def op_affine(node, args, num):
    x = np.asarray(num.f(args["x"]), np.float32)
    out_h, out_w = as_int(args["output_height"]), as_int(args["output_width"])
    align = as_bool(args["align_corners"])

    def base(n):
        return np.linspace(-1, 1, n) if align else (2 * np.arange(n) + 1) / n - 1

    gw, gh = np.meshgrid(base(out_w), base(out_h))  # [H2, W2] each
    m = np.asarray(args["transform_matrix"], np.float64).reshape(-1, 6)
    m = np.broadcast_to(m, (x.shape[0], 6))
    a = m[:, :, None, None]
    cw = a[:, 0] * gw + a[:, 1] * gh + a[:, 2]  # x' = a0 x + a1 y + a2
    ch = a[:, 3] * gw + a[:, 4] * gh + a[:, 5]  # y' = b0 x + b1 y + b2
    return resample(x, np.stack([cw, ch], axis=-1), str(args["sampling_mode"]), str(args["padding_mode"]),
                    float(np.asarray(args["padding_value"])), str(args["coordinates_mode"]), align)
