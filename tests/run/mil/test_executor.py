"""The numpy MIL executor: per-op semantics on small saved packages, palettized weights, weight.bin integrity,
load-time refusal of unknown ops, memory release, and a real BC1S body against its FP32 torch twin.

Tolerances (fp32-accumulate mode). An op computed exactly and rounded once to fp16 is within half an fp16 step
of the exact value. Each output element may differ from a float64 reference of the op's semantics (computed from
the same fp16 inputs and fp16 weights) by at most

    ulp16(|ref|) + 2^-24 + [dot products only] K * 2^-24 * sum_k |a_k b_k|

i.e. one fp16 step at the reference's magnitude (twice the rounding bound, so the float32 evaluation of the
op can never tip an element over), the smallest fp16 subnormal, and the float32 accumulation bound of a K-term
sum. A correct op always passes; an op whose semantics differ by more than about one fp16 step fails, which the
broken-op tests below demonstrate.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from conversion_support import convert_tiny_body, save_program  # noqa: E402
from experiments.ane_engineering.run.mil import kernels  # noqa: E402
from experiments.ane_engineering.run.mil.executor import ExecutionError, InputError, MILExecutor  # noqa: E402
from experiments.ane_engineering.run.mil.numerics import FP16_STRICT, Numerics  # noqa: E402
from experiments.ane_engineering.run.mil.ops.contraction import einsum_as_matmul  # noqa: E402
from experiments.ane_engineering.run.mil.registry import OPS, OpNode, UnsupportedOpError  # noqa: E402
from fp16_support import TINY16, U16, f16, ulp16  # noqa: E402
from package_edits import weight_bin, weight_blobs  # noqa: E402

TARGET = ct.target.macOS15


# ----------------------------------------------------------------------------------------------- helpers

def swap_handler(monkeypatch, op_type: str, handler) -> None:
    """Run `op_type` through `handler` for one test (its registration otherwise unchanged)."""
    monkeypatch.setitem(OPS, op_type, dataclasses.replace(OPS[op_type], handler=handler))


def violation(out, ref, extra=0.0) -> float:
    """max |out - ref| / tolerance; <= 1 passes."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    tol = ulp16(ref) + TINY16 + extra
    return float(np.max(np.abs(out - ref) / tol))


def assert_close16(out, ref, extra=0.0, what=""):
    v = violation(out, ref, extra)
    assert v <= 1.0, (f"{what}: error {v:.2f}x the fp16 tolerance "
                      f"(max abs err {np.max(np.abs(out.astype(np.float64) - ref)):.3g})")


def dot_extra(k: int, abs_terms: np.ndarray) -> np.ndarray:
    return k * TINY16 * abs_terms


def to_package(prog, tmp_path: Path, name: str) -> Path:
    return save_program(prog, tmp_path / f"{name}.mlpackage", TARGET)


def erf64(x):
    return np.vectorize(math.erf)(np.asarray(x, np.float64))


def softmax64(x, axis):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm64(x, axes, gamma=None, beta=None, eps=1e-5):
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
    if gamma is not None:
        y = y * np.asarray(gamma, np.float64).reshape(shape)
    if beta is not None:
        y = y + np.asarray(beta, np.float64).reshape(shape)
    return y


def conv2d64(x, w, bias=None, strides=(1, 1), pads=((0, 0), (0, 0)), dilations=(1, 1), groups=1):
    """Direct float64 convolution from its definition (NCHW, weight [Cout, Cin/groups, KH, KW])."""
    x = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0)) + tuple(pads))
    w = np.asarray(w, np.float64)
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    oh = (h - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((n, cout, oh, ow))
    absout = np.zeros_like(out)
    cout_g = cout // groups
    for o in range(cout):
        g = o // cout_g
        xs = x[:, g * cin_g:(g + 1) * cin_g]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilations[0]: i * dilations[0] + (oh - 1) * strides[0] + 1: strides[0],
                           j * dilations[1]: j * dilations[1] + (ow - 1) * strides[1] + 1: strides[1]]
                term = np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
                out[:, o] += term
                absout[:, o] += np.einsum("nchw,c->nhw", np.abs(patch), np.abs(w[o, :, i, j]))
    if bias is not None:
        out += np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    return out, absout, cin_g * kh * kw


def op_types(path) -> set[str]:
    from experiments.ane_engineering.package.mil.load import load_program

    return set(load_program(path).op_type_counts())


RNG = np.random.default_rng(20240611)


# ----------------------------------------------------------------------------------------------- fp16 casts

def test_fast_fp16_casts_equal_numpy_bit_for_bit():
    if kernels._load_kernels() is None:
        pytest.skip("numba kernels unavailable (numba missing or self-check failed): numpy casts are used")
    rng = np.random.default_rng(7)
    every_half = np.arange(65536, dtype=np.uint16).view(np.float16)
    f32 = every_half.astype(np.float32)
    # all fp16 values, every midpoint between neighbours (the ties), their float32 neighbours, random bit patterns
    finite = f32[np.isfinite(f32)]
    finite = np.sort(finite[finite >= 0])  # 0 .. 65504 ascending; midpoints mirrored for negatives
    mids = ((finite[1:].astype(np.float64) + finite[:-1]) / 2).astype(np.float32)
    mids = np.concatenate([mids, -mids, np.float32([65520.0, -65520.0])])
    bits = np.concatenate([f32.view(np.uint32), mids.view(np.uint32), mids.view(np.uint32) + 1,
                           mids.view(np.uint32) - 1,
                           rng.integers(0, 2 ** 32, 2_000_000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x477FEFFF, 0x477FF000, 0x477FF001, 0x33000000, 0x33000001, 0x387FFFFF],
                                    np.uint32)])
    values = bits.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(np.float16)
    got = kernels.to_float16(values)
    # bit for bit, except NaN payloads: NaN stays NaN (the hardware conversion quiets signalling NaNs)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), values[~same][:5]
    halves = np.tile(every_half, 2)  # above the kernel's size threshold
    wide, ref = kernels.to_float32(halves), halves.astype(np.float32)
    assert np.all((wide.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(wide) & np.isnan(ref)))
    # the fused binary kernel: compute in float32, round once
    a = every_half[np.isfinite(every_half)]
    b = rng.permutation(a)
    for op, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("real_div", np.divide),
                   ("maximum", np.maximum), ("minimum", np.minimum)):
        with np.errstate(all="ignore"):
            want = fn(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
            got = kernels.binary16(op, a, b)
            got_scalar = kernels.binary16(op, a, b[:1])
            want_scalar = fn(a.astype(np.float32), b[:1].astype(np.float32)).astype(np.float16)
        assert np.all((got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))), op
        assert np.all((got_scalar.view(np.uint16) == want_scalar.view(np.uint16))
                      | (np.isnan(got_scalar) & np.isnan(want_scalar))), op


