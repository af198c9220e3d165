"""The reference encoder vs transformers' ModernBertModel (eager attention), FP32, on random configurations.

Each case is written by transformers itself (`save_pretrained`, safetensors) and read by our loader with no
conversion step: `load_checkpoint(str(directory))` and the encode command's `--source DIR`. Sequences are longer
than the sliding window, so the window masks matter. Bound: max abs 1e-4 on valid tokens.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from safetensors import safe_open  # noqa: E402

from checkpoint_support import randomize_transformers_model  # noqa: E402
from experiments.ane_engineering.checkpoint import CheckpointError, ConfigError, load_checkpoint  # noqa: E402
from experiments.ane_engineering.checkpoint.config import parse_config  # noqa: E402
from experiments.ane_engineering.core.tolerances import TRANSFORMERS_ORACLE_ABS  # noqa: E402
from experiments.ane_engineering.encode import main as encode_main  # noqa: E402
from experiments.ane_engineering.model.modernbert_reference import ReferenceEncoder  # noqa: E402

ORACLE_ABS = TRANSFORMERS_ORACLE_ABS
VOCAB = 300

# (global every, local_attention, global theta, local theta, layers, sequence length, extra config)
CASES = {
    "every2-w32-160k-10k": (2, 32, 160000.0, 10000.0, 4, 150, {}),
    "every3-w64-10k-500-biases": (3, 64, 10000.0, 500.0, 4, 220,
                                  dict(norm_bias=True, attention_bias=True, mlp_bias=True, norm_eps=1e-6)),
    "every3-w128-160k-160k": (3, 128, 160000.0, 160000.0, 5, 300, {}),
    "every2-w128-1e6-500-tanh": (2, 128, 1e6, 500.0, 4, 260, dict(hidden_activation="gelu_pytorch_tanh",
                                                                   norm_eps=1e-3)),
}


def _hf_config(every, local, global_theta, local_theta, layers, **extra):
    return transformers.ModernBertConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=2,
        global_attn_every_n_layers=every, local_attention=local, global_rope_theta=global_theta,
        local_rope_theta=local_theta, max_position_embeddings=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2, attn_implementation="eager", **extra)


def _randomize(model, seed: int) -> None:
    """Non-trivial weights: linears N(0, 0.2), embeddings N(0, 1), norm weights 1 + noise, biases N(0, 0.1)."""
    randomize_transformers_model(model, seed, dense_std=0.2)


def _build(model_class, case: str, seed: int = 0):
    every, local, global_theta, local_theta, layers, length, extra = CASES[case]
    torch.manual_seed(seed)
    model = model_class(_hf_config(every, local, global_theta, local_theta, layers, **extra)).eval()
    _randomize(model, seed)
    return model, length


def _ids(length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (1, length), generator=generator)
    ids[0, 0], ids[0, -1] = 1, 2
    return ids


def _reference(checkpoint, ids: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    model = ReferenceEncoder(checkpoint.config, checkpoint.tensors).eval()
    valid = torch.ones_like(ids, dtype=torch.bool) if valid is None else valid
    with torch.no_grad():
        return model(model.embed(ids), valid)


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


@pytest.mark.parametrize("case", list(CASES))
def test_reference_encoder_matches_modernbert(tmp_path, case):
    model, length = _build(transformers.ModernBertModel, case)
    directory = tmp_path / case
    model.save_pretrained(directory)
    saved = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    assert (directory / "model.safetensors").is_file() and not list(directory.glob("*.bin"))

    checkpoint = load_checkpoint(str(directory))
    enc = checkpoint.config.encoder
    every, local, global_theta, local_theta, layers, _, extra = CASES[case]
    assert list(enc.layer_types) == saved["layer_types"]
    assert enc.layer_types[0] == "full_attention" and enc.layer_types[every] == "full_attention"
    assert (enc.local_attention, enc.global_rope_theta, enc.local_rope_theta) == (local, global_theta, local_theta)
    assert length > local  # the window masks keys

    ids = _ids(length, seed=1)
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
    got = _reference(checkpoint, ids)
    assert expected.abs().max() > 1.0
    assert _max_abs(got, expected) <= ORACLE_ABS

    # padded batch: the second row has only 70% valid tokens; compare valid tokens only
    n = int(0.7 * length)
    batch = torch.cat([ids, _ids(length, seed=2)])
    mask = torch.ones_like(batch)
    mask[1, n:] = 0
    with torch.no_grad():
        expected = model(input_ids=batch, attention_mask=mask).last_hidden_state
    got = _reference(checkpoint, batch, mask.bool())
    assert _max_abs(got[0], expected[0]) <= ORACLE_ABS
    assert _max_abs(got[1, :n], expected[1, :n]) <= ORACLE_ABS


def test_window_matters_for_the_oracle(tmp_path):
    """The comparison is sensitive to the sliding window: the same weights with full attention everywhere differ."""
    model, length = _build(transformers.ModernBertModel, "every2-w32-160k-10k")
    model.save_pretrained(tmp_path / "ckpt")
    raw = json.loads((tmp_path / "ckpt" / "config.json").read_text(encoding="utf-8"))
    raw["local_attention"] = 2 * length  # a window covering everything: sliding layers become global
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    ids = _ids(length, seed=1)
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
    assert _max_abs(_reference(load_checkpoint(str(tmp_path / "ckpt")), ids), expected) > 100 * ORACLE_ABS


def test_transformers_saved_config_parses_without_legacy_theta_keys(tmp_path):
    model, _ = _build(transformers.ModernBertModel, "every3-w64-10k-500-biases")
    model.save_pretrained(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text(encoding="utf-8"))
    assert "global_rope_theta" not in saved and "local_rope_theta" not in saved
    assert saved["rope_parameters"]["full_attention"]["rope_theta"] == 10000.0
    encoder = parse_config(saved).encoder
    assert (encoder.global_rope_theta, encoder.local_rope_theta) == (10000.0, 500.0)
    assert (encoder.norm_bias, encoder.attention_bias, encoder.mlp_bias, encoder.norm_eps) == (True, True, True, 1e-6)

    agreeing = {**saved, "global_rope_theta": 10000.0, "local_rope_theta": 500.0}
    assert parse_config(agreeing).encoder.local_rope_theta == 500.0
    with pytest.raises(ConfigError, match=r"'local_rope_theta' \(10000.0\) disagrees with rope_parameters \(500.0\)"):
        parse_config({**saved, "local_rope_theta": 10000.0})


def test_masked_lm_checkpoint_loads_and_matches(tmp_path):
    model, length = _build(transformers.ModernBertForMaskedLM, "every3-w64-10k-500-biases", seed=4)
    model.save_pretrained(tmp_path / "mlm")
    with safe_open(str(tmp_path / "mlm" / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
    assert "model.embeddings.tok_embeddings.weight" in names and "model.layers.0.attn.Wqkv.weight" in names
    assert {name for name in names if not name.startswith("model.")} & {"head.dense.weight", "decoder.bias"}
    checkpoint = load_checkpoint(str(tmp_path / "mlm"))
    assert not any(name.startswith(("model.", "head.", "decoder.")) for name in checkpoint.tensors)
    ids = _ids(length, seed=5)
    with torch.no_grad():
        expected = model.model(input_ids=ids).last_hidden_state
    assert _max_abs(_reference(checkpoint, ids), expected) <= ORACLE_ABS


def test_sharded_checkpoint_loads_and_matches(tmp_path):
    model, length = _build(transformers.ModernBertModel, "every2-w32-160k-10k", seed=6)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="50KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text(encoding="utf-8"))
    shards = set(index["weight_map"].values())
    assert len(shards) >= 2 and not (tmp_path / "sharded" / "model.safetensors").exists()
    checkpoint = load_checkpoint(str(tmp_path / "sharded"))
    assert len(checkpoint.weights_sha256) == 64
    ids = _ids(length, seed=7)
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
    assert _max_abs(_reference(checkpoint, ids), expected) <= ORACLE_ABS


def test_sharded_checkpoint_with_missing_shard_is_refused(tmp_path):
    model, _ = _build(transformers.ModernBertModel, "every2-w32-160k-10k")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="50KB")
    shard = sorted((tmp_path / "sharded").glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=rf"shard\(s\) not found: {shard.name}"):
        load_checkpoint(str(tmp_path / "sharded"))


@pytest.mark.parametrize("backend", ["reference", "bc1s"])
def test_encode_command_reads_transformers_directory(tmp_path, backend, capsys):
    model, length = _build(transformers.ModernBertModel, "every3-w64-10k-500-biases", seed=8)
    model.save_pretrained(tmp_path / "ckpt")
    ids = _ids(length, seed=9)
    output = tmp_path / f"{backend}.npy"
    argv = ["--source", str(tmp_path / "ckpt"), "--ids", ",".join(map(str, ids[0].tolist())), "--backend", backend,
            "--output", str(output)]
    assert encode_main(argv) == 0
    assert str(output) in capsys.readouterr().out
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state[0].numpy()
    got = np.load(output)
    assert got.dtype == np.float32 and got.shape == (length, 64)
    assert float(np.abs(got - expected).max()) <= ORACLE_ABS
