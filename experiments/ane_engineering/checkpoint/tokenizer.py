"""Tokenizers: a checkpoint's own `tokenizer.json`, or the byte-level one written for the built-in sources.

The built-in tokenizer maps each UTF-8 byte to one token (ids 4..259) after four special tokens, so token counts
of the fixture questions are exact and language-independent to reason about: one token per byte.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

from ..core.limits import MAX_JSON_BYTES
from ..core.regular_files import read_regular
from .tensors import CheckpointError

BYTE_SPECIALS = ("[PAD]", "[CLS]", "[SEP]", "[MARK]")
BYTE_VOCAB_SIZE = len(BYTE_SPECIALS) + 256
# Texts in several scripts: a tokenizer that maps every one of them to no content token covers no text at all (an
# empty vocabulary turns "hello world" into [CLS] [SEP]). An unknown-word token counts as content: it stands for
# the text (all-MiniLM-L6-v2 maps some fixture options in Devanagari and Han to [UNK] and is validated so).
COVERAGE_PROBES = ("hello world", "Привет, мир", "你好，世界", "مرحبا بالعالم", "0123456789")


def _bytes_to_symbols() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, the alphabet of tokenizers' ByteLevel pre-tokenizer."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, codes)))


def build_byte_tokenizer() -> Tokenizer:
    """A deterministic byte-level tokenizer: specials 0..3, then byte b -> id 4 + b. No merges."""
    vocab = {name: index for index, name in enumerate(BYTE_SPECIALS)}
    for byte, symbol in sorted(_bytes_to_symbols().items()):
        vocab[symbol] = len(BYTE_SPECIALS) + byte
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(BYTE_SPECIALS))
    # Like ModernBERT's own tokenizers: a plain encode() wraps the text as [CLS] text [SEP].
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", BYTE_SPECIALS.index("[CLS]")), ("[SEP]", BYTE_SPECIALS.index("[SEP]"))])
    return tokenizer


def load_tokenizer(path: Path) -> Tokenizer:
    """Load `tokenizer.json` with the tokenizers library (JSON only; never a pickled tokenizer).

    A tokenizer.json may carry padding and truncation settings (all-MiniLM-L6-v2's pads and truncates every
    encoding to 128 tokens). Both are switched off: inputs are never truncated here, and padding to a bucket is the
    host's job (package/inputs/device_inputs.py), with a mask the tokenizer knows nothing about. The file is read as a
    regular file of at most MAX_JSON_BYTES first (core/regular_files.py): a FIFO or a device is refused, not read."""
    data = read_regular(path, MAX_JSON_BYTES, "tokenizer.json", error=CheckpointError)
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as error:  # tokenizers raises a bare Exception on malformed files
        raise CheckpointError(f"{path}: not a valid tokenizer.json ({error})") from error
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if not any(content_token_count(tokenizer, _encode(tokenizer, text, True) or []) for text in COVERAGE_PROBES):
        shown = _encode(tokenizer, COVERAGE_PROBES[0], True)
        raise CheckpointError(f"{path}: the tokenizer maps every text to no content token (e.g. "
                              f"{COVERAGE_PROBES[0]!r} to {_shown_tokens(tokenizer, shown)}): its vocabulary covers "
                              "no text")
    return tokenizer


def _encode(tokenizer: Tokenizer, text: str, add_special_tokens: bool) -> list[int] | None:
    """The ids of `text`, or None where the tokenizers library refuses it (e.g. a word-level model without an
    unknown token meeting an unknown word raises a bare Exception)."""
    try:
        return tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
    except Exception:  # noqa: BLE001 -- tokenizers raises bare Exceptions
        return None


def _shown_tokens(tokenizer: Tokenizer, ids: list[int] | None) -> str:
    if ids is None:
        return "an error"
    return " ".join(tokenizer.decode([i], skip_special_tokens=False) for i in ids) or "nothing"


def content_ids(tokenizer: Tokenizer, text: str, what: str, add_special_tokens: bool = True) -> list[int]:
    """The encoding of `text`, refused when it holds no content token: a text the model would see as nothing (an
    empty text, or one the vocabulary does not cover) is refused, not run as [CLS] [SEP]."""
    ids = _encode(tokenizer, text, add_special_tokens)
    if ids is None or not content_token_count(tokenizer, ids):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise CheckpointError(f"{what}: the tokenizer maps {shown!r} to no content token "
                              f"({_shown_tokens(tokenizer, ids)}); its vocabulary does not cover the text")
    return ids


def content_token_count(tokenizer: Tokenizer, ids) -> int:
    """How many of `ids` are not special tokens ([CLS], [SEP], padding, markers, ...); the unknown-word token
    counts as content (see COVERAGE_PROBES), although tokenizer.json files list it among the special ones."""
    model = tokenizer.model
    unknown = {getattr(model, "unk_id", None)}  # Unigram names it by id, BPE and WordPiece by token
    if getattr(model, "unk_token", None) is not None:
        unknown.add(tokenizer.token_to_id(model.unk_token))
    specials = {index for index, token in tokenizer.get_added_tokens_decoder().items()
                if token.special and index not in unknown}
    return sum(1 for index in ids if index not in specials)


def special_token_texts(tokenizer: Tokenizer) -> list[str]:
    """Texts the tokenizer would turn into special tokens; question text must not contain them."""
    return [token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special]