# ----------------------------------------------------------------------------------------------- elementwise

SHAPE = (2, 16, 3, 8)
X = f16(RNG.standard_normal(SHAPE) * 2.0)
Y = f16(RNG.uniform(0.5, 2.0, SHAPE) * np.where(RNG.random(SHAPE) < 0.5, -1, 1))
P = f16(RNG.uniform(0.25, 3.0, SHAPE))


@pytest.fixture(scope="module")
def elementwise_pkg(tmp_path_factory):
    spec = [mb.TensorSpec(shape=SHAPE, dtype=types.fp16) for _ in range(3)]

    @mb.program(input_specs=spec, opset_version=TARGET)
    def prog(x, y, p):
        return (
            mb.add(x=x, y=y, name="o_add"), mb.sub(x=x, y=y, name="o_sub"), mb.mul(x=x, y=y, name="o_mul"),
            mb.real_div(x=x, y=y, name="o_div"), mb.maximum(x=x, y=y, name="o_max"),
            mb.minimum(x=x, y=y, name="o_min"), mb.pow(x=p, y=y, name="o_pow"),
            mb.exp(x=x, name="o_exp"), mb.tanh(x=x, name="o_tanh"), mb.sigmoid(x=x, name="o_sigmoid"),
            mb.silu(x=x, name="o_silu"), mb.relu(x=x, name="o_relu"), mb.sqrt(x=p, name="o_sqrt"),
            mb.rsqrt(x=p, epsilon=np.float16(0.01), name="o_rsqrt"),
            mb.gelu(x=x, mode="EXACT", name="o_gelu"), mb.gelu(x=x, mode="TANH_APPROXIMATION", name="o_gelu_tanh"),
            mb.gelu(x=x, mode="SIGMOID_APPROXIMATION", name="o_gelu_sigmoid"),
            mb.clip(x=x, alpha=np.float16(-0.5), beta=np.float16(1.25), name="o_clip"),
            mb.select(cond=mb.greater(x=x, y=y), a=x, b=y, name="o_select"),
        )

    return to_package(prog, tmp_path_factory.mktemp("elementwise"), "elementwise")


def elementwise_refs():
    x, y, p = (a.astype(np.float64) for a in (X, Y, P))
    sig = 1 / (1 + np.exp(-x))
    return {
        "o_add": x + y, "o_sub": x - y, "o_mul": x * y, "o_div": x / y, "o_max": np.maximum(x, y),
        "o_min": np.minimum(x, y), "o_pow": p ** y, "o_exp": np.exp(x), "o_tanh": np.tanh(x), "o_sigmoid": sig,
        "o_silu": x * sig, "o_relu": np.maximum(x, 0), "o_sqrt": np.sqrt(p),
        "o_rsqrt": 1 / np.sqrt(p + float(np.float16(0.01))),
        "o_gelu": 0.5 * x * (1 + erf64(x / math.sqrt(2))),
        "o_gelu_tanh": 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
        "o_gelu_sigmoid": x / (1 + np.exp(-1.702 * x)),
        "o_clip": np.clip(x, -0.5, 1.25), "o_select": np.where(x > y, x, y),
    }


@pytest.mark.slow
def test_elementwise_ops_match_float64_reference(elementwise_pkg):
    ex = MILExecutor(elementwise_pkg)
    out = ex.run({"x": X, "y": Y, "p": P})
    refs = elementwise_refs()
    assert set(out) == set(refs)
    for name, ref in refs.items():
        assert out[name].dtype == np.float16
        assert_close16(out[name], ref, what=name)
    present = set(ex.op_type_counts)
    for t in ("add", "sub", "mul", "real_div", "maximum", "minimum", "pow", "exp", "tanh", "sigmoid", "silu",
              "relu", "sqrt", "rsqrt", "gelu", "clip", "select", "greater"):
        assert t in present, t


@pytest.mark.slow
def test_gelu_tanh_approximation_in_place_of_exact_is_caught(elementwise_pkg, monkeypatch):
    def wrong_gelu(node, args, num):
        x = num.f(args["x"])
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))  # ignores mode

    swap_handler(monkeypatch, "gelu", wrong_gelu)
    out = MILExecutor(elementwise_pkg).run({"x": X, "y": Y, "p": P})
    assert violation(out["o_gelu"], elementwise_refs()["o_gelu"]) > 1.0
    assert violation(out["o_gelu_tanh"], elementwise_refs()["o_gelu_tanh"]) <= 1.0


# ------------------------------------------------------------------------------------------- norms, softmax, reductions

NSHAPE = (1, 24, 1, 10)
NX = f16(RNG.standard_normal(NSHAPE))
NS = f16(0.003 * RNG.standard_normal(NSHAPE))  # variance ~1e-5: layer_norm's epsilon matters here
GAMMA = f16(RNG.uniform(0.5, 1.5, 24))
BETA = f16(RNG.standard_normal(24) * 0.1)


