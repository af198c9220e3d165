"""Command-line values checked where they enter: argparse `type=` functions that refuse, in one `error:` line naming
the flag, what no command could use: a value that is not a number, below its minimum, above the bound its reason
gives (core/limits.py holds the bounds), and lists with an empty or repeated item (`1,,2`, `q,q`), which would
otherwise be silently dropped or counted twice.

They raise a UsageError, which core/cli.py run_main prints as one line with exit status 2 (argparse's own errors
print a usage block first).
"""

from __future__ import annotations

import math

from .cli import UsageError


class ArgumentValueError(UsageError):
    """A command-line value refused where it enters."""


def integer(flag: str, minimum: int | None = None, maximum: int | None = None, why: str = ""):
    """An argparse type: a decimal integer in [minimum, maximum]; `why` says where the maximum comes from."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise ArgumentValueError(f"{flag} must be an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise ArgumentValueError(f"{flag} must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ArgumentValueError(f"{flag} must be <= {maximum}" + (f" ({why})" if why else "") + f", got {value}")
        return value

    parse.__name__ = flag
    return parse


def positive_float(flag: str):
    """An argparse type: a finite number > 0."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ArgumentValueError(f"{flag} must be a number, got {text!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise ArgumentValueError(f"{flag} must be a positive finite number, got {text!r}")
        return value

    parse.__name__ = flag
    return parse


def comma_list(flag: str, item=str, choices=None):
    """An argparse type: comma-separated items, none empty, none repeated, each `item(text)` (a type function such
    as `integer(...)`, or str), each in `choices` when given."""
    def parse(text: str) -> list:
        parts = [part.strip() for part in text.split(",")]
        if not any(parts):
            raise ArgumentValueError(f"{flag} is empty; give comma-separated values")
        if not all(parts):
            raise ArgumentValueError(f"{flag} {text!r} has an empty item; give comma-separated values without gaps")
        values = [item(part) for part in parts]
        if choices is not None:
            unknown = [v for v in values if v not in choices]
            if unknown:
                raise ArgumentValueError(f"{flag}: {unknown[0]!r} is not one of {', '.join(map(str, choices))}")
        repeated = sorted({v for v in values if values.count(v) > 1}, key=values.index)
        if repeated:
            raise ArgumentValueError(f"{flag} {text!r} repeats {repeated[0]!r}; give each value once")
        return values

    parse.__name__ = flag
    return parse


def refuse_unused(args, unused: dict[str, str]) -> None:
    """Refuse flags that were given but do nothing in the chosen mode: {attribute: why it is unused}. A flag counts
    as given when its value is not None (such flags default to None)."""
    for attribute, why in unused.items():
        if getattr(args, attribute) not in (None, False):
            flag = "--" + attribute.replace("_", "-")
            raise ArgumentValueError(f"{flag} is not used {why}; leave it out")
