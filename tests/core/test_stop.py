"""Stop means stop: SIGTERM (exit 143) or Ctrl-C (SIGINT, exit 130) at several points of each long command ends it
without publishing anything, whichever library is running (coremltools' conversion, torch's tracer, k-means
threads and worker processes, the executor): nothing at the output path, no staging entry, no private copy left,
no traceback, inputs unchanged. Plus the publish step's own guarantees, in process: a stop that arrives during the
rename is withdrawn, and code that swallows the stop meets it again."""

from __future__ import annotations

import hashlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from command_support import command_env
from experiments.ane_engineering.core import staging as staging_module
from experiments.ane_engineering.core import stop
from experiments.ane_engineering.core.cli import atomic_file, run_main
from experiments.ane_engineering.core.staging import staged_directory

pytestmark = pytest.mark.slow

COMMAND_TIMEOUT = 240  # seconds; a loaded 2-core machine runs these tiny commands in well under a minute


def tree_digest(path: Path) -> str:
    """What the command must leave unchanged: every file's relative path and bytes."""
    digest = hashlib.sha256()
    paths = sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() else [Path(path)]
    for item in paths:
        digest.update(str(item.relative_to(path) if Path(path).is_dir() else item.name).encode())
        digest.update(item.read_bytes())
    return digest.hexdigest()


