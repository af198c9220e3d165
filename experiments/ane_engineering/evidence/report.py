"""What every section of a rendered report shares: the rendered text with its ledger, the link to an evidence file
(with its SHA256) and the harness that produced it. Sections print figures through the ledger (ledger.py)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .ledger import Evidence, Figure, Ledger


@dataclass(frozen=True)
class Rendered:
    text: str
    figures: list[Figure]


def link(ev: Evidence) -> str:
    """A link to the evidence file (from the ledger's root) and the start of its SHA256."""
    return f"[{ev.name}]({ev.name}) (sha256 `{hashlib.sha256(ev.path.read_bytes()).hexdigest()[:16]}`)"


def harness_label(ev: Evidence) -> str:
    harness = ev.data.get("harness") or ev.data.get("provenance", {}).get("harness") or {}
    return f"harness `{harness.get('sha256', '?')[:12]}`"


def open_if_present(ledger: Ledger, path: Path) -> Evidence | None:
    return ledger.open(path) if path.is_file() else None
