"""The evidence logic of benchmarks/cost_calibration.py (its docstring says what it measures and how to run it).

Benchmark: fit the calibrated cost model (placement/calibration.py) to the reference run's three measurements.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ...core import reference_run
from ...core.cli import (
    UsageError,
)
from ...placement import cost_model, roofline

GRAPH = ("dense attention as the reference run measured it: per head, the scores as two half-size einsums (RoPE "
         "halves) plus an add, additive (1, L, 1, L) global and local masks")


def package_record(report: dict, directory: Path) -> dict:
    manifest = report["manifest"]
    cost = report["cost"]
    return {"length": cost["length"], "kind": manifest["kind"], "directory": directory.name,
            "content_sha256": manifest["package_sha256"], "manifest_sha256": manifest["manifest_sha256"],
            "source": manifest["source"], "compute_precision": manifest["compute_precision"],
            "export_harness_sha256": (manifest["export_harness"] or {}).get("sha256"),
            "attention_score_contractions": cost["by_category"]["attention_scores"]["ops"],
            "einsum_ops": cost["by_op_type"].get("einsum", {}).get("ops", 0)}


SCORE_CONTRACTIONS_PER_SOFTMAX = 2  # the reference graph: two half-size score einsums per head (RoPE halves)


def reference_graph_check(cost: dict, directory: Path) -> float:
    """Refuse a program that is not the graph the reference run measured: it had two half-size score contractions
    per head (per softmax); the leaner layouts since have one (ANE_MATH.md, "Per-head einsum
    attention, one score contraction per head")."""
    scores = cost["by_category"]["attention_scores"]["ops"]
    softmaxes = cost["by_op_type"].get("softmax", {}).get("ops", 0)
    if not softmaxes or scores != SCORE_CONTRACTIONS_PER_SOFTMAX * softmaxes:
        raise UsageError(f"{directory}: {scores} score contractions for {softmaxes} softmaxes, not the graph the "
                         f"reference run measured ({SCORE_CONTRACTIONS_PER_SOFTMAX} per head); export the bodies with "
                         "the harness at git commit 48ff4e9, or `probe --attention reference-run`, and pass them with "
                         "--package")
    return scores / softmaxes


def costed_bodies(directories: list[Path]) -> tuple[dict[int, dict], list[dict]]:
    """{length: cost} and package records of body probe directories of the reference model's dimensions."""
    costs, records = {}, []
    for directory in directories:
        if not (directory / "manifest.json").exists():
            raise UsageError(f"{directory} is not a probe directory (no manifest.json)")
        print(f"costing {directory} ...", file=sys.stderr, flush=True)
        report = cost_model.cost_report(directory)
        manifest = report["manifest"]
        problems = roofline.reference_model_mismatches(manifest.get("model_config"))
        if manifest["kind"] != "body" or problems:
            raise UsageError(f"{directory}: not a body package of the reference run's model "
                             f"({'; '.join(problems) or 'kind ' + str(manifest['kind'])})")
        scores_per_softmax = reference_graph_check(report["cost"], directory)
        length = report["cost"]["length"]
        if length in costs:
            raise UsageError(f"two packages at L{length}")
        costs[length] = report["cost"]
        records.append({**package_record(report, directory), "score_contractions_per_softmax": scores_per_softmax})
    return costs, sorted(records, key=lambda r: r["length"])


def reference_points(costs: dict[int, dict], records: list[dict]) -> list[dict]:
    """One fit point per reference measurement: its id, length, scope, p50 and the program's recorded totals."""
    sha = {r["length"]: r["content_sha256"] for r in records}
    points = []
    for m in reference_run.load()["timings"]["measurements"]:
        if m["length"] not in costs:
            raise UsageError(f"no body package at L{m['length']} for reference measurement {m['id']}")
        points.append({"id": m["id"], "length": m["length"], "scope": m["scope"], "measured_ms": m["p50_ms"],
                       "totals": costs[m["length"]]["totals"], "program_sha256": sha[m["length"]]})
    return points


def reference_bodies(packages: list[Path], source: str, scratch: Path, *options: str) -> list[Path]:
    """The body probe directories to cost: the given ones, else `source`'s bodies exported into `scratch` at each
    length the reference run measured (`options`: further probe arguments, e.g. --attention reference-run)."""
    from ...core import reference_run
    from .cost_model import export

    if packages:
        return list(packages)
    lengths = sorted({m["length"] for m in reference_run.load()["timings"]["measurements"]})
    directories = []
    for length in lengths:
        print(f"exporting {source} body at L{length} {' '.join(options)} ...", file=sys.stderr, flush=True)
        directories.append(export(source, "body", length, scratch, *options))
    return directories
