"""Benchmark one body package (optionally paired with a second) as the reference run timed it.

- load: package load and compile timed apart from warm calls (compile is Core ML's .mlpackage -> .mlmodelc);
- component: the body alone, one backend call on synthetic embeddings and full-length masks;
- full path: an ANEAgent request from tokenization to formatted output on a real fixture question (with
  `long`, a real ~1,024-token input, never a short one padded);
- windows: the component timing is the short window; on a device backend (Core ML on macOS) a long window of
  consecutive calls follows it, reported by blocks, so a burst -> sustained transition shows (windows.py);
- paired (`vs`): two candidates interleaved call by call in one process, with the per-pair ratio distribution.
  The two may differ in attention layout (`probe --attention dense|windowed`): each body is called with the masks
  of its own layout, each request builds its own (the ANEAgent), and the evidence records both layouts. On macOS
  the default backend is Core ML on the Neural Engine (CPU_AND_NE); this project has not run that pairing on a Mac.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...checkpoint import Checkpoint
from ...core import reference_run
from ...core.errors import HarnessError
from ...core.provenance import harness_fingerprint, machine, tool_versions
from ...model.window_tiles import DENSE, AttentionLayout
from ...package.inputs.device_inputs import device_masks
from ...package.inputs.questions import encode_question, load_questions
from ...run.agent import ANEAgent
from .timing import paired_calls, ratio_summary, summarize, timed_calls
from .windows import LONG_WINDOW_CALLS, long_window


def _reference_counts(measurement_id: str) -> dict:
    """Warm-up and timed calls of one reference-run timing: this benchmark times the way that run did."""
    measurement = reference_run.measurement(measurement_id)
    return {"warmup": measurement["warmup"], "calls": measurement["calls"]}


COMPONENT_DEFAULTS = _reference_counts("L96-body")
FULL_PATH_DEFAULTS = _reference_counts("L96-full-path")
LONG_MIN_TOKENS = 1000


class BenchmarkError(HarnessError):
    pass


def synthetic_body_inputs(checkpoint: Checkpoint, length: int, seed: int = 0,
                          attention: AttentionLayout = DENSE) -> dict[str, np.ndarray]:
    """Random N(0, 1) embeddings, every position valid, four active marker slots: the body's full workload. The
    masks are those of the package's attention layout (device_masks)."""
    config = checkpoint.config
    rng = np.random.default_rng(seed)
    hidden = config.encoder.hidden_size
    inputs = {
        "embeddings": rng.standard_normal((1, hidden, 1, length)).astype(np.float16),  # (1, C, 1, L)
        "type_vectors": np.zeros((1, hidden, 1, length), dtype=np.float16),  # (1, C, 1, L)
        "marker_selector": np.zeros((1, length, 1, 32), dtype=np.float16),  # (1, L, 1, 32)
    }
    for slot in range(4):
        inputs["marker_selector"][0, 1 + 2 * slot, 0, slot] = 1.0
    masks = device_masks(config, length, length, attention)  # global_mask (1, L, 1, L), local or window mask
    inputs.update({name: mask.astype(np.float16) for name, mask in masks.items()})
    return inputs


def pick_question(checkpoint: Checkpoint, length: int, long: bool):
    """The full-path request: the longest fixture question that fits (long: one of at least 1,000 tokens)."""
    tokenizer = checkpoint.require_tokenizer("the full-path benchmark")
    fitting = []
    for question in load_questions():
        encoded = encode_question(tokenizer, checkpoint.config.head, question)
        if encoded.num_tokens <= length and (not long or encoded.num_tokens >= LONG_MIN_TOKENS):
            fitting.append((encoded.num_tokens, question.id, question))
    if not fitting:
        raise BenchmarkError(f"no fixture question fits L{length}" + (f" with >= {LONG_MIN_TOKENS} tokens "
                             "(--long needs the 1,024 bucket)" if long else ""))
    tokens, _, question = max(fitting, key=lambda item: (item[0], item[1]))
    return question, tokens


def package_record(agent: ANEAgent, length: int) -> dict:
    manifest = agent.manifests[length]
    return {"length": length, "kind": manifest["kind"], "manifest_sha256": manifest["manifest_sha256"],
            "package_sha256": manifest["package"]["content_hash"]["sha256"],
            "compression": manifest.get("compression"), "load_seconds": agent.load_seconds[length],
            "compile_seconds": agent.compile_seconds[length]}


def benchmark(checkpoint: Checkpoint, package: Path, backend: str | None, long: bool = False,
              component: dict | None = None, full_path: dict | None = None, vs: Path | None = None,
              long_window_calls: int = LONG_WINDOW_CALLS) -> dict:
    component = {**COMPONENT_DEFAULTS, **(component or {})}
    full_path = {**FULL_PATH_DEFAULTS, **(full_path or {})}
    agent = ANEAgent([package], checkpoint, backend)
    (length,) = agent.lengths
    question, tokens = pick_question(checkpoint, length, long)
    synthetic = synthetic_body_inputs(checkpoint, length, attention=agent.layout(length))
    device = agent.backends[length]

    def body_call(runner=device):
        return runner.predict(synthetic)

    result = {
        "format": "ane-engineering/evidence/benchmark/1",
        "length": length,
        "package": package_record(agent, length),
        "source": checkpoint.hashes,
        "backend": agent.backend.describe(),
        "component": {"what": "body alone: one backend call on synthetic N(0,1) embeddings, all positions valid",
                      **component,
                      "timing": summarize(timed_calls(body_call, component["warmup"], component["calls"]))},
        "full_path": {"what": "ANEAgent.decide: tokenization, host lookup and masks, one backend call, FP32 action "
                              "head, calibration and formatting",
                      "question": question.id, "tokens": tokens, "long": long, **full_path,
                      "timing": summarize(timed_calls(lambda: agent.decide(question, length),
                                                      full_path["warmup"], full_path["calls"]))},
    }
    # the short window is `component` (the reference run's counts); the long one follows it on the device
    result["windows"] = {"short": {"what": "component.timing: the reference run's warm-up and timed calls",
                                   "calls": component["calls"], "p50_ms": result["component"]["timing"]["p50_ms"]},
                         "long": long_window(body_call, result["backend"]["backend"], long_window_calls)}
    if vs is not None:
        other = ANEAgent([vs], checkpoint, backend)
        if other.lengths != agent.lengths:
            raise BenchmarkError(f"--vs package has bucket {other.lengths}, the first has {agent.lengths}")
        other_inputs = synthetic_body_inputs(checkpoint, length, attention=other.layout(length))  # its own masks
        a, b = paired_calls(body_call, lambda: other.backends[length].predict(other_inputs),
                            component["warmup"], component["calls"])
        fa, fb = paired_calls(lambda: agent.decide(question, length), lambda: other.decide(question, length),
                              full_path["warmup"], full_path["calls"])
        result["vs"] = {
            "what": "two candidates interleaved call by call in one process (ABBA order); ratio = second / first",
            "first": result["package"], "second": package_record(other, length),
            "attention": {"first": agent.layout(length).to_json(), "second": other.layout(length).to_json()},
            "component": {"first": summarize(a), "second": summarize(b), "ratio": ratio_summary(a, b)},
            "full_path": {"first": summarize(fa), "second": summarize(fb), "ratio": ratio_summary(fa, fb)},
        }
    result.update(machine=machine(), tools=tool_versions(), harness=harness_fingerprint())
    return result
