"""Keeps the `slow` marker true: a test that converts with coremltools, asks for an exported package, or starts a
Python process fails unless it is marked `@pytest.mark.slow`, so `pytest -m "not slow"` stays a quick loop.

What counts, recorded while a test sets up and runs:
- a coremltools conversion: every ct.convert, palettization and the project's exporters end in coremltools'
  `converters.mil.converter._mil_convert`;
- a package from the session caches (package_fixtures.PackageCache.get): it is exported on first use, so asking
  for one counts even when another test has already exported it (the answer must not depend on test order);
- a new Python process: subprocess of a Python interpreter, a multiprocessing spawn or fork (short non-Python
  programs, such as `uname` behind platform.processor(), do not count).

A fixture during whose setup any of these happened is remembered, and every test that uses it (directly or through
other fixtures) counts too, whichever test set it up first. A conversion cached by a plain function
(functools.lru_cache) is seen only by the first test that calls it; a run of `pytest -m "not slow"` catches the
others, since there the cache starts empty. A test that only takes long (seconds on its own) is marked by hand;
nothing here checks that. Loaded by conftest.py.
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

MARKER = "slow"
_events: list[str] = []  # what happened in this process, in order; a test compares its length before and after
_heavy_fixtures = pytest.StashKey[dict]()  # per session: (where defined, name) -> the first thing its setup did
_installed = False


def record(what: str) -> None:
    _events.append(what)


def _program(args, executable) -> str:
    program = executable or (args if isinstance(args, (str, bytes, os.PathLike)) else args[0])
    return os.fsdecode(program)


def _is_python(program: str) -> bool:
    words = program.split()
    return program == sys.executable or bool(words) and os.path.basename(words[0]).startswith("python")


def install() -> None:
    """Wrap the entry points above once per process (a nested pytest session in the same process reuses them)."""
    global _installed
    if _installed:
        return
    _installed = True

    execute_child = subprocess.Popen._execute_child

    def watched_execute_child(self, args, executable, *rest, **kwargs):
        program = _program(args, executable)
        if _is_python(program):
            record(f"starts a Python process ({os.path.basename(program)})")
        return execute_child(self, args, executable, *rest, **kwargs)

    subprocess.Popen._execute_child = watched_execute_child

    spawnv_passfds = multiprocessing.util.spawnv_passfds

    def watched_spawnv_passfds(path, args, passfds):
        record("starts a multiprocessing worker")
        return spawnv_passfds(path, args, passfds)

    multiprocessing.util.spawnv_passfds = watched_spawnv_passfds

    fork = os.fork

    def watched_fork():
        record("forks the test process")
        return fork()

    os.fork = watched_fork

    try:
        from coremltools.converters.mil import converter
    except ImportError:  # no coremltools: nothing can convert
        return
    mil_convert = converter._mil_convert

    def watched_mil_convert(*args, **kwargs):
        record("converts with coremltools")
        return mil_convert(*args, **kwargs)

    converter._mil_convert = watched_mil_convert


def _visible(where: str, nodeid: str) -> bool:
    """Whether a fixture defined at node `where` (a directory, a module) can serve the test `nodeid`."""
    return not where or nodeid == where or nodeid.startswith((where + "/", where + "::"))


def _check(item, since: int) -> None:
    if item.get_closest_marker(MARKER) is not None:
        return
    reasons = list(dict.fromkeys(_events[since:]))
    heavy = item.config.stash[_heavy_fixtures]
    reasons += [f"uses fixture '{name}', which {what}" for (where, name), what in heavy.items()
                if name in item.fixturenames and _visible(where, item.nodeid)]
    if reasons:
        pytest.fail(f"{item.nodeid} {reasons[0]} but is not marked @pytest.mark.{MARKER} (tests/{Path(__file__).name})",
                    pytrace=False)


def pytest_configure(config):
    config.stash[_heavy_fixtures] = {}
    install()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    since = len(_events)
    try:
        return (yield)
    finally:
        if len(_events) > since:
            key = (fixturedef.baseid, fixturedef.argname)
            request.config.stash[_heavy_fixtures].setdefault(key, _events[since])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    since = len(_events)
    result = yield
    _check(item, since)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    since = len(_events)
    result = yield
    _check(item, since)
    return result
