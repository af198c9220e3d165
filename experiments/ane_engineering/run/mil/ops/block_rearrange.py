"""Moving spatial blocks between the spatial axes and the channel or batch axis of an NCHW tensor:
depth_to_space, space_to_depth, pixel_shuffle, pixel_unshuffle, space_to_batch, batch_to_space.

Semantics are coremltools' iOS15/iOS16 tensor_transformation.py:
- depth_to_space / space_to_depth: TensorFlow's DCR order, out[n, c, h*b + i, w*b + j] =
  in[n, (i*b + j) * C_out + c, h, w]; pixel_shuffle / pixel_unshuffle: PyTorch's CRD order,
  out[n, c, h*f + i, w*f + j] = in[n, c*f*f + i*f + j, h, w].
- space_to_batch / batch_to_space: tf.space_to_batch_nd on NCHW: pad, then block (i, j) of image n goes to
  batch (i * b1 + j) * N + n; batch_to_space is the inverse followed by the crop.
All copy values.
"""

from __future__ import annotations

import numpy as np

from ..registry import register
from .common import as_int, as_ints


def _dcr_to_space(x, b):
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)  # (n, C', h, i, w, j)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_dcr(x, b):
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)  # (n, i, j, c, h, w)
    return y.reshape(n, c * b * b, h // b, w // b)


@register("depth_to_space")
def op_depth_to_space(node, args, num):
    return _dcr_to_space(np.asarray(args["x"]), as_int(args["block_size"]))


@register("space_to_depth")
def op_space_to_depth(node, args, num):
    return _space_to_dcr(np.asarray(args["x"]), as_int(args["block_size"]))


@register("pixel_shuffle")
def op_pixel_shuffle(node, args, num):
    x = np.asarray(args["x"])
    f = as_int(args["upscale_factor"])
    n, c, h, w = x.shape
    y = x.reshape(n, c // (f * f), f, f, h, w).transpose(0, 1, 4, 2, 5, 3)  # (n, C', h, i, w, j)
    return y.reshape(n, c // (f * f), h * f, w * f)


@register("pixel_unshuffle", since="iOS16")
def op_pixel_unshuffle(node, args, num):
    x = np.asarray(args["x"])
    f = as_int(args["downscale_factor"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // f, f, w // f, f).transpose(0, 1, 3, 5, 2, 4)  # (n, c, i, j, h, w)
    return y.reshape(n, c * f * f, h // f, w // f)


@register("space_to_batch")
def op_space_to_batch(node, args, num):
    x = np.asarray(args["x"])
    b0, b1 = as_ints(args["block_shape"])
    (p0, p1), (p2, p3) = np.asarray(args["paddings"]).reshape(2, 2).tolist()
    x = np.pad(x, [(0, 0), (0, 0), (p0, p1), (p2, p3)])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b0, b0, w // b1, b1).transpose(3, 5, 0, 1, 2, 4)  # (i, j, n, c, h', w')
    return y.reshape(b0 * b1 * n, c, h // b0, w // b1)


@register("batch_to_space")
def op_batch_to_space(node, args, num):
    x = np.asarray(args["x"])
    b0, b1 = as_ints(args["block_shape"])
    (c0, c1), (c2, c3) = np.asarray(args["crops"]).reshape(2, 2).tolist()
    nb, c, h, w = x.shape
    n = nb // (b0 * b1)
    y = x.reshape(b0, b1, n, c, h, w).transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * b0, w * b1)
    return y[:, :, c0:h * b0 - c1, c2:w * b1 - c3]
