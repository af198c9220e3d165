"""The evidence logic of benchmarks/latency_counts.py: count every program the public points are counted as.

Each distinct `counted_as` of placement/public_latencies.json (a model, an export kind, a layout) is converted exactly
as `probe` would export it, at three anchor lengths, and counted (placement/cost_model.py). Every total of these
dense-family programs is a polynomial of degree <= 2 in the length (placement/crossover.py), so the three anchors
give the totals at every length a point or a routing grid needs (chip_fit.program_at). The L x L tensor-op bytes
(cost_model's `lxl`) and the static placement's regions (placement/regions.py) are recorded beside the totals.
"""

from __future__ import annotations

from typing import Callable

from ...checkpoint import load_checkpoint
from ...core.provenance import harness_fingerprint, machine, tool_versions
from ...placement import public_latencies
from ...placement.chip_fit import COUNTS_FORMAT, program_key
from ..predict_export import config_checkpoint, export_cost

ANCHORS = (96, 352, 1000)  # no anchor equals a head, hidden or FFN size: cost_model tells L x L tensors by shape


def counted_programs(document: dict) -> list[dict]:
    """The distinct counted_as entries of the public points (and of the GPU curves' models, body reference-run)."""
    seen = {}
    for point in document["points"]:
        if point["counted_as"] is not None:
            seen[program_key(point["counted_as"])] = point["counted_as"]
    return [seen[key] for key in sorted(seen)]


def checkpoint_of(model: str, document: dict):
    source = public_latencies.model_source(model, document)
    return load_checkpoint(source) if source else config_checkpoint(model)


def count_program(counted: dict, document: dict, progress: Callable[[str], None]) -> dict:
    checkpoint = checkpoint_of(counted["model"], document)
    anchors = {}
    for length in ANCHORS:
        progress(f"  converting {checkpoint.source} {counted['kind']} L{length} ({counted['layout']}) ...")
        cost, description = export_cost(checkpoint, counted["kind"], length, counted["layout"])
        blocks = sum(group["blocks"] for group in cost["lxl"]["blocks_by_mask"].values())
        anchors[str(length)] = {"totals": cost["totals"], "lxl_bytes": cost["lxl"]["tensor_ops"]["bytes"],
                                "attention_blocks": blocks, "regions": cost["regions"],
                                "attention": description["attention"]}
    return {**counted, "source": checkpoint.source, "model_config_sha256": checkpoint.config_sha256,
            "anchors": anchors}


def counts_evidence(progress: Callable[[str], None] = lambda line: None) -> dict:
    document = public_latencies.load()
    programs = {program_key(c): count_program(c, document, progress) for c in counted_programs(document)}
    return {"format": COUNTS_FORMAT, "label": "counts of the exported programs (static; no device runs here)",
            "benchmark": "programs the public Neural Engine timings are counted as, at three anchor lengths each",
            "anchors": list(ANCHORS), "programs": programs,
            "public_latencies": "experiments/ane_engineering/placement/public_latencies.json",
            "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint()}
