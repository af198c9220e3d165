"""Pools (ops/pool.py) in the mil executor, against torch float64 references, at both precision modes.

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
