"""Benchmark: coremltools' own MIL op test suite, its predictions run by the mil executor.

Runs every test file of coremltools/converters/mil/mil/ops/tests/iOS14 ... iOS18 (or those given with --files) in
pytest subprocesses with the plugin experiments/ane_engineering/run/mil/coremltools_suite.py, `--jobs` files at
a time, and writes one evidence file: pass/fail/skip counts per opset, per test class and per op type, every
failure with the first line of its error, every exclusion (skip) with its reason, the wall time, and the versions
and source hashes behind it. Cases that never reach a prediction (builder/type-inference-only cases) are counted
apart from the cases whose program the executor ran. A `--budget-seconds` stops starting new files once spent;
files not run are listed (the evidence then covers a documented subset).

    python benchmarks/executor_conformance.py --sample-every 4 --sample-offset 1 --macos-version 15.2 \
        --output benchmarks/evidence/executor_conformance_offset1.json     # one offset of four
    python benchmarks/executor_conformance.py --sample-every 4 --sample-offset 1 --macos-version 15.2 \
        --files iOS15/test_image_resizing.py --output benchmarks/evidence/executor_conformance_offset1_rerun.json
        # whole test files again after a fix (benchmarks/executor_conformance_offsets.py lets it replace them)
    python benchmarks/executor_conformance.py \
        --functions-failing-in benchmarks/evidence/executor_conformance_offset1.json \
        --output /tmp/failing_again.json     # only the failed functions, a quick look after a fix
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import write_evidence
from experiments.ane_engineering.core.provenance import (
    harness_fingerprint,
    machine,
    tool_versions,
)
from experiments.ane_engineering.core.staging import check_output

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "experiments.ane_engineering.run.mil.coremltools_suite"
OPSET_DIRS = ("iOS14", "iOS15", "iOS16", "iOS17", "iOS18")
UNSUPPORTED = re.compile(r"unsupported MIL op '?(\w+)'?")
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|root|home|work|Users|usr|opt|var|private)/[^\s'\"),;]*")


def redact(text: str) -> str:
    """A reason without the machine's paths (the temporary package a case converted to): evidence names none."""
    return MACHINE_PATH.sub("<path>", text)


