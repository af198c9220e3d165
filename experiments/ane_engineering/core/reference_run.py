"""The reference run this harness reproduces: facts from outside the project, in core/reference_run.json (their one
home).

The run was measured on the project's user's Mac and reported to the project; nothing here is measured by the
harness. `load()` reads the file (checked against SCHEMA); `citation()` names its source wherever a figure of it
is shown.
"""

from __future__ import annotations

from pathlib import Path

from .json_documents import (
    NON_EMPTY_STRING,
    NON_NEGATIVE_INTEGER,
    POSITIVE_INTEGER,
    POSITIVE_NUMBER,
    array_of,
    closed_object,
    open_object,
    read_json,
)

PATH = Path(__file__).resolve().parent / "reference_run.json"
_WHAT = {"what": NON_EMPTY_STRING}
SCHEMA = open_object({
    "provenance": closed_object({"reported_by": NON_EMPTY_STRING, "date": NON_EMPTY_STRING,
                                 "citation": NON_EMPTY_STRING}),
    "machine": closed_object({"chip": NON_EMPTY_STRING, "os": NON_EMPTY_STRING}),
    "software": {"type": "object", "minProperties": 1, "additionalProperties": NON_EMPTY_STRING},
    "model": open_object({"encoder": {"type": "object", "additionalProperties": POSITIVE_INTEGER},
                          "head": {"type": "object", "additionalProperties": POSITIVE_INTEGER}}),
    "timings": open_object({
        "measurements": array_of(closed_object(
            {"id": NON_EMPTY_STRING, "length": POSITIVE_INTEGER, "scope": {"enum": ["body", "full_path"]},
             "p50_ms": POSITIVE_NUMBER, **_WHAT},
            {"p95_ms": POSITIVE_NUMBER, "warmup": NON_NEGATIVE_INTEGER, "calls": POSITIVE_INTEGER}), 1),
        "mlx": closed_object({"p50_ms": POSITIVE_NUMBER, **_WHAT}),
    }),
    "placement": open_object({
        "compute_units": NON_EMPTY_STRING,
        "bxlxc_export": open_object({"assigned_ops": POSITIVE_INTEGER, "on_cpu": POSITIVE_INTEGER, **_WHAT}),
        "bc1s_export": open_object({"non_constant_ops": POSITIVE_INTEGER, "on_ane": POSITIVE_INTEGER, **_WHAT}),
    }),
    "layout_check": closed_object({"max_abs": POSITIVE_NUMBER, **_WHAT}),
})


def load() -> dict:
    """core/reference_run.json, checked (a fresh copy: callers may keep or change it)."""
    return read_json(PATH, SCHEMA)


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
