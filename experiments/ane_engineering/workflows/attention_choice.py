"""`--attention auto`: export sliding-window layers in whichever layout the calibrated cost model predicts faster.

The choice, per bucket:
- no sliding-window layer (BERT, an all-global ModernBERT) or a kind without attention (mlp, baseline): dense,
  nothing to choose;
- the window covers the whole bucket (radius >= L - 1: every key is within reach of every query): dense, because
  the windowed graph would compute the same result over more keys (W = T + 2r > L per tile) with more ops;
- otherwise both layouts are converted, each program is counted by the cost model (placement/cost_model.py
  `program_cost`), and the calibrated per-chip prediction (placement/calibration.py `predict_body_ms`) picks the
  lower predicted body time. Both predictions, the chip and the counts behind them are recorded in the manifest
  and probe.json. The prediction is a model, not a measurement: no Neural Engine runs here.
"""

from __future__ import annotations

from ..checkpoint import Checkpoint
from ..core.errors import HarnessError
from ..model.window_tiles import DEFAULT_TILE, DENSE, AttentionLayout, reference_run_layout, windowed

CHOICES = ("dense", "windowed", "auto", "reference-run")
PREDICTION_CHIP = "M3 Max"  # the reference run's chip (core/reference_run.json)


class AttentionChoiceError(HarnessError):
    """`--attention auto` cannot decide (e.g. the calibrated cost model is missing)."""


def has_sliding_layers(checkpoint: Checkpoint) -> bool:
    return checkpoint.config.encoder.has_sliding_layers


def requested_layout(choice: str, tile: int = DEFAULT_TILE) -> AttentionLayout | None:
    """The layout of an explicit choice; None for auto (decided per bucket by choose_layout)."""
    if choice not in CHOICES:
        raise AttentionChoiceError(f"--attention must be one of {CHOICES}, got {choice!r}")
    return {"dense": DENSE, "windowed": windowed(tile), "auto": None, "reference-run": reference_run_layout()}[choice]


def _predictor():
    try:
        from ..placement.calibration import predict_body_ms
    except ImportError as error:
        raise AttentionChoiceError(
            "--attention auto needs the calibrated cost model (experiments/ane_engineering/placement/calibration.py, "
            f"predict_body_ms), which is not available here ({error}); choose --attention dense or windowed") from error
    return predict_body_ms


def _counts(cost: dict) -> dict:
    totals = cost["totals"]
    return {"non_constant_ops": totals["non_constant_ops"], "gflop": totals["flops"] / 1e9,
            "unfused_mb": totals["unfused_bytes"] / 1e6, "compulsory_mb": totals["compulsory_bytes"] / 1e6}


def choose_layout(checkpoint: Checkpoint, kind: str, length: int, tile: int = DEFAULT_TILE,
                  build=None, convert=None, chip: str = PREDICTION_CHIP) -> tuple[AttentionLayout, dict, object | None]:
    """(layout, record for manifest/probe.json, the chosen layout's converted model when both were converted).
    `build(layout)` returns the ExportSpec of that layout, `convert(spec)` its converted ct.models.MLModel."""
    record = {"requested": "auto", "chip": chip}
    if kind in ("mlp", "baseline") or not has_sliding_layers(checkpoint):
        return DENSE, {**record, "reason": "no sliding-window layer to lay out"}, None
    radius = checkpoint.config.encoder.window_radius
    if radius >= length - 1:
        return DENSE, {**record, "reason": f"the window (radius {radius}) covers the whole bucket of {length}: "
                                           "windowed would compute the dense result with more keys and ops"}, None
    from ..placement.cost_model import program_cost

    predict = _predictor()
    candidates = {"dense": DENSE, "windowed": windowed(tile)}
    models, predictions, counts = {}, {}, {}
    for name, layout in candidates.items():
        model = convert(build(layout))
        cost = program_cost(model._mil_program, length)
        predictions[name] = float(predict(cost, chip))
        counts[name] = _counts(cost)
        models[name] = model
    chosen = min(predictions, key=lambda name: (predictions[name], name != "dense"))  # a tie keeps dense
    record.update(reason="lower predicted body time (calibrated cost model; a prediction, not a measurement)",
                  predicted_body_ms=predictions, cost=counts)
    return candidates[chosen], record, models[chosen]


def tile_scan(checkpoint: Checkpoint, length: int, tiles: tuple[int, ...] = (32, 64, 128, 256), kind: str = "body",
              chip: str = PREDICTION_CHIP) -> dict:
    """Cost-model counts and calibrated predictions of the dense layout and of the windowed layout per tile size
    (the argument for DEFAULT_TILE, ANE_MATH.md section 15). Converts len(tiles) + 1 programs: minutes at full
    size."""
    from ..package.convert import convert
    from ..package.kinds import build_export_spec
    from ..placement.cost_model import program_cost

    predict = _predictor()
    rows = {}
    for name, layout in [("dense", DENSE)] + [(f"windowed-{t}", windowed(t)) for t in tiles]:
        cost = program_cost(convert(build_export_spec(checkpoint, kind, length, attention=layout))._mil_program, length)
        rows[name] = {**_counts(cost), "predicted_body_ms": float(predict(cost, chip))}
    return {"kind": kind, "length": length, "chip": chip, "label": "prediction (calibrated cost model)",
            "layouts": rows}
