"""The evidence logic of benchmarks/long_attention.py (its docstring says what it measures and how to run it).

Benchmark: dense vs windowed local attention at L96, L192 and L1024 -- predictions and a `mil` timing ratio.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ...core import reference_run
from ...core.cli import (
    UsageError,
)
from ...core.provenance import (
    backend_record,
    portable_path,
)
from ...model.window_tiles import DEFAULT_TILE
from ...placement import calibration, cost_model
from ...placement import chips as chip_table
from .cost_model import export as probe_export

FORMAT = "ane-engineering/evidence/long-attention/1"
LAYOUTS = ("dense", "windowed")
LENGTHS = (96, 192, 1024)
MIL_LENGTH = 1024
AIM_RATIO_TO_MLX = 0.6  # the project's aim for the windowed L1024 request: 0.6x MLX's p50 (a goal, not a measurement)


def export(source: str, layout: str, length: int, scratch: Path, tile: int | None = None) -> Path:
    """The body at `length` in one attention layout (and tile), in scratch/<layout>-<length>[-tile<T>]."""
    tile_options = [] if tile is None else ["--tile", str(tile)]
    return probe_export(source, "body", length, scratch, "--attention", layout, *tile_options,
                        name=f"{layout}-{length}" if tile is None else f"{layout}-{length}-tile{tile}")


def bucket_entry(report: dict, directory: Path, evidence_dir: Path, chips: dict, parameters: dict,
                 chip: str) -> dict:
    """One layout at one bucket: the cost counts, the calibrated predictions per chip and the package's hashes."""
    cost, manifest = report["cost"], report["manifest"]
    totals = cost["totals"]
    by_chip = {name: {"predicted_body_ms": calibration.predict_body_ms(cost, name, parameters, chips),
                      "predicted_request_ms": calibration.predict_request_ms(cost, name, parameters, chips),
                      "terms": calibration.terms(cost, name, parameters, chips)} for name in chips}
    key = chip_table.chip_key(chip)  # the table's key of the chip's name (chips.json)
    return {
        "length": cost["length"], "chip": chip,
        "predicted_body_ms": by_chip[key]["predicted_body_ms"],
        "predicted_request_ms": by_chip[key]["predicted_request_ms"],
        "terms": by_chip[key]["terms"],
        "gflop": totals["flops"] / 1e9,
        "compulsory_mb": totals["compulsory_bytes"] / 1e6,
        "unfused_mb": totals["unfused_bytes"] / 1e6,
        "non_constant_ops": totals["non_constant_ops"],
        "floor_ms": report["floors"][key]["floor_ms"], "bound": report["floors"][key]["bound"],
        "totals": totals,
        "by_category": cost["by_category"],
        "unmodelled_op_types": cost["unmodelled_op_types"],
        "by_chip": by_chip,
        "package": {"directory": portable_path(directory, evidence_dir),
                    "content_sha256": manifest["package_sha256"], "manifest_sha256": manifest["manifest_sha256"],
                    "source": manifest["source"], "compute_precision": manifest["compute_precision"],
                    "export_harness_sha256": (manifest["export_harness"] or {}).get("sha256")},
    }


def layout_of(directory: Path) -> str | None:
    """The attention layout a probe directory's manifest records (None when it predates the choice)."""
    from experiments.ane_engineering.package.manifest import read_manifest

    attention = read_manifest(directory).get("attention")
    return attention.get("layout") if isinstance(attention, dict) else attention


def report_attention(directory: Path) -> dict | None:
    """The manifest's whole attention record (layout, tile, tiles, window width ...)."""
    from experiments.ane_engineering.package.manifest import read_manifest

    return read_manifest(directory).get("attention")


def mil_inputs(agent, length: int, checkpoint) -> tuple[dict, dict]:
    """Device inputs the agent builds for its own package from a real >= 1,000-token fixture question (the host
    builds each layout the masks it needs), as FP16 arrays, and what they are."""
    from experiments.ane_engineering.evidence.benchmarking.run import pick_question

    question, tokens = pick_question(checkpoint, length, long=True)
    encoded = agent.encode(question)
    inputs = agent.device_inputs(encoded.input_ids, encoded.token_types, encoded.marker_positions, length)
    return {k: v.astype(np.float16) for k, v in inputs.items()}, {"question": question.id, "tokens": tokens}


