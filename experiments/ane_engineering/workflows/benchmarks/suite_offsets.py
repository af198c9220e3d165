"""Benchmark evidence: coremltools' op suite over every offset of one stride, assembled from the per-offset evidence.

Each input is an evidence file of benchmarks/executor_conformance.py that ran one offset K of a stride N
(`--sample-every N --sample-offset K`: the cases at index K, K+N, ... of every test function). A later input of the
same offset that ran some test files again (`--files`, after a fix) replaces those test files' counts: per offset
and test file, the last input given that ran the file counts. Per offset the assembly gives the counts, the input
each test file's counts come from, the failures left (a failure or error is unexplained: the explained cases are
the exclusions, skips with a reason) and the exclusions by reason. Across offsets it checks coverage: for every
test file, each offset collected the same cases, and the offsets together ran each of them exactly once (the sum
over offsets of the sampled cases equals the file's case count).
"""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

from ...core.errors import HarnessError
from ...core.provenance import harness_fingerprint, machine

FORMAT = "ane-engineering/evidence/executor-conformance-offsets/1"
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not_sampled")
SAMPLED = tuple(o for o in OUTCOMES if o != "not_sampled")


def test_file(case_or_class: str) -> str:
    """The test file of a per_test_class key or a failure's case id ("iOS14/test_conv.py::TestConv..." -> file)."""
    return case_or_class.split("::", 1)[0]


def file_counts(evidence: dict) -> dict[str, dict[str, int]]:
    """{test file: outcome counts} of one evidence file, from its per-test-class counts."""
    counts: dict[str, dict[str, int]] = collections.defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    for name, row in evidence["per_test_class"].items():
        for outcome in OUTCOMES:
            counts[test_file(name)][outcome] += row[outcome]
    return dict(counts)


