"""Benchmark one embedding-kind package as the body is benchmarked (run.py): load timed apart, the device call
alone on synthetic inputs, and the full path from text to unit embedding through the EmbeddingAgent."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...checkpoint import Checkpoint
from ...core.provenance import harness_fingerprint, machine, tool_versions
from ...package.inputs.texts import load_texts
from ...run.embedding_agent import EmbeddingAgent
from .run import COMPONENT_DEFAULTS, FULL_PATH_DEFAULTS, BenchmarkError, package_record
from .timing import summarize, timed_calls


def synthetic_embedding_inputs(checkpoint: Checkpoint, agent: EmbeddingAgent, length: int, seed: int = 0) -> dict:
    """N(0, 1) embedding rows, every position valid, uniform pooling weights: the graph's full workload."""
    rng = np.random.default_rng(seed)
    inputs = {"embeddings": rng.standard_normal((1, checkpoint.config.encoder.hidden_size, 1, length)),  # (1, C, 1, L)
              "global_mask": np.zeros((1, length, 1, length)),  # (1, L, 1, L): every key visible
              "pooling": np.full((1, length, 1, 1), 1.0 / length)}  # (1, L, 1, 1)
    if {"local_mask", "window_mask"} & set(agent.expected_shapes(length)):
        raise BenchmarkError("synthetic embedding inputs are built for full-attention encoders only")
    return {name: value.astype(np.float16) for name, value in inputs.items()}


def benchmark_embedding(checkpoint: Checkpoint, package: Path, backend: str | None, component: dict | None = None,
                        full_path: dict | None = None) -> dict:
    component = {**COMPONENT_DEFAULTS, **(component or {})}
    full_path = {**FULL_PATH_DEFAULTS, **(full_path or {})}
    agent = EmbeddingAgent([package], checkpoint, backend)
    (length,) = agent.lengths
    fitting = [(len(agent.tokens(t.text)), t.id, t) for t in load_texts() if len(agent.tokens(t.text)) <= length]
    if not fitting:
        raise BenchmarkError(f"no embedding text fits L{length}")
    tokens, _, text = max(fitting, key=lambda item: (item[0], item[1]))
    synthetic = synthetic_embedding_inputs(checkpoint, agent, length)
    device = agent.backends[length]
    result = {
        "format": "ane-engineering/evidence/benchmark/1",
        "task": "embeddings",
        "length": length,
        "package": package_record(agent, length),
        "source": checkpoint.hashes,
        "backend": agent.backend.describe(),
        "component": {"what": "embedding graph alone: one backend call on synthetic N(0,1) embeddings, all positions "
                              "valid", **component,
                      "timing": summarize(timed_calls(lambda: device.predict(synthetic), component["warmup"],
                                                      component["calls"]))},
        "full_path": {"what": "EmbeddingAgent.embed: tokenization, host lookup, mask and pooling weights, one backend "
                              "call", "question": text.id, "tokens": tokens, "long": False, **full_path,
                      "timing": summarize(timed_calls(lambda: agent.embed(text.text, length), full_path["warmup"],
                                                      full_path["calls"]))},
    }
    result.update(machine=machine(), tools=tool_versions(), harness=harness_fingerprint())
    return result
