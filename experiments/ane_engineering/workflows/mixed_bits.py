"""Mixed bit widths under the gates: per-layer sensitivity on calibration inputs, then a greedy walk downwards.

1. Sensitivity: each layer alone palettized at each bit width (every other weight left FP16), validated against
   an FP32 golden of the task's committed calibration set (never a gated set): the error figure of that package
   (decisions: the larger of the calibrated and action probability errors; embeddings: the largest similarity
   error) is the layer's sensitivity at that width.
2. Walk: from every layer at 8 bits, each step lowers one layer by one width (8 -> 6 -> 4), the move with the
   least sensitivity added per byte saved, until no move is left. The first and last layers stay at 8 bits, as
   Apple's published mixed-bit recipes keep boundary layers. The order is fixed by the calibration figures alone,
   so every step is known before any is validated: they run as independent tasks.
3. Every step is its own sealed package (its manifest records the allocation), validated against the golden (and
   held-out) sets under the unchanged gates. The sweep reports the steps as the size-error frontier, passing ones
   marked, and the smallest passing package.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from .palettize_candidate import DENSE_BITS, layer_of, palettized_contents
from .sweep_executors import run_tasks

BOUNDARY_BITS = 8


def layer_units(parent: Path) -> tuple[list[str], dict[str, int]]:
    """The parent's palettizable layers in graph order, and the weight elements of each."""
    contents = palettized_contents(parent / "model.mlpackage")
    units, elements = [], {}
    for name, count in contents["weight_elements"].items():
        unit = layer_of(name)
        if unit not in elements:
            units.append(unit)
            elements[unit] = 0
        elements[unit] += count
    return units, elements


def sensitivity_figure(row: dict, task: str) -> float:
    """The error figure a layer's sensitivity is read from; a refused or non-finite candidate counts as infinite."""
    if task == "embeddings":
        value = row.get("max_similarity_error")
        return math.inf if value is None else float(value)
    values = [row.get("max_calibrated_error"), row.get("max_action_probability_error")]
    return math.inf if None in values else float(max(values))


def greedy_walk(units: list[str], elements: dict[str, int], sensitivity: dict[str, dict[int, float]],
                widths: list[int], keep_boundary: bool = True) -> list[dict]:
    """The allocations of the walk, first all-8-bit, then one move per step (see the module docstring)."""
    widths = sorted(set(widths), reverse=True)
    allocation = {u: widths[0] for u in units}
    fixed = {units[0], units[-1]} if keep_boundary and len(units) > 2 else set()
    steps = [{"allocation": dict(allocation), "moved": None}]
    while True:
        moves = []
        for u in units:
            if u in fixed or allocation[u] == widths[-1]:
                continue
            lower = widths[widths.index(allocation[u]) + 1]
            saved = elements[u] * (allocation[u] - lower)
            added = max(0.0, sensitivity[u][lower] - sensitivity[u][allocation[u]])
            moves.append((added / saved if math.isfinite(added) else math.inf, -saved, units.index(u), u, lower))
        if not moves:
            return steps
        _, _, _, unit, lower = min(moves)
        moved = f"{unit} {allocation[unit]}->{lower}"
        allocation[unit] = lower
        steps.append({"allocation": dict(allocation), "moved": moved})


def _calibration_golden(parent: Path, source: str, task: str, directory: Path) -> tuple[Path, Path]:
    """An FP32 golden of the task's committed calibration set (for sensitivities only; it gates nothing)."""
    from ..checkpoint import load_checkpoint

    checkpoint = load_checkpoint(source)
    if task == "embeddings":
        from ..package.inputs.texts import CALIBRATION_TEXTS_PATH as fixture
        from ..validation.embedding_golden import make_embedding_golden

        golden = make_embedding_golden(checkpoint, fixture=fixture)
    else:
        from ..package.inputs.questions import CALIBRATION_QUESTIONS_PATH as fixture
        from ..validation.golden import make_golden

        golden = make_golden(checkpoint, fixture)
    path = directory / "calibration-golden.json"
    path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path, fixture


def run_walk(parent: Path, output: Path, task: str, common: dict, widths: list[int], group_size: int,
             group_axis: str, weighting: str, executor: str, jobs: int, run_candidate, progress) -> dict:
    """The sensitivity runs and the walk; `run_candidate(job) -> row` and `progress(task, total)` are the sweep's."""
    from ..core.provenance import portable_path

    root = output / "mixed-bits"
    (root / "layers").mkdir(parents=True)
    (root / "walk").mkdir()
    units, elements = layer_units(parent)
    print(f"[mixed bits] {len(units)} layers: {', '.join(units)}; calibration golden", file=sys.stderr, flush=True)
    calibration_golden, calibration_fixture = _calibration_golden(parent, common["source"], task, root)
    settings = {"mode": "kmeans", "group_size": group_size, "group_axis": group_axis, "weighting": weighting,
                "implementation": "exact"}
    layer_jobs = [{**common, **settings, "output": str(root / "layers" / f"{u}-w{b}"), "bits": b,
                   "allocation": {v: (b if v == u else DENSE_BITS) for v in units},
                   "golden": str(calibration_golden), "fixture": str(calibration_fixture), "heldout": None,
                   "repeats": 0} for u in units for b in widths]
    layer_rows = run_tasks(run_candidate, layer_jobs, executor, jobs, progress(task, len(layer_jobs)))
    sensitivity = {u: {} for u in units}
    for job, row in zip(layer_jobs, layer_rows):
        unit = next(u for u, b in job["allocation"].items() if b != DENSE_BITS)
        sensitivity[unit][job["bits"]] = sensitivity_figure(row, task)
    steps = greedy_walk(units, elements, sensitivity, widths)
    walk_jobs = [{**common, **settings, "output": str(root / "walk" / f"step-{i:02d}"),
                  "bits": max(step["allocation"].values()), "allocation": step["allocation"]}
                 for i, step in enumerate(steps)]
    rows = run_tasks(run_candidate, walk_jobs, executor, jobs, progress(task, len(walk_jobs)))
    for i, (step, row) in enumerate(zip(steps, rows)):
        row.update({"step": i, "moved": step["moved"], "allocation": step["allocation"],
                    "mean_bits": sum(step["allocation"][u] * elements[u] for u in units) / sum(elements.values())})
    passing = [r for r in rows if r["passed"]]
    smallest = min(passing, key=lambda r: (r["package_bytes"], r["step"]), default=None)
    return {
        "settings": settings, "widths": sorted(set(widths), reverse=True), "boundary_bits": BOUNDARY_BITS,
        "boundary_layers": [units[0], units[-1]] if len(units) > 2 else [],
        "calibration": {"golden": portable_path(calibration_golden, output),
                        "fixture": calibration_fixture.name},
        "layers": [{"layer": u, "elements": elements[u],
                    "sensitivity": {str(b): (None if not math.isfinite(v) else v)
                                    for b, v in sorted(sensitivity[u].items(), reverse=True)}} for u in units],
        "layer_rows": layer_rows,
        "steps": rows,
        "smallest_passing_step": None if smallest is None else smallest["step"],
    }
