"""The evidence logic of benchmarks/recalibrate_reference_run.py (its docstring says what it measures and how to run
it).

Benchmark: re-export the reference-run layout and compare it with the committed calibration's programs, then
re-derive the calibration on the re-exported bodies.
"""

from __future__ import annotations

from pathlib import Path

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
