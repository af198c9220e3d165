"""Benchmark: dense vs windowed local attention at L96, L192 and L1024 -- predictions and a `mil` timing ratio.

For each attention layout (`probe --attention dense|windowed`) and bucket, exports the body of
builtin:mmbert-base-shape (one probe process at a time, into a temporary directory beside the output), counts it
with the static cost model (placement/cost_model.py) and predicts its body and whole-request latency on every chip
with the calibrated model (placement/calibration.py: roofline floor + per-op and per-byte terms fitted to the
reference run's dense measurements only; nothing is tuned on the windowed graph). Then, at L1024, times the two
bodies on the `mil` executor alternating call by call in one process (ABBA order) and records the windowed / dense
ratio per pair and its median: the numpy executor's time, not the Neural Engine's. With --scan-tiles, also exports
the windowed L1024 body at each tile size and records its prediction (the argument for the default tile).

    python benchmarks/long_attention.py --output benchmarks/evidence/long_attention_mmbert_base_shape.json

or with existing probe directories (LAYOUT=DIR, one per layout and bucket):

    python benchmarks/long_attention.py --package dense=/tmp/d96 --package windowed=/tmp/w96 ... --output out.json

Predictions are labelled as such; refuses an existing output file.
"""

from __future__ import annotations

import argparse
import hashlib
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
from experiments.ane_engineering.core.provenance import (  # noqa: E402
    harness_fingerprint,
    machine,
    portable_path,
    tool_versions,
)
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.placement import calibration, cost_model, roofline  # noqa: E402
from experiments.ane_engineering.placement import chips as chip_table  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.long_attention import (  # noqa: E402
    FORMAT,
    LAYOUTS,
    LENGTHS,
    MIL_LENGTH,
    bucket_entry,
    comparison,
    export,
    layout_of,
    measure_mil_ratio,
    parse_packages,
    report_attention,
    tile_scan,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", action="append", default=[], metavar="LAYOUT=DIR",
                        help="an existing body probe directory of one layout; repeatable (default: export them)")
    parser.add_argument("--source", default="builtin:mmbert-base-shape", help="source to export when no --package")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="layouts to export when no --package")
    parser.add_argument("--mil-warmup", type=int, default=1, help="untimed calls of each body before timing")
    parser.add_argument("--mil-calls", type=int, default=5, help="timed calls of each body (ABBA-interleaved)")
    parser.add_argument("--scan-tiles", default="32,64,128,256",
                        help="tile sizes to export and predict at L1024 when exporting (empty: no scan)")
    parser.add_argument("--calibration", type=Path, default=calibration.EVIDENCE_PATH,
                        help="calibration evidence (benchmarks/cost_calibration.py)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)
    fit = calibration.load_calibration(args.calibration)
    chips = chip_table.load_chips()
    chip = reference_run.chip()
    evidence_dir = args.output.parent

    with tempfile.TemporaryDirectory(dir=evidence_dir, prefix=".long-attention-") as scratch:
        packages = parse_packages(args.package)
        if not args.package:
            for layout in args.layouts.split(","):
                if layout not in LAYOUTS:
                    raise UsageError(f"unknown layout {layout!r}")
                for length in LENGTHS:
                    print(f"exporting {args.source} {layout} body at L{length} ...", file=sys.stderr, flush=True)
                    packages[layout].append(export(args.source, layout, length, Path(scratch)))
        layouts = {}
        for layout, directories in packages.items():
            if not directories:
                continue
            buckets = {}
            for directory in directories:
                recorded = layout_of(directory)
                if recorded is not None and recorded != layout:
                    raise UsageError(f"{directory}: manifest records attention {recorded!r}, given as {layout!r}")
                print(f"costing {layout} {directory} ...", file=sys.stderr, flush=True)
                report = cost_model.cost_report(directory, chips=chips)
                problems = roofline.reference_model_mismatches(report["manifest"].get("model_config"))
                if report["manifest"]["kind"] != "body" or problems:
                    raise UsageError(f"{directory}: not a body package of the reference model ({'; '.join(problems)})")
                entry = bucket_entry(report, directory, evidence_dir, chips, fit["parameters"], chip)
                entry["package"]["attention_recorded"] = recorded
                entry["package"]["attention"] = report_attention(directory)
                if str(entry["length"]) in buckets:
                    raise UsageError(f"two {layout} packages at L{entry['length']}")
                buckets[str(entry["length"])] = entry
            layouts[layout] = {"buckets": dict(sorted(buckets.items(), key=lambda item: int(item[0])))}

        mil = None
        if all(str(MIL_LENGTH) in layouts.get(layout, {}).get("buckets", {}) for layout in LAYOUTS):
            at = {layout: next(d for d in packages[layout]
                               if layouts[layout]["buckets"][str(MIL_LENGTH)]["package"]["directory"]
                               == portable_path(d, evidence_dir)) for layout in LAYOUTS}
            print(f"timing dense vs windowed at L{MIL_LENGTH} on mil ...", file=sys.stderr, flush=True)
            mil = measure_mil_ratio(at["dense"], at["windowed"], args.source, args.mil_warmup, args.mil_calls)

        scan = None
        if not args.package and args.scan_tiles and str(MIL_LENGTH) in layouts.get("windowed", {}).get("buckets", {}):
            scan = tile_scan(args.source, [int(t) for t in args.scan_tiles.split(",")], Path(scratch),
                             layouts["windowed"]["buckets"][str(MIL_LENGTH)], evidence_dir, chips, fit["parameters"],
                             chip)

    calibration_bytes = Path(args.calibration).read_bytes()
    evidence = {
        "format": FORMAT,
        "benchmark": "dense vs windowed local attention: calibrated latency predictions per bucket, mil time ratio",
        "label": calibration.LABEL,
        "chip": chip,
        "calibration": {"file": portable_path(args.calibration, evidence_dir),
                        "sha256": hashlib.sha256(calibration_bytes).hexdigest(), **fit,
                        "note": "fitted to the reference run's dense measurements only; not tuned on any windowed "
                                "graph"},
        "layouts": layouts,
        "comparison": (comparison(layouts["windowed"]["buckets"][str(MIL_LENGTH)],
                                  layouts["dense"]["buckets"][str(MIL_LENGTH)])
                       if all(str(MIL_LENGTH) in layouts.get(lay, {}).get("buckets", {}) for lay in LAYOUTS)
                       else None),
        "tile_scan": scan,
        "measured_mil_ratio": mil["ratio_p50"] if mil else None,
        "mil_timing": mil,
        "reference_run": {"citation": reference_run.citation(), "mlx": reference_run.load()["timings"]["mlx"]},
        "provenance": {"machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint()},
    }
    for layout, entry in layouts.items():
        for length, bucket in entry["buckets"].items():
            print(f"{layout:>8} L{length:>4}: body {bucket['predicted_body_ms']:.2f} ms, request "
                  f"{bucket['predicted_request_ms']:.2f} ms, {bucket['gflop']:.1f} GFLOP, "
                  f"{bucket['unfused_mb']:.0f} MB unfused, {bucket['non_constant_ops']} ops", file=sys.stderr)
    if mil:
        print(f"measured_mil_ratio (windowed/dense, p50 of {mil['calls']} pairs): {mil['ratio_p50']:.3f}",
              file=sys.stderr)
    write_evidence(args.output, evidence)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
