"""Benchmark evidence: restructuring the `mil` executor changed no output bit.

Re-exports the committed builtin:tiny reproduce run's packages (body L96, L192, L1024 and palettized L96 candidates)
with the settings their committed manifests record, checks each against the manifest's package content hash (the
same package, byte for byte, as the committed run), then runs `validate --backend mil` on them twice: once with the
executor of a reference commit and once with the restructured commit, both extracted with `git archive`. Every
MILExecutor.run call is hashed (executor_call_record.py), and the validation JSON of both runs is compared field by
field (only timings and the harness fingerprint may differ). The fp16-strict mode, which validate does not use,
runs on the first recorded L96 input with both executors.
"""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
from pathlib import Path
from typing import Callable

from ...core.json_documents import BOOLEAN, open_object, read_json
from ...core.provenance import REPOSITORY_ROOT, harness_fingerprint, machine, tool_versions
from .executor_call_record import LAYOUTS
from .steps import BenchmarkError, command_argv, run_command

FORMAT = "ane-engineering/executor-bit-identity/1"
RUN = REPOSITORY_ROOT / "benchmarks" / "evidence" / "reproduce-builtin-tiny"
WORKER = Path(__file__).with_name("executor_call_record.py")
SOURCE = "builtin:tiny"
LENGTHS = (96, 192, 1024)
CANDIDATES = ("w8-kmeans-g32", "w4-kmeans-g16", "w6-uniform-g32")  # the best passing one, the smallest, a uniform one
VOLATILE = ("machine", "tools", "harness", "seconds", "load_seconds", "read_seconds", "compile_seconds", "threads")
CALIBRATION = "benchmarks/evidence/cost_calibration_mmbert_base_shape.json"  # `probe --attention auto` reads it
RECORD_SCHEMA = open_object({"calls": {"type": "object"}})
VALIDATION_SCHEMA = open_object({"passed": BOOLEAN})


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["git", *args], cwd=REPOSITORY_ROOT, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise BenchmarkError(f"git {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done


def extract_tree(commit: str, into: Path) -> str:
    """The tree's experiments/ at `commit`, with the cost calibration evidence when the commit has it (exports with
    an automatic attention layout read it); returns the full commit hash."""
    full = git("rev-parse", "--verify", f"{commit}^{{commit}}").stdout.strip()
    into.mkdir(parents=True)
    archive = into / "tree.tar"
    paths = ["experiments"] + ([CALIBRATION] if git("cat-file", "-e", f"{full}:{CALIBRATION}", check=False)
                               .returncode == 0 else [])
    git("archive", "--format=tar", "-o", str(archive), full, *paths)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return full


def executor_sources_sha256(tree: Path) -> str:
    """SHA256 over the executor's source files (relative path and bytes), in the layout the tree has."""
    folder = next((tree / sources for _, _, sources in LAYOUTS if (tree / sources).is_dir()), None)
    if folder is None:
        raise BenchmarkError(f"{tree} holds no mil executor in any known layout")
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(str(path.relative_to(tree)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def differences(a, b, path="") -> list[str]:
    """Paths where two JSON documents differ, ignoring the VOLATILE keys anywhere."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key in VOLATILE:
                continue
            if key not in a or key not in b:
                out.append(f"{path}/{key} (present in one only)")
            else:
                out.extend(differences(a[key], b[key], f"{path}/{key}"))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path or "/"]


def _in_tree(argv: list[str], tree: Path, what: str, progress: Callable[[str], None]) -> None:
    _, seconds = run_command(argv, what, root=tree, cwd=tree)
    progress(f"[bit-identity] {what}: {seconds:.0f} s")


def export_packages(work: Path, tree: Path, reuse: Path | None, progress: Callable[[str], None]) -> dict:
    """The committed run's body and candidate packages, re-exported by `tree` into `work` (or taken from an earlier
    run's `reuse` directory), each with the content hash its committed manifest records and the one it has."""
    from ...package.package_hash import package_content_hash

    schema = open_object({"package": open_object({"content_hash": open_object({})})})
    packages: dict[str, dict] = {}
    if reuse is not None:  # packages exported by an earlier run (their content hashes are still checked below)
        work = reuse
    else:
        (work / "packages").mkdir()
        (work / "candidates").mkdir()
    for length in LENGTHS:
        out = work / "packages" / f"body-{length}"
        if reuse is None:
            _in_tree(command_argv("probe", "--kind", "body", "--length", str(length), "--source", SOURCE, "--output",
                                  str(out), "--require-ane", "--quiet"), tree, f"export body L{length}", progress)
        packages[out.name] = {"dir": out, "committed": RUN / "packages" / out.name / "manifest.json"}
    for name in CANDIDATES:
        bits, mode, group = name.split("-")
        out = work / "candidates" / name
        committed = read_json(RUN / "sweep" / "candidates" / name / "palettize.json",
                              open_object({"compression": open_object({})}))["compression"]
        if reuse is None:
            _in_tree(command_argv("palettize", "--package", str(work / "packages" / "body-96"), "--bits", bits[1:],
                                  "--mode", mode, "--group-size", group[1:], "--workers", "1", "--implementation",
                                  committed["implementation"], "--output", str(out)), tree, f"palettize {name}",
                     progress)
        packages[name] = {"dir": out, "committed": RUN / "sweep" / "candidates" / name / "manifest.json"}
    for entry in packages.values():
        want = read_json(entry["committed"], schema)["package"]["content_hash"]["sha256"]
        got = package_content_hash(entry["dir"] / "model.mlpackage")["sha256"]
        entry.update(committed_sha256=want, reexported_sha256=got, same_as_committed_run=(want == got))
    return packages


def bit_identity_evidence(reference: str, restructured: str, work: Path, packages_from: Path | None = None,
                          progress: Callable[[str], None] = lambda line: None) -> dict:
    """The evidence document comparing the executors of commits `reference` and `restructured`; `work` is a new
    scratch directory (trees, packages, validation files)."""
    work.mkdir(parents=True)
    # both trees extracted from commits, so edits to this checkout while it runs cannot leak into the comparison
    trees = {"reference": work / "reference-tree", "restructured": work / "restructured-tree"}
    commits = {label: extract_tree(commit, trees[label])
               for label, commit in (("reference", reference), ("restructured", restructured))}
    packages = export_packages(work, trees["restructured"], packages_from, progress)
    golden = RUN / "golden.json"
    strict_inputs = work / "strict-inputs-body-96.npz"
    runs: dict[str, dict] = {}
    for label, tree in trees.items():  # the reference first: it records the fp16-strict inputs
        runs[label] = {"tree": str(tree), "executor_sources_sha256": executor_sources_sha256(tree), "validations": {}}
        jobs = {"buckets": [a for n in (f"body-{length}" for length in LENGTHS)
                            for a in ("--package", str(packages[n]["dir"]))]}
        jobs.update({name: ["--package", str(packages[name]["dir"])] for name in CANDIDATES})
        for job, package_args in jobs.items():
            record, validation = work / f"{label}-{job}.record.json", work / f"{label}-{job}.validation.json"
            command = [str(WORKER), "--record", str(record)]
            if job == "buckets":
                command += ["--strict-package", str(packages["body-96"]["dir"]), "--strict-inputs", str(strict_inputs)]
            command += ["--", *package_args, "--source", SOURCE, "--golden", str(golden), "--backend", "mil",
                        "--output", str(validation)]
            _in_tree(command, tree, f"{label} validate {job}", progress)
            runs[label]["validations"][job] = {"record": read_json(record, RECORD_SCHEMA),
                                               "validation": read_json(validation, VALIDATION_SCHEMA)}
    comparisons = {job: compare(job, runs["reference"]["validations"][job], runs["restructured"]["validations"][job])
                   for job in runs["reference"]["validations"]}
    identical = all(c["executor_calls_identical"] and not c["validation_differences"]
                    and c.get("fp16_strict", {"identical": True})["identical"] for c in comparisons.values())
    return {
        "format": FORMAT,
        "question": "does the restructured mil executor give the same outputs, bit for bit, as the reference one on "
                    "the committed builtin:tiny reproduce run's packages?",
        "identical": identical,
        **{label: {"commit": commits[label], "executor_sources_sha256": runs[label]["executor_sources_sha256"]}
           for label in trees},
        "packages": {name: {"committed_manifest": str(p["committed"].relative_to(REPOSITORY_ROOT)),
                            "content_sha256": p["reexported_sha256"],
                            "same_as_committed_run": p["same_as_committed_run"]} for name, p in packages.items()},
        "comparisons": comparisons,
        "method": "each executor call's inputs and outputs hashed in call order (names, dtypes, shapes, bytes) during "
                  "`validate --backend mil` with the default repeats; fp16-strict on the first L96 input; validation "
                  f"JSON compared ignoring {list(VOLATILE)}",
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }


def compare(job: str, ref: dict, new: dict) -> dict:
    """One job's comparison: executor call hashes, validation fields, and the committed run's validation."""
    committed_path = RUN / "validation.json" if job == "buckets" else \
        RUN / "sweep" / "candidates" / job / "validation.json"
    committed = read_json(committed_path, VALIDATION_SCHEMA)
    comparison = {
        "executor_calls": new["record"]["calls"],
        "executor_calls_identical": ref["record"]["calls"] == new["record"]["calls"],
        "validation_differences": differences(ref["validation"], new["validation"]),
        "passed": {"reference": ref["validation"]["passed"], "restructured": new["validation"]["passed"]},
        "differences_from_committed_validation": differences(committed, new["validation"]),
        "committed_validation": str(committed_path.relative_to(REPOSITORY_ROOT)),
    }
    if "fp16_strict" in new["record"]:
        comparison["fp16_strict"] = {"reference": ref["record"]["fp16_strict"],
                                     "restructured": new["record"]["fp16_strict"],
                                     "identical": ref["record"]["fp16_strict"] == new["record"]["fp16_strict"]}
    return comparison

