"""Small saved packages (coremltools-converted MIL programs) and float64 references shared by the executor's tests
(tests/run/mil/test_executor.py) and the per-family op tests that run them (tests/run/mil/ops/): the elementwise,
norm, layout and dot-product programs, a palettizable conv stack, the helpers that compare with fp16 tolerances, and
the models and programs of tests/run/mil/test_tool.py and the op tests of the classifier and control flow.

The *_package functions convert with coremltools (each test module wraps the ones it uses in a module fixture): a
test that uses one is marked slow (tests/slow_guard.py checks it).
The data are drawn from one generator in one order, so every array has the value it had before the tests were split
by op family.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from conversion_support import save_program  # noqa: E402
from experiments.ane_engineering.run.mil.registry import OPS, OpNode  # noqa: E402
from fp16_support import TINY16, f16, ulp16  # noqa: E402

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


def _node(op_type, shapes, dtypes):
    return OpNode(0, "t", op_type, "main", ["t"] * len(shapes), shapes, [np.dtype(d) for d in dtypes])


RNG = np.random.default_rng(20240611)


# ----------------------------------------------------------------------------------------------- elementwise

SHAPE = (2, 16, 3, 8)
X = f16(RNG.standard_normal(SHAPE) * 2.0)
Y = f16(RNG.uniform(0.5, 2.0, SHAPE) * np.where(RNG.random(SHAPE) < 0.5, -1, 1))
P = f16(RNG.uniform(0.25, 3.0, SHAPE))


def elementwise_package(tmp_path_factory):
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


# ------------------------------------------------------------------------------------------- norms, softmax, reductions

NSHAPE = (1, 24, 1, 10)
NX = f16(RNG.standard_normal(NSHAPE))
NS = f16(0.003 * RNG.standard_normal(NSHAPE))  # variance ~1e-5: layer_norm's epsilon matters here
GAMMA = f16(RNG.uniform(0.5, 1.5, 24))
BETA = f16(RNG.standard_normal(24) * 0.1)


def norm_package(tmp_path_factory):
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


# ----------------------------------------------------------------------------------------------- layout ops

LX = f16(RNG.standard_normal((2, 6, 4, 5)))
GATHER_IDX = np.array([3, 0, 2, 2], dtype=np.int32)
ALONG_IDX = RNG.integers(0, 6, size=(2, 3, 4, 5)).astype(np.int32)


def layout_package(tmp_path_factory):
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


def dot_package(tmp_path_factory):
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


# ----------------------------------------------------------------------------------------- a palettizable conv stack

PW = f16(RNG.standard_normal((64, 96, 1, 1)) * 0.2)
PW3 = f16(RNG.standard_normal((32, 64, 3, 3)) * 0.1)
PX = f16(RNG.standard_normal((1, 96, 1, 12)))


def conv_mlmodel():
    @mb.program(input_specs=[mb.TensorSpec(shape=PX.shape, dtype=types.fp16)], opset_version=TARGET)
    def prog(x):
        h = mb.conv(x=x, weight=PW, name="c1")
        return mb.conv(x=mb.relu(x=h), weight=PW3, pad_type="same", name="c2")

    return ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                      minimum_deployment_target=TARGET, skip_model_load=True)


# ---------------------------------------------------------------------------------------- models of the tool's tests

def _mlp(classes: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, classes)).eval()


def _save(model, path):
    model.save(str(path))
    return path


def _convert_program(prog, path, target=ct.target.iOS17):
    return save_program(prog, path, target, ct.precision.FLOAT32)


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path
