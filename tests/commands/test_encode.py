"""The encode command (reference vs BC1S final hidden states, refusals) and the question encoding it shares a
tokenizer with: [CLS] text [SEP] ([MARK] option [SEP])*, token types, marker positions."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from command_support import run_command
from experiments.ane_engineering.checkpoint import CheckpointError
from experiments.ane_engineering.checkpoint.builtin import CLS, MARK, SEP
from experiments.ane_engineering.core.cli import UsageError
from experiments.ane_engineering.core.staging import OutputLocationError
from experiments.ane_engineering.core.tolerances import BC1S_ENCODER_ABS
from experiments.ane_engineering.encode import main
from experiments.ane_engineering.package.inputs.questions import (
    TYPE_MARKER,
    TYPE_OPTION,
    TYPE_QUESTION,
    Question,
    QuestionError,
    encode_question,
    load_questions,
)

AGREE_ABS = BC1S_ENCODER_ABS  # reference and BC1S encoders, both FP32
TEXT = "Which city is the capital of France? Quelle ville est la capitale de la France ?"


def _run(tmp_path, name: str, *args: str) -> np.ndarray:
    output = tmp_path / name
    assert main(["--source", "builtin:tiny", *args, "--output", str(output)]) == 0
    return np.load(output)


def _command(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return run_command("encode", *args, timeout=120, **kwargs)


def test_text_reference_and_bc1s_agree(tmp_path, tiny):
    reference = _run(tmp_path, "ref.npy", "--text", TEXT, "--backend", "reference")
    bc1s = _run(tmp_path, "bc1s.npy", "--text", TEXT, "--backend", "bc1s")
    tokens = len(TEXT.encode("utf-8")) + 2  # byte-level tokenizer: [CLS] bytes [SEP]
    assert reference.shape == bc1s.shape == (tokens, tiny.config.encoder.hidden_size)
    assert reference.dtype == bc1s.dtype == np.float32
    assert np.abs(reference).max() > 0.5
    assert float(np.abs(reference - bc1s).max()) <= AGREE_ABS


def test_ids_reference_and_bc1s_agree_in_a_longer_bucket(tmp_path, tiny):
    """150 ids -> bucket 192, where tiny's sliding window (radius 64) masks keys; --length 1024 pads far more."""
    rng = np.random.default_rng(0)
    ids = ",".join(map(str, [CLS, *rng.integers(4, 260, 148).tolist(), SEP]))
    reference = _run(tmp_path, "ref.npy", "--ids", ids, "--backend", "reference")
    bc1s = _run(tmp_path, "bc1s.npy", "--ids", ids, "--backend", "bc1s")
    padded = _run(tmp_path, "bc1s-1024.npy", "--ids", ids, "--backend", "bc1s", "--length", "1024")
    assert reference.shape == bc1s.shape == padded.shape == (150, tiny.config.encoder.hidden_size)
    assert float(np.abs(reference - bc1s).max()) <= AGREE_ABS
    assert float(np.abs(reference - padded).max()) <= AGREE_ABS


def test_local_directory_with_tokenizer_encodes_text(tmp_path, random_checkpoint):
    """--source DIR --text: the directory's own tokenizer.json decides the ids; both backends agree."""
    directory = random_checkpoint(seed=2, tokenizer=True, bias_scale=10.0)
    outputs = {}
    for backend in ("reference", "bc1s"):
        output = tmp_path / f"{backend}.npy"
        assert main(["--source", str(directory), "--text", TEXT, "--backend", backend, "--output", str(output)]) == 0
        outputs[backend] = np.load(output)
    assert outputs["reference"].shape == (len(TEXT.encode("utf-8")) + 2, 64)
    assert float(np.abs(outputs["reference"] - outputs["bc1s"]).max()) <= AGREE_ABS


def test_text_without_tokenizer_is_refused(tmp_path, random_checkpoint):
    with pytest.raises(CheckpointError, match=r"--text needs tokenizer\.json"):
        main(["--source", str(random_checkpoint()), "--text", TEXT, "--output", str(tmp_path / "out.npy")])


@pytest.mark.slow
def test_existing_output_is_refused_and_left_unchanged(tmp_path):
    output = tmp_path / "exists.npy"
    output.write_bytes(b"keep me")
    result = _command("--source", "builtin:tiny", "--ids", "1,72,105,2", "--output", str(output))
    assert result.returncode == 2, result.stderr
    assert "already exists" in result.stderr and "Traceback" not in result.stderr
    assert output.read_bytes() == b"keep me"


def test_input_longer_than_length_is_refused(tmp_path):
    output = tmp_path / "long.npy"
    ids = ",".join(["1"] + ["70"] * 98 + ["2"])  # 100 tokens
    with pytest.raises(UsageError, match=r"100 tokens do not fit --length 96.*never truncated"):
        main(["--source", "builtin:tiny", "--ids", ids, "--backend", "bc1s", "--length", "96", "--output", str(output)])
    assert not output.exists()
    too_long = ",".join(["70"] * 1025)
    with pytest.raises(UsageError, match=r"1025 tokens do not fit"):
        main(["--source", "builtin:tiny", "--ids", too_long, "--backend", "bc1s", "--output", str(output)])
    assert not output.exists() and not list(tmp_path.iterdir())  # no temporary left behind either


def test_bad_ids_are_refused(tmp_path):
    output = tmp_path / "bad.npy"
    with pytest.raises(UsageError, match=r"token ids must be in \[0, 260\)"):
        main(["--source", "builtin:tiny", "--ids", "1,260,2", "--output", str(output)])
    with pytest.raises(UsageError, match="--ids must be an integer"):
        main(["--source", "builtin:tiny", "--ids", "1,x,2", "--output", str(output)])
    assert not output.exists()


