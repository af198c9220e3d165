"""Stop requests (SIGTERM, SIGINT): a command asked to stop ends without publishing anything, whichever code runs.

A signal handler that raises once is not enough: third-party code swallows or delays the exception (`except
BaseException:` and bare `except:` blocks around optional imports, torch's tracer, worker pools whose shutdown waits
for every queued task, C code that runs the handler only when it returns). So a stop is *recorded*, and the record
is what decides:

- the handler records the signal and raises StopRequested (a SystemExit: `except Exception` lets it through, and an
  uncaught one exits with 128 + signal number without a traceback); a command still running FIRST_RERAISE_SECONDS
  later meets it again every RERAISE_SECONDS (`_thread.interrupt_main`), so code that swallowed one meets the next
  at its next line; `check()` raises it at our own safe points;
- never inside `critical()` (a publish) or `shielded()` (removing a staging entry), where a raise would leave a
  half-done publish or a half-removed directory; `critical()` refuses to start once a stop is recorded;
- every publish (core/staging.py) records what it published; when the command ends stopped, all of it is withdrawn
  (renamed into a fresh hidden sibling and removed, only if it is still the entry this process created), and every
  staging entry still registered is removed: a stop that arrives during or just after a rename still leaves nothing
  at the output path;
- child processes (worker pools, k-means workers) are terminated as soon as the stop is recorded (their work is
  discarded and a pool's shutdown no longer waits for it), no multiprocessing process starts after it (a pool that
  replaces its terminated workers is refused), and a child forked after the stop ends at once;
- a watcher thread reads the signal from a wakeup pipe, so the stop is recorded and children are terminated even
  while the main thread sits in C code;
- a watchdog: a command that has not ended GRACE_SECONDS after the stop is ended by it the same way (withdraw,
  remove staging, kill children, os._exit(128 + signal number)).

Once a command has finished (exit status decided, nothing to withdraw), a later stop changes nothing: the process is
only exiting. Commands started as `python -m experiments.ane_engineering.<command>` install the handlers while the
package is imported (`install_for_command_line`), so a stop while the heavy modules import ends quietly too;
in-process callers (tests, `reproduce`) get them for the duration of `run_main` only.
"""

from __future__ import annotations

import _thread
import atexit
import gc
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Long enough for the ordinary way out (exceptions unwinding, staging removed, children reaped), short enough that a
# stop is obeyed promptly when a library swallows it.
GRACE_SECONDS = 5.0
# The first raise usually ends the command within a second; only then is it repeated (a repeat could cut short a
# cleanup that `shielded()` does not cover).
FIRST_RERAISE_SECONDS = 1.0
RERAISE_SECONDS = 0.2
EXIT_HANDLER_SECONDS = 2.0
START_SETTLE_SECONDS = 0.1  # a fork in flight when the last children were terminated has returned by then
COMMAND_PACKAGE = "experiments.ane_engineering."