@pytest.fixture(scope="module")
def norm_pkg(tmp_path_factory):
    spec = [mb.TensorSpec(shape=NSHAPE, dtype=types.fp16) for _ in range(2)]

    @mb.program(input_specs=spec, opset_version=TARGET)
    def prog(x, s):
        return (
            mb.layer_norm(x=x, axes=[1], gamma=GAMMA, beta=BETA, epsilon=np.float16(1e-5), name="o_ln_gb"),
            mb.layer_norm(x=s, axes=[1], epsilon=np.float16(1e-5), name="o_ln_small"),
            mb.layer_norm(x=x, axes=[-1], name="o_ln_last"),
            mb.softmax(x=x, axis=1, name="o_softmax1"), mb.softmax(x=x, axis=-1, name="o_softmax_last"),
            mb.reduce_mean(x=x, axes=[1], keep_dims=True, name="o_mean"),
            mb.reduce_sum(x=x, axes=[1, 3], keep_dims=False, name="o_sum"),
        )

    return to_package(prog, tmp_path_factory.mktemp("norm"), "norm")


def norm_refs():
    x, s = NX.astype(np.float64), NS.astype(np.float64)
    eps = float(np.float16(1e-5))
    return {
        "o_ln_gb": layer_norm64(x, (1,), GAMMA, BETA, eps), "o_ln_small": layer_norm64(s, (1,), eps=eps),
        "o_ln_last": layer_norm64(x, (3,), eps=eps), "o_softmax1": softmax64(x, 1), "o_softmax_last": softmax64(x, 3),
        "o_mean": x.mean(axis=1, keepdims=True), "o_sum": x.sum(axis=(1, 3)),
    }


@pytest.mark.slow
def test_norm_softmax_reduction_ops_match_float64_reference(norm_pkg):
    ex = MILExecutor(norm_pkg)
    out = ex.run({"x": NX, "s": NS})
    for name, ref in norm_refs().items():
        assert_close16(out[name], ref, what=name)
    assert {"layer_norm", "softmax", "reduce_mean", "reduce_sum"} <= set(ex.op_type_counts)


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["softmax_axis", "layer_norm_epsilon"])
def test_broken_norm_semantics_are_caught(norm_pkg, monkeypatch, broken):
    if broken == "softmax_axis":
        original = OPS["softmax"].handler

        def wrong(node, args, num):
            args = dict(args)
            args["axis"] = np.int32(-1 if int(args["axis"]) != -1 else 1)  # the other axis
            return original(node, args, num)

        swap_handler(monkeypatch, "softmax", wrong)
        name = "o_softmax1"
    else:
        original = OPS["layer_norm"].handler

        def wrong(node, args, num):
            args = dict(args)
            args["epsilon"] = np.float16(0)  # epsilon ignored
            return original(node, args, num)

        swap_handler(monkeypatch, "layer_norm", wrong)
        name = "o_ln_small"
    out = MILExecutor(norm_pkg).run({"x": NX, "s": NS})
    assert violation(out[name], norm_refs()[name]) > 1.0


# ----------------------------------------------------------------------------------------------- layout ops

LX = f16(RNG.standard_normal((2, 6, 4, 5)))
GATHER_IDX = np.array([3, 0, 2, 2], dtype=np.int32)
ALONG_IDX = RNG.integers(0, 6, size=(2, 3, 4, 5)).astype(np.int32)


@pytest.fixture(scope="module")
def layout_pkg(tmp_path_factory):
    @mb.program(input_specs=[mb.TensorSpec(shape=LX.shape, dtype=types.fp16)], opset_version=TARGET)
    def prog(x):
        parts = mb.split(x=x, split_sizes=[2, 4], axis=1, name="o_split")
        return (
            mb.reshape(x=x, shape=[2, 24, 5], name="o_reshape"),
            mb.transpose(x=x, perm=[0, 3, 1, 2], name="o_transpose"),
            mb.slice_by_index(x=x, begin=[0, 1, 0, 4], end=[2, 6, 3, 0], stride=[1, 2, 1, -2],
                              begin_mask=[False, False, True, False], end_mask=[True, False, False, True],
                              name="o_slice"),
            mb.slice_by_index(x=x, begin=[1, 0, 2, 0], end=[2, 6, 3, 5], squeeze_mask=[True, False, True, False],
                              name="o_slice_squeeze"),
            mb.concat(values=[x, mb.mul(x=x, y=np.float16(2))], axis=2, name="o_concat"),
            parts[0], parts[1],
            mb.squeeze(x=mb.slice_by_index(x=x, begin=[0, 0, 0, 0], end=[2, 6, 1, 5]), axes=[2], name="o_squeeze"),
            mb.expand_dims(x=mb.reshape(x=x, shape=[2, 24, 5]), axes=[1, -1], name="o_expand"),
            mb.gather(x=x, indices=GATHER_IDX, axis=2, name="o_gather"),
            mb.gather_along_axis(x=x, indices=ALONG_IDX, axis=1, name="o_along"),
        )

    return to_package(prog, tmp_path_factory.mktemp("layout"), "layout")


@pytest.mark.slow
def test_layout_ops_are_exact(layout_pkg):
    ex = MILExecutor(layout_pkg)
    out = ex.run({"x": LX})
    x = LX
    refs = {
        "o_reshape": x.reshape(2, 24, 5), "o_transpose": x.transpose(0, 3, 1, 2),
        "o_slice": x[0:, 1:6:2, :3, 4::-2], "o_slice_squeeze": x[1, :, 2, :],
        "o_concat": np.concatenate([x, x * np.float16(2)], axis=2),
        "o_squeeze": x[:, :, 0, :], "o_expand": x.reshape(2, 24, 5)[:, None, :, :, None],
        "o_gather": np.take(x, GATHER_IDX, axis=2), "o_along": np.take_along_axis(x, ALONG_IDX, axis=1),
    }
    for name, ref in refs.items():
        assert out[name].shape == ref.shape, name
        np.testing.assert_array_equal(out[name], ref, err_msg=name)
    split_names = [n for n in ex.output_names if n not in refs]
    assert len(split_names) == 2
    np.testing.assert_array_equal(out[split_names[0]], x[:, :2])
    np.testing.assert_array_equal(out[split_names[1]], x[:, 2:])
    for t in ("reshape", "transpose", "slice_by_index", "concat", "split", "squeeze", "expand_dims", "gather",
              "gather_along_axis"):
        assert t in ex.op_type_counts, t


