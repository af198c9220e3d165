"""The layout rules (placement/rules/layout.py) fire exactly at their boundaries: last-axis padding, the dimension
limit and the SRAM cliff."""

from __future__ import annotations

from static_check_support import C, _report_for, findings_of, types


def test_padding_boundary():
    assert not findings_of(_report_for((1, C, 1, 16)), "ANE-R17-last-axis-padding")   # 32 B of 64: half, not more
    assert findings_of(_report_for((1, C, 1, 15)), "ANE-R17-last-axis-padding")
    assert not findings_of(_report_for((1, C, 1, 8), dtype=types.fp32), "ANE-R17-last-axis-padding")


def test_dimension_and_sram_boundaries():
    assert not findings_of(_report_for((1, 4, 1, 16384)), "ANE-R03-dimension-limit")
    assert not findings_of(_report_for((1, 16384, 1, 1024)), "ANE-R24-sram-cliff")    # exactly 32 MiB
    assert findings_of(_report_for((1, 16384, 1, 1025)), "ANE-R24-sram-cliff")
