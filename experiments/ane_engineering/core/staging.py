"""Outputs are never overwritten and never half-written: checked before the work, published atomically after it.

`check_output` runs before any work: the output must not exist in any form (a dangling symlink counts), its parent
must be a directory this process can write in (tried, not guessed from permission bits), and it must not lie
inside one of the command's inputs (writing there would change the input, e.g. break a package's content hash).
Work happens in a temporary sibling (`staged_directory`, `cli.atomic_file`) that is published with a rename that
cannot replace anything (`publish`): not a file, not an empty directory, not a symlink created meanwhile. A failed
or interrupted run removes its staging entry (or, if killed hard, leaves only a hidden `.name.*.partial` sibling,
never the output itself). A stop request (core/stop.py) is never answered by a publish: `publish` refuses once one
is recorded, and what it published is withdrawn if one arrives before the command ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

from . import stop
from .errors import HarnessError


class OutputExistsError(HarnessError, FileExistsError):
    pass


class OutputLocationError(HarnessError):
    """An output path that cannot or must not be written."""


def ordinary_permissions(path: Path, mode: int) -> None:
    """mkstemp/mkdtemp create private (0600/0700) entries; give an output what the user's umask would."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)


def check_output(output: Path, inputs: Iterable[Path | None] = ()) -> Path:
    """Refuse `output` before any work is done (see the module docstring); returns it as a Path."""
    output = Path(output)
    if os.path.lexists(output):
        kind = "a symlink" if output.is_symlink() else "already"
        raise OutputExistsError(f"{output} {'is ' + kind if kind != 'already' else 'already exists'}; outputs are "
                                "never overwritten. Choose a new path or remove it.")
    parent = output.parent
    if not parent.is_dir():
        raise OutputLocationError(f"parent directory {parent} does not exist")
    target = parent.resolve() / output.name
    for item in inputs:
        if item is None:
            continue
        root = Path(item).resolve()
        if target == root or root in target.parents:
            raise OutputLocationError(f"{output} lies inside the input {item}; writing there would change the input. "
                                      "Choose an output outside it.")
    try:  # a real attempt: permission bits do not tell (root, read-only mounts, ACLs)
        handle, probe = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".probe", dir=parent)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise OutputLocationError(f"cannot write in {parent} ({error.strerror or error}); nothing was done") from error
    return output


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1  # Linux renameat2 flag
_RENAME_EXCL = 0x4  # macOS renamex_np flag


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _rename_exclusive(source: Path, target: Path) -> bool:
    """The kernel's no-replace rename; False when this system or filesystem does not offer it."""
    try:
        libc = _libc()
        if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
            result = libc.renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE)
        elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
            result = libc.renamex_np(os.fsencode(source), os.fsencode(target), _RENAME_EXCL)
        else:
            return False
    except OSError:
        return False
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False  # e.g. a filesystem without RENAME_NOREPLACE
    raise OSError(code, os.strerror(code), str(target))


def publish(source: Path, target: Path) -> None:
    """Rename `source` to `target` only if nothing at all is at `target`; raise OutputExistsError otherwise.
    Refused (StopRequested) once a stop is recorded; a stop during the rename is raised after it, and the command's
    end withdraws what was published (core/stop.py)."""
    with stop.critical():
        _publish(source, target)
        stop.record_published(target, source)


def _publish(source: Path, target: Path) -> None:
    try:
        if _rename_exclusive(source, target):
            return
        if Path(source).is_dir():
            os.mkdir(target)  # claim the name atomically; renaming a directory onto our own empty one is then safe
            os.rename(source, target)
        else:
            os.link(source, target)  # a hard link never replaces an existing entry
            os.unlink(source)
    except FileExistsError as error:
        raise OutputExistsError(f"{target} appeared while this command ran; not overwriting it") from error
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise OutputExistsError(f"{target} appeared while this command ran; not "
                                    f"overwriting it ({error})") from error
        raise


@contextmanager
def staged_directory(output: Path, inputs: Iterable[Path | None] = ()):
    """Yield a fresh staging directory next to `output`; publish it as `output` when the block succeeds."""
    output = check_output(output, inputs)
    stop.check()
    # removed at the end of the block unless it was published (also when a stop cuts the block short)
    with stop.scratch(lambda: tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial",
                                               dir=output.parent)) as staging:
        ordinary_permissions(staging, 0o777)
        yield staging
        publish(staging, output)


def replace_text(path: Path, text: str) -> None:
    """Write `path` anew, for the commands that regenerate a committed file (render, op_table, fit_margins): a
    temporary sibling renamed over it, so a crash or a stop leaves the old file or the new one, never half of it."""
    path = Path(path)
    stop.check()

    def sibling() -> str:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        os.close(handle)
        return name

    with stop.scratch(sibling) as temporary:
        temporary.write_text(text, encoding="utf-8")
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        else:
            ordinary_permissions(temporary, 0o666)
        with stop.critical():
            os.replace(temporary, path)
