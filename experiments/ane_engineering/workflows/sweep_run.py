"""A palettization sweep: bits x mode x group size (x grouping axis x weighting), every candidate validated under
the same gates.

Each candidate is palettized from one parent export and validated through the chosen backend against the golden
file (and, when given, a held-out golden: a candidate passes only if it passes both); candidates are independent
tasks run by `sweep_executors` (local worker processes, or Ray), one k-means thread each, so the machine's cores
are not oversubscribed. The FP16 parent is validated too, as the reference point of the table and plot. Fisher
weighting computes the sensitivities once (package/palettize/sensitivity.py) and every weighted candidate reads
them by hash. With `mixed_bits`, workflows/mixed_bits.py adds the per-layer sensitivity runs and the greedy walk.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..core import gates, stop
from ..core.errors import HarnessError
from ..core.provenance import harness_fingerprint, machine, portable_path, tool_versions
from .palettize_candidate import package_bytes, palettize_candidate
from .sweep_executors import run_tasks

VALIDATION_NAME = "validation.json"
HELDOUT_VALIDATION_NAME = "validation-heldout.json"
SENSITIVITIES_NAME = "sensitivities.safetensors"


def candidate_name(bits: int, mode: str, group_size: int, group_axis: str = "output", weighting: str = "none") -> str:
    return (f"w{bits}-{mode}-g{group_size}" + ("-in" if group_axis == "input" else "")
            + ("" if weighting == "none" else f"-{weighting}"))


def _task(package_dir: Path) -> str:
    from ..package.manifest import read_manifest

    return "embeddings" if read_manifest(package_dir)["kind"] == "embedding" else "decisions"


def _validate(package_dir: Path, report_path: Path, source: str, golden_path: Path, backend: str, repeats: int,
              fixture: Path | None = None) -> dict:
    """Validate one package against a golden made from `fixture` (None: the committed default fixture)."""
    from ..checkpoint import load_checkpoint

    checkpoint = load_checkpoint(source)
    if _task(package_dir) == "embeddings":
        from ..run.embedding_agent import EmbeddingAgent
        from ..validation.embedding_golden import load_embedding_golden
        from ..validation.embedding_run import validate_embeddings

        golden = load_embedding_golden(golden_path, checkpoint, fixture)
        agent = EmbeddingAgent([package_dir], checkpoint, backend)
        report = validate_embeddings(agent, golden, golden_path, list(agent.lengths), repeats,
                                     evidence_dir=report_path.parent)
    else:
        from ..package.inputs.questions import FIXTURE_PATH, load_questions
        from ..run.agent import ANEAgent
        from ..validation.gate_run import validate
        from ..validation.golden import load_golden

        golden = load_golden(golden_path, checkpoint, fixture or FIXTURE_PATH)
        agent = ANEAgent([package_dir], checkpoint, backend)
        report = validate(agent, golden, golden_path, list(agent.lengths), repeats,
                          load_questions(fixture or FIXTURE_PATH), evidence_dir=report_path.parent)
    report_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


def figures(report: dict) -> dict:
    """The gate figures of one validation report (one bucket), as a sweep row holds them."""
    if report.get("task") == "embeddings":
        from ..evidence.sweep_embedding import embedding_row_fields

        return embedding_row_fields(report)
    (length, summary), = report["summary"].items()
    decisions_ok = sum(1 for q in report["buckets"][length]["questions"] if q["decision"] == q["golden_decision"])
    return {"length": int(length), "evaluated": summary["evaluated"], "skipped": len(summary["skipped"]),
            "argmax_matches": decisions_ok, "max_calibrated_error": summary["max_calibrated_error"],
            "max_action_probability_error": summary["max_action_probability_error"],
            "max_option_logit_error": summary["max_option_logit_error"],
            "max_action_logit_error": summary["max_action_logit_error"]}


def _row(name: str, settings: dict | None, package_dir: Path, report: dict, report_path: Path,
         seconds: float | None, sweep_dir: Path, heldout: tuple[dict, Path] | None = None) -> dict:
    """One row of sweep.json (written in `sweep_dir`, which paths are recorded relative to). With a held-out
    validation the row carries its figures under "heldout" and passes only if both validations pass."""
    common = {
        "name": name, **(settings or {"bits": 16, "mode": "fp16", "group_size": None}),
        "package": portable_path(package_dir, sweep_dir),
        "package_bytes": package_bytes(package_dir / "model.mlpackage"),
        "package_mb": round(package_bytes(package_dir / "model.mlpackage") / 1e6, 3), "palettize_seconds": seconds,
        "package_sha256": _package_sha256(package_dir),
    }
    reasons = list(report["reasons"][:5])
    passed = report["passed"]
    extra = {}
    if heldout is not None:
        held_report, held_path = heldout
        extra["heldout"] = {**figures(held_report), "passed": held_report["passed"],
                            "validation": portable_path(held_path, sweep_dir)}
        passed = passed and held_report["passed"]
        reasons += [f"held-out: {r}" for r in held_report["reasons"][:5]]
    verdict = {"passed": passed, "failed_reasons": reasons[:8], "validation": portable_path(report_path, sweep_dir)}
    return {**common, **figures(report), **extra, **verdict}


def _package_sha256(package_dir: Path) -> str | None:
    from ..package.manifest import read_manifest

    return read_manifest(package_dir)["package"]["content_hash"]["sha256"]


def _refused_row(name: str, settings: dict, error: HarnessError, task: str = "decisions") -> dict:
    """A candidate that could not be made or run: failed, with the reason, and no figures."""
    none = ({"min_cosine": None, "max_cosine_distance": None, "max_abs_error": None, "max_similarity_error": None,
             "resolved_pairs": None, "resolved_pairs_swapped": None, "top1_neighbour_agreement": None}
            if task == "embeddings" else
            {"argmax_matches": 0, "max_calibrated_error": None, "max_action_probability_error": None,
             "max_option_logit_error": None, "max_action_logit_error": None})
    return {"name": name, **settings, "package": None, "package_bytes": None, "package_mb": None,
            "package_sha256": None,
            "palettize_seconds": None, "length": None, "evaluated": 0, "skipped": 0, **none, "passed": False,
            "failed_reasons": [f"refused: {error}"], "validation": None}


def run_candidate(job: dict) -> dict:
    """Worker: palettize one candidate and validate it (and against the held-out golden, if the job has one). Runs
    in a fresh process or a Ray worker. A candidate the harness refuses (e.g. a palettization that changes nothing)
    is a failed row, so the other candidates still run. A stop ends the worker after its own cleanup (core/stop.py)."""
    with stop.worker_task():
        return _run_candidate(job)


def _run_candidate(job: dict) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    output = Path(job["output"])
    settings = {"bits": job["bits"], "mode": job["mode"], "group_size": job["group_size"],
                "group_axis": job.get("group_axis", "output"), "weighting": job.get("weighting", "none"),
                "implementation": job["implementation"]}
    if job.get("allocation"):
        settings["allocation"] = job["allocation"]
    fixture = None if job.get("fixture") is None else Path(job["fixture"])
    heldout = job.get("heldout")
    try:
        report = palettize_candidate(Path(job["parent"]), output, job["bits"], job["mode"], job["group_size"],
                                     workers=job["kmeans_workers"], implementation=job["implementation"],
                                     group_axis=settings["group_axis"], weighting=settings["weighting"],
                                     allocation=job.get("allocation"),
                                     sensitivities_file=Path(job["sensitivities"])
                                     if settings["weighting"] == "fisher" else None)
        settings["implementation"] = report["compression"]["implementation"]
        report_path = output / VALIDATION_NAME
        validation = _validate(output, report_path, job["source"], Path(job["golden"]), job["backend"],
                               job["repeats"], fixture)
        held = None
        if heldout is not None:
            held_path = output / HELDOUT_VALIDATION_NAME
            held = (_validate(output, held_path, job["source"], Path(heldout["golden"]), job["backend"],
                              job["repeats"], Path(heldout["fixture"])), held_path)
    except HarnessError as error:
        return _refused_row(output.name, settings, error, _task(Path(job["parent"])))
    return _row(output.name, settings, output, validation, report_path, report["seconds"], Path(job["sweep_dir"]),
                held)


def grid_jobs(parent: Path, candidates_dir: Path, bits, modes, group_sizes, group_axes, weightings,
              common: dict) -> list:
    """One job per grid point; weighting applies to k-means only (uniform LUTs have no objective to weight)."""
    jobs = []
    for b in bits:
        for m in modes:
            for g in group_sizes:
                for axis in group_axes:
                    for w in (weightings if m == "kmeans" else ["none"]):
                        jobs.append({**common, "output": str(candidates_dir / candidate_name(b, m, g, axis, w)),
                                     "bits": b, "mode": m, "group_size": g, "group_axis": axis, "weighting": w})
    return jobs


def _progress(task: str, total: int):
    def say(done: int, row: dict) -> None:
        errors = (f"max similarity error {row.get('max_similarity_error')}, min cosine {row.get('min_cosine')}"
                  if task == "embeddings" else f"max calibrated error {row.get('max_calibrated_error')}, max "
                  f"option-logit error {row.get('max_option_logit_error')}")
        held = row.get("heldout")
        if held:
            errors += (f"; held-out {held.get('max_similarity_error')}" if task == "embeddings"
                       else f"; held-out {held.get('max_calibrated_error')}")
        print(f"[sweep {done}/{total}] {row['name']}: {row['package_mb']} MB, {errors} -> "
              f"{'pass' if row['passed'] else 'FAIL: ' + '; '.join(row['failed_reasons'][:2])}",
              file=sys.stderr, flush=True)
    return say


def run_sweep(parent: Path, output: Path, source: str, golden: Path, bits: list[int], modes: list[str],
              group_sizes: list[int], jobs: int, backend: str = "mil", repeats: int = 10,
              implementation: str = "auto", *, group_axes: list[str] = ("output",),
              weightings: list[str] = ("none",), fixture: Path | None = None, heldout: dict | None = None,
              executor: str = "local", mixed_bits: bool = False) -> dict:
    """Run the grid into `output` (which must be new) and return sweep.json's content, to be written in `output`
    (paths in it are relative to it: the same in a staging directory renamed to its sibling the output).

    fixture: the file `golden` was made from (None: the committed default). heldout: {"golden", "fixture"} of a
    held-out set every candidate must pass too. mixed_bits: also the per-layer sensitivities and the greedy walk
    (workflows/mixed_bits.py), with the first group size and axis and the last weighting of the grid."""
    group_axes, weightings = list(group_axes), list(weightings)
    candidates_dir = output / "candidates"
    candidates_dir.mkdir(parents=True)
    started = time.perf_counter()
    task = _task(parent)
    print(f"[sweep] validating the FP16 parent {parent}", file=sys.stderr, flush=True)
    baseline_path = candidates_dir / "fp16-validation.json"  # never write into the parent export
    baseline_held = None
    if heldout is not None:
        held_path = candidates_dir / "fp16-validation-heldout.json"
        baseline_held = (_validate(parent, held_path, source, Path(heldout["golden"]), backend, repeats,
                                   Path(heldout["fixture"])), held_path)
    baseline = _row("fp16", None, parent, _validate(parent, baseline_path, source, golden, backend, repeats, fixture),
                    baseline_path, None, output, baseline_held)
    sensitivity_record = None
    common = {"parent": str(parent), "kmeans_workers": 1 if jobs > 1 else 2, "implementation": implementation,
              "source": source, "golden": str(golden), "backend": backend, "repeats": repeats,
              "sweep_dir": str(output), "fixture": None if fixture is None else str(fixture),
              "heldout": None if heldout is None else {k: str(v) for k, v in heldout.items()}}
    if "fisher" in weightings and ("kmeans" in modes or mixed_bits):
        sensitivity_record = compute_sensitivities(parent, source, output / SENSITIVITIES_NAME)
        common["sensitivities"] = str(output / SENSITIVITIES_NAME)
    grid = grid_jobs(parent, candidates_dir, bits, modes, group_sizes, group_axes, weightings, common)
    rows = run_tasks(run_candidate, grid, executor, jobs, _progress(task, len(grid)))
    rows.sort(key=lambda r: (-r["bits"], r["mode"], r["group_size"], r.get("group_axis", "output") != "output",
                             r.get("weighting", "none") != "none"))
    walk = None
    if mixed_bits:
        from .mixed_bits import run_walk

        walk = run_walk(parent, output, task, common, bits, group_sizes[0], group_axes[0], weightings[-1],
                        executor, jobs, run_candidate, _progress)
    if task == "embeddings":
        from ..evidence.sweep_embedding import gate_fields

        gate = {**gate_fields(), "repeats": repeats}
    else:
        gate = {"probability_error_max": gates.PROBABILITY_ERROR_MAX, "repeats": repeats}
    walk_rows = [] if walk is None else walk["steps"]
    for row in [baseline] + rows + walk_rows:
        row["size_ratio_vs_fp16"] = (None if row["package_bytes"] is None
                                     else round(row["package_bytes"] / baseline["package_bytes"], 3))
    passing = [r for r in rows + walk_rows if r["passed"]]
    smallest = min(passing, key=lambda r: (r["package_bytes"], r["name"]), default=None)
    return {
        "format": "ane-engineering/evidence/sweep/2",
        "parent": {"path": portable_path(parent, output), **{k: baseline[k] for k in ("package_bytes", "length")}},
        "task": task,
        "gate": gate,
        "grid": {"bits": bits, "modes": modes, "group_sizes": group_sizes, "group_axes": group_axes,
                 "weightings": weightings, "implementation": implementation},
        "fixture": _fixture_record(fixture, output),
        "heldout": None if heldout is None else {"golden": portable_path(Path(heldout["golden"]), output),
                                                 "fixture": _fixture_record(Path(heldout["fixture"]), output)},
        "sensitivities": sensitivity_record,
        "baseline": baseline,
        "candidates": rows,
        "mixed_bits": walk,
        "smallest_passing": None if smallest is None else {"name": smallest["name"],
                                                           "package_bytes": smallest["package_bytes"],
                                                           "package_mb": smallest["package_mb"]},
        "seconds": time.perf_counter() - started,
        "jobs": jobs, "backend": backend, "executor": executor,
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }


def _fixture_record(fixture: Path | None, output: Path) -> dict | None:
    import hashlib

    if fixture is None:
        return None
    return {"path": Path(fixture).name, "sha256": hashlib.sha256(Path(fixture).read_bytes()).hexdigest()}


def compute_sensitivities(parent: Path, source: str, path: Path) -> dict:
    """Fisher sensitivities of the parent's weights on its task's committed calibration set, once for the sweep."""
    from ..checkpoint import load_checkpoint
    from ..package.manifest import read_manifest
    from ..package.palettize.sensitivity import fisher_sensitivities

    manifest = read_manifest(parent)
    checkpoint = load_checkpoint(source)
    if checkpoint.hashes["weights_sha256"] != manifest["source"]["weights_sha256"]:
        raise HarnessError(f"{parent} was exported from other weights than {source}'s")
    print(f"[sweep] Fisher sensitivities of the FP32 {manifest['kind']} module at L{manifest['length']}",
          file=sys.stderr, flush=True)
    sensitivities = fisher_sensitivities(checkpoint, manifest["kind"], manifest["length"])
    file_sha256 = sensitivities.save(path)
    return {**sensitivities.record, "file": path.name, "file_sha256": file_sha256}
