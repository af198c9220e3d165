"""The static placement check: run the rule catalogue over a PyMIL program and report a labelled prediction.

This is not Core ML's compute plan (that needs macOS; see compute_plan.py). It predicts placement from the rules
registered in rules/: a non-constant op with an error finding is predicted off the ANE. Works on Linux, from
`model._mil_program` right after ct.convert or from a saved .mlpackage loaded by the MIL module
(package/mil/load.py: `loaded.program`, `loaded.spec`).
"""

from __future__ import annotations

from collections import Counter

from ..package.mil.tensors import is_const_like
from .rules import CATALOGUE, CheckContext, Rule

LABEL = "prediction (static rules; not a Core ML compute plan)"


def check_program(program, spec=None, rules: tuple[Rule, ...] | list[Rule] = CATALOGUE,
                  measured: dict | None = None) -> dict:
    """Run `rules` over `program` ("main" function, nested blocks included); a JSON-serialisable report. `measured`
    (e.g. {"headroom": ...}) is what rules that need a measurement read (rules/context.py)."""
    ctx = CheckContext(program, spec, measured=measured)
    checked = [rule for rule in rules if rule.check is not None]  # documented-only rules have no check
    severity = {rule.id: rule.severity for rule in checked}
    placement = {rule.id for rule in checked if rule.placement}
    findings = []
    for rule in checked:
        findings.extend(rule.check(ctx))

    non_constant = {op.name: op.op_type for op in ctx.non_constant_ops}
    off: dict[str, dict] = {}
    for finding in findings:
        if severity[finding.rule] != "error" or finding.op not in non_constant or is_const_like(finding.op_type) \
                or finding.rule not in placement:
            continue
        entry = off.setdefault(finding.op, {"op": finding.op, "op_type": non_constant[finding.op], "rules": []})
        if finding.rule not in entry["rules"]:
            entry["rules"].append(finding.rule)

    errors = sum(1 for f in findings if severity[f.rule] == "error")
    warnings = len(findings) - errors
    n_ops = len(non_constant)
    return {
        "label": LABEL,
        "rules": [rule.to_dict() for rule in rules],
        "findings": [dict(f.to_dict(), severity=severity[f.rule]) for f in findings],
        "findings_by_rule": dict(sorted(Counter(f.rule for f in findings).items())),
        "violations": errors,
        "warnings": warnings,
        "ops": {"non_constant": n_ops, "constant": len(ctx.constant_ops),
                "by_type": dict(sorted(Counter(op.op_type for op in ctx.operations).items()))},
        "predicted_off_ane": list(off),
        "predicted_off_ane_ops": list(off.values()),
        "predicted_ane_fraction": (n_ops - len(off)) / n_ops if n_ops else None,
        "spec_checked": spec is not None,
        "measured": sorted(ctx.measured),
    }


def program_errors(report: dict) -> list[dict]:
    """Error findings that are not a placement prediction: the program breaks a rule it must keep (e.g. a constant
    that is not finite or does not fit FP16), whichever device runs it."""
    off = set(report.get("predicted_off_ane", []))
    return [f for f in report.get("findings", []) if f["severity"] == "error" and f["op"] not in off]


def require_ane_gate(report: dict, allow_op_types: set[str] | frozenset[str] = frozenset()) -> tuple[bool, list[str]]:
    """Fail when the static rules predict any non-constant op off the ANE, unless its type is in `allow_op_types`.

    Placement only: error findings that are not about an op's placement (e.g. a non-finite constant, a ranged
    input) count as violations in the report but do not decide this gate on their own.
    """
    allow = set(allow_op_types or ())
    offenders = [entry for entry in report.get("predicted_off_ane_ops", []) if entry["op_type"] not in allow]
    if not offenders:
        return True, []
    by_type: dict[str, dict] = {}
    for entry in offenders:
        slot = by_type.setdefault(entry["op_type"], {"count": 0, "rules": set(), "example": entry["op"]})
        slot["count"] += 1
        slot["rules"].update(entry["rules"])
    summary = ", ".join(f"{op_type} x{slot['count']} (e.g. {slot['example']}; {', '.join(sorted(slot['rules']))})"
                        for op_type, slot in sorted(by_type.items(), key=lambda kv: -kv[1]["count"]))
    return False, [f"static rules ({report.get('label', LABEL)}) predict {len(offenders)} non-constant op(s) off "
                   f"the Neural Engine: {summary}"]
