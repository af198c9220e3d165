"""Absurd configs, indexes, fixtures, goldens and text: each is refused by the command with one line and exit 2,
before anything is allocated, and nothing is left at the output path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from checkpoint_support import small_config, write_random_checkpoint
from command_support import refused, run_command
from experiments.ane_engineering import encode, golden, validate
from experiments.ane_engineering.checkpoint.config import ConfigError, parse_config
from experiments.ane_engineering.core.limits import MAX_DIMENSION, MAX_LAYERS, physical_memory_bytes
from experiments.ane_engineering.package.inputs.questions import FIXTURE_PATH
from experiments.ane_engineering.package.manifest import MANIFEST_NAME, ManifestError, read_manifest, seal
from experiments.ane_engineering.validation.golden import COMMITTED_TINY_GOLDEN


def encode_refuses(capsys, tmp_path, source: Path) -> str:
    output = tmp_path / "out" / "hidden.npy"
    output.parent.mkdir()
    return refused(encode.main, ["--source", str(source), "--ids", "1,2,3", "--output", str(output)], capsys,
                   output=output)


def write_config(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(text, encoding="utf-8")
    return directory


# --- configs ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [10**8, 10**400], ids=["1e8", "1e400"])
@pytest.mark.parametrize("section, field", [(None, "num_hidden_layers"), ("decision_head", "num_layers")])
def test_a_hundred_million_layers_are_refused_before_anything_is_built(capsys, tmp_path, section, field, value):
    raw = small_config()
    (raw[section] if section else raw)[field] = value
    directory = write_random_checkpoint(tmp_path / "ckpt", small_config())
    (directory / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    line = encode_refuses(capsys, tmp_path, directory)
    assert f"field '{field}' must be at most {MAX_LAYERS}" in line and "config.json" in line


def test_encoder_and_head_layers_together_are_bounded():
    raw = small_config(num_hidden_layers=MAX_LAYERS, layer_types=None, head={"num_layers": 1})
    with pytest.raises(ConfigError,
                       match=rf"decision_head: field 'num_layers' 1 with {MAX_LAYERS} encoder layers exceeds"):
        parse_config(raw)


@pytest.mark.parametrize("field", ["hidden_size", "intermediate_size", "local_attention", "num_attention_heads"])
def test_a_device_dimension_above_what_core_ml_loads_is_refused(field):
    raw = small_config(**{field: MAX_DIMENSION + 1})
    with pytest.raises(ConfigError, match=rf"field '{field}' must be at most {MAX_DIMENSION} \(.*Core ML"):
        parse_config(raw)


@pytest.mark.parametrize("field", ["scorer_hidden_size", "max_markers", "num_token_types", "intermediate_size"])
def test_a_head_dimension_above_what_core_ml_loads_is_refused(field):
    with pytest.raises(ConfigError, match=rf"decision_head: field '{field}' must be at most {MAX_DIMENSION}"):
        parse_config(small_config(head={field: MAX_DIMENSION + 1}))


def test_weights_larger_than_this_machine_are_refused_before_allocation(capsys, tmp_path):
    """Every dimension within Core ML's bounds, but the float32 weights would not fit in memory: refused from the
    config alone (the weights file here is the small checkpoint's, never read)."""
    memory = physical_memory_bytes()
    assert memory is not None
    layers = MAX_LAYERS - 1
    raw = small_config(hidden_size=8192, intermediate_size=8192, num_attention_heads=64, num_hidden_layers=layers,
                       layer_types=None)
    directory = write_random_checkpoint(tmp_path / "ckpt", small_config())
    (directory / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    parameters = layers * (4 * 8192**2 + 3 * 8192 * 8192)  # encoder layers alone: attention 4 C^2, GeGLU 3 I C
    if parameters * 4 <= memory:
        pytest.skip(f"this machine holds {layers} layers of width 8192 in float32")
    line = encode_refuses(capsys, tmp_path, directory)
    assert "GiB as float32, more than this machine's" in line


@pytest.mark.parametrize("field", ["norm_eps", "global_rope_theta"])
def test_an_integer_too_large_for_a_float_field_is_refused(capsys, tmp_path, field):
    raw = small_config()
    raw[field] = 1  # placeholder replaced in the text: json.dumps would write the int the same way
    text = json.dumps(raw).replace(f'"{field}": 1', f'"{field}": 1{"0" * 400}')
    directory = write_random_checkpoint(tmp_path / "ckpt", small_config())
    (directory / "config.json").write_text(text, encoding="utf-8")
    line = encode_refuses(capsys, tmp_path, directory)
    assert f"field '{field}' must be a number a float can hold, got an integer of 401 digits" in line


def test_a_vocabulary_beyond_32_bit_token_ids_is_refused():
    with pytest.raises(ConfigError, match=r"field 'vocab_size' must be at most 4294967296 \(token ids are 32-bit"):
        parse_config(small_config(vocab_size=10**400))


def test_a_200000_deep_config_is_refused(capsys, tmp_path):
    directory = write_config(tmp_path / "ckpt", "[" * 200_000 + "]" * 200_000)
    assert "nested more than" in encode_refuses(capsys, tmp_path, directory)


@pytest.mark.parametrize("text, message", [
    ('{"hidden_size": NaN}', "NaN is not a JSON number"),
    ('{"hidden_size": 64, "hidden_size": 128}', "key 'hidden_size' appears twice"),
    ("[1, 2]", "top level must be an object, got list"),
])
def test_hostile_config_text_is_refused(capsys, tmp_path, text, message):
    assert message in encode_refuses(capsys, tmp_path, write_config(tmp_path / "ckpt", text))


# --- shard index --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("weight_map, message", [
    (["model-00001.safetensors"], "field 'weight_map' must be an object, got list"),
    ({"layers.0.attn.Wqkv.weight": 7}, "field 'layers.0.attn.Wqkv.weight' must be a string, got int 7"),
    ({"layers.0.attn.Wqkv.weight": "../elsewhere.safetensors"}, "is not a .safetensors file name in this directory"),
    ({}, "field 'weight_map' must not be empty"),
])
def test_a_malformed_shard_index_is_refused(capsys, tmp_path, weight_map, message):
    directory = write_random_checkpoint(tmp_path / "ckpt", small_config())
    (directory / "model.safetensors").rename(directory / "model-00001.safetensors")
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}), encoding="utf-8")
    line = encode_refuses(capsys, tmp_path, directory)
    assert "model.safetensors.index.json" in line and message in line, line


