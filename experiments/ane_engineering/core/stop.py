"""Stop requests (SIGTERM, SIGINT): a command asked to stop ends without publishing anything, whichever code runs.

A signal handler that only raises is not enough: third-party code swallows or delays the exception (`except
BaseException:` and bare `except:` blocks around optional imports and cleanups, C++ boundaries that turn it into
another exception, worker pools whose shutdown waits for every queued task, C code that runs the handler only when
it returns). So a stop is *recorded*, and the record is what decides:

- the handler records the signal and raises StopRequested (a SystemExit: `except Exception` lets it through, and
  if nothing catches it the interpreter exits with 128 + signal number without a traceback), except inside a
  `critical()` section, where a raise would leave a half-done publish; `check()` raises it again at later safe points;
- every publish (core/staging.py) happens inside `critical()`, which refuses to start once a stop is recorded and
  records what it published; when the command ends stopped, everything it published is withdrawn (renamed into a
  fresh hidden sibling and removed, only if it is still the entry this process created): a stop that arrives during
  or just after the rename still leaves nothing at the output path;
- child processes (worker pools, k-means workers) are terminated as soon as the stop is recorded: their work is
  discarded, and a pool's shutdown no longer waits for it;
- a watcher thread reads the signal from a wakeup pipe, so the stop is recorded and children are terminated even
  while the main thread sits in C code;
- a watchdog: if the command has not ended GRACE_SECONDS after the stop, it withdraws what was published, removes
  the registered staging entries, kills the children and exits with 128 + signal number (os._exit): a library that
  swallows every raise or never returns cannot keep a stopped command running.

Once a command has finished (its exit status decided, nothing to withdraw), a later stop no longer changes anything:
the process is only exiting. Commands started with `python -m experiments.ane_engineering.<command>` install the
handlers as the package is imported (`install_for_command_line`), so a stop while the heavy modules import also ends
quietly; in-process callers (tests, `reproduce`) get them for the duration of `run_main` only.
"""

from __future__ import annotations

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
        self.depth = 0  # nested run_main calls (reproduce runs commands in-process)
        self.critical = 0  # main thread inside critical(): the handler records but does not raise
        self.published: list[tuple[Path, int, int]] = []  # (path, st_dev, st_ino) of what this command published
        self.scratch: list[Path] = []  # staging entries to remove if the watchdog has to end the process
        self.installed = False
        self.process_level = False  # installed for the whole process (a command line), never uninstalled
        self.previous: dict = {}
        self.previous_wakeup = -1
        self.pipe: tuple[int, int] | None = None
        self.watchdog_armed = False
        self.generation = 0  # bumped whenever the handlers are uninstalled
        self.exit_status = 0
        self.announced = False
        self.previous_hooks = None


_state = _State()


def requested() -> int | None:
    """The signal number of the recorded stop, or None."""
    return _state.signum


def check() -> None:
    """A safe point: raise StopRequested if a stop was recorded (and the caller is not publishing)."""
    if _state.signum is not None and _state.phase != "finished" and not _state.critical:
        raise StopRequested(_state.signum)


def _record(signum: int) -> None:
    """Record a stop (idempotent; from the handler or the watcher thread), terminate children, arm the watchdog."""
    with _state.lock:
        if _state.phase == "finished":
            _arm_watchdog(_state.exit_status)  # nothing left to stop: only make sure the exit cannot hang
            return
        if _state.signum is None:
            _state.signum = signum
            # Threads of libraries whose worker processes are about to be terminated (a pool's task feeder, say)
            # fail with broken pipes: consequences of the stop, not news for the user.
            _state.previous_hooks = (threading.excepthook, sys.unraisablehook)
            threading.excepthook = lambda args: None
            sys.unraisablehook = lambda unraisable: None
        _arm_watchdog(None)
    terminate_children()


