"""The exact FP16 rescaling of the residual stream (model/bc1s/stream_scale.py, ANE_MATH.md section 17): a rescaled
BC1S model equals the unscaled one in FP32 within STREAM_SCALE_REL on builtin:tiny, the stress source
builtin:tiny-outlier and the real MiniLM (decision body and sentence embedder); a wrong epsilon scaling or a
forgotten bias breaks that bound; epsilons that would stop being exact are refused."""

from __future__ import annotations

import pytest
import torch

from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.core.tolerances import STREAM_SCALE_REL
from experiments.ane_engineering.model.bc1s.embedding import BC1SSentenceEmbedder
from experiments.ane_engineering.model.bc1s.models import BC1SBody
from experiments.ane_engineering.model.bc1s.stream_scale import (
    FP16_SMALLEST_SUBNORMAL,
    StreamScaleError,
    fp16_stored,
    scale_residual_stream,
    scaled_epsilons,
    stream_norms,
)
from experiments.ane_engineering.model.window_tiles import DENSE, AttentionLayout
from experiments.ane_engineering.package.inputs.device_inputs import body_inputs, embedding_inputs
from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions
from experiments.ane_engineering.package.kinds import ExportSpecError, build_export_spec

LENGTH = 96


def _question_inputs(checkpoint, count: int = 6, attention=DENSE) -> list[dict]:
    encoded = [encode_question(checkpoint.tokenizer, checkpoint.config.head, q) for q in load_questions()]
    fitting = [e for e in encoded if e.num_tokens <= LENGTH][:count]
    return [{k: torch.from_numpy(v) for k, v in body_inputs(checkpoint.config, checkpoint.tensors, e.input_ids,
                                                             e.token_types, e.marker_positions, LENGTH,
                                                             attention).items()} for e in fitting]


def _relative_difference(build, inputs: list[dict], exponent: int, edit=None) -> float:
    plain, scaled = build().eval(), build().eval()
    scale_residual_stream(scaled, exponent)
    if edit is not None:
        edit(scaled)
    worst = 0.0
    with torch.no_grad():
        for x in inputs:
            a, b = plain(**x), scaled(**x)
            assert torch.isfinite(b).all()
            worst = max(worst, float((a - b).abs().max() / a.abs().max()))
    return worst


@pytest.fixture(scope="module")
def tiny_outlier():
    return load_checkpoint("builtin:tiny-outlier")


@pytest.mark.parametrize("exponent", [1, 3, 5])
def test_rescaled_tiny_body_equals_the_unscaled_in_fp32(tiny, exponent):
    inputs = _question_inputs(tiny)
    assert _relative_difference(lambda: BC1SBody(tiny.config, tiny.tensors, LENGTH), inputs,
                                exponent) <= STREAM_SCALE_REL


@pytest.mark.parametrize("attention", [DENSE, AttentionLayout("windowed", 32)], ids=["dense", "windowed"])
def test_rescaled_stress_source_equals_the_unscaled_in_fp32(tiny_outlier, attention):
    inputs = _question_inputs(tiny_outlier, attention=attention)
    build = lambda: BC1SBody(tiny_outlier.config, tiny_outlier.tensors, LENGTH, attention=attention)  # noqa: E731
    assert _relative_difference(build, inputs, 4) <= STREAM_SCALE_REL


def test_rescaled_real_minilm_decision_body_equals_the_unscaled_in_fp32():
    checkpoint = load_checkpoint("builtin:minilm-decision")
    inputs = _question_inputs(checkpoint, count=4)
    build = lambda: BC1SBody(checkpoint.config, checkpoint.tensors, LENGTH)  # noqa: E731
    assert _relative_difference(build, inputs, 4) <= STREAM_SCALE_REL


def test_rescaled_real_minilm_embedder_equals_the_unscaled_in_fp32(minilm):
    ids = minilm.tokenizer.encode("The quick brown fox jumps over the lazy dog.").ids
    inputs = [{k: torch.from_numpy(v) for k, v in embedding_inputs(minilm.config, minilm.tensors, ids, LENGTH).items()}]
    build = lambda: BC1SSentenceEmbedder(minilm.config, minilm.tensors, LENGTH)  # noqa: E731
    assert _relative_difference(build, inputs, 4) <= STREAM_SCALE_REL


def _wrong_epsilon(exponent: int):
    def edit(model):  # eps * s instead of eps * s^2
        for norm in stream_norms(model.encoder).values():
            norm.eps = norm.eps * 2.0 ** exponent
    return edit


def _forgotten_bias(model):  # one residual-writing bias left unscaled
    out = model.encoder.layers[2].attn.out
    out.bias = torch.nn.Parameter(out.bias.detach() * 2.0 ** 4, requires_grad=False)


def test_a_wrong_epsilon_scaling_breaks_the_bound(tiny, tiny_outlier):
    for checkpoint in (tiny, tiny_outlier):
        inputs = _question_inputs(checkpoint)
        build = lambda: BC1SBody(checkpoint.config, checkpoint.tensors, LENGTH)  # noqa: E731
        assert _relative_difference(build, inputs, 4, _wrong_epsilon(4)) > STREAM_SCALE_REL


