"""Benchmark: coremltools' k-means against the project's exact k-means, W8/W6/W4, on one full-size body, one run.

For each bit width both implementations palettize the same FP16 package (conv weights > 2048 elements, per grouped
output channel, group 32) in fresh processes (`python -m experiments.ane_engineering.palettize`), run back to back,
so time and peak RSS are each process's own. Then every group's squared error against the FP16 weights is computed
from the two packages' LUTs and indices, and the per-group ratio ours / coremltools is summarised.
Goal: ours at most 1/10 of coremltools' time at W8, with per-group SSE no worse (ties allowed).

    python benchmarks/palettize_kmeans.py --package DIR --output benchmarks/evidence/palettize_kmeans_mmbert_base_shape.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import write_evidence  # noqa: E402
from experiments.ane_engineering.core.provenance import (  # noqa: E402
    harness_fingerprint,
    machine,
    portable_path,
    tool_versions,
)
from experiments.ane_engineering.package.manifest import read_manifest  # noqa: E402
from experiments.ane_engineering.core.staging import check_output

GROUP_SIZE = 32
SSE_RTOL = 1e-9


def palettize(parent: Path, output: Path, bits: int, implementation: str, workers: int) -> dict:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "experiments.ane_engineering.palettize", "--package", str(parent),
                             "--bits", str(bits), "--mode", "kmeans", "--group-size", str(GROUP_SIZE), "--workers",
                             str(workers), "--implementation", implementation, "--output", str(output)],
                            capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"palettize {implementation} W{bits} failed: {result.stderr[-2000:]}")
    report = json.loads((output / "palettize.json").read_text())
    return {"implementation": implementation, "bits": bits, "wall_seconds": wall, "palettize_seconds": report["seconds"],
            "peak_rss_bytes": report["peak_rss_bytes"], "peak_rss_gib": round(report["peak_rss_bytes"] / 2**30, 2),
            "package_bytes": report["package_bytes"],
            "package_sha256": report["package_sha256"], "stats": report["stats"]}


def group_sse(parent: Path, candidate: Path) -> dict[str, np.ndarray]:
    """Per weight: the squared error of every group of GROUP_SIZE output channels against the FP16 weights."""
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import (
        constexpr_lut_to_dense,
    )

    from experiments.ane_engineering.package.mil.load import load_program

    original = load_program(parent / "model.mlpackage").program
    weights = {op.outputs[0].name: op.outputs[0].val for op in original.functions["main"].operations
               if op.op_type == "const" and op.outputs[0].val is not None}
    palettized = load_program(candidate / "model.mlpackage").program
    out = {}
    for op in palettized.functions["main"].operations:
        if op.op_type != "constexpr_lut_to_dense":
            continue
        name = op.outputs[0].name.removesuffix("_palettized")
        dense = constexpr_lut_to_dense.decompress(op.indices.val, op.lut.val,
                                                  op.vector_axis.val if op.vector_axis is not None else None)
        error = (np.asarray(dense, np.float64) - np.asarray(weights[name], np.float64)) ** 2
        out[name] = error.reshape(error.shape[0] // GROUP_SIZE, -1).sum(axis=1)
    return out


def compare(parent: Path, ours: Path, theirs: Path) -> dict:
    a, b = group_sse(parent, ours), group_sse(parent, theirs)
    if set(a) != set(b):
        raise RuntimeError("the two packages palettized different weights")
    ours_sse = np.concatenate([a[k] for k in sorted(a)])
    theirs_sse = np.concatenate([b[k] for k in sorted(b)])
    not_worse = ours_sse <= theirs_sse * (1 + SSE_RTOL) + 1e-18
    ratio = np.where(theirs_sse > 0, ours_sse / np.maximum(theirs_sse, 1e-300), np.where(ours_sse > 0, np.inf, 1.0))
    return {"groups": int(ours_sse.size), "not_worse": int(not_worse.sum()), "worse": int((~not_worse).sum()),
            "ratio_max": float(ratio.max()), "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
            "total_sse_ours": float(ours_sse.sum()), "total_sse_coremltools": float(theirs_sse.sum()),
            "total_ratio": float(ours_sse.sum() / theirs_sse.sum()), "comparison_rtol": SSE_RTOL}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="FP16 probe export of the full-size body")
    parser.add_argument("--bits", default="8,6,4")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)
    manifest = read_manifest(args.package)
    runs = []
    with tempfile.TemporaryDirectory(dir=args.output.parent) as scratch:
        for bits in (int(b) for b in args.bits.split(",")):
            pair = {}
            for implementation in ("exact", "coremltools"):
                print(f"W{bits} {implementation} ...", file=sys.stderr, flush=True)
                out = Path(scratch) / f"w{bits}-{implementation}"
                pair[implementation] = palettize(args.package, out, bits, implementation, args.workers)
                print(f"  {pair[implementation]['palettize_seconds']:.1f} s, peak RSS "
                      f"{pair[implementation]['peak_rss_bytes'] / 2**30:.2f} GiB", file=sys.stderr, flush=True)
            sse = compare(args.package, Path(scratch) / f"w{bits}-exact", Path(scratch) / f"w{bits}-coremltools")
            runs.append({"bits": bits, "exact": pair["exact"], "coremltools": pair["coremltools"], "sse": sse,
                         "time_ratio_exact_over_coremltools":
                             pair["exact"]["palettize_seconds"] / pair["coremltools"]["palettize_seconds"],
                         "speedup": pair["coremltools"]["palettize_seconds"] / pair["exact"]["palettize_seconds"]})
    evidence = {
        "format": "ane-engineering/evidence/palettize-kmeans/1",
        "benchmark": f"coremltools k-means vs the project's exact k-means, per-grouped-channel group {GROUP_SIZE}, one run",
        "goal": {"w8_time_ratio_max": 0.1, "sse": "ours <= coremltools per group (ties allowed)"},
        "parent": {"path": portable_path(args.package, args.output.parent),
                   "package_sha256": manifest["package"]["content_hash"]["sha256"],
                   "source": manifest["source"], "kind": manifest["kind"], "length": manifest["length"]},
        "workers": args.workers, "runs": runs,
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }
    write_evidence(args.output, evidence)
    for run in runs:
        print(f"W{run['bits']}: exact {run['exact']['palettize_seconds']:.1f} s vs coremltools "
              f"{run['coremltools']['palettize_seconds']:.1f} s (x{run['speedup']:.1f}); groups not worse "
              f"{run['sse']['not_worse']}/{run['sse']['groups']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
