"""Evidence: coremltools' k-means against the project's exact k-means at each bit width on one package.

For each bit width both implementations palettize the same FP16 package (conv weights > 2048 elements, per grouped
output channel, group 32) in fresh processes (`python -m experiments.ane_engineering.palettize`), run back to back,
so time and peak RSS are each process's own. Then every group's squared error against the FP16 weights is read
back from the two packages' LUTs and indices (workflows/compression_evidence.compare_groups) and the per-group
ratio exact / coremltools is summarised.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ...core.errors import HarnessError
from ...core.provenance import harness_fingerprint, machine, portable_path, tool_versions
from ...package.manifest import read_manifest
from ..compression_evidence import compare_groups

GROUP_SIZE = 32
IMPLEMENTATIONS = ("exact", "coremltools")


def palettize(parent: Path, output: Path, bits: int, implementation: str, workers: int) -> dict:
    """One palettize command in its own process; its palettize.json's time, peak RSS and size."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "experiments.ane_engineering.palettize", "--package", str(parent),
                             "--bits", str(bits), "--mode", "kmeans", "--group-size", str(GROUP_SIZE), "--workers",
                             str(workers), "--implementation", implementation, "--output", str(output)],
                            capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise HarnessError(f"palettize {implementation} W{bits} failed: {result.stderr.strip()[-2000:]}")
    report = json.loads((output / "palettize.json").read_text(encoding="utf-8"))
    return {"implementation": implementation, "bits": bits, "wall_seconds": wall,
            "palettize_seconds": report["seconds"],
            "peak_rss_bytes": report["peak_rss_bytes"], "peak_rss_gib": round(report["peak_rss_bytes"] / 2**30, 2),
            "package_bytes": report["package_bytes"],
            "package_sha256": report["package_sha256"], "stats": report["stats"]}


def palettize_kmeans_evidence(package: Path, bit_widths: list[int], workers: int, scratch: Path,
                              evidence_dir: Path) -> dict:
    manifest = read_manifest(package)
    runs = []
    for bits in bit_widths:
        pair = {}
        for implementation in IMPLEMENTATIONS:
            print(f"W{bits} {implementation} ...", file=sys.stderr, flush=True)
            pair[implementation] = palettize(package, scratch / f"w{bits}-{implementation}", bits, implementation,
                                             workers)
            print(f"  {pair[implementation]['palettize_seconds']:.1f} s, peak RSS "
                  f"{pair[implementation]['peak_rss_gib']:.2f} GiB", file=sys.stderr, flush=True)
        sse = compare_groups(package, scratch / f"w{bits}-exact", scratch / f"w{bits}-coremltools")
        runs.append({"bits": bits, "exact": pair["exact"], "coremltools": pair["coremltools"], "sse": sse,
                     "time_ratio_exact_over_coremltools":
                         pair["exact"]["palettize_seconds"] / pair["coremltools"]["palettize_seconds"],
                     "speedup": pair["coremltools"]["palettize_seconds"] / pair["exact"]["palettize_seconds"]})
    return {
        "format": "ane-engineering/evidence/palettize-kmeans/2",
        "benchmark": "coremltools k-means vs the project's exact k-means, per-grouped-channel group "
                     f"{GROUP_SIZE}, one run",
        "goal": {"w8_time_ratio_max": 0.1, "sse": "exact <= coremltools per group (ties allowed)"},
        "parent": {"path": portable_path(package, evidence_dir),
                   "package_sha256": manifest["package"]["content_hash"]["sha256"],
                   "source": manifest["source"], "kind": manifest["kind"], "length": manifest["length"]},
        "workers": workers, "runs": runs,
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }


def summary(evidence: dict) -> str:
    return "\n".join(f"W{run['bits']}: exact {run['exact']['palettize_seconds']:.1f} s vs coremltools "
                     f"{run['coremltools']['palettize_seconds']:.1f} s (x{run['speedup']:.1f}); groups not worse "
                     f"{run['sse']['not_worse']}/{run['sse']['groups']}" for run in evidence["runs"])
