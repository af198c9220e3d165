"""The static placement check (placement/static_check.py) over the whole rule catalogue; the rules' own tests are
in tests/placement/rules/test_<module>.py.

Every rule that can find something has a small MIL program that triggers it (TRIGGERS), and one compliant BC1S
program triggers none, so no check is vacuous. Two integrations: the BC1S body of builtin:tiny has zero violations;
an original-layout (B, L, C) torch model with SDPA has many.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from experiments.ane_engineering.package.mil.errors import ProgramLoadError  # noqa: E402
from experiments.ane_engineering.package.mil.load import load_program  # noqa: E402
from experiments.ane_engineering.placement.rules import ANE_OP_ALLOWLIST, CATALOGUE  # noqa: E402
from experiments.ane_engineering.placement.static_check import LABEL, check_program, require_ane_gate  # noqa: E402
from static_check_support import (  # noqa: E402
    APPLICABLE,
    CONVERTED_TRIGGERS,
    OPSET,
    TRIGGERS,
    compliant,
    convert_block,
    findings_of,
    trigger_sdpa,
)


@pytest.fixture(scope="module")
def compliant_report():
    prog, spec = compliant()
    return check_program(prog, spec)


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
