"""The op-form rules (placement/rules/op_forms.py): softmax on the channel axis written as -3 is fine, an einsum
with several heads per contraction is not the supported form."""

from __future__ import annotations

from experiments.ane_engineering.placement.static_check import check_program
from static_check_support import C, L, _report_for, findings_of, mb, program, tensor


def test_softmax_negative_channel_axis_is_fine():
    report = _report_for((1, L, 1, L), body=lambda x: mb.softmax(x=x, axis=-3))
    assert not findings_of(report, "ANE-R19-softmax-axis")


def test_einsum_with_several_heads_per_contraction():
    @program(tensor((1, C, 2, L)), tensor((1, L, 2, 32)))
    def prog(x, y):
        return mb.einsum(values=(x, y), equation="nchw,nwhu->nchu")
    report = check_program(prog)
    assert findings_of(report, "ANE-R18-einsum-form")
