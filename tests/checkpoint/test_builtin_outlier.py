"""The stress sources (checkpoint/builtin_outlier.py): the planted massive activation has the configured magnitude at
the configured place and onset, in the FP32 reference and in the BC1S export model (dense and windowed), for every
input; a config that cannot be planted is refused by field; the stress_source command writes other strengths."""

from __future__ import annotations

import json

import pytest
import torch

from experiments.ane_engineering.checkpoint import load_checkpoint
from experiments.ane_engineering.checkpoint.builtin import BUILTINS, PUBLISHED_OUTLIER, build_from_config
from experiments.ane_engineering.checkpoint.builtin_outlier import MASSIVE_ACTIVATION_KEY
from experiments.ane_engineering.checkpoint.config import ConfigError
from experiments.ane_engineering.model.bc1s.models import BC1SEncoder
from experiments.ane_engineering.model.encoders import reference_encoder
from experiments.ane_engineering.model.window_tiles import AttentionLayout
from experiments.ane_engineering.package.inputs.device_inputs import encoder_inputs

CLS, SEP = 1, 2
RELATIVE = 1e-6  # the planted value is magnitude / u * u in FP32: a few roundings of 2^-24


@pytest.fixture(scope="module")
def outlier():
    return load_checkpoint("builtin:tiny-outlier")


