"""The golden inputs of a package and its Neural Engine headroom on them (what probe.json records).

The golden inputs are the inputs the golden file is made from, prepared for the package as the runtime prepares them:
body packages take every committed fixture question that fits the bucket (package/inputs/fixtures/questions.json,
device inputs as run/agent.py builds them; LoRA packages with the zero adapter, i.e. the base model), encoder
packages the same questions' token ids, embedding packages every committed text that fits (package/inputs/texts.py).
mlp and layer packages take hidden states that no golden file holds: their headroom is not measured.

`package_headroom` runs the package with the mil executor on those inputs (run/mil/headroom.py) and applies the
headroom gate (gate_run.headroom_gate, core/gates.py HEADROOM_MIN). The probe measures at most PROBE_INPUTS of them,
the longest that fit (every position of the bucket that a golden input reaches is then exercised): one executor run
per input costs seconds at full size, and validation measures every golden input anyway (gate_run.py), so a probe
headroom is a preview that validation confirms or refutes on the whole set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..checkpoint import Checkpoint
from ..model.window_tiles import AttentionLayout
from ..package.inputs.device_inputs import body_inputs, embedding_inputs, encoder_inputs
from ..package.inputs.questions import encode_question, fixture_sha256, load_questions
from ..run.mil.cliffs import DEFAULT_FAMILY
from .gate_run import headroom_gate

MEASURED_KINDS = ("body", "encoder", "embedding")
PROBE_INPUTS = 8  # the probe's share of the golden inputs (see the module docstring)


def _longest(items: list, size, limit: int | None) -> list:
    if limit is None or len(items) <= limit:
        return items
    keep = sorted(range(len(items)), key=lambda i: (-size(items[i]), i))[:limit]
    return [items[i] for i in sorted(keep)]


def golden_inputs(checkpoint: Checkpoint, kind: str, length: int, layout: AttentionLayout, lora=None,
                  limit: int | None = None):
    """(iterator of fp16 input dicts, description) for `kind` at `length` (at most `limit`, the longest);
    (None, reason) for kinds without them."""
    if kind not in MEASURED_KINDS:
        return None, f"a {kind} package reads hidden states that no golden file holds"
    if checkpoint.tokenizer is None:  # the golden inputs are tokenized texts; validation refuses such a checkpoint
        return None, f"{checkpoint.source} has no tokenizer.json, so no golden inputs can be made from it"
    config, tensors = checkpoint.config, checkpoint.tensors
    extra = {}
    if lora is not None:
        from ..package.inputs.adapter import device_inputs, zero_adapter

        extra = device_inputs(config, zero_adapter(config, lora, kind), kind)
    if kind == "embedding":
        from ..package.inputs.texts import load_texts, texts_sha256, token_ids

        tokenizer = checkpoint.require_tokenizer("the golden inputs")
        ids = [token_ids(tokenizer, t.text) for t in load_texts()]
        fitting = _longest([i for i in ids if len(i) <= length], len, limit)
        make = (embedding_inputs(config, tensors, i, length, layout) for i in fitting)
        about = {"inputs": "committed texts (package/inputs/texts.py)", "texts_sha256": texts_sha256(),
                 "measured": len(fitting), "total": len(ids), "limit": limit}
    else:
        tokenizer = checkpoint.require_tokenizer("the golden inputs")
        encoded = [encode_question(tokenizer, config.head, q) for q in load_questions()] if config.head else []
        if kind == "encoder" and not encoded:
            return None, "an encoder package of a source without a decision head has no golden questions"
        fitting = _longest([e for e in encoded if e.num_tokens <= length], lambda e: e.num_tokens, limit)
        if kind == "body":
            make = (body_inputs(config, tensors, e.input_ids, e.token_types, e.marker_positions, length, layout)
                    for e in fitting)
        else:
            make = (encoder_inputs(config, tensors, e.input_ids, length, layout) for e in fitting)
        about = {"inputs": "committed fixture questions (package/inputs/fixtures/questions.json)",
                 "fixture_sha256": fixture_sha256(), "measured": len(fitting), "total": len(encoded), "limit": limit}
    if not about["measured"]:
        return None, f"no golden input fits the bucket of {length}"

    def fp16(inputs: dict) -> dict:
        return {k: np.asarray(v).astype(np.float16) for k, v in {**inputs, **extra}.items()}

    return (fp16(i) for i in make), about


def package_headroom(package: Path, checkpoint: Checkpoint, kind: str, length: int, layout: AttentionLayout,
                     lora=None, ane_family: str = DEFAULT_FAMILY, limit: int | None = PROBE_INPUTS) -> dict:
    """The headroom gate's record for an exported package on (at most `limit` of) its golden inputs
    (`measured: False` with the reason when there are none)."""
    from ..run.mil.headroom import measure_headroom

    inputs, about = golden_inputs(checkpoint, kind, length, layout, lora, limit)
    if inputs is None:
        return {"measured": False, "passed": None, "reason": about}
    return {**headroom_gate(measure_headroom(Path(package), inputs, ane_family)), "golden_inputs": about}