class StopRequested(SystemExit):
    """The command was asked to stop by signal `signum`; its exit status is 128 + signum (143 SIGTERM, 130 SIGINT).

    Not an error of the harness (core/errors.py): a control-flow exit, derived from SystemExit so that nothing that
    catches Exception keeps it and an uncaught one exits without a traceback."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


def signal_name(signum: int) -> str:
    return "SIGINT (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name


class _State:
    def __init__(self):
        self.lock = threading.RLock()  # held by publishes and by the watchdog's exit; re-entered by the handler
        self.signum: int | None = None  # the recorded stop
        self.phase = "idle"  # idle (no command yet) | running | finished (exit status decided)
        self.exit_status = 0
        self.depth = 0  # nested run_main calls (reproduce runs commands in-process)
        self.shield = 0  # main thread inside critical()/shielded(): the handler records but does not raise
        self.published: list[tuple[Path, int, int]] = []  # (path, st_dev, st_ino) of what this command published
        self.scratch: list[Path] = []  # staging entries not yet removed or published
        self.installed = False
        self.process_level = False  # installed for the whole process (a command line), never uninstalled
        self.previous: dict = {}
        self.previous_wakeup = -1
        self.previous_hooks = None
        self.write_fd: int | None = None
        self.watchdog_armed = False
        self.generation = 0  # bumped when the handlers are uninstalled: a watchdog of an ended command stands down
        self.announced = False
        self.worker = False  # a worker process of a command (worker_task): a stop ends it at once


_state = _State()


def requested() -> int | None:
    """The signal number of the recorded stop, or None."""
    return _state.signum


def _may_raise() -> bool:
    return _state.signum is not None and _state.phase != "finished" and not _state.shield


def check() -> None:
    """A safe point: raise StopRequested if a stop was recorded (and the caller is not publishing)."""
    if _may_raise():
        raise StopRequested(_state.signum)


def _record(signum: int) -> None:
    """Record a stop (idempotent; from the handler or the watcher thread), terminate children, arm the watchdog."""
    with _state.lock:
        if _state.phase == "finished":
            _arm_watchdog()  # nothing left to stop: only make sure the exit cannot hang
            return
        if _state.signum is None:
            _state.signum = signum
            # Threads of libraries whose worker processes are being terminated (a pool's task feeder, say) fail with
            # broken pipes: consequences of the stop, not news for the user.
            _state.previous_hooks = (threading.excepthook, sys.unraisablehook)
            threading.excepthook = lambda args: None
            sys.unraisablehook = lambda unraisable: None
        if _state.worker:
            _end_worker()
        _arm_watchdog()
    terminate_children()


def _handler(signum, frame) -> None:
    _record(signum)
    if _state.phase == "idle" and _state.signum is not None:  # the command's modules are still importing
        _announce(_state.signum, "nothing was started")
    check()


def _watch(read_fd: int) -> None:
    """Watcher thread: the C-level handler writes each signal's number into the wakeup pipe at once, even while the
    main thread is in C code and cannot run the Python handler yet."""
    try:
        while data := os.read(read_fd, 64):
            for signum in data:
                if signum in STOP_SIGNALS:
                    _record(signum)
    except OSError:
        pass
    finally:
        try:
            os.close(read_fd)
        except OSError:
            pass


def _arm_watchdog() -> None:
    if not _state.watchdog_armed:
        _state.watchdog_armed = True
        threading.Thread(target=_watchdog, args=(_state.generation,), name="stop-watchdog", daemon=True).start()


def _watchdog(generation: int) -> None:
    started = time.monotonic()
    time.sleep(FIRST_RERAISE_SECONDS)
    while time.monotonic() < started + GRACE_SECONDS:
        if generation != _state.generation:
            return  # an in-process command that ended (handlers restored): the process is not ours to end
        if _may_raise() and _state.installed:
            _thread.interrupt_main(_state.signum)  # the handler again, at the main thread's next line
        if _state.phase != "finished":
            terminate_children()  # and the workers a pool started in place of those terminated
        time.sleep(RERAISE_SECONDS)
    got_lock = _state.lock.acquire(timeout=GRACE_SECONDS)  # let a publish in progress finish (and be withdrawn)
    try:
        if generation != _state.generation:
            return
        if _state.signum is not None and (_state.phase != "finished" or _state.exit_status == 128 + _state.signum):
            signum = _state.signum
            withdraw_published()
            remove_scratch()
            _announce(signum, f"it did not end within {GRACE_SECONDS:g} s and was ended; nothing was published")
            status = 128 + signum
        else:
            status = _state.exit_status  # finished before the stop: its own status
        terminate_children(kill=True, wait=0.5, rounds=20)
    finally:
        if got_lock:
            _state.lock.release()
    _flush()
    os._exit(status)


def _announce(signum: int, what: str) -> None:
    """The one line a stopped command prints (once)."""
    if not _state.announced:
        _state.announced = True
        _flush()
        try:
            os.write(2, f"error: stopped by {signal_name(signum)}; {what}\n".encode("utf-8", "replace"))
        except OSError:
            pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def terminate_children(kill: bool = False, wait: float = 0.0, rounds: int = 1) -> None:
    """Terminate (or kill) every descendant process; with `wait`, wait that long for them and kill the rest; with
    `rounds`, repeat until none is left (a pool replaces the workers it loses)."""
    import psutil

    looked_again = False
    for _ in range(rounds):
        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        if not children:
            if rounds == 1 or looked_again:
                return
            # A pool thread may be starting a worker that it decided on before the stop was recorded (later starts
            # are refused: _refuse_process_starts_after_a_stop); it is visible once its fork returns.
            looked_again = True
            time.sleep(START_SETTLE_SECONDS)
            continue
        looked_again = False
        for child in children:
            try:
                child.kill() if kill else child.terminate()
            except psutil.Error:
                pass
        if wait:
            _, alive = psutil.wait_procs(children, timeout=wait)
            for child in alive:
                try:
                    child.kill()
                except psutil.Error:
                    pass


@contextmanager
def shielded():
    """A block the handler does not interrupt (it records a stop only): removing a staging entry, say."""
    _state.shield += 1
    try:
        yield
    finally:
        _state.shield -= 1


@contextmanager
def critical():
    """A publish: refused once a stop is recorded, not interrupted, checked again at its end. Holds the lock the
    watchdog takes before it cleans up and exits."""
    with _state.lock:
        check()
        with shielded():
            yield
    check()


def record_published(path: Path, source: Path | None = None) -> None:
    """Called inside critical() right after `source` was published as `path`: withdrawn again if the command ends
    stopped."""
    if source is not None and Path(source) in _state.scratch:
        _state.scratch.remove(Path(source))
    if _state.phase == "running":
        info = os.lstat(path)
        _state.published.append((Path(path), info.st_dev, info.st_ino))


def withdraw_published() -> list[str]:
    """Take back what this command published, newest first; returns what could not be withdrawn. An entry is taken
    back only if it is still the one this process created (same device and inode); it is renamed into a fresh hidden
    sibling first, so no reader ever sees a half-removed output."""
    problems = []
    with _state.lock, shielded():
        for path, device, inode in reversed(_state.published):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue  # published into a staging directory that is gone, or already withdrawn
            if (info.st_dev, info.st_ino) != (device, inode):
                continue  # not ours any more
            try:
                holder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".withdrawn", dir=path.parent))
                os.rename(path, holder / path.name)
                shutil.rmtree(holder, ignore_errors=True)
            except OSError as error:
                problems.append(f"{path}: {error}")
        _state.published.clear()
    return problems


@contextmanager
def scratch(make):
    """A staging entry, created by `make()` (which returns its path), that exists for the block: removed at its end
    unless it was published meanwhile (the publish unregistered it). Created and registered in one shielded step, so
    that a stopped command's end (or the watchdog) removes it even if the block's own cleanup was cut short."""
    with shielded():
        path = Path(make())
        _state.scratch.append(path)
    try:
        yield path
    finally:
        with shielded():
            if path in _state.scratch:
                _remove(path)
                _state.scratch.remove(path)


def remove_scratch() -> None:
    with shielded():
        for path in list(_state.scratch):
            _remove(path)
        _state.scratch.clear()


def _remove(path: Path) -> None:
    for _ in range(3):  # the main thread may still be writing into it (the watchdog's case)
        if not os.path.lexists(path):
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                path.unlink()
            except OSError:
                pass


def install() -> bool:
    """Install the stop handlers (main thread only); False if they already are or cannot be here."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return False
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        _state.previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        os.close(read_fd)
        os.close(write_fd)
        return False
    _state.previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, _handler)
    _state.write_fd, _state.installed = write_fd, True
    threading.Thread(target=_watch, args=(read_fd,), name="stop-watcher", daemon=True).start()
    return True


