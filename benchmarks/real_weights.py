"""Evidence: the whole chain on real pretrained weights (sentence-transformers/all-MiniLM-L6-v2, BERT family).

Two task families, each through the same commands a user runs (every stage is a command's main()):

- `embeddings/`, on `all-minilm-l6-v2`: probe the encoder and the embedding graph at L96 and L192, FP32 golden
  embeddings, validation of both buckets through `mil` with the embedding gates, the palettization sweep at L96
  (W8/W6/W4 x uniform/kmeans x groups 32/16) under the embedding gates, benchmarks of both buckets;
- `decisions/`, on `builtin:minilm-decision` (the real encoder under the built-in decision head): probe the body at
  L96 and L192, FP32 golden decisions, validation of both buckets, the sweep at L96 under the decision gates,
  benchmarks of both buckets, and the FP16 range analysis on the trained encoder (outlier channels per site).

Each directory is laid out like a reproduce run, so ANE_BENCHMARKS.md renders it with the same sections
(evidence/render_real_weights.py).

    python benchmarks/real_weights.py --output benchmarks/evidence/real-weights-minilm

A validation or sweep that fails its gates is recorded as it is (the stage log keeps each exit status); only a
refusal or a crash stops the chain. Refuses an existing output; works in a staging sibling renamed at the end.
Commit the JSON, Markdown and PNG files (the .mlpackage directories are large and regenerable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.ane_engineering import benchmark, golden, probe, sweep, validate  # noqa: E402
from experiments.ane_engineering.checkpoint import load_checkpoint  # noqa: E402
from experiments.ane_engineering.core.cli import run_main  # noqa: E402
from experiments.ane_engineering.evidence.fp16_range import write_range_evidence  # noqa: E402
from experiments.ane_engineering.core.staging import check_output, publish  # noqa: E402
from experiments.ane_engineering.reproduce import (  # noqa: E402
    SWEEP_BITS,
    SWEEP_GROUPS,
    SWEEP_MODES,
    Chain,
    StageFailed,
    _run,
)

ENCODER = "all-minilm-l6-v2"
DECISIONS = "builtin:minilm-decision"
LENGTHS = (96, 192)


STAGES = 2 + 2 * len(LENGTHS) + 1 + (2 + len(LENGTHS)) + len(LENGTHS) + 1 + (2 + len(LENGTHS)) + 1


def command(chain: Chain, name: str, command_main, argv: list[str], expect_pass: bool = True) -> None:
    """One command as a stage; its exit status goes into the stage log (1: ran, and its gates failed)."""
    status = chain.stage(name, _run, command_main, argv, expect_pass=expect_pass)
    chain.log[-1]["exit_status"] = status


def run_chain(chain: Chain, root: Path, jobs: int) -> None:
    """Every stage writes into `root`; evidence files record paths relative to themselves, so renaming `root` to
    the output afterwards keeps them right. Each task family gets a directory laid out like a reproduce run
    (packages/, golden.json, validation.json, sweep/, benchmarks/, and for decisions fp16_range.json)."""
    for source in (ENCODER, DECISIONS):
        chain.stage(f"load {source}", load_checkpoint, source)
    embeddings, decisions = root / "embeddings", root / "decisions"
    for family in (embeddings, decisions):
        (family / "packages").mkdir(parents=True)
        (family / "benchmarks").mkdir()
    for kind in ("encoder", "embedding"):
        for length in LENGTHS:
            command(chain, f"probe {kind} L{length} ({ENCODER})", probe.main,
                    ["--kind", kind, "--length", str(length), "--source", ENCODER,
                     "--output", str(embeddings / "packages" / f"{kind}-{length}"), "--require-ane", "--quiet"])
    command(chain, "golden embeddings (FP32 reference)", golden.main,
            ["--source", ENCODER, "--task", "embeddings", "--output", str(embeddings / "golden.json")])
    family_chain(chain, embeddings, ENCODER, "embedding", jobs)
    for length in LENGTHS:
        command(chain, f"probe body L{length} ({DECISIONS})", probe.main,
                ["--kind", "body", "--length", str(length), "--source", DECISIONS,
                 "--output", str(decisions / "packages" / f"body-{length}"), "--require-ane", "--quiet"])
    command(chain, "golden decisions (FP32 reference)", golden.main,
            ["--source", DECISIONS, "--output", str(decisions / "golden.json")])
    family_chain(chain, decisions, DECISIONS, "body", jobs)
    chain.stage("FP16 range analysis on the trained encoder", write_range_evidence, load_checkpoint(DECISIONS),
                decisions / "fp16_range.json", LENGTHS)


def family_chain(chain: Chain, root: Path, source: str, kind: str, jobs: int) -> None:
    """Validation of both buckets (a failure of the gates is recorded, not fatal), the sweep at L96, benchmarks."""
    packages = [root / "packages" / f"{kind}-{length}" for length in LENGTHS]
    command(chain, f"validate {kind} packages L96 and L192", validate.main,
            [a for package in packages for a in ("--package", str(package))]
            + ["--source", source, "--golden", str(root / "golden.json"), "--backend", "mil",
               "--output", str(root / "validation.json")], expect_pass=False)
    command(chain, f"palettization sweep of the {kind} package at L96", sweep.main,
            ["--package", str(packages[0]), "--source", source, "--golden", str(root / "golden.json"),
             "--bits", SWEEP_BITS, "--modes", SWEEP_MODES, "--group-sizes", SWEEP_GROUPS, "--jobs", str(jobs),
             "--output", str(root / "sweep")])
    for length, package in zip(LENGTHS, packages):
        command(chain, f"benchmark {kind} L{length}", benchmark.main,
                ["--package", str(package), "--length", str(length), "--source", source, "--backend", "mil",
                 "--output", str(root / "benchmarks" / f"{kind}-{length}.json")])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path, help="new directory (refused if it exists)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel sweep candidates")
    args = parser.parse_args(argv)
    output = check_output(args.output)
    staging = output.parent / f".{output.name}.partial"
    staging.mkdir()  # refused if another run left one: remove it after a look
    started, status = time.perf_counter(), 0
    chain = Chain(staging, STAGES)
    try:
        run_chain(chain, staging, args.jobs)
    except StageFailed as error:
        print(f"error: {error}", file=sys.stderr)
        status = 1
    finally:
        (staging / "real_weights.json").write_text(json.dumps(
            {"sources": [ENCODER, DECISIONS], "lengths": list(LENGTHS), "stages": chain.log,
             "seconds": time.perf_counter() - started}, indent=1) + "\n", encoding="utf-8")
    if status == 0:
        publish(staging, output)
    else:
        os.rename(staging, output.parent / f"{output.name}.failed-{time.strftime('%Y%m%d-%H%M%S')}")
    return status


if __name__ == "__main__":
    sys.exit(run_main(main))
