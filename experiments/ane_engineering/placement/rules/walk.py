"""The MIL op walker the rules (and the modules that read programs through them) use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def iter_operations(block) -> Iterator[Any]:
    """Every op of a PyMIL program (its main function) or block in program order, descending into nested blocks
    (cond, while_loop)."""
    operations = block.functions["main"].operations if hasattr(block, "functions") else block.operations
    for op in operations:
        yield op
        for inner in getattr(op, "blocks", None) or ():
            yield from iter_operations(inner)
