"""Exporters never overwrite: they refuse an existing output and build atomically.

Work happens in a temporary sibling directory that is renamed into place only when everything is written; a
failed or interrupted run removes its staging directory (or, if killed hard, leaves only a hidden `.name.*.partial`
sibling, never the output itself).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..errors import HarnessError


class OutputExistsError(HarnessError, FileExistsError):
    pass


def ordinary_permissions(path: Path, mode: int) -> None:
    """mkstemp/mkdtemp create private (0600/0700) entries; give an output what the user's umask would."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)


def refuse_existing_dir(output: Path) -> Path:
    output = Path(output)
    if output.exists():
        raise OutputExistsError(f"{output} already exists; exporters never overwrite. Choose a new --output.")
    if not output.parent.is_dir():
        raise FileNotFoundError(f"parent directory {output.parent} does not exist")
    return output


@contextmanager
def staged_directory(output: Path):
    """Yield a fresh staging directory next to `output`; rename it to `output` when the block succeeds."""
    output = refuse_existing_dir(output)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent))
    ordinary_permissions(staging, 0o777)
    try:
        yield staging
        try:
            os.rename(staging, output)  # atomic on one filesystem; fails rather than merge if output appeared
        except OSError as error:
            raise OutputExistsError(f"{output} appeared while exporting; not overwriting it ({error})") from error
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