def test_a_forgotten_bias_breaks_the_bound_on_real_minilm():
    """MiniLM's epsilon (1e-12) is too small for a wrong epsilon scaling to show in FP32 (ANE_MATH.md section 11);
    a residual bias left unscaled does."""
    checkpoint = load_checkpoint("builtin:minilm-decision")
    inputs = _question_inputs(checkpoint, count=2)
    build = lambda: BC1SBody(checkpoint.config, checkpoint.tensors, LENGTH)  # noqa: E731
    assert _relative_difference(build, inputs, 4, _forgotten_bias) > STREAM_SCALE_REL


def test_scaled_epsilons_report_fp16_storage_and_refuse_what_stops_being_exact():
    exact = scaled_epsilons({"norm": 1e-5}, 1)["norm"]  # 1e-5 is 168 FP16 subnormal steps: /4 is exact
    assert exact["fp16_exact"] and exact["fp16_effective"] == fp16_stored(1e-5)
    inexact = scaled_epsilons({"norm": 1e-5}, 2)["norm"]  # 10.5 steps: rounds
    assert not inexact["fp16_exact"] and inexact["fp16_stored"] > 0
    assert fp16_stored(1e-12) == FP16_SMALLEST_SUBNORMAL  # coremltools lifts an underflow to 2^-24
    assert scaled_epsilons({"bert": 1e-12}, 5)["bert"]["fp16_effective"] == 2.0 ** -14
    with pytest.raises(StreamScaleError, match="smallest normal"):
        scaled_epsilons({"bert": 1e-12}, 6)
    with pytest.raises(StreamScaleError, match="FP32's normal range"):
        scaled_epsilons({"tiny": 1e-30}, 24)


def test_export_spec_records_the_scale_and_refuses_kinds_without_a_stream(tiny):
    spec = build_export_spec(tiny, "body", LENGTH, fp16_scale=3)
    assert spec.fp16_scale["exponent"] == 3 and "final_norm" in spec.fp16_scale["epsilons"]
    assert build_export_spec(tiny, "body", LENGTH).fp16_scale is None
    with pytest.raises(ExportSpecError, match="kinds encoder, embedding, body"):
        build_export_spec(tiny, "layer", LENGTH, fp16_scale=3)


@pytest.mark.slow
def test_probe_auto_picks_the_smallest_exponent_that_clears_the_headroom_gate(tmp_path):
    """A magnitude past the matmul cliff (40,000 > 32,752): K = 0 leaves the onset MLP's output projection below
    1x headroom; auto picks the smallest K with every op at the gate's margin or more, and records both."""
    from experiments.ane_engineering.checkpoint.builtin import BUILTINS, build_from_config
    from experiments.ane_engineering.checkpoint.builtin_outlier import MASSIVE_ACTIVATION_KEY
    from experiments.ane_engineering.core.gates import HEADROOM_MIN
    from experiments.ane_engineering.package.manifest import read_manifest
    from experiments.ane_engineering.workflows.probe_run import run_probe

    section = {**BUILTINS["tiny-outlier"][MASSIVE_ACTIVATION_KEY], "magnitude": 40000.0}
    (tmp_path / "source").mkdir()
    build_from_config({**BUILTINS["tiny"], MASSIVE_ACTIVATION_KEY: section}, tmp_path / "source", "test", {})
    checkpoint = load_checkpoint(str(tmp_path / "source"))
    report = run_probe(checkpoint, "encoder", 64, tmp_path / "package", show_progress=False, fp16_scale="auto")
    assert report["passed"]
    scale = read_manifest(tmp_path / "package")["fp16_scale"]
    before, after = scale["choice"]["headroom_before"], scale["choice"]["headroom_after"]
    assert before["minimum"]["type"] == "conv" and before["minimum_headroom"] < 1  # the cliff fires unscaled
    assert after["minimum_headroom"] >= HEADROOM_MIN
    # The smallest: the tightest op writes the stream, so K - 1 would leave it at half the headroom.
    assert before["minimum_headroom"] * 2 ** (scale["exponent"] - 1) < HEADROOM_MIN
    assert scale["exponent"] == 2 and [t["exponent"] for t in scale["choice"]["tried"]] == [0, 2]


@pytest.mark.parametrize("argv, message", [
    (["--kind", "layer", "--fp16-scale", "2"], "kinds encoder, embedding, body"),
    (["--kind", "body", "--fp16-scale", "2", "--lora-rank", "2"], "not implemented"),
])
def test_probe_refuses_fp16_scale_where_it_cannot_apply(tmp_path, argv, message):
    from experiments.ane_engineering import probe
    from experiments.ane_engineering.core.arguments import ArgumentValueError

    with pytest.raises(ArgumentValueError, match=message):
        probe.main([*argv, "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["x", "-1", "25", "2.5"])
def test_probe_fp16_scale_values_outside_auto_none_and_0_to_24_are_refused(text):
    from experiments.ane_engineering.core.arguments import ArgumentValueError
    from experiments.ane_engineering.probe import fp16_scale_argument

    with pytest.raises(ArgumentValueError, match="--fp16-scale"):
        fp16_scale_argument(text)
    assert (fp16_scale_argument("none") is None and fp16_scale_argument("auto") == "auto"
            and fp16_scale_argument("3") == 3)