def uninstall() -> None:
    """Restore the handlers, hooks and wakeup fd that were there before install()."""
    if not _state.installed or _state.process_level:
        return
    _state.generation += 1
    for signum, previous in _state.previous.items():
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    signal.set_wakeup_fd(_state.previous_wakeup)
    if _state.previous_hooks is not None:
        threading.excepthook, sys.unraisablehook = _state.previous_hooks
        _state.previous_hooks = None
    os.close(_state.write_fd)  # the watcher reads end-of-file, closes the read end and ends
    _state.write_fd, _state.installed = None, False


def install_for_command_line() -> None:
    """Install for the whole process when it was started as `python -m experiments.ane_engineering.<command>`,
    before the command's heavy imports (a Ctrl-C while torch imports then exits quietly too). A worker process that
    multiprocessing started for a command (it imports the command's module) ignores Ctrl-C instead: the command
    ends its workers itself, and a worker's KeyboardInterrupt traceback would only clutter the terminal."""
    argv = getattr(sys, "orig_argv", [])
    if "--multiprocessing-fork" in argv:
        ignore_interrupts()
        return
    module = next((argv[i + 1] if arg == "-m" else arg[2:] for i, arg in enumerate(argv[:-1])
                   if arg == "-m" or (arg.startswith("-m") and len(arg) > 2)), "")
    if module.startswith(COMMAND_PACKAGE) and install():
        _state.process_level = True


