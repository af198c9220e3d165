"""conv_transpose (1-3 spatial axes, groups, strides, dilations, pad_type valid/same/custom, output_shape).

coremltools' iOS15/iOS17 definition: x [N, C_in, *D], weight [C_in, C_out/groups, *K], bias [C_out].
The full (uncropped) result has F = (D - 1) * stride + (K - 1) * dilation + 1 positions per axis:
full[n, g*Co + o, i*stride + k*dilation] += x[n, g*Ci + c, i] * weight[g*Ci + c, o, k]. The output is
full[before : before + D_out] (zeros past F, as PyTorch's output_padding), with
    valid:  before = 0, D_out = F;  custom: before = pad[2i], D_out = F - pad[2i] - pad[2i+1];
    same:   D_out = D * stride, before = (F - D_out) // 2 (the forward conv's "same" split: extra after);
and `output_shape`, when given, fixes D_out (before as its pad_type says).

Numerics: the contraction over input channels is `num.matmul` (float32 BLAS, or sequential fp16 in fp16-strict);
the overlapping kernel taps are then added in kernel-offset order (float32, or each sum rounded to fp16), then
the bias; fp32-accumulate rounds the result once.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..registry import UnsupportedOpError, register
from .common import as_int, as_ints


@register("conv_transpose")
def op_conv_transpose(node, args, num):
    x = num.f(args["x"])
    w = num.f(args["weight"])
    groups = as_int(args.get("groups", 1))
    n, cin = x.shape[:2]
    spatial = x.ndim - 2
    in_sp, kernel = list(x.shape[2:]), list(w.shape[2:])
    co_g = w.shape[1]
    ci_g = cin // groups
    strides = as_ints(args["strides"]) if args.get("strides") is not None else [1] * spatial
    dilations = as_ints(args["dilations"]) if args.get("dilations") is not None else [1] * spatial
    full = [(d - 1) * s + (k - 1) * dl + 1 for d, s, k, dl in zip(in_sp, strides, kernel, dilations)]
    pad_type = str(args.get("pad_type", "valid"))
    pads = as_ints(args["pad"]) if args.get("pad") is not None else [0] * (2 * spatial)
    given = as_ints(args["output_shape"])[2:] if args.get("output_shape") is not None else None
    if pad_type == "valid":
        before = [0] * spatial
        out_sp = full
    elif pad_type == "custom":
        before = pads[0::2]
        out_sp = [f - pads[2 * i] - pads[2 * i + 1] for i, f in enumerate(full)]
    elif pad_type == "same":
        out_sp = [d * s for d, s in zip(in_sp, strides)] if given is None else given
        before = [max(0, f - o) // 2 for f, o in zip(full, out_sp)]
    else:
        raise UnsupportedOpError(f"conv_transpose pad_type {pad_type!r} ({node.where()})")
    if given is not None:
        out_sp = given

    # per group: (Co/G * prod(K), Ci/G) @ (Ci/G, positions) -> every tap's contribution
    taps = int(np.prod(kernel)) if kernel else 1
    wg = w.reshape(groups, ci_g, co_g * taps).transpose(0, 2, 1)  # (G, Co/G*K, Ci/G)
    cols = x.reshape(n, groups, ci_g, -1)  # (N, G, Ci/G, P)
    contrib = num.matmul(wg[None], cols).reshape((n, groups, co_g, taps) + tuple(in_sp))
    acc = np.zeros((n, groups, co_g) + tuple(max(f, b + o) for f, b, o in zip(full, before, out_sp)), num.dtype)
    for t, offs in enumerate(itertools.product(*[range(k) for k in kernel])):
        index = [slice(None)] * 3
        for d in range(spatial):
            start = offs[d] * dilations[d]
            index.append(slice(start, start + (in_sp[d] - 1) * strides[d] + 1, strides[d]))
        acc[tuple(index)] = num.r(acc[tuple(index)] + contrib[:, :, :, t])
    acc = acc.reshape((n, groups * co_g) + acc.shape[3:])
    out = acc[(slice(None), slice(None)) + tuple(slice(b, b + o) for b, o in zip(before, out_sp))]
    if args.get("bias") is not None:
        out = out + num.f(args["bias"]).reshape((1, -1) + (1,) * spatial)
    return out
