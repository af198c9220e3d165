"""The evidence logic of benchmarks/cost_model.py (its docstring says what it measures and how to run it).

Benchmark: a static cost model of the body package per bucket -- FLOPs, bytes moved, roofline floors per chip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ...placement import chips as chip_table
from ...placement import cost_model

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
