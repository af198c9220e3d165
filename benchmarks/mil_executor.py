"""Benchmark: the `mil` executor against the BC1S torch FP32 forward, same package, same inputs, one run.

Both run alternately call by call in one process (so machine load hits both alike) on the full-size body; the
executor's own peak RSS is measured in a separate process that loads only the package (no checkpoint, no torch
model), since that is what the `mil` backend costs a user. Goal: executor time at most 2x torch FP32, peak RSS at
most 2 GB.

    python benchmarks/mil_executor.py --package DIR --output benchmarks/evidence/mil_executor_mmbert_base_shape.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import write_evidence  # noqa: E402
from experiments.ane_engineering.core.provenance import (  # noqa: E402
    backend_record,
    harness_fingerprint,
    machine,
    portable_path,
    tool_versions,
)
from experiments.ane_engineering.package.manifest import read_manifest  # noqa: E402
from experiments.ane_engineering.core.provenance import peak_rss_bytes  # noqa: E402
from experiments.ane_engineering.core.staging import check_output

GOAL_RATIO, GOAL_RSS_BYTES = 2.0, 2 * 10**9
CHILD = """
import json, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from experiments.ane_engineering.run.backends import choose_backend
from experiments.ane_engineering.core.provenance import peak_rss_bytes
inputs = dict(np.load({inputs!r}))
backend = choose_backend("mil")
started = time.perf_counter(); loaded = backend.load({package!r}); load = time.perf_counter() - started
times = []
for _ in range({calls}):
    started = time.perf_counter(); backend.predict(inputs); times.append(time.perf_counter() - started)
print(json.dumps({{"load_seconds": load, "call_seconds": times,
                  "peak_rss_bytes": peak_rss_bytes()}}))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, type=Path, help="probe export of the body (full size)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating executor/torch calls after one warm-up")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    check_output(args.output)

    import torch

    from experiments.ane_engineering.evidence.benchmarking.run import synthetic_body_inputs
    from experiments.ane_engineering.checkpoint import load_checkpoint
    from experiments.ane_engineering.run.backends import choose_backend
    from experiments.ane_engineering.package.kinds import build_export_spec

    manifest = read_manifest(args.package)
    checkpoint = load_checkpoint(manifest["source"]["source"])
    if checkpoint.weights_sha256 != manifest["source"]["weights_sha256"]:
        raise SystemExit("the package was exported from other weights than its named source holds now")
    length = manifest["length"]
    module = build_export_spec(checkpoint, manifest["kind"], length).module
    inputs = synthetic_body_inputs(checkpoint, length)
    backend = choose_backend("mil")
    backend.load(args.package / "model.mlpackage")
    torch_inputs = {k: torch.from_numpy(v.astype(np.float32)) for k, v in inputs.items()}
    mil_times, torch_times = [], []
    with torch.no_grad():
        reference = module(**torch_inputs).numpy()  # warm-up of both, untimed
        out = backend.predict(inputs)["option_logits"]
        for _ in range(args.rounds):
            started = time.perf_counter()
            out = backend.predict(inputs)["option_logits"]
            mil_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            reference = module(**torch_inputs).numpy()
            torch_times.append(time.perf_counter() - started)
    error = float(np.abs(out.reshape(-1)[:4] - reference.reshape(-1)[:4]).max())  # the four active slots
    ratios = np.asarray(mil_times) / np.asarray(torch_times)

    scratch = args.output.parent / f".{args.output.name}.inputs.npz"
    np.savez(scratch, **inputs)
    try:
        child = subprocess.run([sys.executable, "-c", CHILD.format(root=str(Path(__file__).resolve().parent.parent),
                                                                    inputs=str(scratch),
                                                                    package=str(args.package / "model.mlpackage"),
                                                                    calls=2)],
                               capture_output=True, text=True, check=True)
    finally:
        scratch.unlink(missing_ok=True)
    alone = json.loads(child.stdout.strip().splitlines()[-1])
    alone["peak_rss_gb"] = round(alone["peak_rss_bytes"] / 1e9, 2)
    evidence = {
        "format": "ane-engineering/evidence/mil-executor/1",
        "benchmark": "mil executor vs BC1S torch FP32 forward, alternating in one process; executor RSS alone",
        "goal": {"time_ratio_max": GOAL_RATIO, "peak_rss_bytes_max": GOAL_RSS_BYTES},
        "package": {"path": portable_path(args.package, args.output.parent), "length": length,
                    "package_sha256": manifest["package"]["content_hash"]["sha256"], "source": manifest["source"]},
        "backend": backend_record(backend.describe()),
        "rounds": args.rounds,
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
    write_evidence(args.output, evidence)
    print(f"mil p50 {evidence['mil_p50_seconds']:.2f} s vs torch p50 {evidence['torch_p50_seconds']:.2f} s "
          f"(ratio p50 {evidence['ratio_p50']:.2f}); executor alone peak RSS {alone['peak_rss_bytes'] / 1e9:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
