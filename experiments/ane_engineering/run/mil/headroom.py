"""Headroom: how far every op's output stays below the cliff that op faces on the Neural Engine, measured.

    report = measure_headroom(package_or_program_or_executor, [inputs, ...], ane_family="pre-a16")
    report.minimum            # OpHeadroom of the tightest op (name, type, output, cliff, max |value|, headroom)
    report.tightest(10)       # the ten tightest
    report.to_json()          # what probe.json, the validation report and the evidence record

For each run-time op output of float type (constants and folded ops excluded: no device computes them), the largest
|value| over every given input set, as the mil executor stores it (fp32-accumulate arithmetic, FP16 storage, the
cliffs NOT applied, so each op sees the values it would get if no earlier cliff had fired). The cliff it faces
(cliffs.py `AneCliffs.faced`): the matmul cliff for matmul-class outputs, the width-offset slice cliff for such
slices on pre-A16, the IEEE FP16 limit (finfo(float16).max) for every other output. headroom = cliff / max |value|:
below 1 the cliff fires on these inputs, and a headroom of h means every value of that op may grow h-fold before it
does. An op whose values are all zero has unbounded headroom (null in JSON); a non-finite value gives headroom 0.
An op run several times (inside a loop) counts its largest value over every run.
A width-offset slice (pre-A16) also records the largest |value| of its whole input (`input_max_abs`): the static
rule ANE-R30 (placement/rules/numerics.py) reads it from `width_offset_slices` of the report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cliffs import DEFAULT_FAMILY, FP16_LIMIT, WIDTH_OFFSET_SLICE, AneCliffs
from .numerics import FP32_ACCUMULATE

TIGHTEST = 10  # how many of the tightest ops a report lists


@dataclass
class OpHeadroom:
    op: str
    type: str
    output: str
    cliff: str
    cliff_value: float
    max_abs: float
    block: str = ""
    input_max_abs: float | None = None  # width-offset slices: the largest |value| of the sliced input

    @property
    def headroom(self) -> float:
        if not math.isfinite(self.max_abs):
            return 0.0
        return math.inf if self.max_abs == 0 else self.cliff_value / self.max_abs

    def to_json(self) -> dict:
        h = self.headroom
        return {"op": self.op, "type": self.type, "output": self.output, "cliff": self.cliff,
                "cliff_value": self.cliff_value, "max_abs": self.max_abs if math.isfinite(self.max_abs) else None,
                "non_finite": not math.isfinite(self.max_abs),
                "headroom": None if math.isinf(h) else h, **({"block": self.block} if self.block else {}),
                **({} if self.input_max_abs is None else {"input_max_abs": _finite_or_none(self.input_max_abs)})}


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _peak(value: np.ndarray) -> float:
    peak = float(np.max(np.abs(value)))  # inf for an inf, nan for a nan
    return math.inf if math.isnan(peak) else peak


class HeadroomTracker:
    """An `inspect` hook for MILExecutor.run: keeps, per op output, the largest |value| seen and the cliff it faces."""

    def __init__(self, ane_family: str = DEFAULT_FAMILY):
        self.cliffs = AneCliffs(ane_family)
        self.entries: dict[tuple[str, str, int], OpHeadroom] = {}
        self.runs = 0

    def __call__(self, node, args: dict, values: list) -> None:
        faced = self.cliffs.faced(node.op_type, args, len(values))
        sliced = None
        for i, (value, cliff) in enumerate(zip(values, faced)):
            if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or not value.size:
                continue
            peak = _peak(value)
            if cliff.op_class == WIDTH_OFFSET_SLICE and sliced is None:
                sliced = _peak(np.asarray(args["x"]))
            key = (node.block, node.name, i)
            entry = self.entries.get(key)
            if entry is None:
                entry = self.entries[key] = OpHeadroom(node.name, node.op_type, node.output_names[i], cliff.name,
                                                       cliff.value, peak, node.block)
            elif peak > entry.max_abs:
                entry.max_abs = peak
            if cliff.op_class == WIDTH_OFFSET_SLICE:
                entry.input_max_abs = max(entry.input_max_abs or 0.0, sliced)

    def report(self, executor_mode: str) -> HeadroomReport:
        return HeadroomReport(self.cliffs.family, self.runs, sorted(self.entries.values(), key=lambda e: e.headroom),
                              executor_mode)


@dataclass
class HeadroomReport:
    ane_family: str
    inputs_measured: int
    ops: list[OpHeadroom]  # tightest first
    executor_mode: str = FP32_ACCUMULATE

    @property
    def minimum(self) -> OpHeadroom | None:
        return self.ops[0] if self.ops else None

    def tightest(self, n: int = TIGHTEST) -> list[OpHeadroom]:
        return self.ops[:n]

    def by_cliff(self) -> dict[str, dict]:
        """For each cliff some op faces: how many ops face it and the tightest of them."""
        out: dict[str, dict] = {}
        for entry in self.ops:  # tightest first, so the first seen per cliff is its minimum
            slot = out.setdefault(entry.cliff, {"ops": 0, "minimum": entry.to_json()})
            slot["ops"] += 1
        return out

    def to_json(self, top: int = TIGHTEST) -> dict:
        minimum = self.minimum
        return {
            "ane_family": self.ane_family,
            "measured_with": f"mil executor, mode {self.executor_mode}, cliffs not applied",
            "inputs_measured": self.inputs_measured,
            "ops_measured": len(self.ops),
            "minimum_headroom": None if minimum is None or math.isinf(minimum.headroom) else minimum.headroom,
            "minimum": None if minimum is None else minimum.to_json(),
            "tightest": [e.to_json() for e in self.tightest(top)],
            "by_cliff": self.by_cliff(),
            "width_offset_slices": [e.to_json() for e in self.ops if e.input_max_abs is not None],
            "definition": "headroom = cliff / max |output| over the inputs; cliffs: "
                          f"{FP16_LIMIT} for every float output unless it is matmul-class or (pre-A16) a width-offset "
                          "slice (run/mil/cliffs.py, run/mil/ane_cliffs.json)",
        }


def _executor(subject):
    from .executor import MILExecutor

    if isinstance(subject, MILExecutor):
        return subject
    from ...package.mil.load import LoadedProgram

    if isinstance(subject, (LoadedProgram, str, Path)):
        from .tool import package_path

        return MILExecutor(subject if isinstance(subject, LoadedProgram) else package_path(Path(subject)),
                           mode=FP32_ACCUMULATE)
    raise TypeError("measure_headroom takes a package path, a LoadedProgram or a MILExecutor, not "
                    f"{type(subject).__name__}")


def measure_headroom(subject, inputs_list: Iterable[dict], ane_family: str = DEFAULT_FAMILY) -> HeadroomReport:
    """Run `subject` (package path, LoadedProgram or MILExecutor; a path or program runs in fp32-accumulate) on each
    input set, cliffs off, and report every op's headroom against the cliffs of `ane_family`."""
    executor = _executor(subject)
    tracker = HeadroomTracker(ane_family)
    for inputs in inputs_list:
        executor.run(inputs, inspect=tracker, apply_cliffs=False)
        tracker.runs += 1
    return tracker.report(executor.mode)
