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
and, where an op has one, its `value_inference`/`decompress` formula. `opsets` lists the opsets whose definition of
the op the handler implements (all four unless a family says otherwise).

    from ..registry import register

    @register("relu6", opsets=("iOS15", "iOS16", "iOS17", "iOS18"))
    def op_relu6(node, args, num):
        return np.minimum(np.maximum(num.f(args["x"]), num.c(0)), num.c(6))
"""

from __future__ import annotations

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


def register(*op_types: str, prepare: Prepare | None = None, opsets: tuple[str, ...] = OPSETS):
    """Decorator: `handler` runs the op types given; `prepare`, if any, runs once at load. An op type registered
    twice is an error (two families claiming one op would otherwise depend on import order)."""
    unknown = sorted(set(opsets) - set(OPSETS))
    if unknown:
        raise ValueError(f"unknown opsets {unknown}; choose from {OPSETS}")

    def deco(handler: Handler) -> Handler:
        family = handler.__module__.rsplit(".", 1)[-1]
        for op_type in op_types:
            if op_type in OPS:
                raise ValueError(f"MIL op {op_type!r} is registered twice ({OPS[op_type].family} and {family})")
            OPS[op_type] = OpDef(op_type, handler, prepare, tuple(opsets), family)
        return handler
    return deco


def supported_op_types() -> list[str]:
    return sorted(OPS)
