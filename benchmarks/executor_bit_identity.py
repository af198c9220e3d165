"""Evidence: restructuring the `mil` executor changed no output bit (issue 15: the split of execute/ops.py).

Re-exports the committed builtin:tiny reproduce run's packages (body L96, L192, L1024 and palettized L96 candidates)
with the settings their committed manifests record, checks each against the manifest's package content hash (the
same package, byte for byte, as the committed run), then runs `validate --backend mil` on them twice: once with the
executor of a reference commit (extracted with `git archive`, default: main before the split) and once with this
tree. Every MILExecutor.run call is hashed (input and output names, dtypes, shapes and bytes, in call order), and
the validation JSON of both runs is compared field by field (only timings and the harness fingerprint may differ).
The fp16-strict mode, which validate does not use, runs on the first recorded L96 input with both executors.

    python benchmarks/executor_bit_identity.py --work /tmp/bit-identity \
        --output benchmarks/evidence/executor_bit_identity.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if "--worker" not in sys.argv:  # a worker imports the tree on its PYTHONPATH, never this checkout
    sys.path.insert(0, str(REPO))

RUN = REPO / "benchmarks" / "evidence" / "reproduce-builtin-tiny"
SOURCE = "builtin:tiny"
LENGTHS = (96, 192, 1024)
CANDIDATES = ("w8-kmeans-g32", "w4-kmeans-g16", "w6-uniform-g32")  # the best passing one, the smallest, a uniform one
VOLATILE = ("machine", "tools", "harness", "seconds", "load_seconds", "read_seconds", "compile_seconds", "threads")


# ----------------------------------------------------------------------------------------------- worker (either tree)

def _hash_arrays(digest, arrays: dict) -> None:
    import numpy as np

    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())


def _signature(program) -> str:
    """A package's input names and shapes: what tells the bucket packages apart inside one validate run."""
    return "; ".join(f"{t.name}{tuple(t.shape)}" for t in program.inputs)


def worker(args) -> int:
    """Runs inside the tree on PYTHONPATH: validate through mil, every executor call hashed."""
    import numpy as np

    from experiments.ane_engineering.run.mil import executor as executor_module
    from experiments.ane_engineering.package.mil.load import load_program
    from experiments.ane_engineering.validate import main as validate_main

    # validate runs private copies of the packages: calls are keyed by the package's input shapes (one per bucket)
    packages = [Path(a) for flag, a in zip(args.validate, args.validate[1:]) if flag == "--package"]
    names = {_signature(load_program(p / "model.mlpackage")): p.name for p in packages}
    log: dict[str, dict] = {}
    first_inputs: dict = {}
    original = executor_module.MILExecutor.run

    def recording_run(self, inputs, **kwargs):
        outputs = original(self, inputs, **kwargs)
        name = names[_signature(self)]
        entry = log.setdefault(name, {"calls": 0, "digest": hashlib.sha256()})
        entry["calls"] += 1
        _hash_arrays(entry["digest"], inputs)
        _hash_arrays(entry["digest"], outputs)
        first_inputs.setdefault(name, {k: np.array(v) for k, v in inputs.items()})
        return outputs

    executor_module.MILExecutor.run = recording_run
    status = validate_main(args.validate)
    record = {"executor_module": executor_module.__file__, "validate_status": status,
              "calls": {k: {"calls": v["calls"], "sha256": v["digest"].hexdigest()} for k, v in log.items()}}
    if args.strict_package:
        name = Path(args.strict_package).name
        if not Path(args.strict_inputs).exists():  # the first run (reference) records them
            np.savez(args.strict_inputs, **first_inputs[name])
        feeds = dict(np.load(args.strict_inputs, allow_pickle=False))
        strict = executor_module.MILExecutor(Path(args.strict_package) / "model.mlpackage", mode="fp16-strict")
        outputs = original(strict, feeds)
        digest = hashlib.sha256()
        _hash_arrays(digest, feeds)
        _hash_arrays(digest, outputs)
        record["fp16_strict"] = {"package": name, "sha256": digest.hexdigest()}
    Path(args.record).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


