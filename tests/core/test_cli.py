"""One root for the harness's errors: refusals are one line and exit 2, bugs keep their traceback."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import experiments.ane_engineering as package
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.core.errors import HarnessError
from experiments.ane_engineering.core.stop import StopRequested
from experiments.ane_engineering.run.backends import BackendUnavailableError


def _raiser(error):
    def main(argv=None):
        raise error
    return main


def test_refusals_are_one_line_and_exit_2(capsys):
    for error in (HarnessError("refused: the reason"), BackendUnavailableError("refused: the reason"),
                  FileNotFoundError("refused: the reason"), PermissionError("refused: the reason")):
        assert run_main(_raiser(error)) == 2
        err = capsys.readouterr().err
        assert err == "error: refused: the reason\n", err


def test_bugs_keep_their_traceback():
    for error in (ValueError("a bug"), KeyError("a bug"), TypeError("a bug"), ZeroDivisionError()):
        with pytest.raises(type(error)):
            run_main(_raiser(error))


def test_every_exception_class_of_the_harness_has_the_one_root():
    classes = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass)
                    if issubclass(c, BaseException) and c.__module__ == module.__name__]
    assert len(classes) >= 23
    # A stop request is not an error but a control-flow exit (a SystemExit): the one class outside the root.
    strays = [f"{c.__module__}.{c.__name__}" for c in classes
              if not issubclass(c, HarnessError) and c is not StopRequested]
    assert not strays, strays
    assert issubclass(StopRequested, SystemExit) and not issubclass(StopRequested, Exception)
