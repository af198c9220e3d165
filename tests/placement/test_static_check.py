"""The ANE rule catalogue and the static placement check.

Every rule that can find something has a small MIL program that triggers it (TRIGGERS), and one compliant BC1S
program triggers none, so no check is vacuous. Two integrations: the BC1S body of builtin:tiny has zero violations;
an original-layout (B, L, C) torch model with SDPA has many.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import get_new_symbol, types  # noqa: E402
from torch import nn  # noqa: E402

from experiments.ane_engineering.package.mil.errors import ProgramLoadError  # noqa: E402
from experiments.ane_engineering.package.mil.load import load_program  # noqa: E402
from experiments.ane_engineering.placement.rules import (  # noqa: E402
    ANE_OP_ALLOWLIST,
    CATALOGUE,
    CATALOGUE_BY_ID,
    ORION_STATUSES,
    SEVERITIES,
    Orion,
    Rule,
)
from experiments.ane_engineering.placement.static_check import (  # noqa: E402
    LABEL,
    check_program,
    require_ane_gate,
)

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


@pytest.fixture(scope="module")
def compliant_report():
    prog, spec = compliant()
    return check_program(prog, spec)


# ----------------------------------------------------------------------------------------------------------------
# The catalogue itself.
# ----------------------------------------------------------------------------------------------------------------
def test_catalogue_shape():
    assert len(CATALOGUE) >= 20
    ids = [rule.id for rule in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert CATALOGUE_BY_ID.keys() == set(ids)
    for rule in CATALOGUE:
        assert rule.id.startswith("ANE-R") and rule.statement.strip() and rule.source.strip(), rule.id
        assert (rule.severity in SEVERITIES) == rule.applicable == (rule.check is not None), rule.id
        if rule.orion is not None:
            assert rule.orion.status in ORION_STATUSES and rule.orion.reason.strip(), rule.id
            assert "Orion" in rule.source, rule.id
    # The Orion constraints (SRC_ORION) are all catalogued, applicable or not.
    orion = {rule.id: rule.orion.status for rule in CATALOGUE if rule.orion}
    assert {"ANE-R24-sram-cliff", "ANE-R25-exact-gelu", "ANE-R26-concat", "ANE-R28-io-alphabetical",
            "ANE-R29-min-surface", "ANE-R30-uniform-outputs", "ANE-R31-compile-budget",
            "ANE-R27-baked-weights", "ANE-R20-dense-as-conv"} <= orion.keys()
    assert orion["ANE-R25-exact-gelu"] == "warned" and CATALOGUE_BY_ID["ANE-R25-exact-gelu"].severity == "warning"
    assert CATALOGUE_BY_ID["ANE-R26-concat"].severity == "warning"
    assert {"conv", "einsum", "layer_norm", "softmax", "gelu", "relu", "add", "sub", "mul", "slice_by_index",
            "transpose"} <= ANE_OP_ALLOWLIST


def test_every_applicable_rule_has_a_trigger():
    assert set(TRIGGERS) == {rule.id for rule in APPLICABLE}


CONVERTED_TRIGGERS = {"ANE-R05-range-input", "ANE-R06-enumerated-input"}  # torch blocks converted by coremltools


@pytest.mark.parametrize("rule", [pytest.param(rule, marks=pytest.mark.slow) if rule.id in CONVERTED_TRIGGERS else rule
                                  for rule in APPLICABLE], ids=lambda r: r.id)
def test_rule_fires_on_its_trigger(rule):
    prog, spec, *measured = TRIGGERS[rule.id]()  # a rule that needs a measurement gets one (numerics.py)
    report = check_program(prog, spec, measured=measured[0] if measured else None)
    found = findings_of(report, rule.id)
    assert found, f"{rule.id} did not fire; findings: {report['findings_by_rule']}"
    assert all(f["severity"] == rule.severity for f in found)
    json.dumps(report)
    if rule.severity == "error":
        assert report["violations"] >= len(found)


@pytest.mark.parametrize("rule", CATALOGUE, ids=lambda r: r.id)
def test_rule_silent_on_compliant_program(rule, compliant_report):
    assert not findings_of(compliant_report, rule.id)


def test_compliant_program_report(compliant_report):
    report = compliant_report
    assert report["label"] == LABEL
    assert report["violations"] == 0 and report["warnings"] == 0 and report["findings"] == []
    assert report["predicted_off_ane"] == [] and report["predicted_ane_fraction"] == 1.0
    assert report["ops"]["non_constant"] > 10 and report["ops"]["constant"] > 5
    assert len(report["rules"]) == len(CATALOGUE)
    json.dumps(report)
    assert require_ane_gate(report, set()) == (True, [])


def test_documented_only_rules_are_listed_but_not_checked(compliant_report):
    """Not-applicable Orion constraints stay in the catalogue as documentation: no check, no severity, never counted."""
    assert NOT_APPLICABLE
    listed = {rule["id"]: rule for rule in compliant_report["rules"]}
    for rule in NOT_APPLICABLE:
        assert rule.check is None and rule.severity is None and listed[rule.id]["severity"] is None
        assert rule.orion.reason.strip()
    with pytest.raises(ValueError):
        Rule("ANE-R99-x", "x", "Orion", "error", Orion("not applicable", "why"), None)


# ----------------------------------------------------------------------------------------------------------------
# Boundaries: the rules fire exactly where they say.
# ----------------------------------------------------------------------------------------------------------------
def _report_for(shape, body=lambda x: mb.relu(x=x), dtype=types.fp16):
    @program(tensor(shape, dtype))
    def prog(x):
        return body(x)
    return check_program(prog)


def test_padding_boundary():
    assert not findings_of(_report_for((1, C, 1, 16)), "ANE-R17-last-axis-padding")   # 32 B of 64: half, not more
    assert findings_of(_report_for((1, C, 1, 15)), "ANE-R17-last-axis-padding")
    assert not findings_of(_report_for((1, C, 1, 8), dtype=types.fp32), "ANE-R17-last-axis-padding")


def test_dimension_and_sram_boundaries():
    assert not findings_of(_report_for((1, 4, 1, 16384)), "ANE-R03-dimension-limit")
    assert not findings_of(_report_for((1, 16384, 1, 1024)), "ANE-R24-sram-cliff")    # exactly 32 MiB
    assert findings_of(_report_for((1, 16384, 1, 1025)), "ANE-R24-sram-cliff")


def test_softmax_negative_channel_axis_is_fine():
    report = _report_for((1, L, 1, L), body=lambda x: mb.softmax(x=x, axis=-3))
    assert not findings_of(report, "ANE-R19-softmax-axis")


def test_einsum_with_several_heads_per_contraction():
    @program(tensor((1, C, 2, L)), tensor((1, L, 2, 32)))
    def prog(x, y):
        return mb.einsum(values=(x, y), equation="nchw,nwhu->nchu")
    report = check_program(prog)
    assert findings_of(report, "ANE-R18-einsum-form")


def test_boundary_casts_are_the_interface_rule_not_in_graph_work():
    report = check_program(trigger_fp32_io()[0])
    assert findings_of(report, "ANE-R14-fp32-io")
    for rule_id in ("ANE-R13-cast", "ANE-R12-fp16-compute"):
        assert not findings_of(report, rule_id)
    cast_report = check_program(trigger_cast()[0])
    assert len(findings_of(cast_report, "ANE-R13-cast")) == 2


def test_computed_reshape_shape_is_dynamic():
    @program(tensor((1, C, 1, L)), tensor((4,), types.int32))
    def prog(x, shape):
        return mb.reshape(x=x, shape=shape)
    assert findings_of(check_program(prog), "ANE-R11-dynamic-shape-op")


def test_finite_mask_constant_is_fine():
    @program()
    def prog(x):
        return mb.add(x=x, y=np.full((1, 1, 1, L), -1e4, dtype=np.float16))
    report = check_program(prog)
    assert not findings_of(report, "ANE-R15-non-finite-constant")
    assert not findings_of(report, "ANE-R16-fp16-range-constant")


@pytest.mark.slow
def test_enumerated_symbols_explained_by_the_spec():
    prog, spec = converted("enumerated")
    with_spec = check_program(prog, spec)
    assert findings_of(with_spec, "ANE-R06-enumerated-input") and not findings_of(with_spec, "ANE-R04-symbolic-shape")
    assert with_spec["violations"] == 0
    without_spec = check_program(prog)  # the symbols are unexplained: dynamic shapes
    assert findings_of(without_spec, "ANE-R04-symbolic-shape")
    ranged = check_program(*converted("range"))
    assert findings_of(ranged, "ANE-R04-symbolic-shape") and findings_of(ranged, "ANE-R05-range-input")


def test_gate_and_allow_list():
    report = check_program(trigger_sdpa()[0])
    assert report["predicted_off_ane"] and report["predicted_ane_fraction"] == 0.0
    passed, reasons = require_ane_gate(report, set())
    assert not passed and "scaled_dot_product_attention" in reasons[0] and "ANE-R08-sdpa" in reasons[0]
    assert require_ane_gate(report, {"scaled_dot_product_attention"}) == (True, [])


@pytest.mark.slow
def test_load_program_round_trip(tmp_path):
    model = convert_block("fixed")
    package = tmp_path / "block.mlpackage"
    model.save(str(package))
    program = load_program(package)
    loaded = check_program(program.program, program.spec)
    direct = check_program(model._mil_program, model.get_spec())
    assert loaded["findings"] == direct["findings"] == []
    assert loaded["ops"] == direct["ops"]
    assert loaded["spec_checked"]
    with pytest.raises(ProgramLoadError, match="no model package"):
        load_program(tmp_path / "missing.mlpackage")


# ----------------------------------------------------------------------------------------------------------------
# Integration: the real exports.
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_bc1s_body_has_no_violations():
    from conversion_support import convert_tiny_body
    from experiments.ane_engineering.checkpoint import load_checkpoint

    _, model = convert_tiny_body(load_checkpoint("builtin:tiny"), 96, OPSET)
    report = check_program(model._mil_program, model.get_spec())
    assert report["violations"] == 0, [f for f in report["findings"] if f["severity"] == "error"][:5]
    assert report["predicted_off_ane"] == [] and report["predicted_ane_fraction"] == 1.0
    # The expected warnings: mmBERT's exact erf GELU, once per GeGLU layer, and every concat -- the heads before Wo
    # and the key-bias channel of full-attention heads (both Orion direct-ANE constraints, "warned" for Core ML) --
    # and the last-axis padding of the key bias (1, L, 1, 1) itself (L rows of 64 B, 6 KB at L96; the encoder's and
    # the head's identical slices of global_mask become one op in conversion); nothing else.
    assert set(report["findings_by_rule"]) == {"ANE-R25-exact-gelu", "ANE-R26-concat", "ANE-R17-last-axis-padding"}
    assert report["findings_by_rule"]["ANE-R25-exact-gelu"] == report["ops"]["by_type"]["gelu"]
    assert report["findings_by_rule"]["ANE-R26-concat"] == report["ops"]["by_type"]["concat"]
    padding = [f for f in report["findings"] if f["rule"] == "ANE-R17-last-axis-padding"]
    assert len(padding) == 1 and all(f["op_type"] == "slice_by_index" and "last axis 1 x" in f["detail"]
                                     for f in padding), padding
    assert set(report["ops"]["by_type"]) <= ANE_OP_ALLOWLIST
    assert require_ane_gate(report, set()) == (True, [])


class OriginalLayoutBlock(nn.Module):
    """An original-layout (B, L, C) attention block: nn.Linear, (B, H, L, D) heads, matmul and SDPA."""

    def __init__(self, channels: int = 64, heads: int = 2, length: int = 16):
        super().__init__()
        self.shape = (1, length, channels)
        self.heads = heads
        self.norm = nn.LayerNorm(channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)

    def forward(self, x):
        b, length, channels = self.shape  # fixed: shape arithmetic on traced sizes does not convert here
        d = channels // self.heads
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, length, self.heads, d).transpose(1, 2) for t in (q, k, v))
        explicit = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1) @ v
        fused = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        y = (explicit + fused).transpose(1, 2).reshape(b, length, channels)
        return x + torch.nn.functional.gelu(self.out(y))


@pytest.mark.slow
def test_original_layout_model_has_violations():
    module = OriginalLayoutBlock().eval()
    model = ct.convert(torch.jit.trace(module, torch.zeros(1, 16, 64)),
                       inputs=[ct.TensorType(name="x", shape=(1, 16, 64), dtype=np.float16)],
                       convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                       minimum_deployment_target=OPSET, skip_model_load=True)
    report = check_program(model._mil_program, model.get_spec())
    by_rule = report["findings_by_rule"]
    assert report["violations"] > 10
    for rule_id in ("ANE-R02-bc1s-form", "ANE-R08-sdpa", "ANE-R19-softmax-axis", "ANE-R20-dense-as-conv"):
        assert by_rule.get(rule_id), (rule_id, by_rule)
    assert any("rank 3" in f["detail"] for f in findings_of(report, "ANE-R02-bc1s-form"))
    assert report["predicted_ane_fraction"] < 0.5
    passed, reasons = require_ane_gate(report, set())
    assert not passed and reasons


def test_the_slice_cliff_rule_reads_the_measurement_and_is_not_a_placement_prediction():
    from experiments.ane_engineering.placement.static_check import program_errors

    prog, spec, measured = trigger_slice_cliff()
    report = check_program(prog, spec, measured=measured)
    (found,) = findings_of(report, "ANE-R32-slice-cliff")
    assert found["op"] == "tile" and "tile" not in report["predicted_off_ane"]
    assert found in program_errors(report)  # it fails the probe as a program error
    assert not findings_of(check_program(prog, spec), "ANE-R32-slice-cliff")  # nothing measured: nothing found
    small = json.loads(json.dumps(measured))
    for entry in small["headroom"]["width_offset_slices"]:
        entry["input_max_abs"] = entry["cliff_value"] / 4  # at the gate's margin and below: silent
    assert not findings_of(check_program(prog, spec, measured=small), "ANE-R32-slice-cliff")


@pytest.mark.slow
def test_windowed_slices_of_the_stress_source_read_projections_not_the_stream(tmp_path):
    """The windowed layout cuts K/V windows at nonzero offsets along S (pre-A16 width-offset slices); on the stress
    source at the published magnitude (tiny-outlier: the massive activation in the residual stream) they read the
    normalised projections, so the measured slice inputs stay far inside the slice cliff and ANE-R32 is silent,
    while the op facing the massive activation is the projection that writes it."""
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.core.gates import HEADROOM_MIN
    from experiments.ane_engineering.workflows.probe_run import run_probe

    checkpoint = load_checkpoint("builtin:tiny-outlier")
    magnitude = checkpoint.raw_config["massive_activation"]["magnitude"]
    report = run_probe(checkpoint, "body", 96, tmp_path / "windowed", show_progress=False, attention="windowed")
    headroom = report["headroom"]
    slices = headroom["width_offset_slices"]
    assert slices and all(s["input_max_abs"] * HEADROOM_MIN <= s["cliff_value"] for s in slices)
    assert not findings_of(report["placement"]["static"], "ANE-R32-slice-cliff")
    assert headroom["minimum"]["cliff"] == "matmul_output" and headroom["minimum"]["max_abs"] >= 0.99 * magnitude
    assert max(s["input_max_abs"] for s in slices) * 100 < magnitude