# ----------------------------------------------------------------------------------------------- driver

def _run(command: list[str], tree: Path, what: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree))
    started = time.perf_counter()
    done = subprocess.run(command, check=False, cwd=tree, env=env, capture_output=True, text=True)
    print(f"[bit-identity] {what}: exit {done.returncode} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")


def extract_tree(commit: str, into: Path) -> str:
    """The tree's experiments/ at `commit`, with the cost calibration evidence when the commit has it (exports with
    an automatic attention layout read it); returns the full commit hash."""
    full = subprocess.run(["git", "rev-parse", commit], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()
    into.mkdir(parents=True)
    archive = into / "tree.tar"
    paths = ["experiments"]
    calibration = "benchmarks/evidence/cost_calibration_mmbert_base_shape.json"  # `probe --attention auto` reads it
    if subprocess.run(["git", "cat-file", "-e", f"{full}:{calibration}"], cwd=REPO, capture_output=True).returncode == 0:
        paths.append(calibration)
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), full, *paths], cwd=REPO, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return full


def executor_sources_sha256(tree: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted((tree / "experiments" / "ane_engineering" / "execute").rglob("*.py")):
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


def export_packages(work: Path, tree: Path, reuse: Path | None) -> dict:
    from experiments.ane_engineering.package.package_hash import package_content_hash
    from experiments.ane_engineering.core.json_documents import open_object, read_json

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
            _run([sys.executable, "-m", "experiments.ane_engineering.probe", "--kind", "body", "--length", str(length),
                  "--source", SOURCE, "--output", str(out), "--require-ane", "--quiet"], tree, f"export body L{length}")
        packages[out.name] = {"dir": out, "committed": RUN / "packages" / out.name / "manifest.json"}
    for name in CANDIDATES:
        bits, mode, group = name.split("-")
        out = work / "candidates" / name
        committed = read_json(RUN / "sweep" / "candidates" / name / "palettize.json",
                              open_object({"compression": open_object({})}))["compression"]
        if reuse is None:
            _run([sys.executable, "-m", "experiments.ane_engineering.palettize", "--package",
                  str(work / "packages" / "body-96"), "--bits", bits[1:], "--mode", mode, "--group-size", group[1:],
                  "--workers", "1", "--implementation", committed["implementation"], "--output", str(out)],
                 tree, f"palettize {name}")
        packages[name] = {"dir": out, "committed": RUN / "sweep" / "candidates" / name / "manifest.json"}
    for entry in packages.values():
        want = read_json(entry["committed"], schema)["package"]["content_hash"]["sha256"]
        got = package_content_hash(entry["dir"] / "model.mlpackage")["sha256"]
        entry.update(committed_sha256=want, reexported_sha256=got, same_as_committed_run=(want == got))
    return packages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", default="48ff4e9", help="commit whose executor is the reference (default: "
                        "main before the split of execute/ops.py)")
    parser.add_argument("--restructured", default="HEAD", help="commit whose executor is compared (default HEAD)")
    parser.add_argument("--work", type=Path, help="new scratch directory (packages, trees, validation files)")
    parser.add_argument("--output", type=Path, help="evidence JSON (refused if it exists)")
    parser.add_argument("--packages-from", type=Path, help="--work of an earlier run: reuse its exported packages")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--record", help=argparse.SUPPRESS)
    parser.add_argument("--strict-package", help=argparse.SUPPRESS)
    parser.add_argument("--strict-inputs", help=argparse.SUPPRESS)
    parser.add_argument("validate", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    from experiments.ane_engineering.core.cli import atomic_file
    from experiments.ane_engineering.core.provenance import (
        harness_fingerprint,
        machine,
        tool_versions,
    )
    from experiments.ane_engineering.core.staging import check_output
    from experiments.ane_engineering.core.json_documents import (
        BOOLEAN,
        open_object,
        read_json,
    )

    record_schema = open_object({"calls": {"type": "object"}})
    validation_schema = open_object({"passed": BOOLEAN})

    if args.work is None or args.output is None:
        parser.error("--work and --output are required")
    output = check_output(args.output)
    work = check_output(args.work)
    work.mkdir(parents=True)
    # both trees extracted from commits, so edits to this checkout while it runs cannot leak into the comparison
    trees = {"reference": work / "reference-tree", "restructured": work / "restructured-tree"}
    commits = {label: extract_tree(commit, trees[label])
               for label, commit in (("reference", args.reference), ("restructured", args.restructured))}
    packages = export_packages(work, trees["restructured"], args.packages_from)
    golden = RUN / "golden.json"
    strict_inputs = work / "strict-inputs-body-96.npz"
    runs: dict[str, dict] = {}
    for label, tree in trees.items():  # the reference first: it records the fp16-strict inputs
        runs[label] = {"tree": str(tree), "executor_sources_sha256": executor_sources_sha256(tree), "validations": {}}
        jobs = {"buckets": [a for n in (f"body-{length}" for length in LENGTHS) for a in ("--package", str(packages[n]["dir"]))]}
        jobs.update({name: ["--package", str(packages[name]["dir"])] for name in CANDIDATES})
        for job, package_args in jobs.items():
            record, validation = work / f"{label}-{job}.record.json", work / f"{label}-{job}.validation.json"
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--record", str(record)]
            if job == "buckets":
                command += ["--strict-package", str(packages["body-96"]["dir"]), "--strict-inputs", str(strict_inputs)]
            command += ["--", *package_args, "--source", SOURCE, "--golden", str(golden), "--backend", "mil",
                        "--output", str(validation)]
            _run(command, tree, f"{label} validate {job}")
            runs[label]["validations"][job] = {"record": read_json(record, record_schema),
                                               "validation": read_json(validation, validation_schema)}
    comparisons = {}
    for job in runs["reference"]["validations"]:
        ref, new = runs["reference"]["validations"][job], runs["restructured"]["validations"][job]
        committed_path = RUN / "validation.json" if job == "buckets" else RUN / "sweep" / "candidates" / job / "validation.json"
        committed = read_json(committed_path, validation_schema)
        calls_equal = ref["record"]["calls"] == new["record"]["calls"]
        comparisons[job] = {
            "executor_calls": new["record"]["calls"],
            "executor_calls_identical": calls_equal,
            "validation_differences": differences(ref["validation"], new["validation"]),
            "passed": {"reference": ref["validation"]["passed"], "restructured": new["validation"]["passed"]},
            "differences_from_committed_validation": differences(committed, new["validation"]),
            "committed_validation": str(committed_path.relative_to(REPO)),
        }
        if "fp16_strict" in new["record"]:
            comparisons[job]["fp16_strict"] = {"reference": ref["record"]["fp16_strict"],
                                               "restructured": new["record"]["fp16_strict"],
                                               "identical": ref["record"]["fp16_strict"] == new["record"]["fp16_strict"]}
    identical = all(c["executor_calls_identical"] and not c["validation_differences"]
                    and c.get("fp16_strict", {"identical": True})["identical"] for c in comparisons.values())
    evidence = {
        "format": "ane-engineering/executor-bit-identity/1",
        "question": "does the restructured mil executor give the same outputs, bit for bit, as the reference one on "
                    "the committed builtin:tiny reproduce run's packages?",
        "identical": identical,
        **{label: {"commit": commits[label], "executor_sources_sha256": runs[label]["executor_sources_sha256"]}
           for label in trees},
        "packages": {name: {"committed_manifest": str(p["committed"].relative_to(REPO)),
                            "content_sha256": p["reexported_sha256"],
                            "same_as_committed_run": p["same_as_committed_run"]} for name, p in packages.items()},
        "comparisons": comparisons,
        "method": "each executor call's inputs and outputs hashed in call order (names, dtypes, shapes, bytes) during "
                  "`validate --backend mil` with the default repeats; fp16-strict on the first L96 input; validation "
                  f"JSON compared ignoring {list(VOLATILE)}",
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }
    with atomic_file(output) as tmp:
        Path(tmp).write_text(json.dumps(evidence, indent=1) + "\n", encoding="utf-8")
    print(f"{output}: identical={identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