# ----------------------------------------------------------------------------------------------- dot products

CX = f16(RNG.standard_normal((1, 8, 9, 10)))
W1 = f16(RNG.standard_normal((12, 8, 1, 1)) * 0.3)
B1 = f16(RNG.standard_normal(12) * 0.1)
W3 = f16(RNG.standard_normal((6, 4, 3, 3)) * 0.3)  # groups=2
W5 = f16(RNG.standard_normal((5, 8, 2, 3)) * 0.3)
MX = f16(RNG.standard_normal((2, 7, 16)))
MY = f16(RNG.standard_normal((2, 5, 16)))
LW = f16(RNG.standard_normal((11, 16)) * 0.3)
LB = f16(RNG.standard_normal(11) * 0.1)
HQ = f16(RNG.standard_normal((1, 16, 1, 12)))  # b c h q
HK = f16(RNG.standard_normal((1, 12, 1, 16)))  # b k h c
HP = f16(RNG.uniform(0, 1, (1, 12, 1, 12)))  # b k h q
SQ = f16(RNG.standard_normal((1, 2, 6, 8)))
SK = f16(RNG.standard_normal((1, 2, 7, 8)))
SV = f16(RNG.standard_normal((1, 2, 7, 5)))
SM = f16(np.where(RNG.random((1, 1, 6, 7)) < 0.3, -1e4, 0.0))


@pytest.fixture(scope="module")
def dot_pkg(tmp_path_factory):
    spec = [mb.TensorSpec(shape=a.shape, dtype=types.fp16) for a in (CX, MX, MY, HQ, HK, HP, SQ, SK, SV, SM)]

    @mb.program(input_specs=spec, opset_version=TARGET)
    def prog(x, mx, my, hq, hk, hp, sq, sk, sv, sm):
        return (
            mb.conv(x=x, weight=W1, bias=B1, name="o_conv1x1"),
            mb.conv(x=x, weight=W3, strides=[2, 2], pad_type="same", groups=2, name="o_conv_same"),
            mb.conv(x=x, weight=W5, pad_type="custom", pad=[1, 0, 2, 1], dilations=[2, 1], name="o_conv_custom"),
            mb.matmul(x=mx, y=my, transpose_y=True, name="o_matmul"),
            mb.linear(x=mx, weight=LW, bias=LB, name="o_linear"),
            mb.einsum(values=(hk, hq), equation="bkhc,bchq->bkhq", name="o_einsum_qk"),
            mb.einsum(values=(hq, hp), equation="bchk,bkhq->bchq", name="o_einsum_av"),
            mb.scaled_dot_product_attention(query=sq, key=sk, value=sv, attn_mask=sm, name="o_sdpa"),
        )

    return to_package(prog, tmp_path_factory.mktemp("dot"), "dot")


def dot_feeds():
    return {"x": CX, "mx": MX, "my": MY, "hq": HQ, "hk": HK, "hp": HP, "sq": SQ, "sk": SK, "sv": SV, "sm": SM}


@pytest.mark.slow
def test_dot_product_ops_match_float64_reference(dot_pkg):
    ex = MILExecutor(dot_pkg)
    out = ex.run(dot_feeds())
    x = CX.astype(np.float64)
    ref, absref, k = conv2d64(x, W1, B1)
    assert_close16(out["o_conv1x1"], ref, dot_extra(k, absref), "conv 1x1")
    # same padding, stride 2, input 9x10, kernel 3: total pad (2, 1)... split (1, 1) and (0, 1): extra after
    pads = []
    for size, k_, s in ((9, 3, 2), (10, 3, 2)):
        total = max(0, s * math.ceil(size / s) - size + k_ - s)
        pads.append((total // 2, total - total // 2))
    ref, absref, k = conv2d64(x, W3, strides=(2, 2), pads=tuple(pads), groups=2)
    assert_close16(out["o_conv_same"], ref, dot_extra(k, absref), "conv same/groups/stride")
    ref, absref, k = conv2d64(x, W5, pads=((1, 0), (2, 1)), dilations=(2, 1))
    assert_close16(out["o_conv_custom"], ref, dot_extra(k, absref), "conv custom/dilation")
    a, b = MX.astype(np.float64), MY.astype(np.float64)
    assert_close16(out["o_matmul"], a @ np.swapaxes(b, -1, -2),
                   dot_extra(16, np.abs(a) @ np.abs(np.swapaxes(b, -1, -2))), "matmul")
    assert_close16(out["o_linear"], a @ LW.T.astype(np.float64) + LB,
                   dot_extra(16, np.abs(a) @ np.abs(LW.T.astype(np.float64))), "linear")
    hq, hk, hp = (v.astype(np.float64) for v in (HQ, HK, HP))
    assert_close16(out["o_einsum_qk"], np.einsum("bkhc,bchq->bkhq", hk, hq),
                   dot_extra(16, np.einsum("bkhc,bchq->bkhq", np.abs(hk), np.abs(hq))), "einsum qk")
    assert_close16(out["o_einsum_av"], np.einsum("bchk,bkhq->bchq", hq, hp),
                   dot_extra(12, np.einsum("bchk,bkhq->bchq", np.abs(hq), np.abs(hp))), "einsum av")
    q, kk, v, m = (t.astype(np.float64) for t in (SQ, SK, SV, SM))
    w = softmax64(q @ np.swapaxes(kk, -1, -2) / math.sqrt(8) + m, -1)
    assert_close16(out["o_sdpa"], w @ v, dot_extra(7, np.abs(w) @ np.abs(v)), "sdpa")
    for t in ("conv", "matmul", "linear", "einsum", "scaled_dot_product_attention"):
        assert t in ex.op_type_counts, t


def test_einsum_in_other_orders_matches_numpy():
    """The per-head attention equations in the operand order of ANE_MATH.md ("Per-head einsum attention"), and a few
    permutations."""
    num = Numerics()
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 16, 1, 12)).astype(np.float32)  # b c h q
    k = rng.standard_normal((1, 12, 1, 16)).astype(np.float32)  # b k h c
    p = rng.standard_normal((1, 12, 2, 12)).astype(np.float32)  # b k h q, h broadcast against 1
    for eq, a, b in (("bchq,bkhc->bkhq", q, k), ("bkhc,bchq->bkhq", k, q), ("bkhq,bchk->bchq", p, q),
                     ("bchk,bkhq->bchq", q, p), ("ij,jk->ki", k[0, :, 0, :], q[0, :, 0, :])):
        got = einsum_as_matmul(eq, a, b, num.matmul, lambda t, ax: num.sum(t, ax))
        if a.ndim == 4 and a.shape[2] != b.shape[2]:  # MIL einsum broadcasts a size-1 h
            h = max(a.shape[2], b.shape[2])
            a = np.broadcast_to(a, a.shape[:2] + (h,) + a.shape[3:])
            b = np.broadcast_to(b, b.shape[:2] + (h,) + b.shape[3:])
        want = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=eq)


