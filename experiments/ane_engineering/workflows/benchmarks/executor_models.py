"""Benchmark evidence: small ordinary models converted with coremltools, run through the mil executor, against torch.

Every model of run/mil/model_zoo.py (BERT, DistilBERT, RoBERTa, ModernBERT encoders with an attention mask; a CNN
with batch norm, pools, padding and upsampling; an LSTM; a GRU; an MLP) is converted (FP16 ML program, iOS17) and run
by the executor in both precision modes; the evidence records per model the max abs error of the executor and of
torch's own FP16 run against torch FP32, their ratio, the bound of the agreement criterion (model_zoo.py) and
whether it holds, the ops of the converted program and the hashes behind it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ...core.provenance import harness_fingerprint, machine, tool_versions
from .steps import BenchmarkError

FORMAT = "ane-engineering/evidence/executor-models/1"
MODES = ("fp32-accumulate", "fp16-strict")
STRICT_FIELDS = ("executor_max_abs_error", "ratio", "bound", "passes", "executor_run_seconds")


def model_names(requested: list[str] | None) -> list[str]:
    """`requested` (default: the whole zoo), refused in one line if it names a model the zoo does not have."""
    from ...run.mil import model_zoo

    unknown = [name for name in requested or [] if name not in model_zoo.MODELS]
    if unknown:
        raise BenchmarkError(f"unknown model(s) {', '.join(unknown)}; the zoo has {', '.join(model_zoo.MODELS)}")
    return list(requested or model_zoo.MODELS)


def executor_models_evidence(names: list[str], scratch: Path,
                             progress: Callable[[str], None] = lambda line: None) -> dict:
    """The evidence document of converting and running each model of `names` (packages go into `scratch`)."""
    import torch

    from ...run.mil import model_zoo

    torch.set_num_threads(1)
    harness = harness_fingerprint()  # the source that runs below
    started = time.perf_counter()
    rows = []
    for name in names:
        converted = model_zoo.prepare(name, scratch)
        row = model_zoo.evaluate(converted, MODES[0])
        strict = model_zoo.evaluate(converted, MODES[1])
        row["fp16_strict"] = {k: strict[k] for k in STRICT_FIELDS}
        rows.append(row)
        progress(f"{name}: executor {row['executor_max_abs_error']:.3g} vs torch FP16 "
                 f"{row['torch_fp16_max_abs_error']:.3g} (ratio {row['ratio']:.2f}, bound {row['bound']:.3g}) "
                 f"{'pass' if row['passes'] else 'FAIL'}; fp16-strict {strict['executor_max_abs_error']:.3g} "
                 f"{'pass' if strict['passes'] else 'FAIL'}")
    return {
        "format": FORMAT,
        "benchmark": "small ordinary torch models converted by coremltools (mlprogram, FP16, iOS17) and run by the "
                     "mil executor; errors against torch FP32 beside torch's own FP16 run (model.half() on the CPU)",
        "criterion": {"rule": "executor_max_abs_error <= factor * torch_fp16_max_abs_error + floor * max_abs_reference",
                      "factor": model_zoo.AGREEMENT_FACTOR, "floor": model_zoo.AGREEMENT_FLOOR,
                      "derivation": "experiments/ane_engineering/run/mil/model_zoo.py (module docstring)"},
        "conversion": {"convert_to": "mlprogram", "compute_precision": "FLOAT16",
                       "minimum_deployment_target": "macOS14",
                       "trace": "torch.jit.trace(strict=False)",
                       "fixes": ["aten::Int/aten::Bool scalar cast under NumPy >= 2.4 (package/convert.py)",
                                 "aten::new_ones converter (model_zoo.conversion_fixes)"]},
        "models": rows,
        "all_pass": all(r["passes"] for r in rows),
        "all_pass_fp16_strict": all(r["fp16_strict"]["passes"] for r in rows),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "machine": machine(), "tools": tool_versions(), "harness": harness,
    }


def summary(evidence: dict) -> str:
    rows = evidence["models"]
    return (f"{sum(r['passes'] for r in rows)}/{len(rows)} models pass (fp32-accumulate); "
            f"{sum(r['fp16_strict']['passes'] for r in rows)}/{len(rows)} in fp16-strict")
