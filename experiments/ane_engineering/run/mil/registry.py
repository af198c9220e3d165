"""The op registry: one `OpDef` per MIL op type, filled by the family modules under ops/ through `register`.

A handler is `handler(node, args, num) -> array | tuple[array, ...]`:

    node  OpNode: the op's name, type, position, declared output shapes/dtypes and a per-op `cache` dict
    args  {input name: value}: numpy arrays for tensors (fp16 as stored), lists of arrays for tuple inputs
          (einsum/concat `values`), str for string consts; optional inputs that were not given are absent
    num   numerics.Numerics: the precision mode and its arithmetic helpers

A handler returns its result in the mode's compute dtype; the executor then stores it in the op's declared
dtype (np.float16 for FP16 programs), which is the one rounding of an op's output. Handlers on the hot path
(binary arithmetic, conv, matmul, linear, einsum, softmax, gelu) may return that rounded fp16 result themselves
from fused kernels; the values are the same as "compute in the mode's dtype, then round".

`prepare(node, const_args, num)`, if registered, runs once at load for an op that has non-constant inputs (e.g.
conv converts its constant weight to a float32 matrix once and keeps it in `node.cache`).

Semantics follow coremltools' op definitions (coremltools/converters/mil/mil/ops/defs/iOS15..iOS18): inputs,
defaults (PyMIL's loader materialises every default as a const input, so `args` always holds them), broadcasting
and, where an op has one, its `value_inference`/`decompress` formula. A registration states the opsets whose
definition of the op the handler implements: all of OPSETS by default, a range (`since="iOS16"`, `until=...`,
both inclusive) for an op coremltools defines from a later opset on, or an explicit `opsets=` tuple. The executor
refuses an op outside its handler's opsets, and docs/EXECUTOR_OPS.md (op_table.py) is rendered from these ranges.

    from ..registry import register

    @register("relu6")
    def op_relu6(node, args, num):
        return np.minimum(np.maximum(num.f(args["x"]), num.c(0)), num.c(6))

    @register("fill_like", since="iOS16")
    def op_fill_like(node, args, num): ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core.errors import HarnessError

OPSETS = ("iOS15", "iOS16", "iOS17", "iOS18")
CONSTEXPR_PREFIX = "constexpr_"  # ops that must have constant inputs only; evaluated once at load

Handler = Callable[["OpNode", dict, Any], Any]
Prepare = Callable[["OpNode", dict, Any], None]


class UnsupportedOpError(HarnessError):
    """An op type (or an op configuration) this executor has no handler for."""


@dataclass
class OpNode:
    index: int  # position of the op in the function's op list (const ops counted)
    name: str
    op_type: str
    function: str
    output_names: list[str]
    output_shapes: list[tuple[int, ...] | None]
    output_dtypes: list[np.dtype]
    cache: dict = field(default_factory=dict)
    block: str = ""  # "block 1 of 'while_loop_0'" for an op inside a nested block
    blocks: list = field(default_factory=list)  # cond / while_loop: run_block(input values) -> output values

    def where(self) -> str:
        inside = f" ({self.block})" if self.block else ""
        return f"op #{self.index} {self.name!r} of type {self.op_type!r}{inside} in function {self.function}"


@dataclass(frozen=True)
class OpDef:
    op_type: str
    handler: Handler
    prepare: Prepare | None = None
    opsets: tuple[str, ...] = OPSETS
    family: str = ""  # the module under ops/ that registered it


OPS: dict[str, OpDef] = {}


def opset_range(opsets: tuple[str, ...] | None = None, since: str | None = None,
                until: str | None = None) -> tuple[str, ...]:
    """The opsets a registration covers: `opsets` as given, or OPSETS from `since` to `until` (inclusive; either
    end open), or every opset. Refuses unknown names, an empty or reversed range and a mix of both forms."""
    if opsets is not None and (since is not None or until is not None):
        raise ValueError("give either opsets=(...) or a since/until range, not both")
    unknown = sorted({o for o in (opsets or ()) if o not in OPSETS}
                     | {o for o in (since, until) if o and o not in OPSETS})
    if unknown:
        raise ValueError(f"unknown opsets {unknown}; choose from {OPSETS}")
    if opsets is not None:
        covered = tuple(o for o in OPSETS if o in opsets)
    else:
        first = OPSETS.index(since) if since else 0
        last = OPSETS.index(until) if until else len(OPSETS) - 1
        covered = OPSETS[first:last + 1]
    if not covered:
        raise ValueError(f"the registration covers no opset (opsets={opsets}, since={since}, until={until})")
    return covered


def _takes_three(function: Callable, what: str) -> None:
    try:
        inspect.signature(function).bind(None, None, None)
    except TypeError as error:
        raise ValueError(f"{what} {getattr(function, '__name__', function)!r} must take (node, "
                         f"args, num): {error}") from None


def register(*op_types: str, prepare: Prepare | None = None, opsets: tuple[str, ...] | None = None,
             since: str | None = None, until: str | None = None):
    """Decorator: `handler` runs the op types given, at the opsets `opset_range` makes of `opsets` / `since` /
    `until`; `prepare`, if any, runs once at load. An op type registered twice is an error (two families claiming
    one op would otherwise depend on import order); nothing is registered when any check fails."""
    covered = opset_range(opsets, since, until)
    if not op_types:
        raise ValueError("register() needs at least one MIL op type")
    if prepare is not None:
        _takes_three(prepare, "prepare")

    def deco(handler: Handler) -> Handler:
        _takes_three(handler, "handler")
        family = handler.__module__.rsplit(".", 1)[-1]
        for op_type in op_types:
            if op_type in OPS:
                raise ValueError(f"MIL op {op_type!r} is registered twice ({OPS[op_type].family} and {family})")
        for op_type in op_types:
            OPS[op_type] = OpDef(op_type, handler, prepare, covered, family)
        return handler
    return deco


def supported_op_types() -> list[str]:
    return sorted(OPS)
