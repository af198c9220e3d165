"""Benchmark evidence: body exports, each in a fresh `probe` process (so its peak RSS is its own), with the conversion
time and peak RSS that process's probe.json records, against the goal of at most 20 s and 3 GiB per conversion on
a 2-core machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ...core.provenance import harness_fingerprint, machine, tool_versions
from .steps import command_argv, run_command

FORMAT = "ane-engineering/evidence/probe-export/1"
GOAL_SECONDS, GOAL_RSS_BYTES = 20.0, 3 * 1024 ** 3


def export_run(source: str, length: int, scratch: Path) -> dict:
    """One body export of `source` at `length` into scratch/body-<length>, as its evidence row."""
    output = scratch / f"body-{length}"
    # exit 1 is a finished export whose placement check failed: its conversion figures still count
    _, wall = run_command(command_argv("probe", "--kind", "body", "--length", str(length), "--source", source,
                                       "--output", str(output), "--quiet"), f"probe of {source} at L{length}",
                          ok=(0, 1))
    report = json.loads((output / "probe.json").read_text(encoding="utf-8"))
    export = report["export"]
    return {
        "length": length,
        "convert_seconds": export["convert_seconds"],
        "save_seconds": export["save_seconds"],
        "probe_wall_seconds": wall,
        "peak_rss_bytes": export["peak_rss_bytes"],
        "peak_rss_gib": round(export["peak_rss_bytes"] / 2**30, 2),
        "peak_rss_bytes_before_convert": export["peak_rss_bytes_before_convert"],
        "non_constant_ops": report["mil_ops"]["non_constant"],
        "static_violations": report["placement"]["static"]["violations"],
        "layout_max_abs": report["layout_check"]["max_abs"],
        "package_sha256": report["package_sha256"],
        "source": report["source"],
        "meets_time_goal": export["convert_seconds"] <= GOAL_SECONDS,
        "meets_memory_goal": export["peak_rss_bytes"] <= GOAL_RSS_BYTES,
    }


def probe_export_evidence(source: str, lengths: list[int], scratch: Path,
                          progress: Callable[[str], None] = lambda line: None) -> dict:
    """The evidence document of exporting `source`'s body at each of `lengths` (exports go into `scratch`)."""
    runs = []
    for length in lengths:
        progress(f"exporting {source} body at L{length} ...")
        runs.append(export_run(source, length, scratch))
        progress(f"  convert {runs[-1]['convert_seconds']:.1f} s, peak RSS {runs[-1]['peak_rss_gib']:.2f} GiB")
    return {
        "format": FORMAT,
        "benchmark": "full-size body export: conversion time and peak RSS",
        "goal": {"convert_seconds_max": GOAL_SECONDS, "peak_rss_bytes_max": GOAL_RSS_BYTES},
        "runs": runs,
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }
