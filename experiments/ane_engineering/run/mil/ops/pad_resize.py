"""Padding, cropping and resampling of the spatial (last) axes: pad, crop, upsample_nearest_neighbor,
resize_nearest_neighbor, upsample_bilinear, resize_bilinear, resize (iOS17), crop_resize (iOS15/16/17).

Semantics (coremltools' image_resizing.py and tensor_operation.py op definitions):
- pad: `pad[2i], pad[2i+1]` before/after each of the last len(pad)/2 axes; mode constant (constant_val),
  reflect (numpy "reflect": the edge not repeated) or replicate (numpy "edge").
- crop: x[..., h0:H-h1, w0:W-w1].
- sampling grids (resize_bilinear's `sampling_mode`, also used by resize and crop_resize), for an axis of Xin
  samples resized to Xout, grid_point[i] clamped to [0, Xin - 1]:
  STRICT_ALIGN_CORNERS  i * (Xin - 1) / (Xout - 1)                (0 when Xout == 1)
  ALIGN_CORNERS         the same, but (Xin - 1) / 2 when Xout == 1
  DEFAULT               i * (Xin - Xin / Xout) / (Xout - 1)       (0 when Xout == 1)
  OFFSET_CORNERS        delta / 2 + i * delta, delta = max(1, Xin - 1) / Xout
  UNALIGN_CORNERS       (i + 0.5) * Xin / Xout - 0.5
- upsample_bilinear: align_corners -> ALIGN_CORNERS; otherwise half_pixel_centers (iOS16; default
  not align_corners) -> UNALIGN_CORNERS, else i * Xin / Xout; Xout = floor(Xin * scale) (the scale recomputed
  from the sizes, as the op documents).
- nearest neighbour: upsample_/resize_nearest_neighbor read x[floor(i * Xin / Xout)] (coremltools' fractional
  scale op tests: 3 -> 2 reads 0, 1); iOS17 resize with NEAREST_NEIGHBOR reads x[floor(grid_point + 0.5)] on the
  sampling-mode grid (its op test: DEFAULT 2 -> 3 reads 0, 1, 1).
- bilinear: (1 - t) * x[floor(g)] + t * x[floor(g) + 1], t = g - floor(g), per axis (height, then width).
- crop_resize: each box [start, end] along an axis is sampled like an axis of Xin = end - start + 1 samples on the
  sampling-mode grid, shifted by start (ALIGN_CORNERS over box [1, 2] at size 1 reads 1.5, as its op test);
  coordinates scaled by (H - 1, W - 1) when normalized and by spatial_scale; points outside the image read
  pad_value (iOS16+). iOS15's op has no pad_value, and Core ML does not read zeros there: coremltools' iOS15 op test
  (iOS15/test_image_resizing.py, TestCropResize: roi [2, 2, 1, 1], normalized, UNALIGN_CORNERS, on a 4 x 4 image
  1..16) expects [3.5, 5.5, 11.5, 13.5], the samples at 0.5 and 2.5 of each axis; the box's own samples are at
  5.5 and 3.5, which reflected at the last row / column (p -> 2 (H - 1) - p; p -> -p at the first) land on exactly
  those. So iOS15 reflects sample positions at the image edges (one data point: the simplest rule that meets it).
  Output: iOS15/16 [N, B or 1, C, h, w] from roi [N, 1, 4 or 5, 1, 1]; iOS17 [N, C, h, w] from boxes [N, 4] and
  box_indices.

Numerics: padding, cropping and nearest neighbour copy values. Interpolation is computed in float32 and rounded
once in both modes (fp16-strict does not round the interpolation weights or partial sums: a documented
simplification for these resampling ops).
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import UnsupportedOpError, register
from .common import as_bool, as_int, as_ints


@register("pad")
def op_pad(node, args, num):
    x = np.asarray(args["x"])
    pad = as_ints(args["pad"])
    mode = str(args.get("mode", "constant"))
    widths = [(0, 0)] * (x.ndim - len(pad) // 2) + [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    if mode == "constant":
        value = np.asarray(args.get("constant_val", 0)).astype(x.dtype)
        return np.pad(x, widths, mode="constant", constant_values=value)
    if mode == "reflect":
        return np.pad(x, widths, mode="reflect")
    if mode == "replicate":
        return np.pad(x, widths, mode="edge")
    raise UnsupportedOpError(f"pad mode {mode!r} ({node.where()})")


@register("crop")
def op_crop(node, args, num):
    x = np.asarray(args["x"])
    (h0, h1), (w0, w1) = as_ints(args["crop_height"]), as_ints(args["crop_width"])
    return x[..., h0:x.shape[-2] - h1, w0:x.shape[-1] - w1]


def _grid(mode: str, x_in: float, x_out: int) -> np.ndarray:
    """resize_bilinear's grid points (float64) for `mode`, before clamping; x_in may be fractional (a box)."""
    i = np.arange(x_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if x_out == 1:
            return np.full(1, (x_in - 1) / 2.0 if mode == "ALIGN_CORNERS" else 0.0)
        return i * (x_in - 1) / (x_out - 1)
    if mode == "DEFAULT":
        return i * (x_in - x_in / x_out) / (x_out - 1) if x_out > 1 else np.zeros(1)
    if mode == "OFFSET_CORNERS":
        delta = max(1.0, x_in - 1) / x_out
        return 0.5 * delta + i * delta
    if mode == "UNALIGN_CORNERS":
        return (i + 0.5) * x_in / x_out - 0.5
    if mode == "ASYMMETRIC":  # upsample_bilinear with neither align_corners nor half_pixel_centers
        return i * x_in / x_out
    raise UnsupportedOpError(f"sampling_mode {mode!r}")


def sampling_grid(mode: str, x_in: int, x_out: int) -> np.ndarray:
    """Grid points clamped to [0, x_in - 1]."""
    return np.clip(_grid(mode, x_in, x_out), 0, x_in - 1)


def _lerp_axis(x: np.ndarray, grid: np.ndarray, axis: int) -> np.ndarray:
    """Linear interpolation of float32 `x` along `axis` at the (in-range) float64 positions `grid`."""
    lo = np.floor(grid).astype(np.int64)
    hi = np.minimum(lo + 1, x.shape[axis] - 1)
    t = (grid - lo).astype(np.float32).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
    a, b = np.take(x, lo, axis=axis), np.take(x, hi, axis=axis)
    return a + t * (b - a) if x.shape[axis] > 1 else a


def _bilinear(x, out_h: int, out_w: int, mode: str):
    x32 = np.asarray(x, np.float32)
    y = _lerp_axis(x32, sampling_grid(mode, x32.shape[-2], out_h), x32.ndim - 2)
    return _lerp_axis(y, sampling_grid(mode, x32.shape[-1], out_w), x32.ndim - 1)


def _nearest_floor(x, out_h: int, out_w: int):
    x = np.asarray(x)
    rows = (np.arange(out_h) * x.shape[-2]) // out_h
    cols = (np.arange(out_w) * x.shape[-1]) // out_w
    return x[..., rows, :][..., cols]


def _scaled_size(size: int, scale) -> int:
    return math.floor(float(np.asarray(scale).reshape(-1)[0]) * size)


@register("upsample_nearest_neighbor")
def op_upsample_nearest_neighbor(node, args, num):
    x = np.asarray(args["x"])
    out_h = _scaled_size(x.shape[-2], args.get("scale_factor_height", 1))
    out_w = _scaled_size(x.shape[-1], args.get("scale_factor_width", 1))
    return _nearest_floor(x, out_h, out_w)


@register("resize_nearest_neighbor")
def op_resize_nearest_neighbor(node, args, num):
    return _nearest_floor(args["x"], as_int(args["target_size_height"]), as_int(args["target_size_width"]))


@register("upsample_bilinear")
def op_upsample_bilinear(node, args, num):
    x = np.asarray(args["x"])
    out_h = _scaled_size(x.shape[-2], args.get("scale_factor_height", 1))
    out_w = _scaled_size(x.shape[-1], args.get("scale_factor_width", 1))
    align = as_bool(args.get("align_corners", True))
    half_pixel = as_bool(args["half_pixel_centers"]) if args.get("half_pixel_centers") is not None else not align
    mode = "ALIGN_CORNERS" if align else ("UNALIGN_CORNERS" if half_pixel else "ASYMMETRIC")
    return _bilinear(num.f(x), out_h, out_w, mode)


@register("resize_bilinear")
def op_resize_bilinear(node, args, num):
    return _bilinear(num.f(args["x"]), as_int(args.get("target_size_height", 1)),
                     as_int(args.get("target_size_width", 1)), str(args.get("sampling_mode", "DEFAULT")))


@register("resize", since="iOS17")
def op_resize(node, args, num):
    # iOS17: the last `resized_dims` axes take their size from the end of `shape` (0: keep x's size)
    x = np.asarray(args["x"])
    shape = as_ints(args["shape"])
    k = as_int(args["resized_dims"])
    mode = str(args.get("sampling_mode", "DEFAULT"))
    linear = str(args.get("interpolation_mode", "LINEAR")) == "LINEAR"
    out = num.f(x) if linear else x
    for j in range(k):
        axis = x.ndim - k + j
        size = shape[len(shape) - k + j] or x.shape[axis]
        grid = sampling_grid(mode, x.shape[axis], size)
        if linear:
            out = _lerp_axis(np.asarray(out, np.float32), grid, axis)
        else:
            out = np.take(out, np.minimum(np.floor(grid + 0.5).astype(np.int64), x.shape[axis] - 1), axis=axis)
    return out


def _boxes_to_corners(boxes: np.ndarray, mode: str) -> np.ndarray:
    """[N, 4] boxes in `box_coordinate_mode` -> [N, 4] as (h_start, w_start, h_end, w_end)."""
    a, b, c, d = (boxes[:, i] for i in range(4))
    if mode == "CORNERS_HEIGHT_FIRST":
        return np.stack([a, b, c, d], 1)
    if mode == "CORNERS_WIDTH_FIRST":
        return np.stack([b, a, d, c], 1)
    if mode == "CENTER_SIZE_HEIGHT_FIRST":
        return np.stack([a - c / 2, b - d / 2, a + c / 2, b + d / 2], 1)
    if mode == "CENTER_SIZE_WIDTH_FIRST":
        return np.stack([b - d / 2, a - c / 2, b + d / 2, a + c / 2], 1)
    raise UnsupportedOpError(f"crop_resize box_coordinate_mode {mode!r}")


def _box_axis(start: float, end: float, size: int, mode: str) -> np.ndarray:
    """Sample positions along one axis of a box [start, end] (end < start samples it backwards)."""
    span = end - start
    if span == 0:
        return np.full(size, start)
    x_in = abs(span) + 1  # the box spans abs(span) as an axis of x_in samples spans x_in - 1
    return start + np.sign(span) * np.clip(_grid(mode, x_in, size), 0, x_in - 1)


def _reflect(pos: np.ndarray, n: int) -> np.ndarray:
    """Positions folded back into [0, n - 1] by reflection at both edges (period 2 (n - 1))."""
    if n == 1:
        return np.zeros_like(pos)
    period = 2 * (n - 1)
    folded = np.mod(np.abs(pos), period)
    return np.where(folded > n - 1, period - folded, folded)


def _sample(image: np.ndarray, hs: np.ndarray, ws: np.ndarray, pad_value: float | None) -> np.ndarray:
    """Bilinear samples of image [C, H, W] at rows hs x cols ws; points outside [0, H-1] x [0, W-1] read pad_value,
    or (pad_value None: iOS15, see the module docstring) sample the position reflected at the edges."""
    _, height, width = image.shape
    if pad_value is None:
        hs, ws = _reflect(hs, height), _reflect(ws, width)

    def weights(pos, n):
        inside = (pos >= 0) & (pos <= n - 1)
        p = np.clip(pos, 0, n - 1)
        lo = np.floor(p).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        return lo, hi, (p - lo).astype(np.float32), inside

    h_lo, h_hi, th, h_in = weights(hs, height)
    w_lo, w_hi, tw, w_in = weights(ws, width)
    th, tw = th[:, None], tw[None, :]
    top = image[:, h_lo][:, :, w_lo] * (1 - tw) + image[:, h_lo][:, :, w_hi] * tw
    bottom = image[:, h_hi][:, :, w_lo] * (1 - tw) + image[:, h_hi][:, :, w_hi] * tw
    out = top * (1 - th) + bottom * th
    if pad_value is None:
        return out
    return np.where((h_in[:, None] & w_in[None, :])[None], out, np.float32(pad_value))


@register("crop_resize")
def op_crop_resize(node, args, num):
    x = np.asarray(num.f(args["x"]), np.float32)  # [B, C, H, W]
    th, tw = as_int(args.get("target_height", 1)), as_int(args.get("target_width", 1))
    normalized = as_bool(args.get("normalized_coordinates", False))
    scale = float(np.asarray(args.get("spatial_scale", 1.0)))
    box_mode = str(args.get("box_coordinate_mode", "CORNERS_HEIGHT_FIRST"))
    mode = str(args.get("sampling_mode", "DEFAULT"))
    # iOS16+ define pad_value (the loader gives its default); iOS15's op has none: reflected samples instead
    pad_value = float(np.asarray(args["pad_value"])) if "pad_value" in args else None
    batch, _, height, width = x.shape
    if "boxes" in args:  # iOS17: boxes [N, 4], box_indices [N] -> [N, C, th, tw]
        boxes = np.asarray(args["boxes"], np.float64)
        indices = (np.asarray(args["box_indices"]).astype(np.int64).reshape(-1) if args.get("box_indices") is not None
                   else np.arange(boxes.shape[0]))
        pairs = [(n, int(indices[n])) for n in range(boxes.shape[0])]
        per_box = None
    else:  # iOS15/16: roi [N, 1, 4 or 5, 1, 1]; 5: the first is the image index
        roi = np.asarray(args["roi"], np.float64).reshape(np.asarray(args["roi"]).shape[0], -1)
        if roi.shape[1] == 5:
            boxes, pairs, per_box = roi[:, 1:], [(n, int(roi[n, 0])) for n in range(roi.shape[0])], 1
        else:
            boxes, pairs, per_box = roi, [(n, b) for n in range(roi.shape[0]) for b in range(batch)], batch
    corners = _boxes_to_corners(boxes, box_mode) * scale
    if normalized:
        corners = corners * np.array([height - 1, width - 1, height - 1, width - 1], np.float64)
    crops = []
    for n, b in pairs:
        h0, w0, h1, w1 = corners[n]
        crops.append(_sample(x[b], _box_axis(h0, h1, th, mode), _box_axis(w0, w1, tw, mode), pad_value))
    out = np.stack(crops) if crops else np.zeros((0, x.shape[1], th, tw), np.float32)
    return out if per_box is None else out.reshape((len(corners), per_box) + out.shape[1:])