def test_missing_output_directory_is_refused(tmp_path):
    with pytest.raises(OutputLocationError, match="does not exist"):
        main(["--ids", "1,2", "--output", str(tmp_path / "no-such-dir" / "out.npy")])


@pytest.mark.slow
def test_help_works():
    result = _command("--help")
    assert result.returncode == 0
    for option in ("--source", "--text", "--ids", "--backend", "--length", "--output", "builtin:tiny"):
        assert option in result.stdout


# --- question encoding (package/inputs/questions.py)
# -------------------------------------------------------------------

def test_question_layout_types_and_markers(tiny):
    question = Question("q", "choice", "Pick one:", ("yes", "no", "ça"))
    encoded = encode_question(tiny.tokenizer, tiny.config.head, question)
    text = [4 + b for b in "Pick one:".encode()]  # byte-level ids: 4 + byte
    expected = [CLS, *text, SEP]
    for option in question.options:
        expected += [MARK, *(4 + b for b in option.encode()), SEP]
    assert list(encoded.input_ids) == expected
    assert encoded.num_tokens == len(expected)
    q_len = len(text) + 2
    assert list(encoded.token_types[:q_len]) == [TYPE_QUESTION] * q_len
    assert [encoded.input_ids[p] for p in encoded.marker_positions] == [MARK] * 3
    assert encoded.marker_positions[0] == q_len
    for position, option in zip(encoded.marker_positions, question.options):
        width = len(option.encode()) + 1  # option bytes and its [SEP]
        assert encoded.token_types[position] == TYPE_MARKER
        assert list(encoded.token_types[position + 1:position + 1 + width]) == [TYPE_OPTION] * width
        assert encoded.input_ids[position + width] == SEP
    assert encoded.token_types.count(TYPE_MARKER) == 3


def test_fixture_questions_encode_with_markers_on_mark_tokens(tiny):
    questions = load_questions()
    assert {q.kind for q in questions} == {"choice", "score", "noul"}
    for question in questions:
        encoded = encode_question(tiny.tokenizer, tiny.config.head, question)
        assert encoded.input_ids[0] == CLS and encoded.input_ids[-1] == SEP
        assert len(encoded.marker_positions) == len(question.options)
        assert all(encoded.input_ids[p] == MARK for p in encoded.marker_positions)
        assert encoded.input_ids.count(MARK) == len(question.options)
        assert all(encoded.input_ids[p - 1] == SEP for p in encoded.marker_positions)


@pytest.mark.parametrize("where", ["text", "option"])
@pytest.mark.parametrize("special", ["[MARK]", "[SEP]", "[CLS]"])
def test_special_token_text_is_refused(tiny, where, special):
    text, options = "A question", ("one", "two")
    if where == "text":
        text = f"Is {special} allowed?"
    else:
        options = ("one", f"t{special}wo")
    with pytest.raises(QuestionError, match=rf"contains the special token '{re.escape(special)}'"):
        encode_question(tiny.tokenizer, tiny.config.head, Question("q", "choice", text, options))


def test_too_many_options_are_refused(tiny):
    allowed = Question("q32", "noul", "Which?", tuple(f"o{i}" for i in range(32)))
    assert len(encode_question(tiny.tokenizer, tiny.config.head, allowed).marker_positions) == 32
    with pytest.raises(QuestionError, match=r"33 options exceed the 32 marker slots"):
        encode_question(tiny.tokenizer, tiny.config.head,
                        Question("q33", "noul", "Which?", tuple(f"o{i}" for i in range(33))))


def test_malformed_questions_are_refused():
    with pytest.raises(QuestionError, match="kind must be one of"):
        Question("q", "essay", "text", ("a", "b"))
    with pytest.raises(QuestionError, match="at least 2 options"):
        Question("q", "choice", "text", ("a",))
    with pytest.raises(QuestionError, match="one rubric point per option"):
        Question("q", "score", "text", ("a", "b"), (1.0,))


@pytest.mark.slow
def test_mil_backend_runs_an_encoder_package_like_the_reference(tiny, tiny_packages, tmp_path):
    """encode --backend mil --package DIR: the FP16 package agrees with the FP32 reference within FP16 error,
    and a body package (wrong kind) is refused."""
    import numpy as np

    from experiments.ane_engineering import encode
    from experiments.ane_engineering.core.cli import run_main

    package, _ = tiny_packages.get("encoder", 96)
    ids = ",".join(str(i) for i in [1, 40, 77, 105, 120, 9, 33, 2])
    assert encode.main(["--ids", ids, "--backend", "mil", "--package", str(package),
                        "--output", str(tmp_path / "mil.npy")]) == 0
    assert encode.main(["--ids", ids, "--output", str(tmp_path / "ref.npy")]) == 0
    mil, reference = np.load(tmp_path / "mil.npy"), np.load(tmp_path / "ref.npy")
    assert mil.shape == reference.shape == (8, tiny.config.encoder.hidden_size)
    # final-norm outputs are O(1): FP16 storage through 6 layers stays within a few hundredths, a wrong op does not
    assert 0 < np.abs(mil - reference).max() < 0.05
    body, _ = tiny_packages.get("body", 96)
    assert run_main(encode.main, ["--ids", ids, "--backend", "mil", "--package", str(body),
                                  "--output", str(tmp_path / "x.npy")]) == 2
    assert run_main(encode.main, ["--ids", ids, "--backend", "mil", "--output", str(tmp_path / "y.npy")]) == 2
