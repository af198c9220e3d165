"""Benchmark: a static cost model of the body package per bucket -- FLOPs, bytes moved, roofline floors per chip.

Reads the MIL program of each package (experiments/ane_engineering/placement/cost_model.py), counts FLOPs and bytes
per op, and predicts a latency floor per chip (chips.json, every figure with its source). Checks the floors against
the reference run's timings (experiments/ane_engineering/core/reference_run.json: a run on an M3 Max reported by the
project's user) and reports the measured / floor ratios, and how much of each bucket is attention's dense L x L
work.

Give existing probe directories (each with model.mlpackage and manifest.json):

    python benchmarks/cost_model.py --package /tmp/cm/body96 --package /tmp/cm/body1024 --output out.json

or let it export the bodies itself (one probe process at a time, into a temporary directory beside the output):

    python benchmarks/cost_model.py --source builtin:mmbert-base-shape --lengths 96,192,1024 --output out.json

A prediction from the program text, not a measurement. Refuses an existing output file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core import reference_run  # noqa: E402
from experiments.ane_engineering.core.cli import (  # noqa: E402
    UsageError,
    run_main,
    write_evidence,
)
from experiments.ane_engineering.placement import chips as chip_table  # noqa: E402
from experiments.ane_engineering.placement import cost_model, roofline  # noqa: E402
from experiments.ane_engineering.core.provenance import (  # noqa: E402
    harness_fingerprint,
    machine,
    tool_versions,
)
from experiments.ane_engineering.core.staging import check_output

FORMAT = "ane-engineering/evidence/cost-model/1"
LABEL = "prediction (static cost model of the MIL program; not a measurement)"


def export(source: str, kind: str, length: int, scratch: Path, *options: str, name: str | None = None) -> Path:
    """One probe process exporting into scratch/<name> (default <kind>-<length>); `options` are further probe
    arguments (e.g. --attention windowed --tile 64)."""
    output = scratch / (name or f"{kind}-{length}")
    result = subprocess.run([sys.executable, "-m", "experiments.ane_engineering.probe", "--kind", kind,
                             "--length", str(length), "--source", source, "--output", str(output), "--quiet",
                             *options], capture_output=True, text=True)
    if not (output / "manifest.json").exists():
        raise RuntimeError(f"probe failed for {name or kind} L{length} (exit {result.returncode}): "
                           f"{result.stderr[-2000:]}")
    return output


def sliding_window_view(report: dict) -> dict | None:
    """Dense L x L work of the sliding-window layers that falls outside their window (what a window-only kernel
    would skip), from the local-mask attention blocks and the manifest's local_attention."""
    lxl = report["cost"]["lxl"]
    config = (report.get("manifest") or {}).get("model_config") or {}
    window = (config.get("encoder") or {}).get("local_attention")
    local = (lxl or {}).get("blocks_by_mask", {}).get("local_mask")
    if not lxl or not window or not local:
        return None
    length, radius = lxl["length"], window // 2
    inside = cost_model.window_fraction(length, radius)
    total_flops = report["cost"]["totals"]["flops"]
    outside_flops = local["einsum"]["flops"] * (1.0 - inside)
    return {
        "local_attention": window, "radius": radius, "local_blocks": local["blocks"],
        "window_fraction_of_lxl_pairs": inside,
        "local_lxl_einsum_flops": local["einsum"]["flops"],
        "local_lxl_einsum_flops_outside_window": outside_flops,
        "outside_window_share_of_total_flops": outside_flops / total_flops if total_flops else None,
        "local_lxl_tensor_op_bytes": local["tensor_ops"]["bytes"],
        "local_lxl_tensor_op_bytes_outside_window": local["tensor_ops"]["bytes"] * (1.0 - inside),
        "note": "dense score/AV work and L x L traffic of sliding-window layers scale with L^2; inside the window "
                "only ~L*(2r+1) pairs matter (padding masks not counted)",
    }


def bucket_entry(report: dict, directory: Path) -> dict:
    cost = report["cost"]
    manifest = report["manifest"]
    return {
        "length": cost["length"],
        "kind": manifest["kind"],
        "package": {"directory": directory.name, "content_sha256": manifest["package_sha256"],
                    "manifest_sha256": manifest["manifest_sha256"], "source": manifest["source"],
                    "compute_precision": manifest["compute_precision"],
                    "export_harness_sha256": (manifest["export_harness"] or {}).get("sha256")},
        "totals": cost["totals"],
        "by_category": cost["by_category"],
        "by_op_type": cost["by_op_type"],
        "lxl": cost["lxl"],
        "sliding_window": sliding_window_view(report),
        "unmodelled_op_types": cost["unmodelled_op_types"],
        "floors": report["floors"],
        "model_config": manifest.get("model_config"),
        **({"per_op": cost["per_op"]} if "per_op" in cost else {}),
    }


