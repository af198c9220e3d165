"""Rules on shapes decided at run time: symbolic dimensions, ranged and enumerated inputs, shape-computing ops."""

from __future__ import annotations

from .context import CheckContext, finding, shape_str
from .op_sets import DYNAMIC_SHAPE_OPS, SHAPE_ARGUMENTS
from .registry import Finding, rule
from .sources import SRC_CT_FLEX, SRC_FORUM_RANGE, SRC_REFERENCE_RUN


@rule("ANE-R04-symbolic-shape",
      statement="No non-constant tensor with a symbolic (run-time) dimension.",
      source=SRC_FORUM_RANGE,
      severity="error",
      note="When the spec is given and every flexible input is enumerated, the symbols are explained by the "
           "enumeration and ANE-R06 reports them instead.")
def check_symbolic(ctx: CheckContext, rule_id: str) -> list[Finding]:
    flexible = ctx.flexible_inputs()
    if flexible and all(kind == "enumerated" for _, kind, _ in flexible):
        # The spec says where the symbols come from: enumerated inputs, specialised per shape by Core ML and
        # reported by the enumerated-shapes rule. Without a spec the symbols are unexplained and count as dynamic.
        return []
    return [finding(rule_id, t, f"tensor {shape_str(t.shape)} has symbolic dimensions")
            for t in ctx.non_constant_tensors() if t.symbolic]


@rule("ANE-R05-range-input",
      statement="No model input with a shape range (ct.RangeDim / unbounded dims).",
      source=f"{SRC_FORUM_RANGE}; {SRC_CT_FLEX}",
      severity="error")
def check_range_inputs(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [Finding(rule_id, name, "input", detail) for name, kind, detail in ctx.flexible_inputs() if kind == "range"]


@rule("ANE-R06-enumerated-input",
      statement="Model inputs have one fixed shape; enumerated shapes are a hazard (fixed buckets are exported "
                "instead).",
      source=f"{SRC_CT_FLEX}; {SRC_FORUM_RANGE}; {SRC_REFERENCE_RUN} (the enumerated-shape B x L x C export ran on "
             "the CPU)",
      severity="warning",
      note="Apple says each enumerated shape can run on the ANE, so this is a warning; the reference run's "
           "enumerated export also had SDPA, rank-5 tensors and a gather, which the error rules catch.")
def check_enumerated_inputs(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [Finding(rule_id, name, "input", detail)
            for name, kind, detail in ctx.flexible_inputs() if kind == "enumerated"]


@rule("ANE-R11-dynamic-shape-op",
      statement="No op whose output shape or control flow is decided at run time (shape, range_1d, fill_like, "
                "while_loop, cond, reshape/slice/tile/pad with computed shape arguments, ...).",
      source=SRC_FORUM_RANGE,
      severity="error")
def check_dynamic_ops(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for op in ctx.non_constant_ops:
        if op.op_type in DYNAMIC_SHAPE_OPS:
            found.append(finding(rule_id, op, f"{op.op_type}: output shape or control flow decided at run time"))
            continue
        for argument in SHAPE_ARGUMENTS.get(op.op_type, ()):
            var = op.inputs.get(argument)
            if var is not None and not ctx.is_constant_var(var):
                found.append(finding(rule_id, op, f"{op.op_type}: '{argument}' is computed at run time"))
                break
    return found