def _handler(signum, frame) -> None:
    _record(signum)
    if _state.phase == "idle" and _state.signum is not None:  # the command's modules are still importing
        _announce(_state.signum, "nothing was started")
    if os.environ.get("HB_DEBUG"):
        import traceback; os.write(2, ("HANDLER\n" + "".join(traceback.format_stack(frame)[-4:])).encode())
    check()


def _watch(read_fd: int) -> None:
    """Watcher thread: the C-level handler writes each signal's number into the wakeup pipe at once, even while
    the main thread is in C code and cannot run the Python handler yet."""
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


def _arm_watchdog(exit_status: int | None) -> None:
    if _state.watchdog_armed:
        return
    _state.watchdog_armed = True
    threading.Thread(target=_watchdog, args=(exit_status, _state.generation), name="stop-watchdog",
                     daemon=True).start()


def _watchdog(exit_status: int | None, generation: int) -> None:
    time.sleep(GRACE_SECONDS)
    if os.environ.get("HB_DEBUG"):
        import faulthandler; faulthandler.dump_traceback(all_threads=True)
    got_lock = _state.lock.acquire(timeout=GRACE_SECONDS)  # let a publish in progress finish (and be withdrawn)
    try:
        if generation != _state.generation:
            return  # an in-process command that ended (handlers restored): the process is not ours to end
        if exit_status is None:
            signum = _state.signum
            withdraw_published()
            _remove_scratch()
            _announce(signum, f"it did not end within {GRACE_SECONDS:g} s and was ended; nothing was published")
            exit_status = 128 + signum
        terminate_children(kill=True)
    finally:
        if got_lock:
            _state.lock.release()
    os._exit(exit_status)


def _announce(signum: int, what: str) -> None:
    """The one line a stopped command prints (once)."""
    if not _state.announced:
        _state.announced = True
        _message(f"error: stopped by {signal_name(signum)}; {what}")


def _message(text: str) -> None:
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    try:
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def terminate_children(kill: bool = False, wait: float = 0.0) -> None:
    """Terminate (or kill) every descendant process; with `wait`, wait that long for them and kill the rest."""
    try:
        import psutil
    except ImportError:  # without psutil only multiprocessing's own children are known
        import multiprocessing

        children = multiprocessing.active_children()
        for child in children:
            (child.kill if kill else child.terminate)()
        return
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.kill() if kill else child.terminate()
        except psutil.Error:
            pass
    if wait and children:
        _, alive = psutil.wait_procs(children, timeout=wait)
        for child in alive:
            try:
                child.kill()
            except psutil.Error:
                pass


@contextmanager
def critical():
    """A section the handler does not interrupt (it records the stop only), refused once a stop is recorded, and
    checked again at its end. Holds the lock the watchdog takes before it cleans up and exits."""
    with _state.lock:
        check()
        _state.critical += 1
        try:
            yield
        finally:
            _state.critical -= 1
    check()


def record_published(path: Path) -> None:
    """Called inside critical() right after `path` was published: withdrawn again if the command ends stopped."""
    if _state.phase != "running":
        return
    info = os.lstat(path)
    _state.published.append((Path(path), info.st_dev, info.st_ino))


def withdraw_published() -> list[str]:
    """Take back what this command published, newest first; returns what could not be withdrawn. An entry is taken
    back only if it is still the one this process created (same device and inode); it is renamed into a fresh hidden
    sibling first, so no reader ever sees a half-removed output."""
    problems = []
    with _state.lock:
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
def scratch(path: Path):
    """Register a staging entry for the watchdog to remove if it has to end the process (the ordinary way out
    removes it in the caller's own `finally`)."""
    path = Path(path)
    _state.scratch.append(path)
    try:
        yield path
    finally:
        try:
            _state.scratch.remove(path)
        except ValueError:
            pass


def _remove_scratch() -> None:
    for path in list(_state.scratch):
        for _ in range(3):  # the main thread may still be writing into it
            if not os.path.lexists(path):
                break
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
    _state.previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        _state.previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        os.close(read_fd)
        os.close(write_fd)
        return False
    _state.pipe = (read_fd, write_fd)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _handler)
    threading.Thread(target=_watch, args=(read_fd,), name="stop-watcher", daemon=True).start()
    _state.installed = True
    return True


