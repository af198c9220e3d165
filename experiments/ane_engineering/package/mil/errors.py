"""The errors of the MIL module: one line each, naming the package and what is wrong."""

from __future__ import annotations

from ...core.errors import HarnessError


class ProgramLoadError(HarnessError):
    """A package that cannot be read back as an ML program: damaged, inconsistent, or leading outside itself."""


class SymbolicShapeError(HarnessError):
    """A var whose shape is not fixed where a fixed shape is needed."""
