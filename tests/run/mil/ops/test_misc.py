"""quantize/dequantize, the iOS18 sparse compression constexprs, resample and affine added to the mil executor,
against numpy, coremltools' own `decompress` and PyTorch's grid_sample / affine_grid."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from executor_ops_support import MODES, assert_fp16, ct, f16, mb, run

RNG = np.random.default_rng(99)


@pytest.mark.parametrize("mode", MODES)
def test_quantize_dequantize(mode):
    x = f16(RNG.standard_normal((2, 3, 4)) * 3)
    scale = f16([0.05, 0.1, 0.02])
    zp = np.array([3, -2, 0], np.int8)
    outs = run(lambda v: (mb.quantize(input=v, scale=scale, zero_point=zp, axis=1, output_dtype="int8"),
                          mb.quantize(input=v, scale=np.float16(0.1), output_dtype="uint8"),
                          mb.dequantize(input=mb.quantize(input=v, scale=scale, zero_point=zp, axis=1,
                                                          output_dtype="int8"),
                                        scale=scale, zero_point=zp, axis=1)), {"v": x}, mode)
    s, z = scale.astype(np.float64).reshape(1, 3, 1), zp.astype(np.float64).reshape(1, 3, 1)
    q = np.clip(np.around(x / s) + z, -128, 127)
    assert outs[0].dtype == np.int8
    # fp16-strict rounds x / scale to fp16 before rounding to an integer: off by at most one step
    np.testing.assert_allclose(outs[0], q, atol=0 if mode == "fp32-accumulate" else 1)
    assert outs[1].dtype == np.uint8
    np.testing.assert_allclose(outs[1], np.clip(np.around(x.astype(np.float64) / float(np.float16(0.1))), 0, 255),
                               atol=0 if mode == "fp32-accumulate" else 1)
    assert_fp16(outs[2], s * (outs[0].astype(np.float64) - z), what="dequantize")


def test_sparse_compression_constexprs_match_coremltools_decompress():
    # called directly: the builder wants uint1/uint2 typed consts, which these handlers receive unpacked as uint8
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import (
        constexpr_lut_to_sparse,
        constexpr_sparse_blockwise_shift_scale,
    )

    from experiments.ane_engineering.run.mil.numerics import Numerics
    from experiments.ane_engineering.run.mil.registry import OPS, OpNode

    def node(op_type):
        return OpNode(0, op_type, op_type, "main", ["m", "v"], [None, None], [np.dtype(np.uint8), np.dtype(np.float16)])

    mask = (RNG.random((4, 6)) < 0.5).astype(np.uint8)
    mask[0, 0] = 1
    nnz = int(mask.sum())
    idx = RNG.integers(0, 4, nnz).astype(np.uint8)  # 2-bit palette indices
    cases = [(f16(RNG.standard_normal((2, 1, 4, 1))), None),  # two blocks along axis 0, scalar palettes
             (f16(RNG.standard_normal((1, 1, 4, 3))), np.int32(1))]  # vector palettes of 3 along axis 1
    for lut, axis in cases:
        args = {"indices_mask": mask, "indices_nonzero_data": idx, "lut": lut}
        if axis is not None:
            args["vector_axis"] = axis
        got_m, got_v = OPS["constexpr_lut_to_sparse"].handler(node("constexpr_lut_to_sparse"), args, Numerics())
        want_m, want_v = constexpr_lut_to_sparse.decompress(mask, idx, lut, axis)
        np.testing.assert_array_equal(got_m, want_m)
        np.testing.assert_array_equal(got_v, want_v)
    data = RNG.integers(-8, 8, nnz).astype(np.int8)
    scale, offset = f16(RNG.uniform(0.1, 1, (1, 6))), RNG.integers(-2, 3, (1, 6)).astype(np.int8)
    got_m, got_v = OPS["constexpr_sparse_blockwise_shift_scale"].handler(
        node("constexpr_sparse_blockwise_shift_scale"),
        {"data_mask": mask, "nonzero_data": data, "scale": scale, "offset": offset}, Numerics())
    want_m, want_v = constexpr_sparse_blockwise_shift_scale.decompress(mask, data, scale, offset)
    np.testing.assert_array_equal(got_m, want_m)
    np.testing.assert_array_equal(got_v, want_v)


GRID_CASES = [  # (sampling, torch padding, align_corners) -> Core ML padding as coremltools' converter maps it
    ("bilinear", "zeros", True), ("bilinear", "zeros", False), ("bilinear", "border", False),
    ("bilinear", "reflection", True), ("bilinear", "reflection", False), ("nearest", "border", True),
    ("nearest", "zeros", False),
]


def _coreml_padding(padding, align):
    return {"zeros": "constant", "border": "border"}.get(padding, "reflection" if align else "symmetric")


def test_resample_matches_torch_grid_sample():
    x = f16(RNG.standard_normal((2, 3, 5, 6)))
    grid = f16(RNG.uniform(-1.4, 1.4, (2, 4, 7, 2)))
    outs = run(lambda v, g: tuple(mb.resample(x=v, coordinates=g, sampling_mode=s, padding_mode=_coreml_padding(p, a),
                                              padding_value=np.float16(0),
                                              coordinates_mode="normalized_minus_one_to_one",
                                              align_corners=a) for s, p, a in GRID_CASES),
               {"v": x, "g": grid}, opset=ct.target.iOS16)
    xt, gt = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(grid.astype(np.float64))
    for out, (s, p, a) in zip(outs, GRID_CASES):
        ref = F.grid_sample(xt, gt, mode=s, padding_mode=p, align_corners=a).numpy()
        assert_fp16(out, ref, extra=1e-5, what=f"resample {s} {p} align={a}")


def test_resample_unnormalized_constant_value_and_affine():
    x = f16(RNG.standard_normal((1, 2, 4, 4)))
    pts = f16([[[[0, 0], [3, 3], [1.5, 0.5], [-1, 2], [3.5, 1]]]])  # (w, h) in pixels; two outside
    theta = f16([[0.8, -0.3, 0.1, 0.2, 1.1, -0.2]])
    outs = run(lambda v, p, t: (mb.resample(x=v, coordinates=p, sampling_mode="bilinear", padding_mode="constant",
                                            padding_value=np.float16(0), coordinates_mode="unnormalized",
                                            align_corners=True),
                                mb.affine(x=v, transform_matrix=t, output_height=3, output_width=5,
                                          sampling_mode="bilinear",
                                          padding_mode="constant", padding_value=np.float16(0),
                                          coordinates_mode="normalized_minus_one_to_one", align_corners=True)),
               {"v": x, "p": pts, "t": theta})
    x64 = x.astype(np.float64)
    assert_fp16(outs[0][..., :2], np.stack([x64[0, :, 0, 0], x64[0, :, 3, 3]], -1)[None, :, None], what="corners")
    mid = 0.5 * (0.5 * x64[0, :, 0, 1] + 0.5 * x64[0, :, 0, 2]) + 0.5 * (0.5 * x64[0, :, 1, 1] + 0.5 * x64[0, :, 1, 2])
    assert_fp16(outs[0][0, :, 0, 2], mid, extra=1e-5, what="midpoint")
    # (w=-1, h=2): all weight on the tap left of the image -> padding_value 0; (3.5, 1): half on x[1, 3], half outside
    assert_fp16(outs[0][0, :, 0, 3], np.zeros(2), what="outside left")
    assert_fp16(outs[0][0, :, 0, 4], 0.5 * x64[0, :, 1, 3], extra=1e-5, what="half outside right")
    grid = F.affine_grid(torch.from_numpy(theta.astype(np.float64)).reshape(1, 2, 3), (1, 2, 3, 5), align_corners=True)
    ref = F.grid_sample(torch.from_numpy(x64), grid, align_corners=True).numpy()
    assert_fp16(outs[1], ref, extra=1e-5, what="affine")


def test_non_maximum_suppression_follows_coremltools_reference():
    # coremltools' own smoke case (iOS14 op tests): per-class NMS keeps boxes 1 and 2
    boxes = np.array([[[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]], np.float32)
    scores = np.array([[[-3.5], [9.4], [2.3], [0.7]]], np.float32)
    outs = run(lambda b, s: mb.non_maximum_suppression(boxes=b, scores=s, iou_threshold=0.2, score_threshold=0.4,
                                                       max_boxes=2, per_class_suppression=True),
               {"b": boxes, "s": scores}, opset=ct.target.iOS15)
    np.testing.assert_array_equal(outs[0], [[[1, 1, 1, 1], [2, 2, 2, 2]]])
    np.testing.assert_array_equal(outs[1], scores[:, 1:3])
    assert outs[2].tolist() == [[1, 2]] and outs[3].tolist() == [2]
    # (cx, cy, w, h): box 1 overlaps box 0 (IoU 1/3), box 2 is apart, box 3 overlaps box 2 (IoU 0.6); two classes
    b = np.array([[[0, 0, 2, 2], [1, 0, 2, 2], [10, 10, 2, 2], [10.5, 10, 2, 2], [20, 20, 1, 1]]], np.float32)
    s = np.array([[[0.9, 0.1], [0.1, 0.8], [0.7, 0.0], [0.6, 0.0], [0.05, 0.0]]], np.float32)
    outs = run(lambda bb, ss: (*mb.non_maximum_suppression(boxes=bb, scores=ss, iou_threshold=0.3, score_threshold=0.1,
                                                           max_boxes=4),
                               *mb.non_maximum_suppression(boxes=bb, scores=ss, iou_threshold=0.3, score_threshold=0.1,
                                                           max_boxes=4, per_class_suppression=True)),
               {"bb": b, "ss": s}, opset=ct.target.iOS15)
    assert outs[2].tolist() == [[0, 2, -1, -1]] and outs[3].tolist() == [2]  # 1 and 3 suppressed, 4 below threshold
    np.testing.assert_array_equal(outs[0][0, 2:], 0)
    assert outs[6].tolist() == [[0, 1, 2, -1]]  # class 1 (box 1) is suppressed only within its class
    # iOS17 layout: boxes [n, 4, B], scores [n, K, B], no score threshold, three outputs
    outs = run(lambda bb, ss: mb.non_maximum_suppression(boxes=bb, scores=ss, iou_threshold=0.3, max_boxes=3),
               {"bb": np.swapaxes(b, 1, 2).copy(), "ss": np.swapaxes(s, 1, 2).copy()}, opset=ct.target.iOS17)
    assert len(outs) == 3 and outs[2].tolist() == [[0, 2, 4]]
    np.testing.assert_array_equal(outs[0][0, :, 1], b[0, 2])
