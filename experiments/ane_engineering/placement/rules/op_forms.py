"""Rules on the form of ops the ANE runs: native einsums, softmax axis, dense layers as 1x1 convs, dilation, the
GELU form, concat and weights baked at compile time."""

from __future__ import annotations

import numpy as np

from .context import CheckContext, const_arg, finding, is_symbolic_dim, shape_str
from .registry import Finding, Orion, rule
from .sources import (
    SRC_APPLE_ARTICLE,
    SRC_CT_2536,
    SRC_CT_EINSUM,
    SRC_EINSUM_MEASURED,
    SRC_HOLLANCE_UNSUPPORTED,
    SRC_ML_ANE,
    SRC_ORION,
    SRC_REFERENCE_RUN,
)

# The two per-head contractions of the BC1S attention. The converter swaps torch's operands into MIL's native
# pattern: torch "bchq,bkhc->bkhq" (QK) becomes MIL "bkhc,bchq->bkhq", torch "bkhq,bchk->bchq" (AV and the marker
# read-out) becomes MIL "bchk,bkhq->bchq". Both are "nchw,nwhu->nchu" up to letter names.
NATIVE_EINSUM_PATTERN = "abcd,adce->abce"


def _normalise_equation(equation: str) -> str:
    letters: dict[str, str] = {}
    out = []
    for char in equation.replace(" ", ""):
        if char.isalpha():
            letters.setdefault(char, "abcdefghijklmnopqrstuvwxyz"[len(letters)])
            out.append(letters[char])
        else:
            out.append(char)
    return "".join(out)


@rule("ANE-R18-einsum-form",
      statement="einsum is the native rank-4 per-head contraction ('nchw,nwhu->nchu' up to letters, with dim 2 = 1).",
      source=f"{SRC_ML_ANE} ('bchq,bkhc->bkhq' and 'bkhq,bchk->bchq'); {SRC_CT_EINSUM}; {SRC_EINSUM_MEASURED}",
      severity="warning",
      note="The converter writes torch's 'bchq,bkhc->bkhq' as MIL 'bkhc,bchq->bkhq' (operands swapped).")
def check_einsum_form(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type != "einsum":
            continue
        equation = str(const_arg(op, "equation"))
        values = op.inputs.get("values") or ()
        shapes = [tuple(v.shape) for v in values]
        if _normalise_equation(equation) != NATIVE_EINSUM_PATTERN:
            found.append(finding(rule_id, op, f"equation {equation!r} is not the rank-4 per-head form "
                                              f"(MIL 'bkhc,bchq->bkhq' / 'bchk,bkhq->bchq')"))
        elif any(len(s) != 4 or is_symbolic_dim(s[2]) or int(s[2]) != 1 for s in shapes):
            found.append(finding(rule_id, op, f"equation {equation!r} on {[shape_str(s) for s in shapes]}: "
                                              f"more than one head per contraction (dim 2 != 1)"))
    return found


@rule("ANE-R19-softmax-axis",
      statement="softmax runs over axis 1 (the channel axis of (B, C, 1, S), i.e. the key axis of (1, L, 1, L) "
                "scores).",
      source=f"{SRC_ML_ANE} (softmax(dim=1)); {SRC_REFERENCE_RUN}",
      severity="warning")
def check_softmax_axis(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type != "softmax":
            continue
        axis = const_arg(op, "axis")
        rank = len(op.inputs["x"].shape)
        axis = -1 if axis is None else int(axis)
        if axis < 0:
            axis += rank
        if axis != 1:
            found.append(finding(rule_id, op, f"softmax over axis {axis} of {shape_str(op.inputs['x'].shape)}"))
    return found


@rule("ANE-R20-dense-as-conv",
      statement="Dense layers with constant weights are 1x1 convs, not matmul/linear.",
      source=f"{SRC_APPLE_ARTICLE} (nn.Linear -> nn.Conv2d); {SRC_ORION} (1x1 conv about 3x faster than matmul)",
      severity="warning",
      orion=Orion("warned", "Core ML runs matmul/linear on the ANE, but a 1x1 conv is the faster ANE path; "
                            "warned, not enforced."))
def check_dense_matmul(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type == "linear":
            weight = op.inputs.get("weight")
            found.append(finding(rule_id, op, f"linear with weight {shape_str(weight.shape)}: use a 1x1 conv"))
        elif op.op_type == "matmul":
            constant = [name for name in ("x", "y") if ctx.is_constant_var(op.inputs[name])]
            if constant:
                shape = op.inputs[constant[0]].shape
                found.append(finding(rule_id, op, f"matmul with constant '{constant[0]}' {shape_str(shape)}: "
                                                  f"use a 1x1 conv"))
    return found


@rule("ANE-R23-dilated-conv",
      statement="No dilated convolutions.",
      source=f"{SRC_HOLLANCE_UNSUPPORTED} (dilated convolutions listed as not working; the page says some entries "
             "are guesses)",
      severity="warning",
      note="A warning because the source marks its list as partly guessed and dated.")
def check_dilated_conv(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type in ("conv", "conv_transpose"):
            dilations = const_arg(op, "dilations")
            if dilations is not None and any(int(d) != 1 for d in np.ravel(dilations)):
                found.append(finding(rule_id, op, f"{op.op_type} with dilations {list(np.ravel(dilations))}"))
    return found


@rule("ANE-R25-exact-gelu",
      statement="gelu uses the tanh approximation (direct ANE programs have no exact erf GELU).",
      source=SRC_ORION + " (exact GELU not available; tanh approximation)",
      severity="warning",
      orion=Orion("warned", "Core ML runs gelu(mode=EXACT) (the reference run's all-ANE plan has it); only a "
                            "direct-ANE program needs the tanh form, which would change the numbers."),
      note="Expected on this model: mmBERT's GeGLU uses exact erf GELU and the export keeps it.")
def check_exact_gelu(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type == "gelu":
            mode = const_arg(op, "mode") or "EXACT"
            if str(mode) == "EXACT":
                found.append(finding(rule_id, op, "gelu mode EXACT (erf)"))
    return found


@rule("ANE-R26-concat",
      statement="No concat (direct ANE programs have none).",
      source=SRC_ORION + " (no concat in direct programs)",
      severity="warning",
      orion=Orion("warned", "Core ML supports concat on the ANE; it matters only for a direct-ANE port and "
                            "costs a copy."))
def check_concat(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [finding(rule_id, op, f"concat of {len(op.inputs.get('values') or ())} tensors")
            for op in ctx.non_constant_ops if op.op_type == "concat"]


@rule("ANE-R27-baked-weights",
      statement="conv/linear weights are compile-time constants (the ANE bakes weights at compile time).",
      source=f"{SRC_ORION} (weights baked at compile time; LoRA adapters passed as inputs instead); {SRC_CT_2536}",
      severity="warning",
      orion=Orion("warned", "A Core ML package bakes its const weights into the compiled program; a weight "
                            "computed at run time may still compile but risks leaving the ANE."))
def check_runtime_weights(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type in ("conv", "conv_transpose", "linear"):
            weight = op.inputs.get("weight")
            if weight is not None and not ctx.is_constant_var(weight):
                found.append(finding(rule_id, op,
                                     f"{op.op_type} weight {shape_str(weight.shape)} is computed at run time"))
    return found
