"""Evidence: the whole chain on real pretrained weights (sentence-transformers/all-MiniLM-L6-v2, BERT family),
through the same commands a user runs (every stage is a command's main(), passed in by the caller: the workflows
layer does not import the commands above it).

- `embeddings/`, on `all-minilm-l6-v2`: probe the encoder and the embedding graph at L96 and L192, FP32 golden
  embeddings, validation of both buckets through `mil` with the embedding gates, the palettization sweep at L96
  (the sweep's default grid) under the embedding gates, benchmarks of both buckets;
- `decisions/`, on `builtin:minilm-decision` (the real encoder under the built-in decision head): probe the body at
  L96 and L192, FP32 golden decisions, validation of both buckets, the sweep at L96 under the decision gates,
  benchmarks of both buckets, and the FP16 range analysis on the trained encoder (outlier channels per site).

Each directory is laid out like a reproduce run, so ANE_BENCHMARKS.md renders it with the same sections
(evidence/sections_real_weights.py). A validation or sweep that fails its gates is recorded as it is (the stage log
keeps each exit status); only a refusal or a crash stops the chain.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ...checkpoint import load_checkpoint
from ...evidence.fp16_range import write_range_evidence
from ..chain import Chain, build_in_staging

ENCODER = "all-minilm-l6-v2"
DECISIONS = "builtin:minilm-decision"
LENGTHS = (96, 192)
STAGES = 2 + 2 * len(LENGTHS) + 1 + (2 + len(LENGTHS)) + len(LENGTHS) + 1 + (2 + len(LENGTHS)) + 1


def run_chain(chain: Chain, commands: dict, root: Path, jobs: int) -> None:
    """Every stage writes into `root`; evidence files record paths relative to themselves, so renaming `root` to
    the output afterwards keeps them right."""
    for source in (ENCODER, DECISIONS):
        chain.stage(f"load {source}", load_checkpoint, source)
    embeddings, decisions = root / "embeddings", root / "decisions"
    for family in (embeddings, decisions):
        (family / "packages").mkdir(parents=True)
        (family / "benchmarks").mkdir()
    for kind in ("encoder", "embedding"):
        for length in LENGTHS:
            chain.command(f"probe {kind} L{length} ({ENCODER})", commands["probe"],
                          ["--kind", kind, "--length", str(length), "--source", ENCODER,
                           "--output", str(embeddings / "packages" / f"{kind}-{length}"), "--require-ane", "--quiet"])
    chain.command("golden embeddings (FP32 reference)", commands["golden"],
                  ["--source", ENCODER, "--task", "embeddings", "--output", str(embeddings / "golden.json")])
    family_chain(chain, commands, embeddings, ENCODER, "embedding", jobs)
    for length in LENGTHS:
        chain.command(f"probe body L{length} ({DECISIONS})", commands["probe"],
                      ["--kind", "body", "--length", str(length), "--source", DECISIONS,
                       "--output", str(decisions / "packages" / f"body-{length}"), "--require-ane", "--quiet"])
    chain.command("golden decisions (FP32 reference)", commands["golden"],
                  ["--source", DECISIONS, "--output", str(decisions / "golden.json")])
    family_chain(chain, commands, decisions, DECISIONS, "body", jobs)
    chain.stage("FP16 range analysis on the trained encoder", write_range_evidence, load_checkpoint(DECISIONS),
                decisions / "fp16_range.json", LENGTHS)


def family_chain(chain: Chain, commands: dict, root: Path, source: str, kind: str, jobs: int) -> None:
    """Validation of both buckets (a failure of the gates is recorded, not fatal), the sweep at L96, benchmarks."""
    packages = [root / "packages" / f"{kind}-{length}" for length in LENGTHS]
    chain.command(f"validate {kind} packages L96 and L192", commands["validate"],
                  [a for package in packages for a in ("--package", str(package))]
                  + ["--source", source, "--golden", str(root / "golden.json"), "--backend", "mil",
                     "--output", str(root / "validation.json")], expect_pass=False)
    chain.command(f"palettization sweep of the {kind} package at L96", commands["sweep"],
                  ["--package", str(packages[0]), "--source", source, "--golden", str(root / "golden.json"),
                   "--jobs", str(jobs), "--output", str(root / "sweep")])  # the sweep's default grid
    for length, package in zip(LENGTHS, packages):
        chain.command(f"benchmark {kind} L{length}", commands["benchmark"],
                      ["--package", str(package), "--length", str(length), "--source", source, "--backend", "mil",
                       "--output", str(root / "benchmarks" / f"{kind}-{length}.json")])


def real_weights_evidence(output: Path, commands: dict, jobs: int) -> int:
    """The chain into a staging sibling of `output` (checked by the caller), published when it completes; 0 or 1."""
    chain = Chain(STAGES, "real weights")

    def build(staging: Path) -> None:
        started = time.perf_counter()
        try:
            run_chain(chain, commands, staging, jobs)
        finally:
            (staging / "real_weights.json").write_text(json.dumps(
                {"sources": [ENCODER, DECISIONS], "lengths": list(LENGTHS), "stages": chain.log,
                 "seconds": time.perf_counter() - started}, indent=1) + "\n", encoding="utf-8")

    return build_in_staging(output, build, "real-weights")
