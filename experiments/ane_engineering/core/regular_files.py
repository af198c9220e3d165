"""Open a file the harness reads: a regular file within a size bound, never a FIFO, a device or a directory.

`open(path)` on a FIFO waits for a writer that may never come, and a device such as /dev/zero has no end, so a plain
read can block forever or fill memory. Here the file is opened with O_NONBLOCK (a FIFO opens at once instead of
waiting), the open descriptor is checked with fstat (what is checked is what is read: a name swapped after the check
does not matter), its size is compared with the bound before anything is read, and a read never takes more than
the bound (a file that grows while it is read is refused). With `follow_links=False` a symlink as the last component
is refused too (O_NOFOLLOW): a package's own files must not lead elsewhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import HarnessError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink"))


class FileRefused(HarnessError):
    """A file the harness will not read: not a regular file, or larger than its bound."""


def kind_of(mode: int) -> str:
    """'a FIFO', 'a directory', ... for an st_mode that is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path | str, limit: int, what: str = "file", *, follow_links: bool = True,
                 error: type[HarnessError] = FileRefused, dir_fd: int | None = None,
                 name: str | None = None) -> BinaryIO:
    """A binary handle on `path` after checking, on the open descriptor, that it is a regular file of at most `limit`
    bytes; `error` names the file (`name`, default the path) and what is wrong. `dir_fd`: `path` is relative to that
    open directory."""
    shown = name or str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags, dir_fd=dir_fd)
    except OSError as problem:
        if not follow_links and problem.errno == getattr(os, "ELOOP", None):
            raise error(f"{shown}: is a symlink; a {what} must be a file of its own") from None
        raise error(f"{shown}: cannot read ({problem.strerror or problem})") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{shown}: is {kind_of(info.st_mode)}, not a regular file (a {what} must be one)")
        if info.st_size > limit:
            raise error(f"{shown}: {info.st_size} bytes, more than the {limit} a {what} may have")
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: Path | str, limit: int, what: str = "file", *, follow_links: bool = True,
                 error: type[HarnessError] = FileRefused, name: str | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see open_regular)."""
    with open_regular(path, limit, what, follow_links=follow_links, error=error, name=name) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise error(f"{name or path}: grew past the {limit} bytes a {what} may have while it was read")
    return data