# ----------------------------------------------------------------------------------------------- fp16-strict

@pytest.mark.slow
def test_fp16_strict_accumulates_in_fp16(tmp_path):
    """4096 products of 1 * 1: float32 accumulation gives 4096, a sequential fp16 accumulator stalls at 2048."""
    w = np.ones((1, 4096, 1, 1), np.float16)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4096, 1, 2), dtype=types.fp16)], opset_version=TARGET)
    def prog(x):
        return mb.conv(x=x, weight=w, name="o")

    path = to_package(prog, tmp_path, "acc")
    feeds = {"x": np.ones((1, 4096, 1, 2), np.float16)}
    assert MILExecutor(path).run(feeds)["o"].ravel().tolist() == [4096.0, 4096.0]
    strict = MILExecutor(path, mode=FP16_STRICT)
    assert strict.run(feeds)["o"].ravel().tolist() == [2048.0, 2048.0]
    assert strict.describe()["mode"] == FP16_STRICT
    assert "sequential fp16" in strict.describe()["accumulation"]


@pytest.mark.slow
def test_fp16_strict_stays_close_on_small_ops(norm_pkg, dot_pkg):
    """Strict mode rounds every step: it differs from the exact value by a few fp16 steps per accumulated term."""
    out = MILExecutor(norm_pkg, mode=FP16_STRICT).run({"x": NX, "s": NS})
    for name, ref in norm_refs().items():
        assert violation(out[name], ref, extra=24 * U16 * np.abs(ref) + 24 * U16) <= 1.0, name
    out = MILExecutor(dot_pkg, mode=FP16_STRICT).run(dot_feeds())
    ref, absref, k = conv2d64(CX.astype(np.float64), W1, B1)
    assert violation(out["o_conv1x1"], ref, extra=(k + 1) * U16 * absref) <= 1.0


# ------------------------------------------------------------------------------------ handlers the converter folds away

def _node(op_type, shapes, dtypes):
    return OpNode(0, "t", op_type, "main", ["t"] * len(shapes), shapes, [np.dtype(d) for d in dtypes])


def test_fill_shape_cast_handlers():
    num = Numerics()
    out = OPS["fill"].handler(_node("fill", [(2, 3)], [np.float16]),
                                      {"shape": np.array([2, 3], np.int32), "value": np.float16(1.5)}, num)
    assert out.shape == (2, 3) and out.dtype == np.float16 and np.all(out == 1.5)
    out = OPS["shape"].handler(_node("shape", [(4,)], [np.int32]), {"x": np.zeros((1, 2, 3, 4))}, num)
    assert out.tolist() == [1, 2, 3, 4]
    out = OPS["cast"].handler(_node("cast", [(3,)], [np.int32]), {"x": np.array([-1.7, 0.2, 2.9]), "dtype": "int32"},
                              num)
    assert out.tolist() == [-1, 0, 2]