@contextmanager
def command():
    """The extent of one command (core/cli.py run_main). Outermost: a fresh record, handlers installed if they are
    not. Yields `finish(status)`, which turns a recorded stop into 128 + signal number (withdrawing what was
    published and removing staging) and otherwise marks the command finished; nested: a recorded stop is raised to
    the outer command."""
    outermost = _state.depth == 0
    installed_here = False
    if outermost:
        with _state.lock:
            if _state.phase != "idle" or _state.signum is None:  # else: a stop while the command's modules imported
                _state.signum, _state.watchdog_armed = None, False
            _state.phase, _state.published, _state.scratch, _state.shield = "running", [], [], 0
        installed_here = install()
    _state.depth += 1

    def finish(status: int | None) -> int:
        if not outermost:
            if _state.signum is not None:
                raise StopRequested(_state.signum)
            return status
        _state.shield += 1  # from here on the handler records, never raises
        with _state.lock:
            signum = _state.signum
            _state.phase = "finished"  # the decision: a stop after this changes nothing
            _state.exit_status = status if signum is None else 128 + signum
            if signum is None:
                _state.published.clear()
                return status
            problems = withdraw_published()
            remove_scratch()
        terminate_children(wait=1.0, rounds=20)
        _announce(signum, "nothing was published"
                  + (f" (could not withdraw: {'; '.join(problems)})" if problems else ""))
        if _state.process_level:
            # Nothing is left to do but the libraries' exit handlers (coremltools removes a converted model's
            # temporary package in one), which can wait on the pools just terminated: they get EXIT_HANDLER_SECONDS.
            gc.collect()
            handlers = threading.Thread(target=atexit._run_exitfuncs, name="exit-handlers", daemon=True)
            handlers.start()
            handlers.join(EXIT_HANDLER_SECONDS)
            _flush()
            os._exit(128 + signum)
        return 128 + signum

    try:
        yield finish
    finally:
        _state.depth -= 1
        if outermost:
            _state.phase = "finished" if _state.phase == "running" else _state.phase  # e.g. argparse's own exit
            if installed_here:
                uninstall()
                _state.phase, _state.signum, _state.shield, _state.announced = "idle", None, 0, False


def ignore_interrupts() -> None:
    """A worker pool's initializer: an idle worker ignores Ctrl-C (the terminal sends it to the whole process group;
    the command terminates its workers itself) instead of printing a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def worker_task():
    """One task in a worker process of a command: a stop (the command terminates its workers; the terminal's Ctrl-C
    reaches the whole process group) ends the worker at once, quietly: its staging entries removed, its own children
    killed until none is left, exit 128 + signal number. The command publishes nothing and removes the rest."""
    with command():
        _state.worker = True
        _state.announced = True  # the command says it; a worker's line would only repeat it
        try:
            yield
        finally:
            _state.worker = False


def _end_worker() -> None:
    remove_scratch()
    terminate_children(kill=True, wait=0.5, rounds=20)
    _flush()
    os._exit(128 + _state.signum)


def _reset_in_child() -> None:
    """A forked child (e.g. coremltools' k-means Pool) is not the command: it must not withdraw the parent's outputs
    or write into its wakeup pipe. It dies at once on a stop signal (the default action, no traceback); the parent
    terminates it anyway. One forked after a stop has nothing to do and ends at once."""
    global _state
    if _state.signum is not None:
        os._exit(128 + _state.signum)
    was_installed, write_fd = _state.installed, _state.write_fd
    _state = _State()
    if was_installed:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:
            pass
        try:
            os.close(write_fd)
        except OSError:
            pass


def _refuse_process_starts_after_a_stop() -> None:
    """Process.start once a stop is recorded raises StopRequested instead: a pool replaces the workers the stop
    terminates (coremltools' k-means Pool does), and a worker started after the last look for children would outlive
    the command, run queued tasks as an orphan and print a broken-pipe traceback when it sends a result."""
    from multiprocessing import process

    start = process.BaseProcess.start
    if getattr(start, "refuses_after_stop", False):  # this module imported again
        return

    def start_unless_stopped(self):
        if _state.signum is not None and _state.phase != "finished":
            raise StopRequested(_state.signum)
        return start(self)

    start_unless_stopped.refuses_after_stop = True
    process.BaseProcess.start = start_unless_stopped


_refuse_process_starts_after_a_stop()
os.register_at_fork(after_in_child=_reset_in_child)
