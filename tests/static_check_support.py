"""MIL programs for the ANE rule tests (tests/placement/test_static_check.py and tests/placement/rules/): a
compliant BC1S program that triggers no rule, one small triggering program per rule that can find something
(TRIGGERS), converted torch blocks for the spec-based rules, and `findings_of`.

The programs are built with coremltools' builder; `convert_block` (and `converted`) convert with coremltools, so a
test that uses them is marked slow (tests/slow_guard.py checks it).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import get_new_symbol, types  # noqa: E402
from torch import nn  # noqa: E402

from experiments.ane_engineering.placement.rules import CATALOGUE  # noqa: E402
from experiments.ane_engineering.placement.static_check import check_program  # noqa: E402

OPSET = ct.target.macOS15
C, L = 64, 96
RNG = np.random.default_rng(0)


def fp16(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float16)


def weight(*shape) -> np.ndarray:
    return fp16(RNG.standard_normal(shape) * 0.05)


def tensor(shape, dtype=types.fp16):
    return mb.TensorSpec(shape=shape, dtype=dtype)


def program(*specs):
    """Decorator: a MIL program (macOS15 opset) with the given input specs; default one fp16 (1, 64, 1, 96) input."""
    return mb.program(input_specs=list(specs) or [tensor((1, C, 1, L))], opset_version=OPSET)


def findings_of(report: dict, rule_id: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == rule_id]


# ----------------------------------------------------------------------------------------------------------------
# A compliant BC1S program: channel layer norm, 1x1 convs with tanh GELU, one attention head with K transposed once,
# the two per-head einsums, softmax over axis 1, a finite -1e4 mask constant.
# ----------------------------------------------------------------------------------------------------------------
def compliant():
    mask = np.zeros((1, L, 1, L), dtype=np.float16)
    mask[:, L // 2:] = -1e4

    @program(tensor((1, C, 1, L)), tensor((1, L, 1, L)))
    def prog(x, global_mask):
        h = mb.layer_norm(x=x, axes=[1], epsilon=fp16(1e-5))
        h = mb.conv(x=h, weight=weight(2 * C, C, 1, 1))
        h = mb.gelu(x=h, mode="TANH_APPROXIMATION")
        h = mb.conv(x=h, weight=weight(C, 2 * C, 1, 1), bias=weight(C))
        x1 = mb.add(x=x, y=h)
        q = mb.slice_by_index(x=x1, begin=[0, 0, 0, 0], end=[1, 32, 1, L])            # (1, 32, 1, L)
        k = mb.transpose(x=x1, perm=[0, 3, 2, 1])                                       # (1, L, 1, C)
        k = mb.slice_by_index(x=k, begin=[0, 0, 0, 0], end=[1, L, 1, 32])             # (1, L, 1, 32)
        v = mb.slice_by_index(x=x1, begin=[0, 32, 0, 0], end=[1, C, 1, L])            # (1, 32, 1, L)
        scores = mb.einsum(values=(k, q), equation="bkhc,bchq->bkhq")                  # (1, L, 1, L)
        scores = mb.mul(x=scores, y=fp16(32 ** -0.5))
        scores = mb.add(x=mb.add(x=scores, y=global_mask), y=mask)
        weights = mb.softmax(x=scores, axis=1)
        out = mb.einsum(values=(v, weights), equation="bchk,bkhq->bchq")               # (1, 32, 1, L)
        return mb.relu(x=out)

    return prog, None


# ----------------------------------------------------------------------------------------------------------------
# Converted torch models (for the spec-based rules and load_program).
# ----------------------------------------------------------------------------------------------------------------
class ConvBlock(nn.Module):
    """A BC1S block: 1x1 conv, ReLU, residual."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return x + torch.relu(self.conv(x))


@functools.lru_cache(maxsize=None)
def convert_block(shape_kind: str):
    module = ConvBlock().eval()
    example = torch.zeros(1, 8, 1, 32)
    if shape_kind == "enumerated":
        shape = ct.EnumeratedShapes(shapes=[(1, 8, 1, 32), (1, 8, 1, 64)], default=(1, 8, 1, 32))
    elif shape_kind == "range":
        shape = ct.Shape(shape=(1, 8, 1, ct.RangeDim(lower_bound=16, upper_bound=128, default=32)))
    else:
        shape = (1, 8, 1, 32)
    return ct.convert(torch.jit.trace(module, example),
                      inputs=[ct.TensorType(name="x", shape=shape, dtype=np.float16)],
                      outputs=[ct.TensorType(name="y", dtype=np.float16)],
                      convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                      minimum_deployment_target=OPSET, skip_model_load=True)


