"""Benchmark: small ordinary models converted with coremltools, run through the mil executor, against torch.

Every model of experiments/ane_engineering/run/mil/model_zoo.py (BERT, DistilBERT, RoBERTa, ModernBERT encoders
with an attention mask; a CNN with batch norm, pools, padding and upsampling; an LSTM; a GRU; an MLP) is
converted (FP16 ML program, iOS17) and run by the executor in both precision modes; the evidence records per model
the max abs error of the executor and of torch's own FP16 run against torch FP32, their ratio, the bound of the
agreement criterion (model_zoo.py) and whether it holds, the ops of the converted program and the hashes behind it.

    python benchmarks/executor_models.py --output benchmarks/evidence/executor_models.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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

MODES = ("fp32-accumulate", "fp16-strict")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--models", nargs="*", default=None, help="a subset of the zoo (default: all)")
    args = parser.parse_args(argv)
    check_output(args.output)

    import torch

    from experiments.ane_engineering.run.mil import model_zoo

    torch.set_num_threads(1)
    names = args.models or list(model_zoo.MODELS)
    harness = harness_fingerprint()  # the source that runs below
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name in names:
            converted = model_zoo.prepare(name, Path(directory))
            row = model_zoo.evaluate(converted, MODES[0])
            strict = model_zoo.evaluate(converted, MODES[1])
            row["fp16_strict"] = {k: strict[k] for k in ("executor_max_abs_error", "ratio", "bound", "passes",
                                                          "executor_run_seconds")}
            rows.append(row)
            print(f"{name}: executor {row['executor_max_abs_error']:.3g} vs torch FP16 "
                  f"{row['torch_fp16_max_abs_error']:.3g} (ratio {row['ratio']:.2f}, bound {row['bound']:.3g}) "
                  f"{'pass' if row['passes'] else 'FAIL'}; fp16-strict {strict['executor_max_abs_error']:.3g} "
                  f"{'pass' if strict['passes'] else 'FAIL'}", flush=True)
    evidence = {
        "format": "ane-engineering/evidence/executor-models/1",
        "benchmark": "small ordinary torch models converted by coremltools (mlprogram, FP16, iOS17) and run by the "
                     "mil executor; errors against torch FP32 beside torch's own FP16 run (model.half() on the CPU)",
        "criterion": {"rule": "executor_max_abs_error <= factor * torch_fp16_max_abs_error + floor * max_abs_reference",
                      "factor": model_zoo.AGREEMENT_FACTOR, "floor": model_zoo.AGREEMENT_FLOOR,
                      "derivation": "experiments/ane_engineering/run/mil/model_zoo.py (module docstring)"},
        "conversion": {"convert_to": "mlprogram", "compute_precision": "FLOAT16", "minimum_deployment_target": "macOS14",
                       "trace": "torch.jit.trace(strict=False)",
                       "fixes": ["aten::Int/aten::Bool scalar cast under NumPy >= 2.4 (package/convert.py)",
                                 "aten::new_ones converter (model_zoo.conversion_fixes)"]},
        "models": rows,
        "all_pass": all(r["passes"] for r in rows),
        "all_pass_fp16_strict": all(r["fp16_strict"]["passes"] for r in rows),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "machine": machine(), "tools": tool_versions(), "harness": harness,
    }
    write_evidence(args.output, evidence)
    print(f"{sum(r['passes'] for r in rows)}/{len(rows)} models pass (fp32-accumulate); "
          f"{sum(r['fp16_strict']['passes'] for r in rows)}/{len(rows)} in fp16-strict")
    return 0


if __name__ == "__main__":
    sys.exit(main())
