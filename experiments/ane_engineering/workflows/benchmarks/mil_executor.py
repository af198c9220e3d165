"""Benchmark evidence: the `mil` executor against the BC1S torch FP32 forward, same package, same inputs, one run.

Both run alternately call by call in one process (so machine load hits both alike) on the body package; the
executor's own peak RSS is measured in a separate process that loads only the package (no checkpoint, no torch
model), since that is what the `mil` backend costs a user. Goal: executor time at most 2x torch FP32, peak RSS at
most 2 GB.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ...core.provenance import (
    REPOSITORY_ROOT,
    backend_record,
    harness_fingerprint,
    machine,
    peak_rss_bytes,
    portable_path,
    tool_versions,
)
from ...package.manifest import read_manifest
from .steps import BenchmarkError, run_command

FORMAT = "ane-engineering/evidence/mil-executor/1"
GOAL_RATIO, GOAL_RSS_BYTES = 2.0, 2 * 10**9
ACTIVE_SLOTS = 4  # synthetic_body_inputs activates four marker slots: the option logits compared
ALONE_CALLS = 2
# The executor alone: a fresh interpreter that loads the package through the mil backend and runs it.
ALONE = """
import json, sys, time
import numpy as np
from experiments.ane_engineering.run.backends import choose_backend
from experiments.ane_engineering.core.provenance import peak_rss_bytes
inputs = dict(np.load({inputs!r}, allow_pickle=False))
backend = choose_backend("mil")
started = time.perf_counter(); loaded = backend.load({package!r}); load = time.perf_counter() - started
times = []
for _ in range({calls}):
    started = time.perf_counter(); backend.predict(inputs); times.append(time.perf_counter() - started)
print(json.dumps({{"load_seconds": load, "call_seconds": times, "peak_rss_bytes": peak_rss_bytes()}}))
"""


def executor_alone(mlpackage: Path, inputs: dict, scratch: Path) -> dict:
    """Load time, call times and peak RSS of a process that only runs `mlpackage` through the mil backend."""
    feeds = scratch / "inputs.npz"
    np.savez(feeds, **inputs)
    done, _ = run_command(["-c", ALONE.format(inputs=str(feeds), package=str(mlpackage), calls=ALONE_CALLS)],
                          "the executor-alone process", root=REPOSITORY_ROOT)
    alone = json.loads(done.stdout.strip().splitlines()[-1])
    alone["peak_rss_gb"] = round(alone["peak_rss_bytes"] / 1e9, 2)
    return alone


def mil_executor_evidence(package: Path, rounds: int, scratch: Path, evidence_dir: Path) -> dict:
    """The evidence document of `rounds` alternating executor / torch calls on the probe export `package` (after
    one untimed warm-up of each), and of the executor alone; paths recorded relative to `evidence_dir`."""
    import torch

    from ...checkpoint import load_checkpoint
    from ...evidence.benchmarking.run import synthetic_body_inputs
    from ...package.kinds import build_export_spec
    from ...run.backends import choose_backend

    if rounds < 1:
        raise BenchmarkError(f"--rounds must be at least 1, got {rounds}")
    manifest = read_manifest(package)
    if manifest["kind"] != "body":
        raise BenchmarkError(f"{package} is a {manifest['kind']!r} package; this benchmark runs a body package")
    checkpoint = load_checkpoint(manifest["source"]["source"])
    if checkpoint.weights_sha256 != manifest["source"]["weights_sha256"]:
        raise BenchmarkError(f"{package} was exported from other weights than its source "
                             f"{manifest['source']['source']!r} holds now")
    length = manifest["length"]
    module = build_export_spec(checkpoint, manifest["kind"], length).module
    inputs = synthetic_body_inputs(checkpoint, length)
    backend = choose_backend("mil")
    backend.load(package / "model.mlpackage")
    torch_inputs = {k: torch.from_numpy(v.astype(np.float32)) for k, v in inputs.items()}
    mil_times, torch_times = [], []
    with torch.no_grad():
        reference = module(**torch_inputs).numpy()  # warm-up of both, untimed
        out = backend.predict(inputs)["option_logits"]
        for _ in range(rounds):
            started = time.perf_counter()
            out = backend.predict(inputs)["option_logits"]
            mil_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            reference = module(**torch_inputs).numpy()
            torch_times.append(time.perf_counter() - started)
    error = float(np.abs(out.reshape(-1)[:ACTIVE_SLOTS] - reference.reshape(-1)[:ACTIVE_SLOTS]).max())
    ratios = np.asarray(mil_times) / np.asarray(torch_times)
    alone = executor_alone(package / "model.mlpackage", inputs, scratch)
    return {
        "format": FORMAT,
        "benchmark": "mil executor vs BC1S torch FP32 forward, alternating in one process; executor RSS alone",
        "goal": {"time_ratio_max": GOAL_RATIO, "peak_rss_bytes_max": GOAL_RSS_BYTES},
        "package": {"path": portable_path(package, evidence_dir), "length": length,
                    "package_sha256": manifest["package"]["content_hash"]["sha256"], "source": manifest["source"]},
        "backend": backend_record(backend.describe()),
        "rounds": rounds,
        "mil_seconds": mil_times, "torch_seconds": torch_times,
        "mil_p50_seconds": float(np.median(mil_times)), "torch_p50_seconds": float(np.median(torch_times)),
        "ratio_per_round": ratios.tolist(), "ratio_p50": float(np.median(ratios)),
        "ratio_of_medians": float(np.median(mil_times) / np.median(torch_times)),
        "max_option_logit_difference": error,
        "executor_alone": alone,
        "meets_time_goal": float(np.median(ratios)) <= GOAL_RATIO,
        "meets_memory_goal": alone["peak_rss_bytes"] <= GOAL_RSS_BYTES,
        "torch_threads": torch.get_num_threads(),
        "this_process_peak_rss_bytes": peak_rss_bytes(),
        "machine": machine(), "tools": tool_versions(), "harness": harness_fingerprint(),
    }


def summary(evidence: dict) -> str:
    alone = evidence["executor_alone"]
    return (f"mil p50 {evidence['mil_p50_seconds']:.2f} s vs torch p50 {evidence['torch_p50_seconds']:.2f} s "
            f"(ratio p50 {evidence['ratio_p50']:.2f}); executor alone peak RSS {alone['peak_rss_bytes'] / 1e9:.2f} GB")
