"""conv_transpose (ops/conv_transpose.py) in the mil executor, against torch float64 references, at both precision
modes.

Tolerance: one fp16 ulp of the reference (the op's one rounding) plus, in fp16-strict, the error of its sequential
fp16 sums: a sum of K terms rounded after every addition is off by at most (K - 1) * 2^-11 * sum|terms|, so each
case adds K * 2^-11 times the same op applied to |x| (and |w|)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from executor_ops_support import MODES, U16, assert_fp16, f16, mb, run

RNG = np.random.default_rng(2025)


def _np(t):
    return t.numpy()


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