def file_exclusions(evidence: dict) -> dict[str, dict[str, int]]:
    """{test file: {skip reason: cases}} of one evidence file."""
    found: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
    for exclusion in evidence["exclusions"]:
        for name, cases in exclusion["per_test_class"].items():
            found[test_file(name)][exclusion["reason"]] += cases
    return {name: dict(reasons) for name, reasons in found.items()}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assemble(paths: list[Path]) -> dict:
    """The evidence of all offsets of one stride (module docstring); refuses inputs of mixed strides or macOS
    versions, a missing offset, and any coverage gap or overlap."""
    if not paths:
        raise HarnessError("no evidence files given")
    loaded = []
    for path in paths:
        try:
            evidence = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise HarnessError(f"{path}: not a readable evidence file ({error})") from None
        selection = evidence.get("selection", {})
        if "sample_offset" not in selection or "per_test_class" not in evidence:
            raise HarnessError(f"{path}: not an executor_conformance evidence file with a sample offset")
        if selection.get("functions_failing_in"):
            raise HarnessError(f"{path}: ran single test functions (--functions-failing-in), not whole test files; "
                               "rerun whole files with --files to replace a file's counts")
        if evidence.get("selection", {}).get("files_not_run_budget"):
            raise HarnessError(f"{path}: its time budget left files out: "
                               + ", ".join(selection["files_not_run_budget"]))
        loaded.append((path, evidence))
    strides = {e["selection"]["sample_every"] for _, e in loaded}
    versions = {e["selection"]["macos_version_reported"] for _, e in loaded}
    if len(strides) != 1 or len(versions) != 1:
        raise HarnessError(f"the inputs mix strides {sorted(strides)} or macOS versions {sorted(versions)}: "
                           "assemble one stride at one version")
    stride, version = strides.pop(), versions.pop()
    offsets = {e["selection"]["sample_offset"] for _, e in loaded}
    missing = sorted(set(range(stride)) - offsets)
    if missing:
        raise HarnessError(f"no evidence for offset(s) {missing} of stride {stride}")

    per_offset: dict[int, dict] = {k: {"counts": {}, "cases": {}, "from": {}, "failures": {}, "exclusions": {}}
                                   for k in range(stride)}
    for path, evidence in loaded:  # later inputs replace earlier ones file by file
        room = per_offset[evidence["selection"]["sample_offset"]]
        counts, exclusions = file_counts(evidence), file_exclusions(evidence)
        for name, run in evidence["files"].items():
            room["counts"][name] = counts.get(name, dict.fromkeys(OUTCOMES, 0))
            room["cases"][name] = run["cases"]
            room["from"][name] = path.name
            room["failures"][name] = [f for f in evidence["failures"] if test_file(f["case"]) == name]
            room["exclusions"][name] = exclusions.get(name, {})

    coverage_problems = []
    all_files = sorted({name for room in per_offset.values() for name in room["cases"]})
    for name in all_files:
        collected = {k: room["cases"].get(name) for k, room in per_offset.items()}
        if len(set(collected.values())) != 1 or None in collected.values():
            coverage_problems.append(f"{name}: cases collected per offset {collected}")
            continue
        ran = sum(sum(room["counts"][name][o] for o in SAMPLED) for room in per_offset.values())
        if ran != collected[0]:
            coverage_problems.append(f"{name}: {ran} cases ran over the offsets, {collected[0]} collected")
    if coverage_problems:
        raise HarnessError("the offsets do not cover each case once: " + "; ".join(coverage_problems))

    offsets_out, grand = {}, dict.fromkeys(SAMPLED, 0)
    for k, room in per_offset.items():
        total = dict.fromkeys(OUTCOMES, 0)
        for row in room["counts"].values():
            for outcome in OUTCOMES:
                total[outcome] += row[outcome]
        reasons: dict[str, int] = collections.Counter()
        for per_file in room["exclusions"].values():
            reasons.update(per_file)
        failures = [f for name in sorted(room["failures"]) for f in room["failures"][name]]
        offsets_out[str(k)] = {
            "sample_offset": k,
            "total": total,
            "unexplained_failures": total["failed"] + total["error"],
            "failures": failures,
            "exclusions": dict(reasons.most_common()),
            "test_files_from": {name: room["from"][name] for name in sorted(room["from"])},
        }
        for outcome in SAMPLED:
            grand[outcome] += total[outcome]
    cases = sum(per_offset[0]["cases"].values())
    return {
        "format": FORMAT,
        "benchmark": "coremltools' MIL op test suite, every offset of one stride, assembled from the per-offset "
                     "evidence of benchmarks/executor_conformance.py",
        "goal": "every case of the suite run once over the offsets; 0 unexplained failures at every offset",
        "stride": stride,
        "macos_version_reported": version,
        "sources": [{"file": path.name, "sha256": _sha256(path), "sample_offset": e["selection"]["sample_offset"],
                     "test_files": len(e["files"]), "harness_sha256": e["harness"]["sha256"],
                     "tensorflow": e.get("suite_dependencies", {}).get("tensorflow"),
                     "wall_seconds": e["wall_seconds"]} for path, e in loaded],
        "offsets": offsets_out,
        "total": grand,
        "coverage": {"test_files": len(all_files), "cases": cases,
                     "cases_run": sum(grand[o] for o in SAMPLED), "each_case_once": True},
        "unexplained_failures": sum(room["unexplained_failures"] for room in offsets_out.values()),
        "machine": machine(),
        "harness": harness_fingerprint(),
    }


def summary(evidence: dict) -> str:
    lines = [(f"{evidence['coverage']['cases']} cases in {evidence['coverage']['test_files']} test "
              "files, each run once "
             f"over {evidence['stride']} offsets (macOS {evidence['macos_version_reported']} reported)")]
    for k, room in evidence["offsets"].items():
        t = room["total"]
        lines.append(f"offset {k}: {t['passed']} passed, {t['failed']} failed, {t['error']} errors, {t['skipped']} "
                     f"skipped, {t['xfailed']} xfailed, {t['xpassed']} xpassed; unexplained failures "
                     f"{room['unexplained_failures']}")
    return "\n".join(lines)
