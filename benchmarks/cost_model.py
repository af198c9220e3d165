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
    tool_versions,
)
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.placement import chips as chip_table  # noqa: E402
from experiments.ane_engineering.placement import cost_model, roofline  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.cost_model import (  # noqa: E402
    FORMAT,
    LABEL,
    bucket_entry,
    export,
    print_summary,
    summary_rows,
)


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
