"""Benchmark: re-export the reference-run layout and compare it with the committed calibration's programs, then
re-derive the calibration on the re-exported bodies.

The committed calibration (benchmarks/evidence/cost_calibration_mmbert_base_shape.json) was fitted on the dense
graph of the harness before issue 14 and records its programs' content hashes. `--attention reference-run` restores
that graph (model/bc1s/reference_attention.py, converted without the passes added since: package/graph_passes.py
AFTER_REFERENCE_RUN). This script exports builtin:mmbert-base-shape bodies in that layout at the reference run's
lengths (or takes them with --package), compares each program hash and op count with the committed one, and fits the
same two parameters to the same three measurements on them (benchmarks/cost_calibration.py's fit).

    python benchmarks/recalibrate_reference_run.py --output benchmarks/evidence/cost_calibration_reference_run_layout.json
    python benchmarks/recalibrate_reference_run.py --package /tmp/body-96 --package /tmp/body-1024 --output out.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cost_calibration import costed_bodies, reference_points  # noqa: E402
from benchmarks.cost_model import export  # noqa: E402
from experiments.ane_engineering.core import reference_run  # noqa: E402
from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.json_documents import ANY_OBJECT, read_json  # noqa: E402
from experiments.ane_engineering.core.provenance import harness_fingerprint, machine, tool_versions  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.placement import calibration  # noqa: E402

FORMAT = "ane-engineering/evidence/reference-run-recalibration/1"
DATE_KEY = "com.github.apple.coremltools.conversion_date"
# The day the committed calibration's bodies were exported (git log of its evidence: commit de764ff, 2026-12-01).
COMMITTED_EXPORT_DATE = "2026-12-01"


def hash_with_date(package_dir: Path, date: str) -> dict:
    """The package content hash with coremltools' conversion-date metadata set to `date`: coremltools stamps the day
    of conversion into model.mlmodel, which the content hash covers, so no re-export on another day can give a
    committed hash; this is the hash the same bytes would have had on `date`."""
    import hashlib

    from coremltools.proto import Model_pb2

    from experiments.ane_engineering.package.package_hash import combine, package_content_hash

    package = package_dir / "model.mlpackage"
    files = dict(package_content_hash(package)["files"])
    name = next(k for k in files if k.endswith(".mlmodel"))
    model = Model_pb2.Model()
    model.ParseFromString((package / name).read_bytes())
    stamped = model.description.metadata.userDefined.get(DATE_KEY)
    model.description.metadata.userDefined[DATE_KEY] = date
    files[name] = hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()
    return {"conversion_date": stamped, "as_of": date, "sha256": combine(files)}


def comparison(committed: dict, records: list[dict], costs: dict[int, dict], fit: dict,
               dated: dict[int, dict]) -> dict:
    by_length = {p["length"]: p for p in committed["provenance"]["packages"]}
    committed_ops = {p["length"]: p["totals"]["non_constant_ops"] for p in committed["fit"]["points"]}
    programs = []
    for record in records:
        length = record["length"]
        old = by_length.get(length, {})
        programs.append({"length": length, "committed_sha256": old.get("content_sha256"),
                         "reexported_sha256": record["content_sha256"],
                         "identical": old.get("content_sha256") == record["content_sha256"],
                         "dated": dated[length],
                         "identical_as_of_committed_date": old.get("content_sha256") == dated[length]["sha256"],
                         "export_harness_sha256": record["export_harness_sha256"],
                         "committed_ops": committed_ops.get(length),
                         "reexported_ops": costs[length]["totals"]["non_constant_ops"]})
    identical = all(p["identical"] for p in programs)
    if not identical and all(p["identical_as_of_committed_date"] for p in programs):
        summary = ("The re-exported programs are the committed calibration's byte for byte except coremltools' "
                   "conversion-date stamp: with the date set to the committed export's day their content hashes are "
                   "the committed ones.")
    elif any(p["identical_as_of_committed_date"] for p in programs):
        same = ", ".join(f"L{p['length']}" for p in programs if p["identical_as_of_committed_date"])
        other = ", ".join(f"L{p['length']}" for p in programs if not p["identical_as_of_committed_date"])
        summary = (f"{same}: the re-exported program is the committed calibration's byte for byte except coremltools' "
                   f"conversion-date stamp (with the date set to the committed export's day the content hash is the "
                   f"committed one). {other}: differs; compare export_harness_sha256, the harness that exported it; "
                   "where the op counts and totals agree the difference is in names, and the re-derived fit is the "
                   "same.")
    elif identical:
        summary = ("The re-exported programs are byte-identical to the committed calibration's (same content hashes), "
                   "so the committed calibration describes exactly what `--attention reference-run` exports.")
    else:
        summary = ("The re-exported programs differ from the committed calibration's; the calibration is re-derived "
                   "on them below. Where the op counts agree, the programs differ in names or constants only; where "
                   "they differ, the ops the restored layout lacks or adds are what changed since the reference run.")
    return {"programs": programs, "identical": identical, "summary": summary,
            "committed_per_op_us": committed["fit"]["derived"]["per_op_us"],
            "committed_traffic_factor": committed["fit"]["parameters"]["traffic_factor"],
            "committed_harness_sha256": committed["provenance"]["harness"]["sha256"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", action="append", type=Path, default=[],
                        help="an existing reference-run body probe directory; repeatable (default: export them)")
    parser.add_argument("--source", default="builtin:mmbert-base-shape", help="source to export when no --package")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)
    committed = read_json(calibration.EVIDENCE_PATH, ANY_OBJECT)
    lengths = sorted({m["length"] for m in reference_run.load()["timings"]["measurements"]})
    with tempfile.TemporaryDirectory(dir=args.output.parent, prefix=".recalibration-") as scratch:
        directories = list(args.package)
        if not directories:
            for length in lengths:
                print(f"exporting {args.source} body at L{length} (reference-run) ...", file=sys.stderr, flush=True)
                directories.append(export(args.source, "body", length, Path(scratch), "--attention", "reference-run"))
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