def stop_command(tmp_path: Path, argv: list[str], sig: int, when, extra: float = 0.0, group: bool = False,
                 inputs: tuple[Path, ...] = ()) -> str:
    """Run `python -m experiments.ane_engineering.<argv>` in tmp_path/work, send `sig` once
    `when(stderr, work, pid)` holds (plus `extra` seconds), and check the stop's contract; returns stderr. `group`: to
    the whole process group, as the terminal's Ctrl-C does."""
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    before = {path: tree_digest(path) for path in inputs}
    env = command_env(TMPDIR=str(scratch))
    process = subprocess.Popen([sys.executable, "-m", "experiments.ane_engineering." + argv[0], *argv[1:]],
                               cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    stderr, deadline = b"", time.time() + COMMAND_TIMEOUT
    try:
        while not when(stderr.decode(errors="replace"), work, process.pid):
            assert process.poll() is None, f"finished before it could be stopped:\n{stderr.decode()[-2000:]}"
            assert time.time() < deadline, "the point to stop at never came"
            if selector.select(timeout=0.05):
                stderr += os.read(process.stderr.fileno(), 65536)
        time.sleep(extra)
        assert process.poll() is None, f"finished before it could be stopped:\n{stderr.decode()[-2000:]}"
        os.killpg(process.pid, sig) if group else process.send_signal(sig)
        sent = time.time()
        stderr += process.communicate(timeout=COMMAND_TIMEOUT)[1]
        ended = time.time() - sent
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = stderr.decode(errors="replace")
    assert process.returncode == 128 + sig, (process.returncode, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
    assert f"error: stopped by {stop.signal_name(sig)}" in text, text[-2000:]
    assert ended < stop.GRACE_SECONDS + 10, ended
    assert list(work.iterdir()) == [], list(work.iterdir())  # no output, no staging sibling
    assert list(scratch.iterdir()) == [], list(scratch.iterdir())  # no private copy left behind
    assert {path: tree_digest(path) for path in inputs} == before
    return text


def after_line(pattern: str):
    return lambda stderr, work, pid: re.search(pattern, stderr) is not None


def handlers_installed(stderr, work, pid):
    """The command catches SIGTERM (it does from the package's import on; before that the interpreter is starting
    and the default action ends it, with nothing started either). Linux: the caught-signal mask in /proc."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        time.sleep(2.0)
        return True
    caught = next(int(line.split()[1], 16) for line in status.read_text().splitlines() if line.startswith("SigCgt:"))
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def cpu_seconds_at_least(seconds: float):
    import psutil

    def reached(stderr, work, pid):
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system >= seconds
    return reached


@pytest.mark.parametrize("sig, point, extra", [
    (signal.SIGTERM, handlers_installed, 0.0),  # while the command's modules import
    (signal.SIGTERM, after_line(r"\[probe 3/\d+\] tracing and converting"), 0.5),  # torch's tracer / coremltools
    (signal.SIGTERM, after_line(r"\[probe \d+/\d+\] placement"), 0.0),
])
def test_probe_stopped_publishes_nothing(tmp_path, sig, point, extra):
    stop_command(tmp_path, ["probe", "--kind", "body", "--length", "96", "--attention", "dense", "--output", "out"],
                 sig, point, extra)


@pytest.mark.parametrize("implementation, sig, group", [
    ("exact", signal.SIGTERM, False),  # numba kernels in a thread pool
    ("coremltools", signal.SIGTERM, False),  # coremltools' k-means in a pool of worker processes
    ("coremltools", signal.SIGINT, True),  # Ctrl-C reaches the workers too: no traceback from any of them
])
def test_palettize_stopped_during_kmeans_publishes_nothing(tiny_packages, tmp_path, implementation, sig, group):
    package, _ = tiny_packages.get("body", 96)  # enough weights that the k-means outlasts the signal's delay
    stop_command(tmp_path, ["palettize", "--package", str(package), "--bits", "8", "--mode", "kmeans",
                            "--group-size", "32", "--workers", "2", "--implementation", implementation,
                            "--output", "out"],
                 sig, after_line(r"palettizing conv weights"), 1.0, group=group, inputs=(package,))


@pytest.mark.parametrize("sig, point, extra", [
    (signal.SIGTERM, after_line(r"validate \(mil\):\s+\d+%"), 0.0),  # loading, first calls
    (signal.SIGINT, after_line(r"validate \(mil\):\s+[1-9]\d%"), 0.0),  # part-way through the questions
])
def test_validate_stopped_publishes_nothing(tiny_packages, tmp_path, sig, point, extra):
    package, _ = tiny_packages.get("body", 96)
    stop_command(tmp_path, ["validate", "--package", str(package), "--backend", "mil", "--repeats", "2",
                            "--output", "validation.json"], sig, point, extra, inputs=(package,))


EXECUTE_RUNS = 4  # one process runs them in turn: it is still running when the stop comes, however fast the machine


@pytest.fixture(scope="module")
def execute_inputs(tiny_packages, tmp_path_factory):
    package, _ = tiny_packages.get("body", 96)
    manifest = json.loads((package / "manifest.json").read_text())
    arrays = {item["name"]: np.zeros(item["shape"], dtype=np.float16 if item["dtype"] == "float16" else np.int32)
              for item in manifest["io"]["inputs"]}
    directory = tmp_path_factory.mktemp("execute")
    paths = [directory / f"inputs-{i}.npz" for i in range(EXECUTE_RUNS)]
    for path in paths:
        np.savez(path, **arrays)
    return package, paths


@pytest.mark.parametrize("sig, point", [
    (signal.SIGTERM, cpu_seconds_at_least(3.0)),  # past the imports: loading and executing the program
    (signal.SIGINT, cpu_seconds_at_least(3.0)),
])
def test_execute_stopped_publishes_nothing(execute_inputs, tmp_path, sig, point):
    package, inputs = execute_inputs
    stop_command(tmp_path, ["execute", "--package", str(package), "--inputs", *map(str, inputs), "--output", "out",
                            "--mode", "fp16-strict"], sig, point, inputs=(package, *inputs))


def test_sweep_stopped_while_a_candidate_runs_publishes_nothing(tiny_packages, tmp_path):
    """Ctrl-C reaches the sweep, its candidate worker and the worker's own k-means pool at once."""
    package, _ = tiny_packages.get("body", 96)
    stop_command(tmp_path, ["sweep", "--package", str(package), "--bits", "8", "--modes", "kmeans", "--group-sizes",
                            "32", "--repeats", "0", "--jobs", "1", "--implementation", "coremltools", "--output",
                            "out"],
                 signal.SIGINT, lambda stderr, work, pid: any(work.glob(".out.*.partial/candidates/.w8-*")), 3.0,
                 group=True, inputs=(package,))


POOL_THAT_REPLACES_ITS_WORKERS = """
import multiprocessing, os, signal, sys, time
from experiments.ane_engineering.core import stop

LOG = sys.argv[1]

def task(i):
    with open(LOG, "a") as log:
        log.write(f"{os.getpid()} {time.time()}\\n")
    time.sleep(0.02)
    return i

if __name__ == "__main__":
    with stop.worker_task():  # a sweep's candidate worker, running coremltools' k-means Pool
        pool = multiprocessing.get_context("spawn").Pool(2, initializer=stop.ignore_interrupts)
        result = pool.map_async(task, range(5000), chunksize=1)
        while not os.path.exists(LOG) or len(open(LOG).read().splitlines()) < 10:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
        result.wait()
"""


def test_a_stopped_worker_leaves_no_pool_worker_behind(tmp_path):
    """The stop terminates the pool's workers and the pool starts new ones at once; none may outlive the worker
    (CI once caught such an orphan running queued k-means tasks, then printing a broken-pipe traceback)."""
    import psutil

    script, log = tmp_path / "worker.py", tmp_path / "tasks.log"
    script.write_text(POOL_THAT_REPLACES_ITS_WORKERS)
    process = subprocess.run([sys.executable, str(script), str(log)], env=command_env(), capture_output=True, text=True,
                             timeout=COMMAND_TIMEOUT)  # returns once every holder of its stderr is gone
    ended = time.time()
    assert process.returncode == 128 + signal.SIGTERM, process.stderr[-3000:]
    assert process.stderr == "", process.stderr[-3000:]  # no traceback, no resource-tracker relaunch warning
    time.sleep(1.0)  # an orphan would run queued tasks now
    tasks = [line.split() for line in log.read_text().splitlines()]
    assert not [when for _, when in tasks if float(when) > ended]
    assert not [pid for pid in {int(pid) for pid, _ in tasks} if psutil.pid_exists(pid)]


def test_no_process_starts_once_a_stop_is_recorded(monkeypatch):
    import multiprocessing

    import psutil

    outcomes = []

    def main(argv):  # run_main turns whatever main raises into an exit status: outcomes are checked outside
        _in_process_stop(monkeypatch)
        before = psutil.Process().children(recursive=True)
        for method in ("spawn", "fork"):
            try:
                multiprocessing.get_context(method).Process(target=os.getpid).start()
                outcomes.append((method, "started"))
            except stop.StopRequested as refused:
                outcomes.append((method, refused.signum))
        outcomes.append(psutil.Process().children(recursive=True) == before)
        return 0

    assert run_main(main, []) == 128 + signal.SIGTERM
    assert outcomes == [("spawn", signal.SIGTERM), ("fork", signal.SIGTERM), True]
    process = multiprocessing.get_context("spawn").Process(target=os.getpid)
    process.start()  # the command ended: processes start again
    process.join(COMMAND_TIMEOUT)
    assert process.exitcode == 0


# In process: the publish step itself.

def _in_process_stop(monkeypatch):
    """What the handler does when a signal arrives, minus the signal: record the stop (children of this test
    process are none of its business)."""
    monkeypatch.setattr(stop, "terminate_children", lambda *args, **kwargs: None)
    stop._record(signal.SIGTERM)


def test_a_stop_during_the_rename_is_withdrawn(tmp_path, monkeypatch, capfd):
    output = tmp_path / "out"
    rename = staging_module._rename_exclusive

    def rename_while_signalled(source, target):
        _in_process_stop(monkeypatch)  # the signal lands while the kernel renames
        return rename(source, target)

    def main(argv):
        with staged_directory(output) as staging:
            (staging / "result.json").write_text("{}")
            monkeypatch.setattr(staging_module, "_rename_exclusive", rename_while_signalled)
        return 0

    assert run_main(main, []) == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []  # published, then withdrawn: nothing at the output, no staging
    assert "error: stopped by SIGTERM; nothing was published" in capfd.readouterr().err


def test_a_recorded_stop_refuses_every_later_publish(tmp_path, monkeypatch):
    def main(argv):
        with atomic_file(tmp_path / "first.json") as temporary:
            temporary.write_text("{}")
        _in_process_stop(monkeypatch)
        try:  # a library that swallows the stop
            stop.check()
        except BaseException:
            pass
        with atomic_file(tmp_path / "second.json") as temporary:
            temporary.write_text("{}")
        return 0

    assert run_main(main, []) == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []  # the second refused, the first withdrawn


def test_code_that_swallows_the_stop_meets_it_again(tmp_path, monkeypatch):
    """The stop is raised again while the command runs on, so a swallowing loop ends (and publishes nothing)."""
    swallowed = []
    monkeypatch.setattr(stop, "GRACE_SECONDS", 60.0)  # the watchdog would end this test process otherwise

    def main(argv):
        with staged_directory(tmp_path / "out") as staging:
            started = time.monotonic()
            while time.monotonic() - started < stop.FIRST_RERAISE_SECONDS + 5 * stop.RERAISE_SECONDS:
                try:
                    if not swallowed:
                        os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(0.01)
                except BaseException as error:  # what some libraries do
                    swallowed.append(error)
            (staging / "result.json").write_text("{}")
        return 0

    monkeypatch.setattr(stop, "terminate_children", lambda *args, **kwargs: None)
    assert run_main(main, []) == 128 + signal.SIGTERM
    assert len(swallowed) >= 2 and all(isinstance(e, stop.StopRequested) for e in swallowed)
    assert list(tmp_path.iterdir()) == []


def test_in_process_callers_get_their_handlers_back():
    before = {s: signal.getsignal(s) for s in stop.STOP_SIGNALS}
    assert run_main(lambda argv: 0, []) == 0
    assert {s: signal.getsignal(s) for s in stop.STOP_SIGNALS} == before


def test_a_regenerated_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """render, op_table and fit_margins overwrite committed files: never half-written, and not once stopped."""
    target = tmp_path / "REPORT.md"
    target.write_text("old\n")
    staging_module.replace_text(target, "new\n")
    assert target.read_text() == "new\n" and list(tmp_path.iterdir()) == [target]

    def main(argv):
        _in_process_stop(monkeypatch)
        staging_module.replace_text(target, "newer\n")
        return 0

    assert run_main(main, []) == 128 + signal.SIGTERM
    assert target.read_text() == "new\n" and list(tmp_path.iterdir()) == [target]
