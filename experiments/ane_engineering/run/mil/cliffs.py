"""The Neural Engine's published numeric cliffs: which MIL ops face which cliff, and what the `ane` mode does to them.

The cliff values, the chip families each was measured on and their sources live in ane_cliffs.json (one entry per
cliff); nothing here types a value. This module decides, from each op's MIL semantics (coremltools' op definitions,
iOS15..iOS18), which op class an op belongs to:

matmul-class (cliff `matmul_output`): ops whose output is an accumulated matrix product --
    matmul, linear (x @ W^T + b), conv (every output is a dot product over Cin x kernel taps; a 1x1 conv is a matmul,
    which is how the BC1S exports write their projections), conv_transpose (a conv of the dilated input), einsum
    (the contractions coremltools accepts are batched matmuls) and scaled_dot_product_attention (iOS18; it lowers to
    matmul -> softmax -> matmul, and only its output, the second product, is seen here: the scores inside it are not,
    so an overflow of the scores alone is missed -- the harness's exports do not use this op).
    Ops that contain products but whose output is not one (gru, lstm, rnn: their outputs pass tanh/sigmoid; a
    reduce_sum_square) are not matmul-class. The cliff is applied to the op's output, bias included: it is the
    output path the source measured ("the relevant quantity is the accumulated output").
width-offset-slice (cliff `width_offset_slice`, pre-A16 only): ops that copy out a window of their input that begins
    at a nonzero offset on the last axis (the width axis of the Neural Engine's layout, the sequence axis S of the
    BC1S layout (B, C, 1, S)) --
    slice_by_index with a nonzero effective start on the last axis (begin after begin_mask and negative-index
    normalisation; a squeezed last axis counts at its index; a negative stride starts at a nonzero index unless the
    axis has length 1), slice_by_size with a nonzero begin on the last axis, split along the last axis (every
    output but the first begins at a nonzero offset), and crop with a nonzero left crop (crop_width[0]).
    Other data movement (gather, sliding_windows, concat, transpose) is not in the source and not classed.
reduce-sum (cliff `integer_reduce_sum`): reduce_sum. It is a precision cliff, not an overflow: the total is rounded
    to the FP16 grid. In an FP16 program every reduce_sum output is stored in FP16 by every mode, so the cliff changes
    no value there and the `ane` mode only records where it fired (an integer total above the value that the stored
    FP16 output does not equal); a float32 output is rounded to the FP16 grid in `ane` mode. Which way the device
    rounds a tie (the source saw 2049 read back as 2050, not round-to-nearest-even's 2048) is not modelled.

Every other float output faces the IEEE FP16 limit (numpy's finfo(float16).max), which storage already enforces.

A magnitude cliff fires on an output value whose magnitude exceeds the cliff's value; the value becomes +/-inf with
its sign (NaN stays NaN). `AneCliffs.apply` is what `MILExecutor(mode="ane")` runs after every run-time op.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...core.errors import HarnessError
from ...core.json_documents import NON_EMPTY_STRING, STRING, array_of, closed_object, open_object, read_json
from .ops.common import as_axis, as_bools, as_int, as_ints

CLIFFS_PATH = Path(__file__).resolve().parent / "ane_cliffs.json"
FAMILIES = ("pre-a16", "a16")
DEFAULT_FAMILY = "pre-a16"  # the stricter: every published cliff applies
FP16_MAX = float(np.finfo(np.float16).max)

MATMUL_CLASS = "matmul-class"
WIDTH_OFFSET_SLICE = "width-offset-slice"
REDUCE_SUM = "reduce-sum"
FP16_LIMIT = "fp16-max"  # the IEEE limit every other float output faces

MATMUL_CLASS_OPS = frozenset({"matmul", "linear", "conv", "conv_transpose", "einsum", "scaled_dot_product_attention"})
SLICE_OPS = frozenset({"slice_by_index", "slice_by_size", "split", "crop"})

_CLIFF = open_object({"value": {"type": "number", "exclusiveMinimum": 0},
                      "op_class": {"enum": [MATMUL_CLASS, WIDTH_OFFSET_SLICE, REDUCE_SUM]},
                      "effect": {"enum": ["inf", "round-to-fp16"]},
                      "families": array_of({"enum": list(FAMILIES)}, 1),
                      "absent_on": array_of({"enum": list(FAMILIES)}),
                      "measured_on": array_of(NON_EMPTY_STRING, 1),
                      "source": open_object({"repository": NON_EMPTY_STRING, "path": NON_EMPTY_STRING,
                                             "url": NON_EMPTY_STRING, "statement": NON_EMPTY_STRING})})
SCHEMA = open_object({"format": {"const": "ane-engineering/ane-cliffs/1"}, "about": STRING,
                      "families": closed_object({f: open_object({"measured_on": array_of(STRING, 1)})
                                                 for f in FAMILIES}),
                      "cliffs": {"type": "object", "minProperties": 1, "additionalProperties": _CLIFF}})


class CliffError(HarnessError):
    """An unknown chip family or a cliff table that does not say what this module needs."""


@lru_cache(maxsize=4)
def load_cliffs(path: str = str(CLIFFS_PATH)) -> dict:
    """ane_cliffs.json, checked against SCHEMA; every op class must have exactly one cliff."""
    table = read_json(Path(path), SCHEMA)
    classes = [c["op_class"] for c in table["cliffs"].values()]
    for op_class in (MATMUL_CLASS, WIDTH_OFFSET_SLICE, REDUCE_SUM):
        if classes.count(op_class) != 1:
            raise CliffError(f"{path}: {classes.count(op_class)} cliffs of op class {op_class!r}, expected one")
    return table


def check_family(family: str) -> str:
    if family not in FAMILIES:
        raise CliffError(f"unknown Neural Engine family {family!r}; choose one of {', '.join(FAMILIES)}")
    return family


@dataclass(frozen=True)
class Cliff:
    name: str  # the entry's key in ane_cliffs.json, or FP16_LIMIT
    op_class: str
    value: float
    effect: str

    def to_json(self) -> dict:
        return {"cliff": self.name, "op_class": self.op_class, "value": self.value, "effect": self.effect}


FP16_CLIFF = Cliff(FP16_LIMIT, FP16_LIMIT, FP16_MAX, "inf")


# ----------------------------------------------------------------------------------------------- op semantics

def _slice_start(begin: int, mask: bool, stride: int, dim: int) -> int:
    if mask:
        return 0 if stride > 0 else dim - 1
    start = begin + dim if begin < 0 else begin
    return min(max(start, 0), dim - 1 if stride < 0 else dim)


def width_offset_outputs(op_type: str, args: dict) -> list[int]:
    """Indices of the op's outputs that are width-offset slices of its input (see the module docstring)."""
    if op_type not in SLICE_OPS or "x" not in args:
        return []
    x = args["x"]
    shape = np.shape(x)
    if not shape:
        return []
    rank, dim = len(shape), shape[-1]
    if op_type == "slice_by_index":
        begin = as_ints(args["begin"])
        stride = as_ints(args["stride"]) if args.get("stride") is not None else [1] * rank
        squeeze = as_bools(args.get("squeeze_mask"), rank)[-1]
        mask = as_bools(args.get("begin_mask"), rank)[-1] and not squeeze
        start = _slice_start(begin[-1], mask, 1 if squeeze else stride[-1], dim)
        return [0] if start != 0 else []
    if op_type == "slice_by_size":
        start = as_ints(args["begin"])[-1]
        return [0] if (start + dim if start < 0 else start) != 0 else []
    if op_type == "crop":
        return [0] if as_ints(args["crop_width"])[0] != 0 else []
    # split
    if as_axis(args["axis"], rank) != rank - 1:
        return []
    n = len(as_ints(args["split_sizes"])) if args.get("split_sizes") is not None else as_int(args["num_splits"])
    return list(range(1, n))


