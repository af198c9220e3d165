"""Benchmark: re-export the reference-run layout and compare it with the committed calibration's programs, then
re-derive the calibration on the re-exported bodies.

The committed calibration (benchmarks/evidence/cost_calibration_mmbert_base_shape.json) was fitted on the dense
graph of the harness before its leaner layouts (git commit 48ff4e9) and records its programs' content hashes.
`--attention reference-run` restores that graph (model/bc1s/reference_attention.py, converted without the passes added
since: package/graph_passes.py AFTER_REFERENCE_RUN). This script exports builtin:mmbert-base-shape bodies in that layout
at the reference run's lengths (or takes them with --package), compares each program hash and op count with the
committed one, and fits the same two parameters to the same three measurements on them (benchmarks/cost_calibration.py's
fit).

    python benchmarks/recalibrate_reference_run.py \
        --output benchmarks/evidence/cost_calibration_reference_run_layout.json
    python benchmarks/recalibrate_reference_run.py --package /tmp/body-96 --package /tmp/body-1024 --output out.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core import reference_run  # noqa: E402
from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.json_documents import ANY_OBJECT, read_json  # noqa: E402
from experiments.ane_engineering.core.provenance import harness_fingerprint, machine, tool_versions  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.placement import calibration  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.cost_calibration import (  # noqa: E402
    costed_bodies,
    reference_bodies,
    reference_points,
)
from experiments.ane_engineering.workflows.benchmarks.recalibrate_reference_run import (  # noqa: E402
    COMMITTED_EXPORT_DATE,
    FORMAT,
    comparison,
    hash_with_date,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", action="append", type=Path, default=[],
                        help="an existing reference-run body probe directory; repeatable (default: export them)")
    parser.add_argument("--source", default="builtin:mmbert-base-shape", help="source to export when no --package")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)
    committed = read_json(calibration.EVIDENCE_PATH, ANY_OBJECT)
    with tempfile.TemporaryDirectory(dir=args.output.parent, prefix=".recalibration-") as scratch:
        directories = reference_bodies(args.package, args.source, Path(scratch), "--attention", "reference-run")
        costs, records = costed_bodies(directories)
        dated = {record["length"]: hash_with_date(directory, COMMITTED_EXPORT_DATE)
                 for record, directory in zip(records, sorted(directories, key=lambda d: read_json(
                     d / "manifest.json", ANY_OBJECT)["length"]))}
    chip = reference_run.chip()
    result = calibration.fit(reference_points(costs, records), chip)
    for point in result["points"]:
        point["terms"] = calibration.terms({"totals": point["totals"]}, chip, result["parameters"])
    result["derived"] = {"per_op_us": result["parameters"]["per_op_ms"] * 1e3}
    evidence = {"format": FORMAT, "benchmark": "reference-run layout re-exported and the calibration re-derived on it",
                "label": calibration.LABEL, "fit": result,
                "comparison": comparison(committed, records, costs, result, dated),
                "provenance": {"packages": records, "machine": machine(), "tools": tool_versions(),
                               "harness": harness_fingerprint()}}
    print(evidence["comparison"]["summary"], file=sys.stderr)
    write_evidence(args.output, evidence)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
