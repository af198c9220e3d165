"""Pools, normalisations, padding, resizing and conv_transpose added to the mil executor, against torch float64
(or numpy) references, at both precision modes.

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
tabs = t64.abs()


def _np(t):
    return t.numpy()


# ----------------------------------------------------------------------------------------------- pools

POOLS = [  # (kernel, strides, pad_type, pad, ceil_mode, exclude_padding)
    ((3, 3), (2, 2), "valid", None, False, False),
    ((3, 2), (2, 2), "valid", None, True, False),
    ((3, 3), (2, 2), "custom", (1, 1, 1, 1), True, False),
    ((3, 3), (2, 2), "custom", (1, 1, 1, 1), True, True),
    ((2, 3), (1, 2), "custom", (1, 0, 0, 2), False, False),
    ((3, 3), (2, 1), "same", None, False, True),
    ((3, 3), (2, 1), "same", None, False, False),
    ((2, 2), (2, 2), "same_lower", None, False, False),
]


def _pads(kernel, strides, pad_type, pad, shape):
    if pad_type == "valid":
        return (0, 0, 0, 0)
    if pad_type == "custom":
        return pad
    out = []
    for i, k, s in zip(shape, kernel, strides):
        total = max(0, s * -(-i // s) - i + k - s)
        lo, hi = total // 2, total - total // 2
        out += [lo, hi] if pad_type == "same" else [hi, lo]
    return tuple(out)


def _torch_pool(kind, x, kernel, strides, pads, ceil_mode, exclude):
    """Torch pools take symmetric padding only: pad asymmetric cases explicitly (that padding then counts as
    input for the average, which is what count_include_pad means)."""
    symmetric = pads[0] == pads[1] and pads[2] == pads[3]
    if kind == "max":
        if not symmetric:
            x = F.pad(x, (pads[2], pads[3], pads[0], pads[1]), value=-np.inf)
            pads = (0, 0, 0, 0)
        return F.max_pool2d(x, kernel, strides, (pads[0], pads[2]), ceil_mode=ceil_mode)
    if not symmetric:
        assert not exclude and not ceil_mode
        x = F.pad(x, (pads[2], pads[3], pads[0], pads[1]))
        pads = (0, 0, 0, 0)
    return F.avg_pool2d(x, kernel, strides, (pads[0], pads[2]), ceil_mode=ceil_mode, count_include_pad=not exclude)


@pytest.mark.parametrize("mode", MODES)
def test_max_and_avg_pool_match_torch(mode):
    def build(x):
        outs = []
        for kernel, strides, pad_type, pad, ceil_mode, exclude in POOLS:
            kw = {"x": x, "kernel_sizes": kernel, "strides": strides, "pad_type": pad_type, "ceil_mode": ceil_mode}
            if pad is not None:
                kw["pad"] = pad
            outs += [mb.max_pool(**kw), mb.avg_pool(**kw, exclude_padding_from_average=exclude)]
        return tuple(outs)

    outs = run(build, {"x": X}, mode, opset=ct.target.iOS17)
    for i, (kernel, strides, pad_type, pad, ceil_mode, exclude) in enumerate(POOLS):
        pads = _pads(kernel, strides, pad_type, pad, X.shape[2:])
        case = f"{kernel} {strides} {pad_type} {pads} ceil={ceil_mode} exclude={exclude} {mode}"
        ref_max = _np(_torch_pool("max", t64, kernel, strides, pads, ceil_mode, exclude))
        assert_fp16(outs[2 * i], ref_max, what="max_pool " + case)
        ref_avg = _np(_torch_pool("avg", t64, kernel, strides, pads, ceil_mode, exclude))
        k = kernel[0] * kernel[1]
        extra = (k * U16 * _np(_torch_pool("avg", tabs, kernel, strides, pads, ceil_mode, exclude))
                 if mode == "fp16-strict" else 0)
        assert_fp16(outs[2 * i + 1], ref_avg, extra=extra, what="avg_pool " + case)


@pytest.mark.parametrize("mode", MODES)
def test_l2_pool_and_1d_3d_pools(mode):
    x1 = f16(RNG.standard_normal((1, 2, 9)))
    x3 = f16(RNG.standard_normal((1, 2, 4, 5, 3)))
    outs = run(lambda x, a, b: (mb.l2_pool(x=x, kernel_sizes=[2, 3], strides=[1, 2], pad_type="valid"),
                                mb.max_pool(x=a, kernel_sizes=[3], strides=[2], pad_type="same"),
                                mb.avg_pool(x=b, kernel_sizes=[2, 2, 2], strides=[2, 2, 1], pad_type="valid")),
               {"x": X, "a": x1, "b": x3}, mode)
    ref = _np(F.lp_pool2d(t64, 2, (2, 3), (1, 2)))
    extra = 6 * U16 * ref if mode == "fp16-strict" else 0
    assert_fp16(outs[0], ref, extra=extra, what="l2_pool")
    assert_fp16(outs[1], _np(F.max_pool1d(F.pad(torch.from_numpy(x1.astype(np.float64)), (1, 1), value=-np.inf), 3, 2)),
                what="max_pool1d same")
    b64 = torch.from_numpy(x3.astype(np.float64))
    extra = 8 * U16 * _np(F.avg_pool3d(b64.abs(), 2, (2, 2, 1))) if mode == "fp16-strict" else 0
    assert_fp16(outs[2], _np(F.avg_pool3d(b64, 2, (2, 2, 1))), extra=extra, what="avg_pool3d")


def test_avg_pool_that_ignores_padding_is_caught():
    # the exclude/include distinction must show: the two differ at the borders
    a, b = run(lambda x: (mb.avg_pool(x=x, kernel_sizes=[3, 3], pad_type="same", exclude_padding_from_average=True),
                          mb.avg_pool(x=x, kernel_sizes=[3, 3], pad_type="same")), {"x": X})
    assert np.abs(a[..., 0, 0].astype(np.float64) - b[..., 0, 0]).min() > 0


# ----------------------------------------------------------------------------------------------- normalisation

C = X.shape[1]
MEAN, VAR = f16(RNG.standard_normal(C) * 0.5), f16(RNG.uniform(0.5, 2.0, C))
GAMMA, BETA = f16(RNG.uniform(0.5, 1.5, C)), f16(RNG.standard_normal(C) * 0.1)


def _c(p):
    return np.asarray(p, np.float64).reshape(1, -1, 1, 1)


@pytest.mark.parametrize("mode", MODES)
def test_normalisations_match_torch(mode):
    eps = np.float16(1e-3)
    outs = run(lambda x: (mb.batch_norm(x=x, mean=MEAN, variance=VAR, gamma=GAMMA, beta=BETA, epsilon=eps),
                          mb.batch_norm(x=x, mean=MEAN, variance=VAR),
                          mb.instance_norm(x=x, gamma=GAMMA, beta=BETA, epsilon=eps),
                          mb.l2_norm(x=x, epsilon=eps),
                          mb.local_response_norm(x=x, size=2, alpha=np.float16(0.5), beta=np.float16(0.75),
                                                 k=np.float16(1)),
                          mb.local_response_norm(x=x, size=3)),
               {"x": X}, mode)
    e = float(eps)
    bn = _c(GAMMA) * (x64 - _c(MEAN)) / np.sqrt(_c(VAR) + e) + _c(BETA)
    bn_plain = (x64 - _c(MEAN)) / np.sqrt(_c(VAR) + 1e-5)
    inorm = _np(F.instance_norm(t64, weight=torch.from_numpy(GAMMA.astype(np.float64)),
                                bias=torch.from_numpy(BETA.astype(np.float64)), eps=e))
    l2 = x64 / np.sqrt((x64 ** 2).sum(axis=(1, 2, 3), keepdims=True) + e)
    lrn = _np(F.local_response_norm(t64, 2, alpha=0.5, beta=0.75, k=1.0))
    lrn3 = _np(F.local_response_norm(t64, 3))
    strict = mode == "fp16-strict"
    # strict: batch_norm's 4 and instance_norm's ~6 inner roundings (each <= 2^-11 relative of its value);
    # instance_norm's and l2_norm's sums over 42 / 126 elements carry up to n * 2^-11 relative into the variance
    assert_fp16(outs[0], bn, extra=6 * U16 * (np.abs(bn) + 1) if strict else 0, what="batch_norm")
    assert_fp16(outs[1], bn_plain, extra=4 * U16 * np.abs(bn_plain) if strict else 0, what="batch_norm defaults")
    assert_fp16(outs[2], inorm, extra=(42 + 8) * U16 * (np.abs(inorm) + 1) if strict else 0, what="instance_norm")
    assert_fp16(outs[3], l2, extra=(126 + 4) * U16 * np.abs(l2) if strict else 0, what="l2_norm")
    assert_fp16(outs[4], lrn, extra=8 * U16 * np.abs(lrn) if strict else 0, what="local_response_norm size 2")
    assert_fp16(outs[5], lrn3, extra=8 * U16 * np.abs(lrn3) if strict else 0, what="local_response_norm size 3")


@pytest.mark.parametrize("mode", MODES)
def test_l2_norm_of_rank3_input_normalises_everything(mode):
    x = X[0]
    (out,) = run(lambda v: mb.l2_norm(x=v), {"x": x}, mode)
    ref = x.astype(np.float64) / np.sqrt((x.astype(np.float64) ** 2).sum() + 1e-6)
    assert_fp16(out, ref, extra=50 * U16 * np.abs(ref) if mode == "fp16-strict" else 0, what="l2_norm rank 3")


def test_batch_norm_iOS17_fp32_parameters_with_fp16_x():
    (out,) = run(lambda x: mb.batch_norm(x=x, mean=MEAN.astype(np.float32), variance=VAR.astype(np.float32),
                                         epsilon=np.float32(1e-5)), {"x": X})
    assert out.dtype == np.float16
    assert_fp16(out, (x64 - _c(MEAN)) / np.sqrt(_c(VAR) + 1e-5), what="batch_norm fp32 params")


# ----------------------------------------------------------------------------------------------- pad / crop

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


# ----------------------------------------------------------------------------------------------- resizing

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


# ----------------------------------------------------------------------------------------------- conv_transpose

CT = [  # (groups, strides, dilations, pad_type, pad, output_shape spatial or None)
    (1, (2, 2), (1, 1), "valid", None, None),
    (2, (2, 1), (1, 2), "custom", (1, 0, 2, 1), None),
    (1, (2, 2), (1, 1), "same", None, None),
    (1, (2, 3), (1, 1), "custom", (1, 1, 1, 1), (14, 18)),  # torch output_padding (1, 2)
]


@pytest.mark.parametrize("mode", MODES)
def test_conv_transpose_matches_torch(mode):
    xin = f16(RNG.standard_normal((2, 4, 7, 6)))
    ws = {g: f16(RNG.standard_normal((4, 6 // g, 3, 2)) * 0.5) for g in (1, 2)}
    bias = f16(RNG.standard_normal(6))

    def build(x):
        outs = []
        for groups, strides, dil, pad_type, pad, oshape in CT:
            kw = {"x": x, "weight": ws[groups], "bias": bias, "strides": strides, "dilations": dil,
                  "pad_type": pad_type, "groups": groups}
            if pad is not None:
                kw["pad"] = pad
            if oshape is not None:
                kw["output_shape"] = (2, 6) + oshape
            outs.append(mb.conv_transpose(**kw))
        return tuple(outs)

    outs = run(build, {"x": xin}, mode)
    xt = torch.from_numpy(xin.astype(np.float64))
    for out, (groups, strides, dil, pad_type, pad, oshape) in zip(outs, CT):
        wt = torch.from_numpy(ws[groups].astype(np.float64))
        full = F.conv_transpose2d(xt, wt, torch.from_numpy(bias.astype(np.float64)), strides, 0, 0, groups, dil)
        full_abs = F.conv_transpose2d(xt.abs(), wt.abs(), None, strides, 0, 0, groups, dil)
        if pad_type == "custom":
            before = pad[0::2]
            size = oshape or (full.shape[2] - pad[0] - pad[1], full.shape[3] - pad[2] - pad[3])
        elif pad_type == "same":
            size = (xin.shape[2] * strides[0], xin.shape[3] * strides[1])
            before = [(f - s) // 2 for f, s in zip(full.shape[2:], size)]
        else:
            before, size = (0, 0), full.shape[2:]
        grow = [max(0, b + s - f) for b, s, f in zip(before, size, full.shape[2:])]
        full = F.pad(full - torch.from_numpy(bias.astype(np.float64)).reshape(1, -1, 1, 1), (0, grow[1], 0, grow[0]))
        full = full + torch.from_numpy(bias.astype(np.float64)).reshape(1, -1, 1, 1)  # output_padding keeps the bias
        full_abs = F.pad(full_abs, (0, grow[1], 0, grow[0]))
        sl = (slice(None), slice(None), slice(before[0], before[0] + size[0]), slice(before[1], before[1] + size[1]))
        extra = (2 + 6 + 2) * U16 * _np(full_abs[sl]) if mode == "fp16-strict" else 0
        assert_fp16(out, _np(full[sl]), extra=extra,
                    what=f"conv_transpose {groups} {strides} {pad_type} {oshape} {mode}")


def test_conv_transpose_1d():
    xin = f16(RNG.standard_normal((1, 3, 5)))
    w = f16(RNG.standard_normal((3, 2, 4)))
    (out,) = run(lambda x: mb.conv_transpose(x=x, weight=w, strides=[3]), {"x": xin})
    ref = F.conv_transpose1d(torch.from_numpy(xin.astype(np.float64)), torch.from_numpy(w.astype(np.float64)), stride=3)
    assert_fp16(out, _np(ref), what="conv_transpose1d")