def converted(shape_kind: str):
    model = convert_block(shape_kind)
    return model._mil_program, model.get_spec()


# ----------------------------------------------------------------------------------------------------------------
# One triggering program per rule that can find something.
# ----------------------------------------------------------------------------------------------------------------
def trigger_rank():
    @program()
    def prog(x):
        return mb.reshape(x=x, shape=[1, 2, 32, 1, L])
    return prog, None


def trigger_bc1s_form():
    @program()
    def prog(x):
        return mb.reshape(x=x, shape=[1, C, L])
    return prog, None


def trigger_dimension_limit():
    @program(tensor((1, 4, 1, 16385)))
    def prog(x):
        return mb.relu(x=x)
    return prog, None


def trigger_symbolic():
    @program(tensor((1, C, 1, get_new_symbol())))
    def prog(x):
        return mb.relu(x=x)
    return prog, None


def trigger_gather():
    @program()
    def prog(x):
        return mb.gather(x=x, indices=np.array([0, 2, 4, 6], dtype=np.int32), axis=1)
    return prog, None


def trigger_sdpa():
    @program(tensor((1, 2, 16, 32)), tensor((1, 2, 16, 32)), tensor((1, 2, 16, 32)))
    def prog(q, k, v):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v)
    return prog, None


def trigger_allowlist():
    @program()
    def prog(x):
        return mb.sin(x=x)
    return prog, None


def trigger_recurrent():
    @program(tensor((8, 1, 16), types.fp32), tensor((1, 32), types.fp32))
    def prog(x, h0):
        return mb.rnn(x=x, initial_h=h0, weight_ih=np.float32(RNG.standard_normal((32, 16))),
                      weight_hh=np.float32(RNG.standard_normal((32, 32))))
    return prog, None


def trigger_dynamic_op():
    @program()
    def prog(x):
        return mb.relu(x=x), mb.shape(x=x)
    return prog, None


def trigger_non_fp16():
    @program(tensor((1, C, 1, L), types.fp32))
    def prog(x):
        return mb.relu(x=x)
    return prog, None


def trigger_cast():
    @program()
    def prog(x):
        y = mb.cast(x=mb.relu(x=x), dtype="fp32")
        y = mb.cast(x=mb.relu(x=y), dtype="fp16")
        return mb.relu(x=y)
    return prog, None


def trigger_fp32_io():
    @program(tensor((1, C, 1, L), types.fp32))
    def prog(x):
        return mb.relu(x=mb.cast(x=x, dtype="fp16"))
    return prog, None


def trigger_non_finite_constant():
    @program()
    def prog(x):
        return mb.add(x=x, y=np.full((1, 1, 1, L), -np.inf, dtype=np.float16))
    return prog, None


def trigger_fp16_range_constant():
    @program(tensor((1, C, 1, L), types.fp32))
    def prog(x):
        return mb.mul(x=x, y=np.full((1, C, 1, 1), 1e6, dtype=np.float32))
    return prog, None


