"""Rules on which op types may appear: the allow-list, and the families predicted off the ANE by a rule of their
own (gather/scatter, fused attention, recurrent layers)."""

from __future__ import annotations

from collections.abc import Iterable

from .context import CheckContext, finding
from .op_sets import (
    ANE_OP_ALLOWLIST,
    GATHER_OPS,
    OWNED_BY_SPECIFIC_RULES,
    RECURRENT_OPS,
)
from .registry import Finding, rule
from .sources import SRC_CT_RNN, SRC_HOLLANCE_UNSUPPORTED, SRC_ML_ANE, SRC_REFERENCE_RUN


def _ops_of_types(ctx: CheckContext, rule_id: str, op_types: Iterable[str], detail: str) -> list[Finding]:
    wanted = frozenset(op_types)
    return [finding(rule_id, op, detail.format(op_type=op.op_type))
            for op in ctx.non_constant_ops if op.op_type in wanted]


@rule("ANE-R07-gather",
      statement="No gather/scatter indexing inside the graph (look rows up on the host, or contract a one-hot "
                "selector).",
      source=f"{SRC_HOLLANCE_UNSUPPORTED} (gather listed as not working on the ANE)",
      severity="error")
def check_gather(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return _ops_of_types(ctx, rule_id, GATHER_OPS, "{op_type}: indexed read/write inside the graph")


@rule("ANE-R08-sdpa",
      statement="No fused scaled_dot_product_attention op; attention is split into per-head einsums.",
      source=f"{SRC_REFERENCE_RUN} (the export with SDPA put every op on the CPU); {SRC_ML_ANE} (per-head einsum "
             "attention)",
      severity="error")
def check_sdpa(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return _ops_of_types(ctx, rule_id, {"scaled_dot_product_attention"},
                         "fused scaled_dot_product_attention (split heads into per-head einsums instead)")


@rule("ANE-R09-op-allowlist",
      statement="Every non-constant op type is in ANE_OP_ALLOWLIST.",
      source=f"{SRC_REFERENCE_RUN} (op types of the all-ANE BC1S plan); {SRC_ML_ANE}; {SRC_HOLLANCE_UNSUPPORTED}",
      severity="error",
      note="A conservative prediction: an op type outside the list is predicted off the ANE until a Core ML "
           "compute plan shows otherwise. Types owned by a more specific error rule are reported there.")
def check_allowlist(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [finding(rule_id, op, f"op type {op.op_type!r} is not in ANE_OP_ALLOWLIST")
            for op in ctx.non_constant_ops
            if op.op_type not in ANE_OP_ALLOWLIST and op.op_type not in OWNED_BY_SPECIFIC_RULES]


@rule("ANE-R10-recurrent",
      statement="No recurrent layers (lstm, gru, rnn).",
      source=f"{SRC_CT_RNN}; {SRC_HOLLANCE_UNSUPPORTED}",
      severity="error")
def check_recurrent(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return _ops_of_types(ctx, rule_id, RECURRENT_OPS, "recurrent layer {op_type}")