def test_constexpr_handlers_equal_coremltools_decompression():
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import constexpr_affine_dequantize as affine16
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import constexpr_lut_to_dense as lut16
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import constexpr_sparse_to_dense as sparse16
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_blockwise_shift_scale as shift18
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_lut_to_dense as lut18
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_sparse_to_dense as sparse18

    num = Numerics()
    rng = np.random.default_rng(3)
    h = {op_type: op_def.handler for op_type, op_def in OPS.items()}
    # iOS18 LUT, per-grouped-channel scalar and vector palettization
    idx = rng.integers(0, 16, size=(8, 6, 1, 1)).astype(np.uint8)
    lut = rng.standard_normal((4, 1, 1, 1, 16, 1)).astype(np.float16)
    got = h["constexpr_lut_to_dense"](_node("constexpr_lut_to_dense", [(8, 6, 1, 1)], [np.float16]),
                                      {"indices": idx, "lut": lut}, num)
    np.testing.assert_array_equal(got, lut18.decompress(idx, lut, None))
    vlut = rng.standard_normal((2, 1, 1, 1, 4, 3)).astype(np.float16)
    vidx = rng.integers(0, 4, size=(4, 6, 1, 1)).astype(np.uint8)
    got = h["constexpr_lut_to_dense"](_node("constexpr_lut_to_dense", [(4, 18, 1, 1)], [np.float16]),
                                      {"indices": vidx, "lut": vlut, "vector_axis": np.int32(1)}, num)
    np.testing.assert_array_equal(got, lut18.decompress(vidx, vlut, np.int32(1)))
    # iOS16 LUT with packed indices
    lut1 = rng.standard_normal(16).astype(np.float16)
    packed = rng.integers(0, 256, size=12).astype(np.uint8)
    got = h["constexpr_lut_to_dense"](_node("constexpr_lut_to_dense", [(4, 6)], [np.float16]),
                                      {"indices": packed, "lut": lut1, "shape": np.array([4, 6], np.uint32)}, num)
    np.testing.assert_array_equal(got, lut16.decompress(lut1, packed, np.array([4, 6], np.uint32)))
    # affine dequantize (per-channel scale and zero point)
    q = rng.integers(-128, 127, size=(5, 7)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, 5).astype(np.float16)
    zp = rng.integers(-3, 3, 5).astype(np.int8)
    got = h["constexpr_affine_dequantize"](_node("constexpr_affine_dequantize", [(5, 7)], [np.float16]),
                                           {"quantized_data": q, "scale": scale, "zero_point": zp, "axis": np.int32(0)},
                                           num)
    np.testing.assert_array_equal(got, affine16.decompress(q, zp, scale, 0))
    # blockwise shift/scale (iOS18), block of 4 along the input axis
    data = rng.integers(-8, 8, size=(6, 8)).astype(np.int8)
    bscale = rng.uniform(0.01, 0.1, (6, 2)).astype(np.float16)
    boff = rng.integers(-2, 2, (6, 2)).astype(np.int8)
    got = h["constexpr_blockwise_shift_scale"](_node("constexpr_blockwise_shift_scale", [(6, 8)], [np.float16]),
                                               {"data": data, "scale": bscale, "offset": boff}, num)
    np.testing.assert_array_equal(got, shift18.decompress(data, bscale, boff))
    # sparse to dense, iOS18 and iOS16
    mask = (rng.random((4, 5)) < 0.4).astype(np.uint8)
    nz = rng.standard_normal(int(mask.sum())).astype(np.float16)
    got = h["constexpr_sparse_to_dense"](_node("constexpr_sparse_to_dense", [(4, 5)], [np.float16]),
                                         {"nonzero_data": nz, "mask": mask}, num)
    np.testing.assert_array_equal(got, sparse18.decompress(nz, mask))
    packed_mask = np.packbits(mask.ravel(), bitorder="little")
    got = h["constexpr_sparse_to_dense"](_node("constexpr_sparse_to_dense", [(4, 5)], [np.float16]),
                                         {"nonzero_data": nz, "mask": packed_mask,
                                          "shape": np.array([4, 5], np.uint32)}, num)
    np.testing.assert_array_equal(got, sparse16.decompress(nz, packed_mask, np.array([4, 5], np.uint32)))


# ----------------------------------------------------------------------------------------------- palettized packages

PW = f16(RNG.standard_normal((64, 96, 1, 1)) * 0.2)
PW3 = f16(RNG.standard_normal((32, 64, 3, 3)) * 0.1)
PX = f16(RNG.standard_normal((1, 96, 1, 12)))


@pytest.fixture(scope="module")
def conv_model():
    @mb.program(input_specs=[mb.TensorSpec(shape=PX.shape, dtype=types.fp16)], opset_version=TARGET)
    def prog(x):
        h = mb.conv(x=x, weight=PW, name="c1")
        return mb.conv(x=mb.relu(x=h), weight=PW3, pad_type="same", name="c2")

    return ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                      minimum_deployment_target=TARGET, skip_model_load=True)


