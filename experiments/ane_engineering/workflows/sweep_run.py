"""A palettization sweep: bits x mode x group size, every candidate validated under the same gates.

Each candidate is palettized from one parent export and validated through the chosen backend against the golden
file; candidates run in parallel worker processes (one k-means thread each, so the machine's cores are not
oversubscribed). The FP16 parent is validated too, as the reference point of the table and plot.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from ..core import gates, stop
from ..core.errors import HarnessError
from ..core.provenance import harness_fingerprint, machine, portable_path, tool_versions
from .palettize_candidate import package_bytes, palettize_candidate

VALIDATION_NAME = "validation.json"


def candidate_name(bits: int, mode: str, group_size: int) -> str:
    return f"w{bits}-{mode}-g{group_size}"


def _task(package_dir: Path) -> str:
    from ..package.manifest import read_manifest

    return "embeddings" if read_manifest(package_dir)["kind"] == "embedding" else "decisions"


def _validate(package_dir: Path, report_path: Path, source: str, golden_path: Path, backend: str, repeats: int) -> dict:
    from ..checkpoint import load_checkpoint

    if _task(package_dir) == "embeddings":
        from ..run.embedding_agent import EmbeddingAgent as Agent
        from ..validation.embedding_golden import load_embedding_golden as load_golden
        from ..validation.embedding_run import validate_embeddings as validate
    else:
        from ..run.agent import ANEAgent as Agent
        from ..validation.gate_run import validate
        from ..validation.golden import load_golden

    checkpoint = load_checkpoint(source)
    golden = load_golden(golden_path, checkpoint)
    agent = Agent([package_dir], checkpoint, backend)
    report = validate(agent, golden, golden_path, list(agent.lengths), repeats, evidence_dir=report_path.parent)
    report_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


def _row(name: str, settings: dict | None, package_dir: Path, report: dict, report_path: Path,
         seconds: float | None, sweep_dir: Path) -> dict:
    """One row of sweep.json (written in `sweep_dir`, which paths are recorded relative to)."""
    common = {
        "name": name, **(settings or {"bits": 16, "mode": "fp16", "group_size": None}),
        "package": portable_path(package_dir, sweep_dir), "package_bytes": package_bytes(package_dir / "model.mlpackage"),
        "package_mb": round(package_bytes(package_dir / "model.mlpackage") / 1e6, 3), "palettize_seconds": seconds,
    }
    verdict = {"passed": report["passed"], "failed_reasons": report["reasons"][:5],
               "validation": portable_path(report_path, sweep_dir)}
    if report.get("task") == "embeddings":
        from ..evidence.sweep_embedding import embedding_row_fields

        return {**common, **embedding_row_fields(report), **verdict}
    (length, summary), = report["summary"].items()
    decisions_ok = sum(1 for q in report["buckets"][length]["questions"] if q["decision"] == q["golden_decision"])
    return {
        **common, "length": int(length), "evaluated": summary["evaluated"],
        "skipped": len(summary["skipped"]), "argmax_matches": decisions_ok,
        "max_calibrated_error": summary["max_calibrated_error"],
        "max_action_probability_error": summary["max_action_probability_error"],
        "max_option_logit_error": summary["max_option_logit_error"],
        "max_action_logit_error": summary["max_action_logit_error"],
        **verdict,
    }


def _refused_row(name: str, settings: dict, error: HarnessError, task: str = "decisions") -> dict:
    """A candidate that could not be made or run: failed, with the reason, and no figures."""
    figures = ({"min_cosine": None, "max_cosine_distance": None, "max_abs_error": None, "max_similarity_error": None, "resolved_pairs": None,
                "resolved_pairs_swapped": None, "top1_neighbour_agreement": None} if task == "embeddings" else
               {"argmax_matches": 0, "max_calibrated_error": None, "max_action_probability_error": None,
                "max_option_logit_error": None, "max_action_logit_error": None})
    return {"name": name, **settings, "package": None, "package_bytes": None, "package_mb": None,
            "palettize_seconds": None, "length": None, "evaluated": 0, "skipped": 0, **figures, "passed": False,
            "failed_reasons": [f"refused: {error}"], "validation": None}


def run_candidate(job: dict) -> dict:
    """Worker: palettize one candidate and validate it. Runs in a fresh process. A candidate the harness refuses
    (e.g. a palettization that changes nothing) is a failed row, so the other candidates still run. A stop ends the
    worker after its own cleanup (core/stop.py)."""
    with stop.worker_task():
        return _run_candidate(job)


def _run_candidate(job: dict) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    output = Path(job["output"])
    settings = {"bits": job["bits"], "mode": job["mode"], "group_size": job["group_size"],
                "implementation": job["implementation"]}
    try:
        report = palettize_candidate(Path(job["parent"]), output, job["bits"], job["mode"], job["group_size"],
                                     workers=job["kmeans_workers"], implementation=job["implementation"])
        settings["implementation"] = report["compression"]["implementation"]
        report_path = output / VALIDATION_NAME
        validation = _validate(output, report_path, job["source"], Path(job["golden"]), job["backend"], job["repeats"])
    except HarnessError as error:
        return _refused_row(output.name, settings, error, _task(Path(job["parent"])))
    return _row(output.name, settings, output, validation, report_path, report["seconds"], Path(job["sweep_dir"]))


def run_sweep(parent: Path, output: Path, source: str, golden: Path, bits: list[int], modes: list[str],
              group_sizes: list[int], jobs: int, backend: str = "mil", repeats: int = 10,
              implementation: str = "auto") -> dict:
    """Run the grid into `output` (which must be new) and return sweep.json's content, to be written in `output`
    (paths in it are relative to it: the same in a staging directory renamed to its sibling the output)."""
    candidates_dir = output / "candidates"
    candidates_dir.mkdir(parents=True)
    started = time.perf_counter()
    task = _task(parent)
    print(f"[sweep] validating the FP16 parent {parent}", file=sys.stderr, flush=True)
    baseline_path = candidates_dir / "fp16-validation.json"  # never write into the parent export
    baseline = _row("fp16", None, parent, _validate(parent, baseline_path, source, golden, backend, repeats),
                    baseline_path, None, output)
    grid = [{"parent": str(parent), "output": str(candidates_dir / candidate_name(b, m, g)), "bits": b, "mode": m,
             "group_size": g, "kmeans_workers": 1 if jobs > 1 else 2, "implementation": implementation,
             "source": source, "golden": str(golden), "backend": backend, "repeats": repeats, "sweep_dir": str(output)}
            for b in bits for m in modes for g in group_sizes]
    rows = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                             initializer=stop.ignore_interrupts) as pool:
        futures = {pool.submit(run_candidate, job): job for job in grid}
        for done, future in enumerate(as_completed(futures), start=1):
            row = future.result()
            rows.append(row)
            errors = (f"min cosine {row['min_cosine']}, max abs error {row['max_abs_error']}" if task == "embeddings"
                      else f"max calibrated error {row['max_calibrated_error']}, max option-logit error "
                      f"{row['max_option_logit_error']}")
            print(f"[sweep {done}/{len(grid)}] {row['name']}: {row['package_mb']} MB, {errors} -> "
                  f"{'pass' if row['passed'] else 'FAIL: ' + '; '.join(row['failed_reasons'][:2])}",
                  file=sys.stderr, flush=True)
    rows.sort(key=lambda r: (-r["bits"], r["mode"], r["group_size"]))
    if task == "embeddings":
        from ..evidence.sweep_embedding import gate_fields

        gate = {**gate_fields(), "repeats": repeats}
    else:
        gate = {"probability_error_max": gates.PROBABILITY_ERROR_MAX, "repeats": repeats}
    for row in [baseline] + rows:
        row["size_ratio_vs_fp16"] = (None if row["package_bytes"] is None
                                     else round(row["package_bytes"] / baseline["package_bytes"], 3))
    return {
        "format": "ane-engineering/evidence/sweep/1",
        "parent": {"path": portable_path(parent, output), **{k: baseline[k] for k in ("package_bytes", "length")}},
        "task": task,
        "gate": gate,
        "grid": {"bits": bits, "modes": modes, "group_sizes": group_sizes, "implementation": implementation},
        "baseline": baseline,
        "candidates": rows,
        "seconds": time.perf_counter() - started,
        "jobs": jobs, "backend": backend,
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }
