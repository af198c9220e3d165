"""Padding, cropping and resizing (ops/pad_resize.py) in the mil executor, against torch float64 (or numpy)
references and coremltools' own op examples, at both precision modes.

Tolerance: one fp16 ulp of the reference (the op's one rounding) plus, in fp16-strict, the error of its sequential
fp16 sums: a sum of K terms rounded after every addition is off by at most (K - 1) * 2^-11 * sum|terms|, so each
case adds K * 2^-11 times the same op applied to |x| (and |w|)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from executor_ops_support import MODES, U16, assert_fp16, ct, f16, mb, run

RNG = np.random.default_rng(2025)
X = f16(RNG.standard_normal((2, 3, 7, 6)) * 2)
x64 = X.astype(np.float64)
t64 = torch.from_numpy(x64)


def _np(t):
    return t.numpy()


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_and_crop(mode):
    xi = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)  # pad takes fp16 / fp32 only
    outs = run(lambda x, i: (mb.pad(x=x, pad=[1, 2, 0, 3], mode="constant", constant_val=np.float16(-1.5)),
                             mb.pad(x=x, pad=[2, 1, 3, 2], mode="reflect"),
                             mb.pad(x=x, pad=[0, 0, 1, 2, 2, 0, 1, 1], mode="replicate"),
                             mb.pad(x=x, pad=[0, 0, 0, 0], mode="reflect"),
                             mb.crop(x=x, crop_height=[1, 2], crop_width=[0, 3]),
                             mb.pad(x=i, pad=[1, 1], mode="constant", constant_val=np.float32(7))),
               {"x": X, "i": xi}, mode)
    np.testing.assert_array_equal(outs[0],
                                  np.pad(X, [(0, 0), (0, 0), (1, 2), (0, 3)], constant_values=np.float16(-1.5)))
    np.testing.assert_array_equal(outs[1], np.pad(X, [(0, 0), (0, 0), (2, 1), (3, 2)], mode="reflect"))
    np.testing.assert_array_equal(outs[2], np.pad(X, [(0, 0), (1, 2), (2, 0), (1, 1)], mode="edge"))
    np.testing.assert_array_equal(outs[3], X)
    np.testing.assert_array_equal(outs[4], X[:, :, 1:5, 0:3])
    assert outs[5].dtype == np.float32
    np.testing.assert_array_equal(outs[5], np.pad(xi, [(0, 0), (0, 0), (1, 1)], constant_values=7))


def test_reflect_pad_matches_torch_reflection():
    (out,) = run(lambda x: mb.pad(x=x, pad=[2, 2, 3, 1], mode="reflect"), {"x": X})
    np.testing.assert_array_equal(out, F.pad(torch.from_numpy(X.astype(np.float32)), (3, 1, 2, 2), mode="reflect")
                                  .numpy().astype(np.float16))


@pytest.mark.parametrize("mode", MODES)
def test_upsample_and_resize_match_torch(mode):
    outs = run(lambda x: (mb.upsample_nearest_neighbor(x=x, scale_factor_height=2, scale_factor_width=3),
                          mb.upsample_nearest_neighbor(x=x, scale_factor_height=1.5, scale_factor_width=0.5),
                          mb.resize_nearest_neighbor(x=x, target_size_height=10, target_size_width=4),
                          mb.upsample_bilinear(x=x, scale_factor_height=2, scale_factor_width=2, align_corners=True),
                          mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=1.5,
                                               align_corners=False),
                          mb.resize_bilinear(x=x, target_size_height=9, target_size_width=4,
                                             sampling_mode="ALIGN_CORNERS"),
                          mb.resize_bilinear(x=x, target_size_height=5, target_size_width=11,
                                             sampling_mode="UNALIGN_CORNERS")),
               {"x": X}, mode)

    def near(size):
        return _np(F.interpolate(t64, size=size, mode="nearest"))

    def lin(size, ac):
        return _np(F.interpolate(t64, size=size, mode="bilinear", align_corners=ac))

    np.testing.assert_array_equal(outs[0], near((14, 18)).astype(np.float16))
    np.testing.assert_array_equal(outs[1], near((10, 3)).astype(np.float16))
    np.testing.assert_array_equal(outs[2], near((10, 4)).astype(np.float16))
    for out, ref, what in ((outs[3], lin((14, 12), True), "upsample align"),
                           (outs[4], lin((14, 9), False), "upsample half"),
                           (outs[5], lin((9, 4), True), "resize align"),
                           (outs[6], lin((5, 11), False), "resize unalign")):
        assert_fp16(out, ref, extra=2 * U16 * np.abs(x64).max(), what=what)  # float32 interpolation, then one rounding


def test_sampling_modes_and_iOS17_resize_follow_coremltools_examples():
    # the grids coremltools documents for Xin = 2 (resize_bilinear docstring) and its iOS17 resize op tests
    x = f16([0, 1]).reshape(1, 1, 1, 2)
    modes = {"UNALIGN_CORNERS": (5, [0, 0.1, 0.5, 0.9, 1]), "ALIGN_CORNERS": (5, [0, 0.25, 0.5, 0.75, 1]),
             "DEFAULT": (5, [0, 0.4, 0.8, 1, 1]), "OFFSET_CORNERS": (5, [0.1, 0.3, 0.5, 0.7, 0.9])}
    names = list(modes)
    outs = run(lambda v: tuple(mb.resize_bilinear(x=v, target_size_height=1, target_size_width=modes[m][0],
                                                  sampling_mode=m) for m in names), {"x": x})
    for m, out in zip(names, outs):
        assert_fp16(out.reshape(-1), np.array(modes[m][1]), what=m)
    y = f16([-6.174, 9.371]).reshape(1, 1, 2, 1)
    near, lin = run(lambda v: (mb.resize(x=v, shape=[1, 1, 3, 2], resized_dims=np.uint32(2),
                                         interpolation_mode="NEAREST_NEIGHBOR", sampling_mode="DEFAULT"),
                               mb.resize(x=mb.reshape(x=v, shape=[1, 1, 2]), shape=[1, 1, 5], resized_dims=np.uint32(1),
                                         interpolation_mode="LINEAR", sampling_mode="DEFAULT")), {"y": y})
    np.testing.assert_array_equal(near.reshape(-1), f16([-6.174, -6.174, 9.371, 9.371, 9.371, 9.371]))
    assert_fp16(lin.reshape(-1), np.array([-6.174, -6.174 + 0.4 * 15.545, -6.174 + 0.8 * 15.545, 9.371, 9.371]),
                extra=1e-2, what="resize linear")


def test_crop_resize_follows_coremltools_op_test():
    x = f16(np.arange(1, 17).reshape(1, 1, 4, 4))
    roi = f16([1, 1, 2, 2]).reshape(1, 1, 4, 1, 1)
    roi_norm = f16([0, 0, 0, 1 / 3, 1 / 3]).reshape(1, 1, 5, 1, 1)
    roi_inv = f16([2, 2, 1, 1]).reshape(1, 1, 4, 1, 1)
    kw = {"box_coordinate_mode": "CORNERS_HEIGHT_FIRST", "sampling_mode": "ALIGN_CORNERS"}
    outs = run(lambda v: (mb.crop_resize(x=v, roi=roi, target_height=2, target_width=2, **kw),
                          mb.crop_resize(x=v, roi=roi, target_height=4, target_width=4, **kw),
                          mb.crop_resize(x=v, roi=roi, target_height=1, target_width=1, **kw),
                          mb.crop_resize(x=v, roi=roi_norm, target_height=2, target_width=2,
                                         normalized_coordinates=True, **kw),
                          mb.crop_resize(x=v, roi=roi_inv, target_height=2, target_width=2, **kw)),
               {"x": x}, opset=ct.target.iOS16)
    third = 1 / 3
    want = [np.array([6, 7, 10, 11]), 6 + np.array([[0, 1, 2, 3]]).T * (4 * third) + np.array([0, 1, 2, 3]) * third,
            np.array([8.5]), np.array([1, 2, 5, 6]), np.array([11, 10, 7, 6])]
    for i, (out, ref) in enumerate(zip(outs, want)):
        assert out.shape[:2] == (1, 1)
        assert_fp16(out.reshape(-1), np.asarray(ref, np.float64).reshape(-1), extra=1e-2, what=f"crop_resize case {i}")
    # iOS17: boxes [N, 4] and box_indices, output [N, C, h, w]
    (out,) = run(lambda v: mb.crop_resize(x=v, boxes=f16([[1, 1, 2, 2]]), box_indices=np.int32([0]), target_height=2,
                                          target_width=2, **kw), {"x": x}, opset=ct.target.iOS17)
    assert out.shape == (1, 1, 2, 2)
    np.testing.assert_array_equal(out.reshape(-1), f16([6, 7, 10, 11]))


def test_ios15_crop_resize_outside_the_image_reflects_as_core_ml_does():
    """coremltools' iOS15 op test (iOS15/test_image_resizing.py, TestCropResize): an inverted normalized box beyond
    the image, UNALIGN_CORNERS; Core ML's expected values, which a zero fill (the former handler) misses entirely."""
    x = f16(np.arange(1, 17).reshape(1, 1, 4, 4))
    roi = f16([2, 2, 1, 1]).reshape(1, 1, 4, 1, 1)
    kw = {"roi": roi, "target_height": 2, "target_width": 2, "normalized_coordinates": True,
          "box_coordinate_mode": "CORNERS_HEIGHT_FIRST", "sampling_mode": "UNALIGN_CORNERS"}
    (out,) = run(lambda v: mb.crop_resize(x=v, **kw), {"x": x}, opset=ct.target.iOS15)
    assert out.shape == (1, 1, 1, 2, 2)
    np.testing.assert_array_equal(out.reshape(-1), f16([3.5, 5.5, 11.5, 13.5]))
    # iOS16 defines pad_value: the same box reads it everywhere (all its samples, 5.5 and 3.5, lie outside 0..3)
    (padded,) = run(lambda v: mb.crop_resize(x=v, pad_value=np.float16(7), **kw), {"x": x}, opset=ct.target.iOS16)
    np.testing.assert_array_equal(padded.reshape(-1), f16([7, 7, 7, 7]))
    # inside the image the two opsets agree (the reflection only moves samples that fall outside)
    inside = {**kw, "roi": f16([0, 0.1, 1, 0.9]).reshape(1, 1, 4, 1, 1)}
    (a,) = run(lambda v: mb.crop_resize(x=v, **inside), {"x": x}, opset=ct.target.iOS15)
    (b,) = run(lambda v: mb.crop_resize(x=v, pad_value=np.float16(7), **inside), {"x": x}, opset=ct.target.iOS16)
    np.testing.assert_array_equal(a, b)