@pytest.mark.slow
@pytest.mark.parametrize("nbits,mode", [(8, "kmeans"), (4, "uniform")])
def test_palettized_weights_decompress_exactly_and_run(conv_model, tmp_path, nbits, mode):
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_lut_to_dense as lut18

    from experiments.ane_engineering.package.mil.load import load_program

    cfg = ct.optimize.coreml.OpPalettizerConfig(mode=mode, nbits=nbits, granularity="per_grouped_channel",
                                                group_size=16, weight_threshold=1024)
    model = ct.optimize.coreml.palettize_weights(conv_model,
                                                 ct.optimize.coreml.OptimizationConfig(op_type_configs={"conv": cfg}))
    path = tmp_path / f"w{nbits}.mlpackage"
    model.save(str(path))
    ex = MILExecutor(path, keep_program=True)
    assert ex.op_type_counts.get("constexpr_lut_to_dense") == 2

    # coremltools' own decompression of the same package, loaded from disk
    dense_path = tmp_path / f"w{nbits}_dense.mlpackage"
    ct.optimize.coreml.decompress_weights(ct.models.MLModel(str(path), skip_model_load=True)).save(str(dense_path))
    dense = {op.outputs[0].name: op.outputs[0].val
             for op in load_program(dense_path).operations() if op.op_type == "const"}
    decompressed = {}
    for op in ex.program.operations():
        if op.op_type != "constexpr_lut_to_dense":
            continue
        indices, lut = op.indices.val, op.lut.val
        # PyMIL unpacked the uint{nbits} indices to one uint8 per weight element, with the weight's shape
        assert indices.dtype == np.uint8 and indices.max() < 2 ** nbits
        assert lut.shape == (indices.shape[0] // 16, 1, 1, 1, 2 ** nbits, 1)
        mine = ex.constant(op.outputs[0].name)
        np.testing.assert_array_equal(mine, lut18.decompress(indices, lut, None))
        theirs = [v for v in dense.values() if isinstance(v, np.ndarray) and v.shape == mine.shape]
        assert len(theirs) == 1
        np.testing.assert_array_equal(mine, theirs[0])
        decompressed[mine.shape] = mine.astype(np.float64)
        if nbits == 4 and indices.shape == PW.shape:
            # the raw blob: 4-bit indices packed little-endian, two per byte
            raw = weight_bin(path).read_bytes()
            blob = [b for b in weight_blobs(weight_bin(path)) if b[2] == indices.size // 2]
            assert len(blob) == 1
            packed = np.frombuffer(raw, np.uint8, count=blob[0][2], offset=blob[0][3])
            bits = np.unpackbits(packed, bitorder="little").reshape(-1, 4)
            np.testing.assert_array_equal(bits @ np.array([1, 2, 4, 8]), indices.ravel())

    out = ex.run({"x": PX})
    name = ex.output_names[0]
    h, habs, k1 = conv2d64(PX.astype(np.float64), decompressed[PW.shape])
    h = np.maximum(f16(h).astype(np.float64), 0)  # the executor stores conv1's output in fp16
    ref, absref, k2 = conv2d64(h, decompressed[PW3.shape], pads=((1, 1), (1, 1)))
    assert_close16(out[name], ref, dot_extra(k2, absref), f"W{nbits} conv stack")
    # the palettized weights are not the original ones
    assert not np.array_equal(decompressed[PW.shape], PW.astype(np.float64))


# ----------------------------------------------------------------------------------------------- weight.bin integrity

@pytest.mark.slow
def test_flipped_weight_byte_changes_outputs(conv_model, tmp_path):
    path = tmp_path / "clean.mlpackage"
    conv_model.save(str(path))
    clean_ex = MILExecutor(path)
    clean = clean_ex.run({"x": PX})[clean_ex.output_names[0]]
    bad = tmp_path / "flipped.mlpackage"
    shutil.copytree(path, bad)
    blobs = [b for b in weight_blobs(weight_bin(bad)) if b[2] == PW.size * 2]  # the fp16 64x96 weight
    assert len(blobs) == 1
    _, _, size, offset = blobs[0]
    raw = bytearray(weight_bin(bad).read_bytes())
    element = 1234
    raw[offset + 2 * element + 1] ^= 0x40  # high byte of one fp16: an exponent bit
    weight_bin(bad).write_bytes(bytes(raw))
    bad_ex = MILExecutor(bad)
    flipped = bad_ex.run({"x": PX})[bad_ex.output_names[0]]
    assert not np.array_equal(clean, flipped)
    weights = [n for n in bad_ex.constant_names() if getattr(bad_ex.constant(n), "shape", None) == PW.shape]
    changed = bad_ex.constant(weights[0]) != clean_ex.constant(weights[0])
    assert changed.sum() == 1 and np.flatnonzero(changed)[0] == element


# ------------------------------------------------------------------------------------ load-time refusal, inputs, memory

@pytest.mark.slow
def test_unsupported_op_fails_at_load_naming_type_and_op(norm_pkg, monkeypatch):
    monkeypatch.delitem(OPS, "softmax")
    with pytest.raises(UnsupportedOpError) as err:
        MILExecutor(norm_pkg)
    msg = str(err.value)
    assert "unsupported MIL op 'softmax'" in msg and "o_softmax1" in msg and "op #" in msg and "function main" in msg


@pytest.mark.slow
def test_inputs_are_checked(norm_pkg):
    ex = MILExecutor(norm_pkg)
    with pytest.raises(InputError, match="missing"):
        ex.run({"x": NX})
    with pytest.raises(InputError, match="unexpected"):
        ex.run({"x": NX, "s": NS, "z": NS})
    with pytest.raises(InputError, match="shape"):
        ex.run({"x": NX[..., :5], "s": NS})
    out32 = ex.run({"x": NX.astype(np.float32), "s": NS.astype(np.float64)}, as_float32=True)
    assert all(v.dtype == np.float32 for v in out32.values())


@pytest.mark.slow
def test_handler_failure_names_the_op(norm_pkg, monkeypatch):
    def boom(node, args, num):
        raise ValueError("bad")

    swap_handler(monkeypatch, "reduce_sum", boom)
    ex = MILExecutor(norm_pkg)
    with pytest.raises(ExecutionError, match=r"o_sum.*reduce_sum.*bad"):
        ex.run({"x": NX, "s": NS})


@pytest.mark.slow
def test_intermediates_are_released(dot_pkg, elementwise_pkg):
    for path, feeds in ((dot_pkg, dot_feeds()), (elementwise_pkg, {"x": X, "y": Y, "p": P})):
        ex = MILExecutor(path)
        ex.run(feeds)
        assert sorted(ex.last_run["live_after_run"]) == sorted(ex.output_names)
        plan = ex.free_plan()
        runtime_values = set(ex.step_value_names()) - set(ex.output_names)
        assert set(plan) == runtime_values  # every non-output value has exactly one release point


# ---------------------------------------------------------------------------------------------- a real BC1S body (tiny)

BODY_L = 96
BODY_QUESTIONS = 8
DEPTH_SAFETY = 4


@pytest.fixture(scope="module")
def tiny_body(tmp_path_factory):
    pytest.importorskip("torch")
    from experiments.ane_engineering.checkpoint import load_checkpoint

    ck = load_checkpoint("builtin:tiny")
    body, model = convert_tiny_body(ck, BODY_L, TARGET)
    path = tmp_path_factory.mktemp("body") / "body.mlpackage"
    model.save(str(path))
    return ck, body, path


def _body_cases(ck, body, n):
    import torch

    from experiments.ane_engineering.package.inputs.device_inputs import body_inputs
    from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions

    cases = []
    for q in load_questions():
        e = encode_question(ck.tokenizer, ck.config.head, q)
        if e.num_tokens > BODY_L:
            continue
        inputs = body_inputs(ck.config, ck.tensors, e.input_ids, e.token_types, e.marker_positions, BODY_L)
        with torch.no_grad():
            ref = body(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()[0, 0, 0, :len(q.options)]
        cases.append((q.id, inputs, ref.astype(np.float64)))
        if len(cases) == n:
            break
    return cases


def body_tolerance(ck, refs) -> float:
    """u16 * max|logit| * depth * safety: one fp16 rounding (u16 = 2^-11) of the largest reference logit, grown
    by each of the encoder + head layers it passed through (depth 6 + 2 = 8 for builtin:tiny), times 4. The
    fp16-strict test allows twice this; a softmax over the wrong axis fails it (test below)."""
    depth = ck.config.encoder.num_hidden_layers + ck.config.head.num_layers
    magnitude = max(float(np.max(np.abs(r))) for r in refs)
    return U16 * magnitude * depth * DEPTH_SAFETY


def _body_errors(path, cases, **kw):
    ex = MILExecutor(path, **kw)
    errors = []
    for _, inputs, ref in cases:
        out = ex.run(inputs, as_float32=True)["option_logits"][0, 0, 0, :len(ref)]
        assert np.all(np.isfinite(out))
        errors.append(float(np.max(np.abs(out - ref))))
    return ex, errors


@pytest.mark.slow
def test_tiny_body_matches_fp32_torch(tiny_body):
    ck, body, path = tiny_body
    cases = _body_cases(ck, body, BODY_QUESTIONS)
    assert len(cases) == BODY_QUESTIONS
    tol = body_tolerance(ck, [c[2] for c in cases])
    ex, errors = _body_errors(path, cases)
    assert max(errors) <= tol, (errors, tol)
    assert max(errors) > 0  # fp16 storage is visible: this is not the torch model in disguise
    assert sorted(ex.last_run["live_after_run"]) == ["option_logits"]
    counts = ex.op_type_counts
    assert counts["conv"] > 0 and counts["einsum"] > 0 and counts["layer_norm"] > 0


@pytest.mark.slow
def test_tiny_body_with_broken_softmax_axis_fails(tiny_body, monkeypatch):
    ck, body, path = tiny_body
    cases = _body_cases(ck, body, 3)
    tol = body_tolerance(ck, [c[2] for c in cases])
    original = OPS["softmax"].handler

    def wrong_axis(node, args, num):
        args = dict(args)
        args["axis"] = np.int32(3)  # the query axis instead of the key axis
        return original(node, args, num)

    swap_handler(monkeypatch, "softmax", wrong_axis)
    _, errors = _body_errors(path, cases)
    assert max(errors) > tol, (errors, tol)


@pytest.mark.slow
def test_tiny_body_fp16_strict_runs_and_stays_near(tiny_body):
    ck, body, path = tiny_body
    cases = _body_cases(ck, body, 1)
    tol = body_tolerance(ck, [c[2] for c in cases])
    _, errors = _body_errors(path, cases, mode=FP16_STRICT)
    assert max(errors) <= 2 * tol, (errors, tol)


# ----------------------------------------------------------------------------------------- the original-layout baseline

@pytest.fixture(scope="module")
def tiny_baseline(tmp_path_factory):
    pytest.importorskip("torch")
    kinds = pytest.importorskip("experiments.ane_engineering.package.kinds")
    convert = pytest.importorskip("experiments.ane_engineering.package.convert")
    from experiments.ane_engineering.checkpoint import load_checkpoint

    ck = load_checkpoint("builtin:tiny")
    spec = kinds.build_export_spec(ck, "baseline", BODY_L)
    path = tmp_path_factory.mktemp("baseline") / "baseline.mlpackage"
    convert.convert(spec).save(str(path))
    return ck, spec, path


@pytest.mark.slow
def test_baseline_export_with_enumerated_lengths_runs(tiny_baseline):
    """B x L x C export: embedding gather, linear, reshape/split/squeeze, RoPE from range_1d/sin/cos, bool-masked
    SDPA, gather read-out, and enumerated input lengths (96 and 192 here)."""
    import torch

    from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions

    ck, spec, path = tiny_baseline
    ex = MILExecutor(path)
    for t in ("linear", "reshape", "scaled_dot_product_attention", "gather", "gather_along_axis", "range_1d", "cast"):
        assert t in ex.op_type_counts, t
    info = {t.name: t for t in ex.inputs}
    assert (1, 96) in info["input_ids"].enumerated and (1, 192) in info["input_ids"].enumerated
    with pytest.raises(InputError, match="one of"):
        ex.run({"input_ids": np.zeros((1, 100), np.int32), "attention_mask": np.zeros((1, 100), np.int32),
                "token_types": np.zeros((1, 100), np.int32), "marker_positions": np.zeros((1, 32), np.int32)})
    refs, errors = [], []
    questions = [encode_question(ck.tokenizer, ck.config.head, q) for q in load_questions()[:2]]
    for length in (96, 192):
        for e in questions:
            k = len(e.marker_positions)
            feeds = {"input_ids": np.full((1, length), ck.config.encoder.pad_token_id, np.int32),
                     "attention_mask": np.zeros((1, length), np.int32), "token_types": np.zeros((1, length), np.int32),
                     "marker_positions": np.zeros((1, 32), np.int32)}
            feeds["input_ids"][0, :e.num_tokens] = e.input_ids
            feeds["attention_mask"][0, :e.num_tokens] = 1
            feeds["token_types"][0, :e.num_tokens] = e.token_types
            feeds["marker_positions"][0, :k] = e.marker_positions
            with torch.no_grad():
                ref = spec.module(*[torch.from_numpy(feeds[c.name]) for c in spec.inputs]).numpy()[0, :k]
            out = ex.run(feeds, as_float32=True)["option_logits"][0, :k]
            refs.append(ref)
            errors.append(float(np.max(np.abs(out - ref))))
    assert max(errors) <= body_tolerance(ck, refs), (errors, body_tolerance(ck, refs))


def test_strict_sum_over_every_axis_and_over_no_terms():
    """fp16-strict sums: reducing every axis without keepdims gives a 0-d result (it used to fail on a numpy
    scalar), and a sum over an empty axis is 0."""
    from experiments.ane_engineering.run.mil.numerics import _sequential_sum16

    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    assert _sequential_sum16(x, (0, 1), keepdims=False) == np.float16(15)
    assert _sequential_sum16(x, (0, 1), keepdims=True).shape == (1, 1)
    np.testing.assert_array_equal(_sequential_sum16(np.zeros((0, 3), np.float16), (0,), keepdims=False),
                                  np.zeros(3, np.float16))