# --- fixtures and goldens -----------------------------------------------------------------------------------------

def fixture_with(tmp_path: Path, edit) -> Path:
    data = json.loads(FIXTURE_PATH.read_text(encoding="utf-8"))
    data = edit(data)
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _set_options(data):
    data["questions"][0]["options"] = "Paris"
    return data


def _drop_kind(data):
    del data["questions"][0]["kind"]
    return data


def _no_questions(data):
    data["questions"] = []
    return data


@pytest.mark.parametrize("edit, message", [
    (lambda data: data["questions"], "top level must be an object, got list"),
    (_drop_kind, "questions[0]: missing required field 'kind'"),
    (_set_options, "questions[0]: field 'options' must be a list, got str 'Paris'"),
    (_no_questions, "field 'questions' must list at least 1 entries, got 0"),
], ids=["top-level-list", "no-kind", "options-string", "no-questions"])
def test_a_malformed_fixture_is_refused_by_golden(capsys, tmp_path, edit, message):
    fixture = fixture_with(tmp_path, edit)
    output = tmp_path / "out" / "golden.json"
    output.parent.mkdir()
    line = refused(golden.main, ["--fixture", str(fixture), "--output", str(output)], capsys, output=output)
    assert str(fixture) in line and message in line, line


def test_a_golden_whose_source_is_not_an_object_is_refused_by_validate(capsys, tmp_path):
    data = json.loads(COMMITTED_TINY_GOLDEN.read_text(encoding="utf-8"))
    data["source"] = "builtin:tiny"
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    output = tmp_path / "out" / "validation.json"
    output.parent.mkdir()
    # The golden is read before any package: the package path is never touched.
    line = refused(validate.main, ["--package", str(tmp_path / "no-package"), "--golden", str(path),
                                   "--backend", "mil", "--output", str(output)], capsys, output=output)
    assert f"{path}: field 'source' must be an object, got str 'builtin:tiny'" in line


def test_a_manifest_of_the_wrong_structure_is_refused_before_its_seal_is_checked(tmp_path):
    manifest = json.loads(json.dumps({
        "format": "ane-engineering/manifest/1", "kind": "body", "length": 96,
        "source": {"source": "builtin:tiny", "weights_sha256": "0" * 64, "config_sha256": "1" * 64,
                   "tokenizer_sha256": None},
        "model_config": {}, "package": {"path": ["model.mlpackage"],
                                        "content_hash": {"sha256": "2" * 64, "files": {}}},
        "io": {"inputs": [], "outputs": [{"name": "option_logits", "shape": [1, 1, 1, 32], "dtype": "float16"}]},
    }))
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(seal(manifest)), encoding="utf-8")
    with pytest.raises(ManifestError, match=r"manifest\.json package: field 'path' must be a string, got list"):
        read_manifest(tmp_path)


# --- text ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_text_that_is_not_utf8_is_refused_by_encode(tmp_path):
    """argv bytes that are not UTF-8 reach Python as lone surrogates; encode refuses them with one line."""
    output = tmp_path / "hidden.npy"
    result = run_command("encode", "--text", os.fsencode("caf") + b"\xe9", "--output", str(output))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "error: --text is not valid UTF-8 (byte 0xe9 at character 3)", result.stderr
    assert not output.exists() and list(tmp_path.iterdir()) == []
