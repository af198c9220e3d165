"""The reference run this harness reproduces: facts from outside the project, in reference_run.json (their one home).

The run was measured on the project's user's Mac and reported to the project; nothing here is measured by the
harness. `load()` reads the file; `citation()` names its source wherever a figure of it is shown.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).resolve().parent / "reference_run.json"


@lru_cache(maxsize=1)
def _load_text() -> str:
    return PATH.read_text(encoding="utf-8")


def load() -> dict:
    """A fresh copy of reference_run.json (callers may keep or change it without touching the next caller's)."""
    return json.loads(_load_text())


def citation(reference: dict | None = None) -> str:
    """Where the figures come from and what produced them, in one line."""
    reference = reference or load()
    machine, software = reference["machine"], reference["software"]
    tools = ", ".join(f"{name} {version}" for name, version in software.items())
    return f"{reference['provenance']['citation']}: Apple {machine['chip']}, {machine['os']}, {tools}"


def chip() -> str:
    """The chip the reference run was measured on (the chip cost-model floors are set beside)."""
    return load()["machine"]["chip"]


def measurement(measurement_id: str) -> dict:
    """One timing of the reference run by id (e.g. "L96-body")."""
    return next(m for m in load()["timings"]["measurements"] if m["id"] == measurement_id)
