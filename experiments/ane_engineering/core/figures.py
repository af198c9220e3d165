"""How a field of a JSON document is printed in a report: one formatting for every report that prints figures.

A figure is named by its JSON path -- a tuple of object keys and list indices, e.g. ("runs", 0, "convert_seconds")
-- and printed with a format, one of
    a Python format spec       ".3f", ".1f", "d", ".4g", "" (str(value)), ...
    "len"                      the number of items of a list or object
    "num<d>"                   d decimals, or d significant digits for a non-zero magnitude below 1e-3 ("num5")
    "/GB:<spec>", "/GiB:<spec>" a byte count in GB (1e9 bytes) or GiB (2**30 bytes), then <spec>
A missing value (None) prints as "-" whatever the format.

`Document` prints the fields of one parsed JSON document; the report renderer's ledger (evidence/ledger.py) is a
`Document` that also records every figure it prints, so a check can re-read each one from its file.
"""

from __future__ import annotations

from typing import Any

UNITS = {"GB": 1e9, "GiB": float(2 ** 30)}


def value_at(document: Any, path: tuple) -> Any:
    """The value at `path` in a parsed JSON document (KeyError / IndexError if there is none)."""
    value = document
    for key in path:
        value = value[key]
    return value


def format_value(value: Any, fmt: str) -> str:
    """`value` printed with `fmt` (see the module docstring)."""
    if value is None:
        return "-"
    if fmt == "len":
        return str(len(value))
    if fmt.startswith("num"):
        digits = int(fmt[3:])
        if isinstance(value, int):
            return str(value)
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"
    if fmt.startswith("/"):
        unit, _, spec = fmt[1:].partition(":")
        return format(value / UNITS[unit], spec)
    return format(value, fmt)


class Document:
    """One parsed JSON document whose fields a report prints: `fig(*path, fmt=...)` is the printed text."""

    def __init__(self, data: Any):
        self.data = data

    def value(self, *path) -> Any:
        return value_at(self.data, path)

    def fig(self, *path, fmt: str = "") -> str:
        return format_value(self.value(*path), fmt)
