"""Shared fixtures (the offline default checkpoint, a writer of random checkpoint directories, the session package
caches) and the guard of the `slow` marker (slow_guard.py)."""

from __future__ import annotations

import itertools

import pytest
import torch

from checkpoint_support import write_random_checkpoint
from experiments.ane_engineering.checkpoint import load_checkpoint
from minilm_fixtures import minilm, minilm_packages  # noqa: F401  (real MiniLM weights and their packages)
from package_fixtures import tiny_packages, validation_report  # noqa: F401  (session fixtures: packages, validation)
from slow_guard import (  # noqa: F401  (hooks: an unmarked test that converts or starts Python fails)
    pytest_configure,
    pytest_fixture_setup,
    pytest_runtest_call,
    pytest_runtest_setup,
)

# The test models are small: one intra-op thread is several times faster than two on a shared 2-core machine
# (thread hand-off dominates tiny matmuls) and keeps timings stable when other jobs share the cores.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny():
    """builtin:tiny, written into $ANE_ENGINEERING_CACHE on first use and loaded by the ordinary path."""
    return load_checkpoint("builtin:tiny")


@pytest.fixture
def random_checkpoint(tmp_path):
    """make(raw=None, seed=0, tokenizer=False, bias_scale=1.0) -> a fresh checkpoint directory under tmp_path."""
    counter = itertools.count()

    def make(raw: dict | None = None, **kwargs):
        return write_random_checkpoint(tmp_path / f"checkpoint-{next(counter)}", raw, **kwargs)

    return make
