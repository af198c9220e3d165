"""The suite itself: support modules are imported by name (so plain `pytest` collects from any directory), and the
`slow` marker guard (slow_guard.py) fails an unmarked test that converts, asks for a package or starts Python,
whichever test set up the fixture that did, and lets a marked one pass."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent


def test_support_modules_are_imported_by_name_not_through_a_tests_package():
    """`from tests.x import ...` resolves only when the repository root is the working directory."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.relative_to(TESTS)}:{node.lineno}"
                          for name in names if name == "tests" or name.startswith("tests.")]
    assert offenders == []


INNER = f'''
import subprocess, sys
import pytest

def start_python():
    subprocess.run([{sys.executable!r}, "-c", "pass"], check=True)

@pytest.fixture(scope="module")
def started():
    start_python()

def test_unmarked_starts_python():
    start_python()

@pytest.mark.slow
def test_marked_starts_python():
    start_python()

@pytest.mark.slow
def test_marked_sets_up_the_fixture(started):
    pass

def test_unmarked_uses_the_fixture_after_it_was_set_up(started):
    pass

def test_unmarked_converts():
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2))])
    def prog(x):
        return mb.relu(x=x)

    ct.convert(prog, convert_to="milinternal")

def test_unmarked_starts_a_short_program():
    subprocess.run(["true"], check=True)

def test_unmarked_does_neither():
    assert 1 + 1 == 2
'''


@pytest.mark.slow  # the inner tests start Python and convert in this process
def test_the_guard_fails_exactly_the_unmarked_tests_that_convert_or_start_python(pytester):
    pytest.importorskip("coremltools")
    pytester.makeini("[pytest]\nmarkers =\n    slow: see pyproject.toml\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "slow_guard", "-p", "no:cacheprovider",
                                          "-W", "ignore::pytest.PytestAssertRewriteWarning")
    outcomes = {report.head_line: report.outcome for report in result.reprec.getreports("pytest_runtest_logreport")
                if report.when == "call" or report.outcome != "passed"}
    assert outcomes == {
        "test_unmarked_starts_python": "failed",
        "test_marked_starts_python": "passed",
        "test_marked_sets_up_the_fixture": "passed",
        "test_unmarked_uses_the_fixture_after_it_was_set_up": "failed",
        "test_unmarked_converts": "failed",
        "test_unmarked_starts_a_short_program": "passed",
        "test_unmarked_does_neither": "passed",
    }
    for line in ("*::test_unmarked_starts_python starts a Python process*not marked @pytest.mark.slow*",
                 "*::test_unmarked_uses_the_fixture_after_it_was_set_up uses fixture 'started', which starts a Python*",
                 "*::test_unmarked_converts converts with coremltools*"):
        result.stdout.fnmatch_lines([line])
