"""Benchmark: small ordinary models converted with coremltools, run through the mil executor, against torch.

Every model of experiments/ane_engineering/run/mil/model_zoo.py (BERT, DistilBERT, RoBERTa, ModernBERT encoders
with an attention mask; a CNN; an LSTM; a GRU; an MLP) is converted (FP16 ML program, iOS17) and run by the executor
in both precision modes, against torch FP32 beside torch's own FP16 run. The evidence logic is
experiments/ane_engineering/workflows/benchmarks/executor_models.py.

    python benchmarks/executor_models.py --output benchmarks/evidence/executor_models.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering.core.cli import run_main, write_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output  # noqa: E402
from experiments.ane_engineering.workflows.benchmarks.executor_models import (  # noqa: E402
    executor_models_evidence,
    model_names,
    summary,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="evidence JSON (refused if it exists)")
    parser.add_argument("--models", nargs="*", default=None, help="a subset of the zoo (default: all)")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    names = model_names(args.models)
    with tempfile.TemporaryDirectory() as scratch:
        evidence = executor_models_evidence(names, Path(scratch), progress=lambda line: print(line, flush=True))
    write_evidence(output, evidence)
    print(summary(evidence))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
