"""Rules on number formats: fp16 compute, casts, the fp16 interface, and constants that fp16 cannot hold."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .context import CheckContext, const_arg, finding, mil_types, shape_str, tensor_info
from .registry import Finding, Orion, rule
from .sources import (
    SRC_CAST_MEASURED,
    SRC_CT_1984,
    SRC_CT_TYPED,
    SRC_HOLLANCE_16BIT,
    SRC_ML_ANE,
    SRC_ORION,
    SRC_REFERENCE_RUN,
)

FP16_MAX = 65504.0  # the largest finite IEEE 754 binary16 value


@rule("ANE-R12-fp16-compute",
      statement="Every non-constant op computes in fp16 (no fp32, integer or bool outputs).",
      source=f"{SRC_CT_TYPED}; {SRC_HOLLANCE_16BIT}",
      severity="error",
      note="Boundary casts of an fp32 interface are left to ANE-R14-fp32-io.")
def check_non_fp16(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [finding(rule_id, t, f"output {shape_str(t.shape)} is {t.dtype}")
            for t in ctx.non_constant_tensors(include_boundary_casts=False)
            if t.op_type != "input" and t.dtype != "fp16"]


@rule("ANE-R13-cast",
      statement="No cast inside the graph.",
      source=f"{SRC_CT_TYPED}; {SRC_CAST_MEASURED}",
      severity="error",
      note="A cast that reads a model input or writes a model output is the host-side conversion of an fp32 "
           "interface, reported by ANE-R14-fp32-io.")
def check_cast(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type == "cast" and not ctx.is_boundary_cast(op):
            x = op.inputs.get("x")
            source = tensor_info(x)[1] if x is not None and tensor_info(x) else "?"
            found.append(finding(rule_id, op, f"in-graph cast {source} -> {const_arg(op, 'dtype')}"))
    return found


@rule("ANE-R14-fp32-io",
      statement="Model inputs and outputs are fp16 (an fp32 interface costs a conversion on every call).",
      source=f"{SRC_CT_TYPED}; {SRC_CT_1984}",
      severity="warning")
def check_fp32_io(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for name, var in ctx.inputs.items():
        info = tensor_info(var)
        if info and info[1] != "fp16":
            found.append(Finding(rule_id, name, "input", f"model input {shape_str(info[0])} is {info[1]}"))
    for var in ctx.outputs:
        info = tensor_info(var)
        if info and info[1] != "fp16":
            found.append(Finding(rule_id, var.name, "output", f"model output {shape_str(info[0])} is {info[1]}"))
    return found


def _float_constants(ctx: CheckContext) -> Iterator[tuple[Any, np.ndarray]]:
    types = mil_types()
    for op, var in ctx.constant_outputs():
        info = tensor_info(var)
        if not info or not types.is_float(var.dtype):
            continue
        value = var.val
        if value is None:
            continue
        yield op, np.asarray(value)


@rule("ANE-R15-non-finite-constant",
      statement="No non-finite constant (inf/nan); masks use a finite additive bias such as -1e4.",
      source=f"{SRC_ML_ANE} (masks use -1e4); {SRC_REFERENCE_RUN} (finite additive bias of -1e4); {SRC_ORION} "
             "(FP16 hygiene: sanitise NaN/Inf)",
      severity="error",
      orion=Orion("enforced", "Statically checkable in a Core ML package: a -inf mask makes fully masked rows "
                              "NaN (-inf - -inf) in fp16 softmax."),
      note="Not a placement rule: the op stays on the ANE, the result becomes NaN.")
def check_non_finite_constants(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op, value in _float_constants(ctx):
        bad = ~np.isfinite(value)
        if bad.any():
            sample = value[bad].ravel()[:3].tolist()
            found.append(finding(rule_id, op, f"constant {shape_str(value.shape)} has {int(bad.sum())} non-finite "
                                              f"value(s), e.g. {sample}"))
    return found


@rule("ANE-R16-fp16-range-constant",
      statement=f"Float constants fit fp16 (|x| <= {FP16_MAX:g}).",
      source=f"{SRC_HOLLANCE_16BIT}; {SRC_ORION} (FP16 hygiene)",
      severity="error",
      orion=Orion("enforced", "Statically checkable: on the fp16 ANE such a constant becomes inf."),
      note="Not a placement rule: the value overflows to inf.")
def check_fp16_range_constants(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op, value in _float_constants(ctx):
        finite = value[np.isfinite(value)]
        if finite.size and float(np.abs(finite).max()) > FP16_MAX:
            found.append(finding(rule_id, op, f"constant {shape_str(value.shape)} reaches |x| = "
                                              f"{float(np.abs(finite).max()):g} > {FP16_MAX:g}"))
    return found
