"""`probe --fp16-scale auto`: the smallest exponent K whose rescaled package (model/bc1s/stream_scale.py) gives every
op the headroom gate's margin on the golden inputs, measured, not predicted.

The golden inputs are every one of validation/headroom_inputs.py's for this kind and bucket (the fixture questions
that fit for kinds body and encoder, the fixture texts that fit for kind embedding), not the probe's preview share:
K is chosen on the set validation measures. Each candidate is converted and run by the mil executor with the cliffs
off (run/mil/headroom.py, the chip family DEFAULT_FAMILY, the stricter), and its minimum headroom is compared with
core/gates.py's HEADROOM_MIN. K = 0 is measured first (the "before" of the manifest); if it falls short, the next
candidate is the K that would clear the margin if the tightest op scaled with the stream
(ceil(log2(HEADROOM_MIN / minimum))), then K + 1, and so on, until the margin is met ("after"), the epsilons refuse
the exponent (stream_scale.scaled_epsilons) or MAX_EXPONENT is passed.

The K found is the smallest: no op's output shrinks by more than 2^-K (the stream and what writes it shrink by exactly
that, everything read through a norm not at all), so below the jump the tightest op of K = 0 stays under the margin;
the K skipped are not measured. An op that does not read the stream (an attention score, an MLP's hidden units) does
not move with K: when that is the tightest, no K helps and the probe refuses, naming it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from ..checkpoint import Checkpoint
from ..core.errors import HarnessError
from ..model.bc1s.stream_scale import MAX_EXPONENT, StreamScaleError
from ..model.window_tiles import AttentionLayout
from ..package.kinds import ExportSpecError
from ..run.mil.cliffs import DEFAULT_FAMILY


class ScaleChoiceError(HarnessError):
    """No exponent gives the package the headroom gate's margin."""


def _summary(report) -> dict:
    minimum = report.minimum
    return {"minimum_headroom": None if minimum is None or math.isinf(minimum.headroom) else minimum.headroom,
            "op": None if minimum is None else minimum.op, "type": None if minimum is None else minimum.type,
            "cliff": None if minimum is None else minimum.cliff}


def choose_exponent(checkpoint: Checkpoint, kind: str, length: int, layout: AttentionLayout,
                    build: Callable[[int], object], convert: Callable[[object], object],
                    ane_family: str = DEFAULT_FAMILY) -> tuple[int, dict, object]:
    """(K, the record manifest.json keeps, the converted model of K). `build(K)` returns the ExportSpec rescaled by
    2^-K, `convert(spec)` its converted ct.models.MLModel."""
    from ..core.gates import HEADROOM_MIN
    from ..run.mil.headroom import measure_headroom
    from ..validation.headroom_inputs import golden_inputs

    inputs, about = golden_inputs(checkpoint, kind, length, layout)
    if inputs is None:
        raise ScaleChoiceError(f"--fp16-scale auto measures headroom on golden inputs, and here there are none "
                               f"({about}); give K")
    inputs = list(inputs)  # measured once per candidate K
    tried, reports = [], {}
    exponent = 0
    while True:
        try:
            spec = build(exponent)
        except ExportSpecError as error:
            if isinstance(error.__cause__, StreamScaleError):
                raise ScaleChoiceError(f"--fp16-scale auto: headroom {tried[-1]['minimum_headroom']:.3g} at op "
                                       f"{tried[-1]['op']!r} "
                                       f"needs more than K = {exponent - 1}, and {error}") from error
            raise
        model = convert(spec)
        report = measure_headroom(Path(model.package_path), inputs, ane_family)
        reports[exponent] = report
        tried.append({"exponent": exponent, **_summary(report)})
        minimum = report.minimum
        if minimum is None or minimum.headroom >= HEADROOM_MIN:
            break
        if (exponent > 0 and len(tried) > 1 and tried[-2]["op"] == minimum.op
                and minimum.headroom <= tried[-2]["minimum_headroom"] * 1.01):
            raise ScaleChoiceError(f"--fp16-scale auto: the tightest op {minimum.op!r} ({minimum.type}, headroom "
                                   f"{minimum.headroom:.3g} < {HEADROOM_MIN:g}) does not scale with the residual "
                                   "stream; no K gives the package the gate's headroom")
        step = math.ceil(math.log2(HEADROOM_MIN / minimum.headroom)) if minimum.headroom > 0 else 1
        exponent = exponent + max(1, step) if exponent == 0 else exponent + 1
        if exponent > MAX_EXPONENT:
            raise ScaleChoiceError(f"--fp16-scale auto: no K up to {MAX_EXPONENT} gives op {minimum.op!r} the headroom "
                                   f"{HEADROOM_MIN:g}")
    record = {"target_headroom": HEADROOM_MIN, "ane_family": ane_family, "golden_inputs": about,
              "tried": tried, "headroom_before": reports[0].to_json(), "headroom_after": reports[exponent].to_json()}
    return exponent, record, model
