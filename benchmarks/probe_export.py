"""Benchmark: full-size (builtin:mmbert-base-shape) body exports at L96 and L1024 -- conversion time and peak RSS.

Each export runs in a fresh process (`python -m experiments.ane_engineering.probe`), so its peak RSS is its own;
the figures come from that run's probe.json. Writes one evidence JSON (with the hashes of what produced it).
Goal on a 2-core machine: each conversion at most 20 s and 3 GB.

    python benchmarks/probe_export.py --output artifacts/bench/probe_export.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import write_evidence  # noqa: E402
from experiments.ane_engineering.core.provenance import (  # noqa: E402
    harness_fingerprint,
    machine,
    tool_versions,
)
from experiments.ane_engineering.core.staging import check_output

GOAL_SECONDS, GOAL_RSS_BYTES = 20.0, 3 * 1024 ** 3


def export(source: str, length: int, scratch: Path) -> dict:
    output = scratch / f"body-{length}"
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "experiments.ane_engineering.probe", "--kind", "body",
                             "--length", str(length), "--source", source, "--output", str(output), "--quiet"],
                            capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode not in (0, 1):
        raise RuntimeError(f"probe failed for L{length}: {result.stderr[-2000:]}")
    report = json.loads((output / "probe.json").read_text())
    return {
        "length": length,
        "convert_seconds": report["export"]["convert_seconds"],
        "save_seconds": report["export"]["save_seconds"],
        "probe_wall_seconds": wall,
        "peak_rss_bytes": report["export"]["peak_rss_bytes"],
        "peak_rss_gib": round(report["export"]["peak_rss_bytes"] / 2**30, 2),
        "peak_rss_bytes_before_convert": report["export"]["peak_rss_bytes_before_convert"],
        "non_constant_ops": report["mil_ops"]["non_constant"],
        "static_violations": report["placement"]["static"]["violations"],
        "layout_max_abs": report["layout_check"]["max_abs"],
        "package_sha256": report["package_sha256"],
        "source": report["source"],
        "meets_time_goal": report["export"]["convert_seconds"] <= GOAL_SECONDS,
        "meets_memory_goal": report["export"]["peak_rss_bytes"] <= GOAL_RSS_BYTES,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="builtin:mmbert-base-shape")
    parser.add_argument("--lengths", default="96,1024")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)
    with tempfile.TemporaryDirectory(dir=args.output.parent) as scratch:
        runs = []
        for length in (int(n) for n in args.lengths.split(",")):
            print(f"exporting {args.source} body at L{length} ...", file=sys.stderr, flush=True)
            runs.append(export(args.source, length, Path(scratch)))
            print(f"  convert {runs[-1]['convert_seconds']:.1f} s, peak RSS {runs[-1]['peak_rss_bytes'] / 2**30:.2f} GiB",
                  file=sys.stderr, flush=True)
    evidence = {
        "format": "ane-engineering/evidence/probe-export/1",
        "benchmark": "full-size body export: conversion time and peak RSS",
        "goal": {"convert_seconds_max": GOAL_SECONDS, "peak_rss_bytes_max": GOAL_RSS_BYTES},
        "runs": runs,
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }
    write_evidence(args.output, evidence)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