def summary_rows(buckets: list[dict], chip: str) -> list[dict]:
    rows = []
    for bucket in buckets:
        floor = bucket["floors"][chip_table.chip_key(chip)]
        lxl = bucket["lxl"] or {}
        rows.append({
            "length": bucket["length"], "gflops": bucket["totals"]["flops"] / 1e9,
            "compulsory_mb": bucket["totals"]["compulsory_bytes"] / 1e6,
            "unfused_mb": bucket["totals"]["unfused_bytes"] / 1e6,
            "chip": chip, "compute_ms": floor["compute_ms"], "memory_ms": floor["memory_ms"],
            "floor_ms": floor["floor_ms"], "bound": floor["bound"], "unfused_floor_ms": floor["unfused_floor_ms"],
            "lxl_einsum_flops_share": (lxl.get("einsum") or {}).get("flops_share"),
            "lxl_tensor_ops_bytes_share": (lxl.get("tensor_ops") or {}).get("bytes_share"),
            "lxl_tensor_ops_share_of_category_roofline": floor.get("lxl_tensor_ops_share_of_category_sum"),
        })
    return rows


def print_summary(rows: list[dict], check: dict) -> None:
    print(f"{'L':>5} {'GFLOP':>8} {'min MB':>8} {'unfused MB':>11} {'compute':>8} {'memory':>8} {'floor':>8} "
          f"{'unfused':>8}  {'LxL flops':>9} {'LxL bytes':>9}   ({rows[0]['chip'] if rows else ''}, ms)",
          file=sys.stderr)
    for r in rows:
        print(f"{r['length']:>5} {r['gflops']:>8.2f} {r['compulsory_mb']:>8.1f} {r['unfused_mb']:>11.1f} "
              f"{r['compute_ms']:>8.3f} {r['memory_ms']:>8.3f} {r['floor_ms']:>8.3f} {r['unfused_floor_ms']:>8.3f}  "
              f"{(r['lxl_einsum_flops_share'] or 0):>9.1%} {(r['lxl_tensor_ops_bytes_share'] or 0):>9.1%}",
              file=sys.stderr)
    for entry in check.get("not_compared", []):
        print(f"reference run not compared at L{entry['length']}: {'; '.join(entry['why'])}", file=sys.stderr)
    for row in check["rows"]:
        print(f"reference {row['id']}: measured {row['measured_ms']:.3f} ms, floor {row['floor_ms']:.3f} ms "
              f"({row['bound']}) -> x{row['ratio_to_floor']:.2f}; unfused estimate {row['unfused_floor_ms']:.3f} ms "
              f"-> x{row['ratio_to_unfused_floor']:.2f}", file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", action="append", type=Path, default=[],
                        help="an existing probe directory (model.mlpackage + manifest.json); repeatable")
    parser.add_argument("--source", default="builtin:mmbert-base-shape", help="source to export when no --package")
    parser.add_argument("--lengths", default="96,192,1024", help="bucket lengths to export when no --package")
    parser.add_argument("--kind", default="body", help="export kind when no --package")
    parser.add_argument("--per-op", action="store_true", help="include one record per op (large)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)

    chips = chip_table.load_chips()
    with tempfile.TemporaryDirectory(dir=args.output.parent, prefix=".cost-model-") as scratch:
        directories = list(args.package)
        if not directories:
            for length in (int(n) for n in args.lengths.split(",")):
                print(f"exporting {args.source} {args.kind} at L{length} ...", file=sys.stderr, flush=True)
                directories.append(export(args.source, args.kind, length, Path(scratch)))
        buckets = []
        for directory in directories:
            if not (directory / "manifest.json").exists():
                raise UsageError(f"{directory} is not a probe directory (no manifest.json)")
            print(f"costing {directory} ...", file=sys.stderr, flush=True)
            report = cost_model.cost_report(directory, per_op=args.per_op, chips=chips)
            buckets.append(bucket_entry(report, directory))
    buckets.sort(key=lambda b: b["length"])
    lengths = [b["length"] for b in buckets]
    if len(set(lengths)) != len(lengths):
        raise UsageError(f"two packages share a bucket length: {lengths}")

    body_costs, skipped = {}, []
    for bucket in buckets:
        mismatches = roofline.reference_model_mismatches(bucket["model_config"])
        if bucket["kind"] != "body" or mismatches:
            skipped.append({"length": bucket["length"], "kind": bucket["kind"],
                            "why": (["not a body package"] if bucket["kind"] != "body" else []) + mismatches})
            continue
        body_costs[bucket["length"]] = {"totals": bucket["totals"], "by_category": bucket["by_category"],
                                        "lxl": bucket["lxl"]}
    check = {**roofline.reference_check(body_costs, chips), "not_compared": skipped}
    reference_chip = reference_run.chip()
    evidence = {
        "format": FORMAT,
        "benchmark": "static cost model per bucket: FLOPs, bytes moved, roofline latency floors per chip",
        "label": LABEL,
        "conventions": cost_model.conventions(),
        "chips": json.loads(chip_table.CHIPS_PATH.read_text(encoding="utf-8")),
        "summary": summary_rows(buckets, reference_chip),
        "reference_check": check,
        "reference_run": reference_run.load(),
        "buckets": buckets,
        "provenance": {
            "packages": [{"length": b["length"], "kind": b["kind"], **b["package"]} for b in buckets],
            "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
        },
    }
    print_summary(evidence["summary"], check)
    write_evidence(args.output, evidence)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
