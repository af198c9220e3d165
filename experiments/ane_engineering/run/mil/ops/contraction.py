"""Dot products: linear, matmul, einsum, conv, scaled_dot_product_attention. Constant weights are converted
once at load by each op's `prepare` and kept on the node.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from ..registry import UnsupportedOpError, register
from .common import as_bool, as_int, as_ints, cached_const


def _prepare_linear(node, const_args, num):
    if const_args.get("weight") is not None:
        cached_const(node, num, "weight", const_args["weight"])
    if const_args.get("bias") is not None:
        cached_const(node, num, "bias", const_args["bias"])


@register("linear", prepare=_prepare_linear)
def op_linear(node, args, num):
    w = node.cache.get("weight")
    if w is None:
        w = num.f(args["weight"])
    b = None
    if args.get("bias") is not None:
        b = node.cache.get("bias")
        b = num.f(args["bias"]) if b is None else b
    if node.output_dtypes[0] == np.float16:
        return num.matmul_fp16(args["x"], np.swapaxes(w, -1, -2), col_bias=b)  # x @ weight.T + bias, one rounding
    y = num.matmul(num.f(args["x"]), np.swapaxes(w, -1, -2))
    return y if b is None else num.r(y) + b


def _prepare_matmul(node, const_args, num):
    for key in ("x", "y"):
        if const_args.get(key) is not None and np.asarray(const_args[key]).dtype.kind == "f":
            cached_const(node, num, key, const_args[key])


@register("matmul", prepare=_prepare_matmul)
def op_matmul(node, args, num):
    fp16_out = node.output_dtypes[0] == np.float16
    x = node.cache.get("x")
    x = (np.asarray(args["x"]) if fp16_out else num.f(args["x"])) if x is None else x
    y = node.cache.get("y")
    y = (np.asarray(args["y"]) if fp16_out else num.f(args["y"])) if y is None else y
    if as_bool(args.get("transpose_x", False)):
        x = np.swapaxes(x, -1, -2)
    if as_bool(args.get("transpose_y", False)):
        y = np.swapaxes(y, -1, -2)
    squeeze_x = x.ndim == 1
    squeeze_y = y.ndim == 1
    if squeeze_x:
        x = x[None, :]
    if squeeze_y:
        y = y[:, None]
    out = num.matmul_fp16(x, y) if fp16_out else num.matmul(x, y)
    if squeeze_x:
        out = out[..., 0, :]
    if squeeze_y:
        out = out[..., 0]
    return out


def _parse_einsum(equation: str):
    eq = equation.replace(" ", "")
    if "->" not in eq or "." in eq:
        return None
    lhs, out = eq.split("->")
    operands = lhs.split(",")
    if len(operands) != 2:
        return None
    xs, ys = operands
    if len(set(xs)) != len(xs) or len(set(ys)) != len(ys) or len(set(out)) != len(out):
        return None  # diagonals / repeated labels: not a matmul pattern
    if not set(out) <= set(xs) | set(ys):
        return None
    return xs, ys, out


def einsum_as_matmul(equation: str, x: np.ndarray, y: np.ndarray, matmul: Callable, reduce_sum: Callable):
    """Evaluate a two-operand einsum as one broadcast batched matmul.

    Labels split into batch (x, y and out), contracted (x and y, not out), x-free and y-free (one operand and out);
    labels only in one operand and not in out are summed first. Size-1 batch labels broadcast as MIL einsum does.
    Returns None if the equation is not of that form.
    """
    parsed = _parse_einsum(equation)
    if parsed is None:
        return None
    xs, ys, out = parsed
    if len(xs) != x.ndim or len(ys) != y.ndim:
        raise ValueError(f"einsum {equation!r}: operand ranks {x.ndim}, {y.ndim} do not match the equation")
    x_only_summed = [c for c in xs if c not in ys and c not in out]
    y_only_summed = [c for c in ys if c not in xs and c not in out]
    if x_only_summed:
        x = reduce_sum(x, tuple(xs.index(c) for c in x_only_summed))
        x = x.reshape([x.shape[i] for i, c in enumerate(xs) if c not in x_only_summed])
        xs = "".join(c for c in xs if c not in x_only_summed)
    if y_only_summed:
        y = reduce_sum(y, tuple(ys.index(c) for c in y_only_summed))
        y = y.reshape([y.shape[i] for i, c in enumerate(ys) if c not in y_only_summed])
        ys = "".join(c for c in ys if c not in y_only_summed)
    batch = [c for c in out if c in xs and c in ys]
    contract = [c for c in xs if c in ys and c not in out]
    x_free = [c for c in out if c in xs and c not in ys]
    y_free = [c for c in out if c in ys and c not in xs]
    size = {}
    for labels, arr in ((xs, x), (ys, y)):
        for c, d in zip(labels, arr.shape):
            if c in size and size[c] != d and 1 not in (size[c], d):
                raise ValueError(f"einsum {equation!r}: label {c!r} has sizes {size[c]} and {d}")
            size[c] = max(size.get(c, 1), d)
    for c in contract:
        if x.shape[xs.index(c)] != y.shape[ys.index(c)]:
            raise ValueError(f"einsum {equation!r}: contracted label {c!r} sizes differ")
    xt = np.transpose(x, [xs.index(c) for c in batch + x_free + contract])
    yt = np.transpose(y, [ys.index(c) for c in batch + contract + y_free])
    m = int(np.prod([size[c] for c in x_free])) if x_free else 1
    n = int(np.prod([size[c] for c in y_free])) if y_free else 1
    k = int(np.prod([size[c] for c in contract])) if contract else 1
    xm = xt.reshape(xt.shape[:len(batch)] + (m, k))  # batch dims keep their own size (maybe 1): matmul broadcasts
    ym = yt.reshape(yt.shape[:len(batch)] + (k, n))
    res = matmul(xm, ym)  # (*batch, m, n)
    res = res.reshape(res.shape[:len(batch)] + tuple(size[c] for c in x_free + y_free))
    have = batch + x_free + y_free
    return np.transpose(res, [have.index(c) for c in out])


def _prepare_einsum(node, const_args, num):
    values = const_args.get("values")
    if values is not None:
        for i, v in enumerate(values):
            if v is not None and np.asarray(v).dtype.kind == "f":
                cached_const(node, num, f"value{i}", v)


@register("einsum", prepare=_prepare_einsum)
def op_einsum(node, args, num):
    equation = str(args["equation"])
    fp16_out = node.output_dtypes[0] == np.float16
    values = []
    for i, v in enumerate(args["values"]):
        cached = node.cache.get(f"value{i}")
        values.append((np.asarray(v) if fp16_out else num.f(v)) if cached is None else cached)
    if len(values) == 2:
        out = einsum_as_matmul(equation, values[0], values[1], num.matmul_fp16 if fp16_out else num.matmul,
                               lambda a, axes: num.sum(a, axes, keepdims=True))
        if out is not None:
            return out
    values = [num.f(v) for v in values]
    if num.strict:
        raise UnsupportedOpError(f"einsum {equation!r} is not a two-operand matmul pattern; fp16-strict cannot "
                                 f"order its sums ({node.where()})")
    # Any other equation (MIL itself only defines the matmul-like ones): numpy's einsum in float32.
    return np.einsum(equation, *values, optimize=True)


def conv_geometry(node, x_shape, w_shape, args):
    spatial = len(w_shape) - 2
    strides = as_ints(args["strides"]) if args.get("strides") is not None else [1] * spatial
    dilations = as_ints(args["dilations"]) if args.get("dilations") is not None else [1] * spatial
    pad_type = str(args.get("pad_type", "valid"))
    kernel = list(w_shape[2:])
    in_sp = list(x_shape[2:])
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if pad_type == "valid":
        pads = [(0, 0)] * spatial
    elif pad_type == "custom":
        p = as_ints(args["pad"]) if args.get("pad") is not None else [0] * (2 * spatial)
        pads = [(p[2 * i], p[2 * i + 1]) for i in range(spatial)]
    elif pad_type in ("same", "same_lower"):
        pads = []
        for i, k, s in zip(in_sp, eff, strides):
            total = max(0, s * math.ceil(i / s) - i + k - s)
            small, large = total // 2, total - total // 2
            pads.append((small, large) if pad_type == "same" else (large, small))  # same: extra after
    else:
        raise UnsupportedOpError(f"conv pad_type {pad_type!r} ({node.where()})")
    out_sp = [(i + a + b - k) // s + 1 for i, (a, b), k, s in zip(in_sp, pads, eff, strides)]
    return spatial, strides, dilations, kernel, pads, out_sp


def _prepare_conv(node, const_args, num):
    w = const_args.get("weight")
    if w is None:
        return
    w = np.asarray(w)
    groups = as_int(const_args.get("groups", 1))
    cout = w.shape[0]
    # (groups, Cout/groups, Cin/groups * prod(K)) in the compute dtype, converted once
    node.cache["weight"] = np.ascontiguousarray(num.f(w.reshape(groups, cout // groups, -1)))
    if const_args.get("bias") is not None:
        node.cache["bias"] = num.f(np.asarray(const_args["bias"]))


@register("conv", prepare=_prepare_conv)
def op_conv(node, args, num):
    x = np.asarray(args["x"])
    w_raw = np.asarray(args["weight"])
    groups = as_int(args.get("groups", 1))
    spatial, strides, dilations, kernel, pads, out_sp = conv_geometry(node, x.shape, w_raw.shape, args)
    n, cin = x.shape[0], x.shape[1]
    cout = w_raw.shape[0]
    w = node.cache.get("weight")
    if w is None:
        w = num.f(w_raw.reshape(groups, cout // groups, -1))
    bias = node.cache.get("bias")
    if bias is None and args.get("bias") is not None:
        bias = num.f(args["bias"])
    cin_g = cin // groups
    pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in strides) and all(p == (0, 0) for p in pads)
    fused = node.output_dtypes[0] == np.float16 and (bias is None or groups == 1)
    if pointwise:
        # 1x1 conv: (Cout/G x Cin/G) @ (Cin/G x positions) per group and batch item
        cols = x.reshape(n, groups, cin_g, -1)  # (N, G, Cin/G, P)
        cols = cols if fused else num.f(cols)
    else:
        xp = num.f(x)
        if any(a or b for a, b in pads):
            xp = np.pad(xp, [(0, 0), (0, 0)] + [tuple(p) for p in pads])
        # im2col: for every kernel offset the strided window, ordered (Cin/G, *K) to match weight[o, c, *k]
        windows = []
        for offs in itertools.product(*[range(k) for k in kernel]):
            index = [slice(None), slice(None)]
            for d in range(spatial):
                start = offs[d] * dilations[d]
                index.append(slice(start, start + (out_sp[d] - 1) * strides[d] + 1, strides[d]))
            windows.append(xp[tuple(index)])  # (N, Cin, *out)
        cols = np.stack(windows, axis=2)  # (N, Cin, prod(K), *out)
        cols = cols.reshape(n, groups, cin_g * len(windows), -1)  # (N, G, Cin/G*prod(K), P)
    if fused:  # conv + bias, rounded once
        out = num.matmul_fp16(w[None], cols, row_bias=bias)  # (N, G, Cout/G, P)
        return out.reshape((n, cout) + tuple(out_sp))
    out = num.matmul(w[None], cols)  # (N, G, Cout/G, P)
    out = out.reshape((n, cout) + tuple(out_sp))
    if bias is not None:
        out = num.r(out) + bias.reshape((1, cout) + (1,) * spatial)
    return out


@register("scaled_dot_product_attention", since="iOS18")
def op_sdpa(node, args, num):
    q, k, v = num.f(args["query"]), num.f(args["key"]), num.f(args["value"])
    scores = num.r(num.matmul(q, np.swapaxes(k, -1, -2)))
    scores = num.r(scores / num.c(math.sqrt(q.shape[-1])))  # (Q @ K^T) / sqrt(E)
    mask = args.get("attn_mask")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            scores = np.where(mask, scores, num.c(-np.inf))
        else:
            scores = num.r(scores + num.f(mask))
    m = np.max(scores, axis=-1, keepdims=True)
    e = num.fn(np.exp, num.r(scores - m))
    weights = num.r(e / num.sum(e, (-1,)))
    return num.matmul(weights, v)