def uninstall() -> None:
    """Restore the handlers and wakeup fd that were there before install()."""
    if not _state.installed or _state.process_level:
        return
    for signum, previous in _state.previous.items():
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    signal.set_wakeup_fd(_state.previous_wakeup)
    if _state.previous_hooks is not None:
        threading.excepthook, sys.unraisablehook = _state.previous_hooks
        _state.previous_hooks = None
    os.close(_state.pipe[1])  # the watcher reads end-of-file, closes the read end and ends
    _state.pipe, _state.installed = None, False
    _state.generation += 1  # a watchdog armed meanwhile belongs to a command that is over


def install_for_command_line() -> None:
    """Install for the whole process when it was started as `python -m experiments.ane_engineering.<command>`,
    before the command's heavy imports (a Ctrl-C while torch imports then exits quietly too)."""
    argv = getattr(sys, "orig_argv", [])
    for index, arg in enumerate(argv[:-1]):
        if arg == "-m":
            module = argv[index + 1]
            break
        if arg.startswith("-m") and len(arg) > 2:
            module = arg[2:]
            break
    else:
        return
    if module.startswith(COMMAND_PACKAGE) and install():
        _state.process_level = True


@contextmanager
def command():
    """The extent of one command (core/cli.py run_main). Outermost: a fresh record, handlers installed if they are
    not. Yields a `finish(status)` callable that turns a recorded stop into 128 + signal number (withdrawing what
    was published) and otherwise marks the command finished; nested: a recorded stop is raised to the outer one."""
    outermost = _state.depth == 0
    installed_here = False
    if outermost:
        with _state.lock:
            if _state.phase != "idle" or _state.signum is None:  # else: a stop while the command's modules imported
                _state.signum, _state.watchdog_armed = None, False
            _state.phase, _state.published, _state.scratch, _state.critical = "running", [], [], 0
        installed_here = install()
    _state.depth += 1

    def finish(status: int | None) -> int:
        if not outermost:
            if _state.signum is not None:
                raise StopRequested(_state.signum)
            return status
        _state.critical += 1  # from here on the handler records, never raises
        with _state.lock:
            signum = _state.signum
            _state.phase = "finished"  # the decision: a stop after this changes nothing
            if signum is None:
                _state.exit_status = status
                _state.published.clear()
                return status
            _state.exit_status = 128 + signum
            problems = withdraw_published()
        terminate_children(wait=1.0)
        _announce(signum, "nothing was published" + (f" (could not withdraw: {'; '.join(problems)})" if problems else ""))
        if _state.process_level:
            # Nothing is left to do but the libraries' exit handlers, which can wait on the pools just terminated.
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(128 + signum)
        return 128 + signum

    try:
        yield finish
    finally:
        _state.depth -= 1
        if outermost:
            if _state.phase == "running":  # left by an exception finish() did not see (e.g. argparse's SystemExit)
                _state.phase = "finished"
            if installed_here:
                uninstall()
                _state.phase, _state.signum, _state.critical, _state.announced = "idle", None, 0, False


def _reset_in_child() -> None:
    """A forked child (e.g. coremltools' k-means Pool) is not the command: it must not withdraw the parent's outputs
    or write into its wakeup pipe. It dies at once on a stop signal (the default action, no traceback); the parent
    terminates it anyway. One forked after a stop has nothing to do and ends at once."""
    global _state
    if _state.signum is not None:
        os._exit(128 + _state.signum)  # forked after the stop (a pool replacing the workers just terminated)
    was_installed = _state.installed
    pipe = _state.pipe
    _state = _State()
    if was_installed:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:
            pass
        for fd in pipe or ():
            try:
                os.close(fd)
            except OSError:
                pass


os.register_at_fork(after_in_child=_reset_in_child)
