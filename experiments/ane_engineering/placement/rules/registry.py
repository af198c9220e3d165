"""The rule registry: what a rule is (`Rule`, `Orion`, `Finding`) and the decorator that registers one.

A rule is registered where its check is written, with everything the catalogue records about it:

    @rule("ANE-R01-rank", statement="No non-constant tensor of rank above 4.", source=SRC_APPLE_ARTICLE,
          severity="error")
    def check_rank(ctx, rule_id):
        return [finding(rule_id, t, "...") for t in ctx.non_constant_tensors() if len(t.shape) > 4]

The check takes the `CheckContext` (context.py) and the rule's own id, and returns `Finding`s. A catalogued
constraint that no Core ML package can violate is registered by `documented(...)`: no check, no severity.

Severity:
    "error"   the op is predicted to run off the Neural Engine, or the program violates a rule it must keep
              (e.g. a non-finite constant). Error findings on non-constant ops make up the predicted-off list.
    "warning" a performance or numerical hazard that is not expected to move the op off the ANE.

`orion` is None for rules that do not come from the Orion direct-ANE constraint catalogue. For the Orion
constraints it says whether the constraint applies to a Core ML package:
    "enforced"        checked here, with error severity,
    "warned"          checked here, with warning severity (Core ML itself copes, the hazard remains),
    "not applicable"  documented only: kept in the catalogue so the Orion list is complete, with no check and no
                      severity (a Core ML package cannot violate it; `reason` says why).

`placement=False` marks a rule whose errors are about the values the program computes on the Neural Engine, not about
where an op runs (numerics.py): its error findings fail the probe as program errors and never enter the
predicted-off-ANE list.

Ids are "ANE-R<two digits>-<slug>"; the catalogue lists rules by number, whichever module registered them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

SEVERITIES = ("error", "warning")
ORION_STATUSES = ("enforced", "warned", "not applicable")
RULE_ID = re.compile(r"ANE-R(\d{2})-[a-z0-9]+(-[a-z0-9]+)*")


@dataclass(frozen=True)
class Orion:
    """How an Orion direct-ANE constraint relates to Core ML packages."""

    status: str
    reason: str

    def __post_init__(self):
        if self.status not in ORION_STATUSES:
            raise ValueError(f"orion status {self.status!r} not in {ORION_STATUSES}")

    def to_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class Finding:
    rule: str
    op: str
    op_type: str
    detail: str

    def to_dict(self) -> dict:
        return {"rule": self.rule, "op": self.op, "op_type": self.op_type, "detail": self.detail}


@dataclass(frozen=True)
class Rule:
    id: str
    statement: str
    source: str
    severity: str | None  # None: documented only (no check runs)
    orion: Orion | None
    check: Callable[..., list] | None = field(compare=False, repr=False)  # check(ctx) -> [Finding]
    note: str = ""
    placement: bool = True  # False: an error is a wrong value on the device, not an op predicted off it

    def __post_init__(self):
        if not RULE_ID.fullmatch(self.id):
            raise ValueError(f"rule id {self.id!r} is not of the form ANE-R<two digits>-<slug>")
        if not (self.statement.strip() and self.source.strip()):
            raise ValueError(f"{self.id}: a rule states what it asks and the public source it rests on")
        if self.applicable != (self.check is not None) or self.applicable != (self.severity is not None):
            raise ValueError(f"{self.id}: an applicable rule has a check and a severity; a documented-only "
                             "(not applicable) rule has neither")
        if self.severity is not None and self.severity not in SEVERITIES:
            raise ValueError(f"{self.id}: severity {self.severity!r} not in {SEVERITIES}")

    @property
    def number(self) -> int:
        return int(RULE_ID.fullmatch(self.id).group(1))

    @property
    def applicable(self) -> bool:
        return self.orion is None or self.orion.status != "not applicable"

    def to_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "source": self.source, "severity": self.severity,
                "orion": self.orion.to_dict() if self.orion else None, "note": self.note,
                **({} if self.placement else {"placement": False})}


RULES: dict[str, Rule] = {}  # id -> Rule, filled by the check modules as they are imported


def _add(new: Rule) -> Rule:
    clash = [r.id for r in RULES.values() if r.id == new.id or r.number == new.number]
    if clash:
        raise ValueError(f"rule {new.id!r} clashes with the registered {clash[0]!r} (ids and numbers are unique)")
    RULES[new.id] = new
    return new


def rule(rule_id: str, *, statement: str, source: str, severity: str, orion: Orion | None = None, note: str = "",
         placement: bool = True):
    """Decorator: register `check(ctx, rule_id) -> [Finding]` as rule `rule_id`; returns the check unchanged."""
    def deco(check: Callable) -> Callable:
        _add(Rule(rule_id, statement, source, severity, orion, functools.partial(check, rule_id=rule_id), note,
                  placement))
        return check
    return deco


def documented(rule_id: str, *, statement: str, source: str, orion: Orion) -> Rule:
    """Register a catalogued constraint that does not apply to Core ML packages: no check, no severity."""
    return _add(Rule(rule_id, statement, source, None, orion, None))


def catalogue() -> tuple[Rule, ...]:
    """Every registered rule, by number."""
    return tuple(sorted(RULES.values(), key=lambda r: r.number))