class AneCliffs:
    """The cliffs of one chip family, read from ane_cliffs.json."""

    def __init__(self, family: str = DEFAULT_FAMILY, path: Path | str = CLIFFS_PATH):
        self.family = check_family(family)
        table = load_cliffs(str(path))
        self.by_class: dict[str, Cliff] = {}
        for name, entry in table["cliffs"].items():
            if family in entry["families"]:
                self.by_class[entry["op_class"]] = Cliff(name, entry["op_class"], float(entry["value"]),
                                                         entry["effect"])
        self.source = str(path)
        self.first: dict | None = None  # the first op where a cliff fired in the current run
        self.fired: dict[str, int] = {}

    def describe(self) -> dict:
        return {"ane_family": self.family, "cliffs": {c.name: c.to_json() for c in self.by_class.values()},
                "cliff_table": Path(self.source).name}

    def reset(self) -> None:
        self.first, self.fired = None, {}

    def faced(self, op_type: str, args: dict, n_outputs: int) -> list[Cliff]:
        """The magnitude cliff each output faces: matmul-class, width-offset slice (if this family has it), else
        FP16."""
        out = [FP16_CLIFF] * n_outputs
        if op_type in MATMUL_CLASS_OPS and MATMUL_CLASS in self.by_class:
            out = [self.by_class[MATMUL_CLASS]] * n_outputs
        if WIDTH_OFFSET_SLICE in self.by_class:
            for i in width_offset_outputs(op_type, args):
                if i < n_outputs:
                    out[i] = self.by_class[WIDTH_OFFSET_SLICE]
        return out

    def _record(self, node, cliff: Cliff, output: int, value: float, count: int) -> None:
        self.fired[cliff.name] = self.fired.get(cliff.name, 0) + count
        if self.first is None:
            self.first = {"op": node.name, "type": node.op_type, "output": node.output_names[output],
                          "cliff": cliff.name, "cliff_value": cliff.value, "value": value, "count": count,
                          "block": node.block or None}

    def apply(self, node, args: dict, values: list) -> list:
        """The op's outputs as the family's Neural Engine would leave them; records where a cliff fired."""
        out = list(values)
        for i, cliff in enumerate(self.faced(node.op_type, args, len(values))):
            value = out[i]
            if cliff is FP16_CLIFF or not isinstance(value, np.ndarray) or value.dtype.kind != "f" or not value.size:
                continue
            over = np.abs(value) > cliff.value  # NaN compares False: stays NaN
            if over.any():
                first = float(value[over].reshape(-1)[0])
                out[i] = np.where(over, np.copysign(np.inf, value), value).astype(value.dtype)
                self._record(node, cliff, i, first, int(over.sum()))
        if node.op_type == "reduce_sum" and REDUCE_SUM in self.by_class:
            out[0] = self._reduce_sum(node, args, out[0])
        return out

    def _reduce_sum(self, node, args, value):
        cliff = self.by_class[REDUCE_SUM]
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or not value.size:
            return value
        if value.dtype != np.float16:
            value = value.astype(np.float16).astype(value.dtype)  # the Neural Engine's total is an FP16 value
        x = np.asarray(args["x"], dtype=np.float64)
        axes = args.get("axes")
        axes = None if axes is None else tuple(as_ints(axes))
        exact = np.sum(x, axis=axes, keepdims=bool(args.get("keep_dims", False))).reshape(value.shape)
        wrong = (np.abs(exact) > cliff.value) & (exact == np.round(exact)) & (value.astype(np.float64) != exact)
        if wrong.any():
            self._record(node, cliff, 0, float(exact[wrong].reshape(-1)[0]), int(wrong.sum()))
        return value
