"""A pytest plugin for users' own projects: their tests that call `coremltools.models.MLModel(path).predict(...)` run
on Linux CI through the mil executor (predict_shim.py).

    pytest -p experiments.ane_engineering.run.mil.pytest_plugin          # the fixture below, on request
    pytest -p experiments.ane_engineering.run.mil.pytest_plugin --coremltools-predict-on-linux   # every test

or in a conftest.py: `pytest_plugins = ["experiments.ane_engineering.run.mil.pytest_plugin"]`.

- fixture `coremltools_predict_on_linux`: MLModel.predict / make_state run through the executor for that test and
  are coremltools' own again after it (unless the whole session has them);
- option `--coremltools-predict-on-linux`: installed for the whole session.
"""

from __future__ import annotations

import pytest

OPTION = "--coremltools-predict-on-linux"


def pytest_addoption(parser):
    parser.addoption(OPTION, action="store_true", default=False,
                     help="run coremltools' MLModel.predict and make_state through the mil executor in every test")


def pytest_configure(config):
    if config.getoption(OPTION):
        from .predict_shim import install_coremltools_predict

        install_coremltools_predict()


@pytest.fixture
def coremltools_predict_on_linux():
    """MLModel.predict and make_state through the mil executor for this test (predict_shim.py)."""
    from .predict_shim import install_coremltools_predict, installed, uninstall_coremltools_predict

    already = installed()
    install_coremltools_predict()
    yield
    if not already:
        uninstall_coremltools_predict()