def installed_version(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def suite_files(suite: Path, selected: list[str] | None) -> list[Path]:
    files = [p for d in OPSET_DIRS for p in sorted((suite / d).glob("test_*.py"))]
    if selected:
        files = [p for p in files if any(p.relative_to(suite).as_posix() == s for s in selected)]
    return files


def failing_functions(evidence: Path) -> dict[str, list[str]]:
    """{test file: [its test functions (node ids without parameters) with a failed case]} of an evidence file."""
    found: dict[str, set[str]] = collections.defaultdict(set)
    for failure in json.loads(evidence.read_text(encoding="utf-8"))["failures"]:
        function = failure["case"].split("[", 1)[0]
        found[function.split("::", 1)[0]].add(function)
    return {name: sorted(functions) for name, functions in sorted(found.items())}


def run_file(path: Path, report: Path, timeout: float, sample_every: int, sample_offset: int = 0,
             macos_version: str = "15.0", functions: list[str] | None = None) -> dict:
    """One pytest process over `path` (or only the given test functions of it: node ids under the suite)."""
    targets = [str(path.parent.parent / f) for f in functions] if functions else [str(path)]
    # -c: this checkout's pytest settings (its `pythonpath`), not those of a pyproject.toml above the installed suite
    command = [sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"), "-p", "no:cacheprovider",
               "-p", PLUGIN, "--mil-report",
               str(report), "--mil-sample-every", str(sample_every), "--mil-sample-offset", str(sample_offset),
               "--mil-macos-version", macos_version, "-o", "addopts=", "--rootdir", str(path.parent.parent), *targets]
    started = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        status, tail = done.returncode, done.stdout.strip().splitlines()[-1:] or [""]
    except subprocess.TimeoutExpired:
        status, tail = "timeout", [f"stopped after {timeout:.0f} s"]
    return {"exit_status": status, "summary": tail[0][:300], "seconds": round(time.perf_counter() - started, 1)}


def short_id(nodeid: str) -> str:
    """A case id without the directory prefix and coremltools' long parameter reprs."""
    nodeid = nodeid.split("/ops/tests/", 1)[-1]
    nodeid = nodeid.replace("compute_unit=ComputeUnit.CPU_ONLY-", "")
    nodeid = re.sub(r"backend=BackendConfig\(backend='(\w+)', precision='(\w+)', "
                    r"opset_version=<AvailableTarget\.(\w+): \d+>\)",
                    r"\1-\2-\3", nodeid)
    return nodeid


def test_class(nodeid: str) -> str:
    parts = short_id(nodeid).split("::")
    return "::".join(parts[:2]) if len(parts) > 2 else parts[0]


def opset_of(record: dict) -> str:
    if record.get("opset"):
        return record["opset"]
    directory = record["nodeid"].split("/ops/tests/", 1)[-1].split("/", 1)[0]
    return f"{directory} (no backend parameter)"


def summarise(records: list[dict]) -> dict:
    outcomes = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not_sampled")

    def counter():
        return {k: 0 for k in outcomes}

    by_opset: dict = collections.defaultdict(counter)
    by_class: dict = collections.defaultdict(counter)
    by_op: dict = collections.defaultdict(counter)
    predicted = counter()
    failures, skip_reasons, skipped_cases, xfails = [], collections.Counter(), collections.defaultdict(list), []
    unsupported = collections.Counter()
    for r in records:
        r["reason"] = redact(r["reason"])
        outcome = r["outcome"]
        by_opset[opset_of(r)][outcome] += 1
        by_class[test_class(r["nodeid"])][outcome] += 1
        if r["predicted"]:
            predicted[outcome] += 1
        if outcome == "not_sampled":
            continue
        for op in r["ops"]:
            by_op[op][outcome] += 1
        if outcome in ("failed", "error"):
            failures.append({"case": short_id(r["nodeid"]), "opset": opset_of(r), "reason": r["reason"]})
            for name in UNSUPPORTED.findall(r["reason"]):
                unsupported[name] += 1
        elif outcome == "skipped":
            skip_reasons[r["reason"]] += 1
            skipped_cases[r["reason"]].append(short_id(r["nodeid"]))
        elif outcome in ("xfailed", "xpassed"):
            xfails.append({"case": short_id(r["nodeid"]), "outcome": outcome, "coremltools_reason": r["reason"]})
    total = counter()
    for r in records:
        total[r["outcome"]] += 1
    ml_program = counter()  # the goal's population: cases with an mlprogram backend
    for r in records:
        if r["backend"] == "mlprogram":
            ml_program[r["outcome"]] += 1
    exclusions = []
    for reason, count in skip_reasons.most_common():
        cases = skipped_cases[reason]
        per_class = collections.Counter(test_class(c) for c in cases)
        exclusions.append({"reason": reason, "cases": count, "per_test_class": dict(sorted(per_class.items()))})
    return {
        "total": total,
        "ml_program_cases": ml_program,
        "executor_ran_program": predicted,
        "per_opset": dict(sorted(by_opset.items())),
        "per_test_class": dict(sorted(by_class.items())),
        "per_op_type": dict(sorted(by_op.items())),
        "failures": failures,
        "unsupported_ops_in_failures": dict(unsupported.most_common()),
        "exclusions": exclusions,
        "coremltools_xfail_marks": xfails,
    }


def redact_file(path: Path) -> None:
    """Apply `redact` to every string of an evidence file written before redaction existed (numbers untouched)."""
    def walk(value):
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    data = walk(json.loads(path.read_text(encoding="utf-8")))
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--files", nargs="*", default=None,
                        help="only these files, relative to the suite directory (e.g. iOS17/test_activation.py)")
    parser.add_argument("--jobs", type=int, default=2, help="test files run at once (one pytest process each)")
    parser.add_argument("--file-timeout", type=float, default=3600.0, help="seconds before one file is stopped")
    parser.add_argument("--sample-every", type=int, default=1,
                        help="run every Nth case of each test function (1 = all); the rest count as not_sampled")
    parser.add_argument("--sample-offset", type=int, default=0,
                        help="with --sample-every N: run the cases at index K, K+N, ... of each test function "
                             "(0 <= K < N); offsets 0..N-1 together cover every case")
    parser.add_argument("--macos-version", default="15.0",
                        help="the macOS version the plugin reports to coremltools (coremltools skips some cases "
                             "below 15.2)")
    parser.add_argument("--functions-failing-in", type=Path, default=None, metavar="EVIDENCE",
                        help="only the test functions with a failed case in that evidence file, with its sampling "
                             "(stride and offset): the same cases again, run by today's executor")
    parser.add_argument("--from-reports", type=Path, default=None, metavar="DIR",
                        help="run nothing: assemble the evidence from the per-file reports a stopped run left in DIR "
                             "(a file still running when it stopped holds the cases finished by then; files "
                             "without a report are listed as not run)")
    parser.add_argument("--budget-seconds", type=float, default=None,
                        help="start no new file after this many seconds; files not started are listed")
    args = parser.parse_args(argv)
    if args.sample_every < 1 or not 0 <= args.sample_offset < args.sample_every:
        parser.error(f"--sample-offset must be in [0, {args.sample_every}) and --sample-every at least 1")
    check_output(args.output)

    from experiments.ane_engineering.run.mil.coremltools_suite import suite_directory

    suite = suite_directory()
    functions = failing_functions(args.functions_failing_in) if args.functions_failing_in else None
    if functions is not None:
        earlier = json.loads(args.functions_failing_in.read_text(encoding="utf-8"))["selection"]
        args.sample_every, args.sample_offset = earlier["sample_every"], earlier.get("sample_offset", 0)
        args.macos_version = earlier.get("macos_version_reported", args.macos_version)
        args.files = list(functions)
    files = suite_files(suite, args.files)
    if not files:
        raise SystemExit("no test files selected")
    harness = harness_fingerprint()  # the source the subprocesses import, taken before they start
    started = time.perf_counter()
    results: dict[str, dict] = {}
    not_run: list[str] = []
    queue = list(files)
    lock = threading.Lock()
    if args.from_reports is not None:  # a run stopped before it wrote its evidence: its per-file reports
        for path in files:
            name = path.relative_to(suite).as_posix()
            report = args.from_reports / (name.replace("/", "__") + ".jsonl")
            if report.exists():
                results[name] = {"exit_status": "stopped or finished (assembled from its report)",
                                 "summary": "", "seconds": None,
                                 "records": [json.loads(line) for line in report.read_text().splitlines()]}
            else:
                not_run.append(name)
    with tempfile.TemporaryDirectory() as scratch:
        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    path = queue.pop(0)
                    if args.budget_seconds is not None and time.perf_counter() - started > args.budget_seconds:
                        not_run.append(path.relative_to(suite).as_posix())
                        continue
                name = path.relative_to(suite).as_posix()
                report = Path(scratch) / (name.replace("/", "__") + ".jsonl")
                result = run_file(path, report, args.file_timeout, args.sample_every, args.sample_offset,
                                  args.macos_version, functions.get(name) if functions else None)
                result["records"] = [json.loads(line) for line in report.read_text().splitlines()] \
                    if report.exists() else []
                with lock:
                    results[name] = result
                    print(f"{name}: {result['summary']} ({result['seconds']} s)", flush=True)

        threads = [threading.Thread(target=worker)
                   for _ in range(max(1, args.jobs) if args.from_reports is None else 0)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    records = [r for name in sorted(results) for r in results[name]["records"]]
    summary = summarise(records)
    evidence = {
        "format": "ane-engineering/evidence/executor-conformance/1",
        "benchmark": "coremltools' MIL op test suite (ops/tests/iOS14..iOS18), Core ML prediction replaced by the "
                     "mil executor (plugin experiments/ane_engineering/run/mil/coremltools_suite.py)",
        "goal": "0 failures among ML program cases; every exclusion listed with its reason",
        "selection": {"files_requested": [p.relative_to(suite).as_posix() for p in files],
                      "functions_failing_in": args.functions_failing_in.name if functions else None,
                      "functions": functions,
                      "files_not_run_budget": sorted(not_run), "budget_seconds": args.budget_seconds,
                      "sample_every": args.sample_every, "sample_offset": args.sample_offset,
                      "macos_version_reported": args.macos_version,
                      "sampling": "all cases" if args.sample_every == 1 else
                                  f"the cases at index {args.sample_offset}, {args.sample_offset + args.sample_every}, "
                                  f"{args.sample_offset + 2 * args.sample_every} ... (0-based) of every test function "
                                  "(pytest collection order); the others counted as not_sampled",
                      "backends": "coremltools' default: mlprogram fp16 for iOS15..iOS18 and neuralnetwork fp32 "
                                  "(the fp32 mlprogram cases need INCLUDE_MIL_FP32_UNIT_TESTS=1 and are not run)",
                      "complete_suite": not not_run and args.files is None and args.sample_every == 1},
        "nice": os.nice(0),
        "files": {name: {k: v for k, v in result.items() if k != "records"} | {"cases": len(result["records"])}
                  for name, result in sorted(results.items())},
        "wall_seconds": round(time.perf_counter() - started, 1) if args.from_reports is None else None,
        "assembled_from_reports": args.from_reports is not None,
        "jobs": args.jobs,
        **summary,
        # coremltools skips the cases whose expected values come from TensorFlow when it is absent
        "suite_dependencies": {"tensorflow": installed_version("tensorflow") or installed_version("tensorflow-cpu")},
        "machine": machine(), "tools": tool_versions(), "harness": harness,
    }
    write_evidence(args.output, evidence)
    t = summary["total"]
    print(f"{sum(t.values())} cases: {t['passed']} passed, {t['failed'] + t['error']} failed, {t['skipped']} skipped, "
          f"{t['xfailed']} xfailed, {t['xpassed']} xpassed; executor ran "
          f"{sum(summary['executor_ran_program'].values())} programs; {evidence['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