def trigger_last_axis_padding():
    @program()
    def prog(x):
        return mb.reshape(x=x, shape=[1, C * L // 8, 1, 8])
    return prog, None


def trigger_einsum_form():
    @program(tensor((C, 1, L)), tensor((L, 1, 32)))
    def prog(x, y):
        return mb.einsum(values=(x, y), equation="chw,whr->chr")
    return prog, None


def trigger_softmax_axis():
    @program()
    def prog(x):
        return mb.softmax(x=x, axis=-1)
    return prog, None


def trigger_dense_as_conv():
    @program()
    def prog(x):
        return mb.matmul(x=x, y=weight(L, 32)), mb.linear(x=x, weight=weight(32, L))
    return prog, None


def trigger_large_transpose():
    @program(tensor((1, 2048, 1, 1152)))
    def prog(x):
        return mb.transpose(x=x, perm=[0, 3, 2, 1])
    return prog, None


def trigger_batch_one():
    @program(tensor((2, C, 1, L)))
    def prog(x):
        return mb.relu(x=x)
    return prog, None


def trigger_dilated_conv():
    @program()
    def prog(x):
        return mb.conv(x=x, weight=weight(C, C, 1, 3), dilations=[1, 2], pad_type="same")
    return prog, None


def trigger_sram_cliff():
    @program(tensor((1, 16384, 1, 1088)))
    def prog(x):
        return mb.relu(x=x)
    return prog, None


def trigger_exact_gelu():
    @program()
    def prog(x):
        return mb.gelu(x=x, mode="EXACT")
    return prog, None


def trigger_concat():
    @program()
    def prog(x):
        return mb.concat(values=[x, x], axis=1)
    return prog, None


def trigger_baked_weights():
    @program(tensor((1, C, 1, L)), tensor((C, C, 1, 1)))
    def prog(x, w):
        return mb.conv(x=x, weight=w)
    return prog, None


def trigger_slice_cliff():
    """A width-offset slice of the residual stream (as the windowed layout cuts tiles along S), measured on inputs
    whose |values| reach 2/3 of the pre-A16 slice cliff: times the headroom gate they can pass it."""
    from experiments.ane_engineering.package.mil.load import LoadedProgram
    from experiments.ane_engineering.run.mil.cliffs import AneCliffs
    from experiments.ane_engineering.run.mil.headroom import measure_headroom

    @program()
    def prog(x):
        return mb.slice_by_index(x=mb.add(x=x, y=x), begin=[0, 0, 0, 16], end=[1, C, 1, L], name="tile")

    cliff = AneCliffs("pre-a16").by_class["width-offset-slice"].value
    x = np.zeros((1, C, 1, L), np.float16)
    x[0, 3, 0, 20] = cliff / 3  # the added stream holds 2/3 of the cliff (past the gate, short of the cliff)
    headroom = measure_headroom(LoadedProgram.built(prog, OPSET.name, path="<trigger>"), [{"x": x}], "pre-a16")
    return prog, None, {"headroom": headroom.to_json()}


TRIGGERS = {
    "ANE-R01-rank": trigger_rank,
    "ANE-R02-bc1s-form": trigger_bc1s_form,
    "ANE-R03-dimension-limit": trigger_dimension_limit,
    "ANE-R04-symbolic-shape": trigger_symbolic,
    "ANE-R05-range-input": lambda: converted("range"),
    "ANE-R06-enumerated-input": lambda: converted("enumerated"),
    "ANE-R07-gather": trigger_gather,
    "ANE-R08-sdpa": trigger_sdpa,
    "ANE-R09-op-allowlist": trigger_allowlist,
    "ANE-R10-recurrent": trigger_recurrent,
    "ANE-R11-dynamic-shape-op": trigger_dynamic_op,
    "ANE-R12-fp16-compute": trigger_non_fp16,
    "ANE-R13-cast": trigger_cast,
    "ANE-R14-fp32-io": trigger_fp32_io,
    "ANE-R15-non-finite-constant": trigger_non_finite_constant,
    "ANE-R16-fp16-range-constant": trigger_fp16_range_constant,
    "ANE-R17-last-axis-padding": trigger_last_axis_padding,
    "ANE-R18-einsum-form": trigger_einsum_form,
    "ANE-R19-softmax-axis": trigger_softmax_axis,
    "ANE-R20-dense-as-conv": trigger_dense_as_conv,
    "ANE-R21-large-transpose": trigger_large_transpose,
    "ANE-R22-batch-one": trigger_batch_one,
    "ANE-R23-dilated-conv": trigger_dilated_conv,
    "ANE-R24-sram-cliff": trigger_sram_cliff,
    "ANE-R25-exact-gelu": trigger_exact_gelu,
    "ANE-R26-concat": trigger_concat,
    "ANE-R27-baked-weights": trigger_baked_weights,
    "ANE-R32-slice-cliff": trigger_slice_cliff,
}

APPLICABLE = [rule for rule in CATALOGUE if rule.applicable]
NOT_APPLICABLE = [rule for rule in CATALOGUE if not rule.applicable]


CONVERTED_TRIGGERS = {"ANE-R05-range-input", "ANE-R06-enumerated-input"}  # torch blocks converted by coremltools


def _report_for(shape, body=lambda x: mb.relu(x=x), dtype=types.fp16):
    @program(tensor(shape, dtype))
    def prog(x):
        return body(x)
    return check_program(prog)
