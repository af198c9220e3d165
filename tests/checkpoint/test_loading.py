"""Checkpoint sources: local directories, refusals that name what is wrong, the pinned hub source, the built-ins."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time

import pytest
import torch

from checkpoint_support import (
    assert_margins_match_the_fit,
    checkpoint_tensors,
    config_variant,
    small_config,
    write_checkpoint,
)
from command_support import command_env, python
from experiments.ane_engineering.checkpoint import CheckpointError, ConfigError, load_checkpoint
from experiments.ane_engineering.checkpoint.builtin import BUILTINS, UnknownSourceError, build_builtin
from experiments.ane_engineering.checkpoint.config import parse_config
from experiments.ane_engineering.checkpoint.hub import HubSourceError, read_pins
from experiments.ane_engineering.validation.margins import MIN_DECISION_MARGIN, decision_margins

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- a valid directory loads -------------------------------------------------------------------------------------

def test_random_directory_loads_with_exact_tensors_and_hashes(tmp_path):
    raw = small_config(norm_bias=True, attention_bias=True, mlp_bias=True)
    tensors = checkpoint_tensors(raw, seed=11, bias_scale=10.0)
    directory = write_checkpoint(tmp_path / "ckpt", raw, tensors, tokenizer=True)
    checkpoint = load_checkpoint(str(directory))
    assert checkpoint.config == parse_config(raw)
    assert set(checkpoint.tensors) == set(tensors)
    for name, value in tensors.items():
        assert torch.equal(checkpoint.tensors[name], value), name
    assert checkpoint.weights_sha256 == _sha256(directory / "model.safetensors")
    assert checkpoint.config_sha256 == _sha256(directory / "config.json")
    assert checkpoint.tokenizer is not None and checkpoint.tokenizer_sha256 == _sha256(directory / "tokenizer.json")
    assert checkpoint.hashes["source"] == str(directory)


def test_encoder_only_directory_loads_without_head(tmp_path):
    raw = small_config()
    del raw["decision_head"]
    directory = write_checkpoint(tmp_path / "enc", raw, checkpoint_tensors(raw))
    checkpoint = load_checkpoint(str(directory))
    assert checkpoint.config.head is None and checkpoint.tokenizer is None
    with pytest.raises(CheckpointError, match="decision_head"):
        checkpoint.require_head("the decision model")
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        checkpoint.require_tokenizer("--text")


def test_half_precision_tensors_load_as_float32(tmp_path):
    raw = small_config()
    tensors = {name: value.to(torch.bfloat16) for name, value in checkpoint_tensors(raw).items()}
    checkpoint = load_checkpoint(str(write_checkpoint(tmp_path / "bf16", raw, tensors)))
    assert all(value.dtype == torch.float32 for value in checkpoint.tensors.values())


# --- refusals: each names the tensor or field --------------------------------------------------------------------

def _write_with(tmp_path, raw=None, edit=None):
    """A small random checkpoint whose tensors dict went through `edit` before saving."""
    raw = small_config() if raw is None else raw
    tensors = checkpoint_tensors(raw)
    if edit is not None:
        edit(tensors)
    return write_checkpoint(tmp_path / "bad", raw, tensors)


def test_missing_tensor_is_refused_by_name(tmp_path):
    directory = _write_with(tmp_path, edit=lambda t: t.pop("layers.2.attn.Wo.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor.*layers\.2\.attn\.Wo\.weight"):
        load_checkpoint(str(directory))


def test_missing_head_tensor_is_refused_by_name(tmp_path):
    directory = _write_with(tmp_path, edit=lambda t: t.pop("decision_head.scorer.out.bias"))
    with pytest.raises(CheckpointError, match=r"missing tensor.*decision_head\.scorer\.out\.bias"):
        load_checkpoint(str(directory))


def test_extra_tensor_is_refused_by_name(tmp_path):
    directory = _write_with(tmp_path, edit=lambda t: t.update({"layers.0.attn_norm.weight": torch.ones(64)}))
    with pytest.raises(CheckpointError, match=r"unexpected tensor.*layers\.0\.attn_norm\.weight"):
        load_checkpoint(str(directory))


def test_bias_not_implied_by_config_is_refused(tmp_path):
    directory = _write_with(tmp_path, edit=lambda t: t.update({"layers.1.mlp.Wi.bias": torch.zeros(192)}))
    with pytest.raises(CheckpointError, match=r"unexpected tensor.*layers\.1\.mlp\.Wi\.bias"):
        load_checkpoint(str(directory))


def test_wrong_shape_is_refused_by_name(tmp_path):
    directory = _write_with(tmp_path, edit=lambda t: t.update({"layers.1.mlp.Wi.weight": torch.zeros(190, 64)}))
    with pytest.raises(CheckpointError,
                       match=r"tensor 'layers\.1\.mlp\.Wi\.weight' has shape \[190, 64\].*\[192, 64\]"):
        load_checkpoint(str(directory))


def test_non_finite_tensor_is_refused_by_name(tmp_path):
    def poison(tensors):
        tensors["layers.3.mlp_norm.weight"][7] = float("nan")

    with pytest.raises(CheckpointError, match=r"tensor 'layers\.3\.mlp_norm\.weight' contains NaN or Inf"):
        load_checkpoint(str(_write_with(tmp_path, edit=poison)))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf")])
def test_infinite_tensor_is_refused_by_name(tmp_path, bad):
    def poison(tensors):
        tensors["layers.2.attn.Wo.weight"][3, 5] = bad

    with pytest.raises(CheckpointError, match=r"tensor 'layers\.2\.attn\.Wo\.weight' contains NaN or Inf"):
        load_checkpoint(str(_write_with(tmp_path, edit=poison)))


def test_finite_values_whose_sum_overflows_are_accepted(tmp_path):
    """The finiteness check sums first; an overflowing sum of finite values must fall back, not refuse."""
    def huge(tensors):
        tensors["final_norm.weight"][:4] = 3e38

    checkpoint = load_checkpoint(str(_write_with(tmp_path, edit=huge)))
    assert checkpoint.tensors["final_norm.weight"][:4].eq(3e38).all()


def test_integer_tensor_is_refused_by_name(tmp_path):
    directory = _write_with(tmp_path, edit=lambda t: t.update({"final_norm.weight": torch.ones(64, dtype=torch.int32)}))
    with pytest.raises(CheckpointError, match=r"tensor 'final_norm\.weight' has dtype"):
        load_checkpoint(str(directory))


def test_pickle_only_directory_is_refused(tmp_path):
    directory = tmp_path / "pickled"
    directory.mkdir()
    raw = small_config()
    (directory / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    torch.save(checkpoint_tensors(raw), directory / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin.*never loads pickle"):
        load_checkpoint(str(directory))


def test_garbage_safetensors_file_is_refused(random_checkpoint):
    directory = random_checkpoint()
    (directory / "model.safetensors").write_bytes(b"\x80\x04 this is not a safetensors header" * 10)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file"):
        load_checkpoint(str(directory))


def test_directory_without_weights_or_config_is_refused(random_checkpoint):
    directory = random_checkpoint()
    (directory / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no model\.safetensors"):
        load_checkpoint(str(directory))
    (directory / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        load_checkpoint(str(directory))


def test_missing_source_path_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_checkpoint(str(tmp_path / "nowhere"))
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(NotADirectoryError, match="must be a directory"):
        load_checkpoint(str(tmp_path / "file.json"))


ENCODER_FIELD_ERRORS = [
    (dict(hidden_activation="swish"), r"'hidden_activation' 'swish' is not supported"),
    (dict(hidden_size="768"), r"'hidden_size' must be an integer, got str"),
    (dict(num_hidden_layers=4.0), r"'num_hidden_layers' must be an integer"),
    (dict(norm_bias=1), r"'norm_bias' must be a boolean, got int"),
    (dict(attention_bias="false"), r"'attention_bias' must be a boolean"),
    (dict(layer_types=["full_attention", "sliding_attention", "sliding_attention"]), r"'layer_types' must list 4"),
    (dict(layer_types=["full_attention", "sliding", "sliding_attention", "full_attention"]), r"'layer_types'"),
    (dict(global_attn_every_n_layers=2), r"'layer_types' and 'global_attn_every_n_layers' disagree"),
    (dict(num_attention_heads=3), r"'hidden_size' \(64\) must be a multiple of num_attention_heads \(3\)"),
    (dict(norm_eps=0.0), r"'norm_eps' must be a positive"),
    (dict(norm_eps="1e-5"), r"'norm_eps' must be a number"),
    (dict(pad_token_id=260), r"'pad_token_id' 260 is outside the vocabulary"),
    (dict(model_type="roberta"), r"'model_type' must be 'modernbert' or 'bert', got 'roberta'"),
    (dict(local_attention=True), r"'local_attention' must be an integer, got bool"),
]


@pytest.mark.parametrize("overrides, message", ENCODER_FIELD_ERRORS,
                         ids=[re.sub(r"\W+", "-", repr(o)).strip("-")[:40] for o, _ in ENCODER_FIELD_ERRORS])
def test_bad_encoder_field_is_refused_by_name(tmp_path, overrides, message):
    raw = small_config()
    raw.update(overrides)  # written raw: no self-consistency fix-ups
    directory = write_checkpoint(tmp_path / "bad", raw, checkpoint_tensors(small_config()))
    with pytest.raises(ConfigError, match=message):
        load_checkpoint(str(directory))


def test_missing_required_field_is_refused_by_name():
    raw = small_config()
    del raw["intermediate_size"]
    with pytest.raises(ConfigError, match=r"missing required field 'intermediate_size'"):
        parse_config(raw)


HEAD_FIELD_ERRORS = [
    (dict(activation="gelu"), r"decision_head: field 'activation' 'gelu' is not supported"),
    (dict(format_version=2), r"decision_head: field 'format_version' 2"),
    (dict(num_token_types=2), r"decision_head: field 'num_token_types' must be at least 3"),
    (dict(num_layers="1"), r"decision_head: field 'num_layers' must be an integer"),
    (dict(num_attention_heads=3), r"decision_head: field 'num_attention_heads' 3"),
    (dict(marker_token_id=260), r"decision_head: field 'marker_token_id' 260 is outside the vocabulary"),
    (dict(output_decimals=0), r"decision_head: field 'output_decimals' must be at least 1, got 0"),
    (dict(rope_theta=-1.0), r"decision_head: field 'rope_theta' must be a positive"),
    (dict(action_head={"hidden_size": 64, "actions": ["answer", "answer"]}), r"action_head: field 'actions'"),
    (dict(action_head={"hidden_size": 64, "actions": ["a", "b"], "activation": "relu"}),
     r"action_head: field 'activation'"),
    (dict(calibration={"temperature": {"choice": 1.0, "score": 1.0}, "none_logit": 0.0}),
     r"calibration.temperature: missing required field 'noul'"),
    (dict(calibration={"temperature": {"choice": 1.0, "score": 1.0, "noul": 1.0, "essay": 1.0}, "none_logit": 0.0}),
     r"calibration.temperature: unknown field\(s\) \['essay'\]"),
    (dict(calibration={"temperature": {"choice": 1.0, "score": 0.0, "noul": 1.0}, "none_logit": 0.0}),
     r"calibration.temperature: field 'score' must be a positive"),
]


@pytest.mark.parametrize("overrides, message", HEAD_FIELD_ERRORS, ids=[str(i) for i in range(len(HEAD_FIELD_ERRORS))])
def test_bad_decision_head_field_is_refused_by_name(overrides, message):
    raw = small_config()
    raw["decision_head"].update(overrides)
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_decision_head_that_is_not_an_object_is_refused():
    raw = small_config()
    raw["decision_head"] = ["not", "an", "object"]
    with pytest.raises(ConfigError, match="config.json: field 'decision_head' must be an object or null, got list"):
        parse_config(raw)


def test_head_size_mismatch_in_tensors_is_refused(tmp_path):
    """A config whose decision-head intermediate_size disagrees with the stored tensors names the tensor."""
    stored = small_config()
    raw = small_config(head=dict(intermediate_size=96))
    directory = write_checkpoint(tmp_path / "bad", raw, checkpoint_tensors(stored))
    with pytest.raises(CheckpointError, match=r"decision_head\.layers\.0\.mlp\.W[io]\.weight' has shape"):
        load_checkpoint(str(directory))


# --- RoPE bases: legacy keys and/or rope_parameters --------------------------------------------------------------

def test_rope_parameters_only_parse():
    raw = small_config()
    del raw["global_rope_theta"], raw["local_rope_theta"]
    raw["rope_parameters"] = {"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    encoder = parse_config(raw).encoder
    assert (encoder.global_rope_theta, encoder.local_rope_theta) == (160000.0, 10000.0)
    assert encoder.rope_theta("sliding_attention") == 10000.0


def test_legacy_keys_only_parse():
    raw = small_config(global_rope_theta=500.0, local_rope_theta=1e6)
    del raw["rope_parameters"]
    encoder = parse_config(raw).encoder
    assert (encoder.global_rope_theta, encoder.local_rope_theta) == (500.0, 1e6)


def test_legacy_keys_and_rope_parameters_that_agree_parse():
    raw = small_config(global_rope_theta=10000.0, local_rope_theta=160000.0)
    assert raw["rope_parameters"]["full_attention"]["rope_theta"] == raw["global_rope_theta"] == 10000.0
    encoder = parse_config(raw).encoder
    assert (encoder.global_rope_theta, encoder.local_rope_theta) == (10000.0, 160000.0)


@pytest.mark.parametrize("key, slot",
                         [("global_rope_theta", "full_attention"), ("local_rope_theta", "sliding_attention")])
def test_legacy_keys_and_rope_parameters_that_disagree_are_refused(key, slot):
    raw = small_config()
    raw["rope_parameters"][slot]["rope_theta"] = 10000.0
    assert raw[key] == 160000.0
    with pytest.raises(ConfigError, match=rf"'{key}' \(160000.0\) disagrees with rope_parameters \(10000.0\)"):
        parse_config(raw)


def test_unsupported_rope_type_and_missing_base_are_refused():
    raw = small_config()
    raw["rope_parameters"]["sliding_attention"]["rope_type"] = "yarn"
    with pytest.raises(ConfigError, match=r"rope_parameters.sliding_attention: field 'rope_type' 'yarn'"):
        parse_config(raw)
    raw = small_config()
    del raw["local_rope_theta"], raw["rope_parameters"]["sliding_attention"]
    with pytest.raises(ConfigError, match=r"missing RoPE base: give 'local_rope_theta'"):
        parse_config(raw)


# --- the named hub source ----------------------------------------------------------------------------------------

def test_shipped_pin_has_no_revision_and_is_refused_with_source_hint():
    assert read_pins()["laya-multilingual"]["revision"] is None
    with pytest.raises(HubSourceError, match=r"--source"):
        load_checkpoint("laya-multilingual")


@pytest.mark.parametrize("revision", ["main", "v1.0", "abc123", "0" * 39, "G" * 40])
def test_branch_tag_or_short_revision_is_refused(revision):
    with pytest.raises(HubSourceError, match=r"full 40-hex commit"):
        load_checkpoint(f"laya-multilingual@{revision}")


@pytest.mark.slow
def test_unreachable_hub_fails_quickly_with_source_hint(tmp_path):
    """HF_ENDPOINT is read when huggingface_hub is imported, so the check runs in a fresh interpreter."""
    env = command_env({k: v for k, v in os.environ.items() if not k.startswith("HF_")},
                      HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf-home"))
    script = ("import time\n"
              "from experiments.ane_engineering.checkpoint import load_checkpoint\n"
              "from experiments.ane_engineering.checkpoint.hub import HubSourceError\n"
              "start = time.monotonic()\n"
              "try:\n"
              f"    load_checkpoint('laya-multilingual@{'0123456789abcdef' * 2}01234567')\n"
              "except HubSourceError as error:\n"
              "    print(f'{time.monotonic() - start:.3f}', 'HubSourceError:', error)\n")
    start = time.monotonic()
    result = python("-c", script, env=env, timeout=120)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    seconds, _, message = result.stdout.partition(" ")
    assert message.startswith("HubSourceError:"), result.stdout + result.stderr
    assert "--source DIR" in message
    assert elapsed < 30, f"took {elapsed:.1f} s (interpreter included) to give up on an unreachable hub"
    # The resolution itself, without interpreter start-up: huggingface_hub's own retry backoff would take longer.
    assert float(seconds) < 10, f"load_checkpoint took {seconds} s to give up on an unreachable hub"


def test_offline_hub_without_cache_fails_with_source_hint(monkeypatch, tmp_path):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    start = time.monotonic()
    with pytest.raises(HubSourceError, match=r"--source DIR"):
        load_checkpoint("laya-multilingual@" + "ab" * 20)
    assert time.monotonic() - start < 30


# --- built-in sources --------------------------------------------------------------------------------------------

def test_builtin_tiny_is_deterministic(tmp_path, tiny):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    build_builtin("tiny", first)
    build_builtin("tiny", second)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "builtin.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    # and identical to the copy the cache holds (written by whichever process built it first)
    assert (first / "model.safetensors").read_bytes() == (tiny.directory / "model.safetensors").read_bytes()


def test_builtin_tiny_hash_and_layout(tiny):
    assert HEX64.match(tiny.weights_sha256)
    assert tiny.weights_sha256 == _sha256(tiny.directory / "model.safetensors")
    assert tiny.config_sha256 == _sha256(tiny.directory / "config.json")
    assert tiny.source == "builtin:tiny" and tiny.tokenizer is not None
    enc = tiny.config.encoder
    assert "full_attention" in enc.layer_types and "sliding_attention" in enc.layer_types
    assert tiny.config.head is not None and tiny.config.head.max_markers == 32


def test_builtin_tiny_decision_margins(tiny):
    """Re-measured with the FP32 reference model: every gap is at least MIN_DECISION_MARGIN, and equals the margin
    recorded when the fit was made (on another machine) within the FP32 cross-machine tolerance (core/tolerances.py; a
    gap is the difference of two values, each within the tolerance at its scale)."""
    measured = decision_margins(tiny.config, tiny.tensors)
    assert min(measured["min_decision_logit_gap"], measured["min_action_logit_gap"]) >= MIN_DECISION_MARGIN, measured
    recorded = json.loads((tiny.directory / "builtin.json").read_text(encoding="utf-8"))["margins_when_fitted"]
    assert_margins_match_the_fit(tiny.config, measured, recorded)


def test_mmbert_base_shape_config_has_mmbert_dimensions():
    """Only the config: writing this built-in produces full-size weights."""
    config = parse_config(BUILTINS["mmbert-base-shape"])
    enc = config.encoder
    assert (enc.num_hidden_layers, enc.hidden_size, enc.num_attention_heads, enc.head_dim) == (22, 768, 12, 64)
    assert (enc.intermediate_size, enc.vocab_size, enc.local_attention) == (1152, 256000, 128)
    assert [i for i, t in enumerate(enc.layer_types) if t == "full_attention"] == list(range(0, 22, 3))
    assert enc.global_rope_theta == enc.local_rope_theta == 160000.0
    assert enc.hidden_activation == "gelu" and not (enc.norm_bias or enc.attention_bias or enc.mlp_bias)


def test_unknown_builtin_is_refused():
    with pytest.raises(UnknownSourceError, match=r"unknown built-in source 'builtin:huge'"):
        load_checkpoint("builtin:huge")


def test_config_variant_helper_stays_consistent():
    raw = config_variant("tiny", num_hidden_layers=5, global_attn_every_n_layers=2, local_rope_theta=500.0)
    assert raw["layer_types"] == ["full_attention", "sliding_attention"] * 2 + ["full_attention"]
    assert raw["rope_parameters"]["sliding_attention"]["rope_theta"] == 500.0 == raw["local_rope_theta"]
    assert BUILTINS["tiny"]["num_hidden_layers"] == 6  # the shared dict is not mutated
    assert parse_config(raw).encoder.local_rope_theta == 500.0
