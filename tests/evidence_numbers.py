"""Check that every number printed in a rendered report appears in its evidence files (no hand-typed figures).

A printed number matches an evidence value when they agree to the precision printed (half a unit of the last
printed digit). Numbers inside code spans (hashes) and link targets are not figures and are skipped, as are digits
that are part of a word (L96, W8, p50, FP16, M3).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

NUMBER = re.compile(r"(?<![\w.\-/])(\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w.])")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


def printed_numbers(markdown: str) -> list[str]:
    text = LINK_TARGET.sub("]", CODE_SPAN.sub("", markdown))
    return NUMBER.findall(text)


def evidence_values(paths: list[Path]) -> list[float]:
    """Every number of the evidence files: numeric fields, and numbers quoted inside text fields (a citation
    such as "macOS 27.2" is printed from the evidence too)."""
    values: list[float] = []

    def walk(node):
        if isinstance(node, bool):
            return
        if isinstance(node, str):
            values.extend(float(token) for token in NUMBER.findall(node))
        elif isinstance(node, (int, float)):
            if math.isfinite(node):
                values.append(float(node))
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in paths:
        walk(json.loads(Path(path).read_text(encoding="utf-8")))
    return sorted(values)


def half_unit(token: str) -> float:
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def unmatched_numbers(markdown: str, paths: list[Path]) -> list[str]:
    import bisect

    values = evidence_values(paths)
    missing = []
    for token in printed_numbers(markdown):
        number, tolerance = float(token), half_unit(token) * (1 + 1e-9)
        index = bisect.bisect_left(values, number - tolerance)
        if index >= len(values) or values[index] > number + tolerance:
            missing.append(token)
    return missing
