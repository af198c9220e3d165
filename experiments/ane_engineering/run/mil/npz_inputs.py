"""`execute --inputs IN.npz`: one array per program input, read with every size known before anything is inflated.

np.load would inflate a member before anyone could ask how large it is: a 12 MB archive can hold a member that
inflates to 12 GB, and a member can declare 4 TB in 16 bytes. Here, against the program's inputs:

1. the file is a regular file of at most the archive bound (every input at its largest, plus zip overhead);
2. it is a zip archive (a bare .npy is named as such), with no more members than the program has inputs, each named
   `<input>.npy` for an input of the program, none twice, none encrypted;
3. each member's declared size is at most what its input can take at its largest shape in the widest numeric dtype,
   read from the zip's central directory before a byte of it is inflated;
4. each member's .npy header (at most MAX_NPY_HEADER_BYTES) gives a numeric dtype and a shape the input accepts, and
   header plus data is exactly the declared size; only then is the data read, at most that many bytes, and the
   member's CRC checked.

Refusal lines name the file and at most a few names, so a hostile archive cannot make them long.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from ...core.errors import HarnessError
from ...core.limits import MAX_NPY_HEADER_BYTES, ZIP_OVERHEAD_BYTES, host_memory_bound
from ...core.regular_files import open_regular

WIDEST_ITEM_BYTES = 8  # float64 / int64: the widest numeric element an input file may hold
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
NPY_MAGIC = b"\x93NUMPY"


class NpzError(HarnessError):
    """An inputs file that is not a plain .npz of numeric arrays for this program."""


def _short(names, limit: int = 4) -> str:
    names = [repr(str(n)[:40]) for n in names]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def member_bound(info) -> int:
    """Bytes the .npy of one input may declare: its largest accepted shape in the widest dtype, plus its header."""
    largest = info.largest()
    if any(d is None for d in largest):
        return host_memory_bound()
    return min(host_memory_bound(), math.prod(largest) * WIDEST_ITEM_BYTES + MAX_NPY_HEADER_BYTES)


def _members(archive: zipfile.ZipFile, path: Path, expected: dict, bounds: dict) -> dict[str, zipfile.ZipInfo]:
    entries = archive.infolist()
    if len(entries) > len(expected):
        raise NpzError(f"{path}: holds {len(entries)} arrays; the program takes {len(expected)} inputs")
    members: dict[str, zipfile.ZipInfo] = {}
    for entry in entries:
        name = entry.filename[:-4] if entry.filename.endswith(".npy") else None
        if name not in expected:
            raise NpzError(f"{path}: member {entry.filename[:40]!r} is no input of the program "
                           f"(inputs: {_short(sorted(expected))})")
        if name in members:
            raise NpzError(f"{path}: holds input {name[:40]!r} twice")
        if entry.flag_bits & 0x1:
            raise NpzError(f"{path}: member {entry.filename[:40]!r} is encrypted")
        if entry.file_size > bounds[name]:
            raise NpzError(f"{path}: member {entry.filename[:40]!r} declares {entry.file_size} bytes; input "
                           f"{name[:40]!r} takes at most {bounds[name]}")
        members[name] = entry
    missing = sorted(set(expected) - set(members))
    if missing:
        raise NpzError(f"{path}: no array for input(s) {_short(missing)}")
    return members


def _read_member(archive: zipfile.ZipFile, entry: zipfile.ZipInfo, info, path: Path) -> np.ndarray:
    where = f"{path}: {entry.filename[:40]!r}"
    with archive.open(entry) as member:
        try:
            version = np.lib.format.read_magic(member)
            reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in reader:
                raise NpzError(f"{where}: .npy format version {version} is not read here")
            shape, fortran, dtype = reader[version](member, max_header_size=MAX_NPY_HEADER_BYTES)
        except (ValueError, EOFError) as problem:
            raise NpzError(f"{where}: not a readable .npy ({str(problem)[:80]})") from None
        if dtype.hasobject or dtype.kind not in "fiub" or dtype.fields is not None:
            raise NpzError(f"{where}: dtype {str(dtype)[:40]}; inputs are numeric arrays")
        if not info.accepts(shape):
            raise NpzError(f"{where}: shape {tuple(shape)[:8]}, the program expects {info.expected()}")
        nbytes = math.prod(shape) * dtype.itemsize
        if member.tell() + nbytes != entry.file_size:
            raise NpzError(f"{where}: header says {nbytes} bytes of data, the archive "
                           f"{entry.file_size - member.tell()}")
        data = member.read(nbytes)
        if len(data) != nbytes or member.read(1):
            raise NpzError(f"{where}: truncated")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def read_inputs(path: Path, inputs: list) -> dict[str, np.ndarray]:
    """{input name: array} from an .npz, for a program whose inputs are `inputs` (TensorInfo); module docstring."""
    path = Path(path)
    expected = {info.name: info for info in inputs}
    bounds = {name: member_bound(info) for name, info in expected.items()}
    data_bound = sum(bounds.values())
    archive_bound = data_bound + data_bound // 8192 + ZIP_OVERHEAD_BYTES * (len(bounds) + 1)  # core/limits.py
    with open_regular(path, archive_bound, ".npz inputs file", error=NpzError) as handle:
        magic = handle.read(6)
        if magic.startswith(NPY_MAGIC):
            raise NpzError(f"{path}: a bare .npy; give an .npz with one array per input (numpy.savez)")
        if magic[:4] not in ZIP_MAGIC:
            raise NpzError(f"{path}: not an .npz (no zip header)")
        handle.seek(0)
        try:
            with zipfile.ZipFile(handle) as archive:
                members = _members(archive, path, expected, bounds)
                return {name: _read_member(archive, entry, expected[name], path) for name, entry in members.items()}
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as problem:
            raise NpzError(f"{path}: not a readable .npz ({str(problem)[:80]})") from None