def _ids(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [CLS, *torch.randint(4, 260, (n,), generator=g).tolist(), SEP]


def _reference_states(checkpoint, ids: list[int]) -> list[torch.Tensor]:
    """Hidden states after the embedding norm and after every encoder layer, each (L, C)."""
    encoder = reference_encoder(checkpoint.config, checkpoint.tensors).eval()
    tokens = torch.tensor([ids])
    with torch.no_grad():
        x = encoder.embedding_norm(encoder.embed(tokens))
        states = [x[0]]
        for layer in encoder.layers:
            x = layer(x, tokens != -1)
            states.append(x[0])
    return states


def _bc1s_states(checkpoint, ids: list[int], length: int, attention: AttentionLayout) -> list[torch.Tensor]:
    """The same from the BC1S encoder run in FP32 on the host's device inputs: (L, C) for the valid columns."""
    encoder = BC1SEncoder(checkpoint.config, checkpoint.tensors, length, attention=attention).eval()
    states = []

    def keep(module, inputs, output):
        if output.shape[2] != 1:  # a sliding layer of the windowed layout returns tiles
            output = encoder.tiling.untile(output)
        states.append(output[0, :, 0, :len(ids)].T)

    hooks = [encoder.embedding_norm.register_forward_hook(keep)]
    hooks += [layer.register_forward_hook(keep) for layer in encoder.layers]
    inputs = {k: torch.from_numpy(v) for k, v in encoder_inputs(checkpoint.config, checkpoint.tensors, ids, length,
                                                                 attention).items()}
    with torch.no_grad():
        encoder.encode(inputs)
    for hook in hooks:
        hook.remove()
    return states[:1 + checkpoint.config.encoder.num_hidden_layers]


def _check_planted(states: list[torch.Tensor], spec: dict) -> None:
    dims, onset, magnitude = spec["dims"], spec["onset_layer"], spec["magnitude"]
    signs = torch.tensor(spec.get("signs", [1] * len(dims)), dtype=torch.float32)
    for index, h in enumerate(states):  # index 0: after the embedding norm; n + 1: after layers.n
        planted = h[:, dims]  # (L, dims)
        if index <= onset:
            assert planted.abs().max() == 0, f"planted dims are non-zero before the onset (state {index})"
        else:
            assert torch.allclose(planted[0], signs * magnitude, rtol=RELATIVE, atol=0), (index, planted[0])
            assert planted[1:].abs().max() <= 1e-6 * magnitude, f"the activation leaked off [CLS] (state {index})"
    unplanted = [c for c in range(states[0].shape[1]) if c not in dims]
    assert max(float(h[:, unplanted].abs().max()) for h in states) < 100, "only the planted dims are massive"


def test_builtin_outlier_configs_carry_the_published_place_onset_and_magnitude():
    assert BUILTINS["mmbert-outlier"][MASSIVE_ACTIVATION_KEY] == PUBLISHED_OUTLIER
    assert PUBLISHED_OUTLIER["dims"] == [468, 488, 530, 580, 614] and PUBLISHED_OUTLIER["onset_layer"] == 11
    assert 1.37e4 <= PUBLISHED_OUTLIER["magnitude"] <= 1.40e4
    tiny = BUILTINS["tiny-outlier"][MASSIVE_ACTIVATION_KEY]
    assert tiny["dims"] == [78, 81, 88, 97, 102] and tiny["onset_layer"] == 3


@pytest.mark.parametrize("n", [3, 60, 400])
def test_reference_carries_the_configured_activation_at_cls_from_the_onset(outlier, n):
    spec = json.loads((outlier.directory / "builtin.json").read_text())[MASSIVE_ACTIVATION_KEY]
    _check_planted(_reference_states(outlier, _ids(n, seed=n)), spec)


@pytest.mark.parametrize("attention", [AttentionLayout(), AttentionLayout("windowed", 32)], ids=["dense", "windowed"])
def test_bc1s_export_model_carries_it_too(outlier, attention):
    spec = json.loads((outlier.directory / "builtin.json").read_text())[MASSIVE_ACTIVATION_KEY]
    ids = _ids(150, seed=7)
    _check_planted(_bc1s_states(outlier, ids, 192, attention), spec)


def test_builtin_tiny_outlier_decision_margins(outlier):
    """Its committed margin fit (builtin_tiny_outlier_fit.json) holds, re-measured with the FP32 reference, as
    builtin:tiny's does: a decision the numerics flip is then not a random near-tie."""
    from checkpoint_support import assert_margins_match_the_fit
    from experiments.ane_engineering.validation.margins import MIN_DECISION_MARGIN, decision_margins

    measured = decision_margins(outlier.config, outlier.tensors)
    assert min(measured["min_decision_logit_gap"], measured["min_action_logit_gap"]) >= MIN_DECISION_MARGIN, measured
    recorded = json.loads((outlier.directory / "builtin.json").read_text(encoding="utf-8"))["margins_when_fitted"]
    assert_margins_match_the_fit(outlier.config, measured, recorded)


def test_other_strengths_and_signs_are_built_from_the_config(tmp_path):
    section = {"magnitude": 40000.0, "dims": [5, 60], "onset_layer": 1, "signs": [1, -1]}
    meta = build_from_config({**BUILTINS["tiny"], MASSIVE_ACTIVATION_KEY: section}, tmp_path, "test", {})
    checkpoint = load_checkpoint(str(tmp_path))
    assert meta[MASSIVE_ACTIVATION_KEY]["magnitude"] == 40000.0
    _check_planted(_reference_states(checkpoint, _ids(20, seed=1)), section)


@pytest.mark.parametrize("section, field", [
    ({"magnitude": 1e4, "dims": [5, 500], "onset_layer": 1}, "dims"),
    ({"magnitude": 1e4, "dims": [5], "onset_layer": 6}, "onset_layer"),
    ({"magnitude": 1e4, "dims": [5, 6], "onset_layer": 1, "signs": [1]}, "signs"),
    ({"magnitude": 1e4, "dims": [127], "onset_layer": 1}, "marker_dim"),
    ({"magnitude": -1.0, "dims": [5], "onset_layer": 1}, "magnitude"),
])
def test_a_section_that_cannot_be_planted_is_refused_by_field(tmp_path, section, field):
    with pytest.raises(ConfigError, match=field):
        build_from_config({**BUILTINS["tiny"], MASSIVE_ACTIVATION_KEY: section}, tmp_path, "test", {})


def test_stress_source_command_writes_a_source_past_the_matmul_cliff(tmp_path, capsys):
    from experiments.ane_engineering import stress_source

    output = tmp_path / "tiny-40k"
    assert stress_source.main(["--magnitude", "40000", "--signs", "1,-1,1,1,-1", "--no-margin-fit",
                               "--output", str(output)]) == 0
    checkpoint = load_checkpoint(str(output))
    section = json.loads((output / "config.json").read_text())[MASSIVE_ACTIVATION_KEY]
    assert (section["magnitude"] == 40000.0
            and section["dims"] == BUILTINS["tiny-outlier"][MASSIVE_ACTIVATION_KEY]["dims"])
    _check_planted(_reference_states(checkpoint, _ids(30, seed=3)), section)
    assert f"--source {output}" in capsys.readouterr().out