def measure_mil_ratio(dense_dir: Path, windowed_dir: Path, source: str, warmup: int, calls: int) -> dict:
    """Windowed body time / dense body time on the `mil` executor, ABBA-interleaved in one process."""
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.evidence.benchmarking.timing import (
        paired_calls,
        ratio_summary,
        summarize,
    )
    from experiments.ane_engineering.run.agent import ANEAgent

    checkpoint = load_checkpoint(source)
    agents = {layout: ANEAgent([directory], checkpoint, "mil")
              for layout, directory in (("dense", dense_dir), ("windowed", windowed_dir))}
    prepared = {layout: mil_inputs(agent, MIL_LENGTH, checkpoint) for layout, agent in agents.items()}
    outputs = {}

    def call(layout):
        def run():
            outputs[layout] = agents[layout].backends[MIL_LENGTH].predict(prepared[layout][0])
        return run

    dense, windowed = paired_calls(call("dense"), call("windowed"), warmup, calls)
    active = int(prepared["dense"][0]["marker_selector"].sum())  # one-hot columns of the options asked
    ratio = ratio_summary(dense, windowed)
    logits = {layout: np.asarray(out["option_logits"], dtype=np.float32).reshape(-1) for layout, out in outputs.items()}
    return {
        "what": "windowed body time / dense body time at L1024 on the mil executor (numpy FP16 reference, not the "
                "Neural Engine), one call each alternating in ABBA order in one process, after warm-up",
        "length": MIL_LENGTH, "warmup": warmup, "calls": calls, "input": prepared["dense"][1],
        "dense": summarize(dense), "windowed": summarize(windowed), "ratio": ratio,
        "ratio_p50": ratio["p50"],
        "max_abs_logit_difference_active_slots": float(np.abs(logits["windowed"] - logits["dense"])[:active].max()),
        "backend": backend_record(agents["dense"].backend.describe()),
    }


def comparison(windowed_l1024: dict, dense_l1024: dict) -> dict:
    """The windowed L1024 request prediction against MLX's p50 and the project's aim, and what bounds it."""
    mlx = reference_run.load()["timings"]["mlx"]["p50_ms"]
    predicted = windowed_l1024["predicted_request_ms"]
    terms = windowed_l1024["terms"]
    largest = max(("floor_ms", "per_op_ms", "traffic_ms", "boundary_ms"), key=lambda name: terms[name])
    return {
        "chip": windowed_l1024["chip"], "mlx_p50_ms": mlx, "mlx_what": reference_run.load()["timings"]["mlx"]["what"],
        "windowed_predicted_request_ms": predicted, "dense_predicted_request_ms": dense_l1024["predicted_request_ms"],
        "ratio_to_mlx": predicted / mlx, "below_mlx_ms": mlx - predicted, "above_mlx_ms": predicted - mlx,
        "below_mlx": predicted < mlx,
        "aim_ratio_to_mlx": AIM_RATIO_TO_MLX, "aim_ms": AIM_RATIO_TO_MLX * mlx,
        "above_aim_ms": predicted - AIM_RATIO_TO_MLX * mlx,
        "windowed_over_dense_predicted": predicted / dense_l1024["predicted_request_ms"],
        "terms": terms, "largest_term": largest,
        "unfused_mb_by_category": {
            category: {"dense": dense_l1024["by_category"][category]["bytes"] / 1e6,
                       "windowed": windowed_l1024["by_category"][category]["bytes"] / 1e6,
                       "ops_dense": dense_l1024["by_category"][category]["ops"],
                       "ops_windowed": windowed_l1024["by_category"][category]["ops"]}
            for category in sorted(windowed_l1024["by_category"],
                                   key=lambda name: -windowed_l1024["by_category"][name]["bytes"])
            if windowed_l1024["by_category"][category]["ops"] or dense_l1024["by_category"][category]["ops"]},
        "terms_share": {name: value / predicted for name, value in terms.items()},
        "floor_bound": windowed_l1024["bound"],
        "no_traffic_ms": predicted - terms["traffic_ms"],
    }


def tile_scan(source: str, tiles: list[int], scratch: Path, windowed_at_length: dict, evidence_dir: Path,
              chips: dict, parameters: dict, chip: str) -> dict:
    """The windowed body at MIL_LENGTH for each tile size, costed and predicted like the buckets: the argument for
    DEFAULT_TILE (ANE_MATH.md section 15). The default tile's row is the windowed bucket itself."""
    rows = {}
    for tile in tiles:
        if tile == DEFAULT_TILE:
            entry = windowed_at_length
        else:
            print(f"exporting {source} windowed body at L{MIL_LENGTH} with tile {tile} ...", file=sys.stderr,
                  flush=True)
            directory = export(source, "windowed", MIL_LENGTH, scratch, tile)
            entry = bucket_entry(cost_model.cost_report(directory, chips=chips), directory, evidence_dir, chips,
                                 parameters, chip)
        rows[str(tile)] = {key: entry[key] for key in ("predicted_body_ms", "predicted_request_ms", "gflop",
                                                        "unfused_mb", "non_constant_ops")}
        rows[str(tile)]["package_sha256"] = entry["package"]["content_sha256"]
    lowest = min(rows, key=lambda tile: rows[tile]["predicted_body_ms"])
    return {"length": MIL_LENGTH, "chip": chip, "label": calibration.LABEL, "default_tile": DEFAULT_TILE,
            "tiles": rows, "lowest_predicted_body_tile": int(lowest)}


def parse_packages(pairs: list[str]) -> dict[str, list[Path]]:
    packages: dict[str, list[Path]] = {layout: [] for layout in LAYOUTS}
    for pair in pairs:
        layout, _, directory = pair.partition("=")
        if layout not in LAYOUTS or not directory:
            raise UsageError(f"--package takes LAYOUT=DIR with LAYOUT one of {', '.join(LAYOUTS)}: {pair!r}")
        packages[layout].append(Path(directory))
    return packages
