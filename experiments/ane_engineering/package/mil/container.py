"""The .mlpackage directory: what it may hold, where Core ML's Manifest.json may point, and a link-free copy.

An .mlpackage is `Manifest.json` plus a `Data/` directory; the manifest's `itemInfoEntries` name every item by a path
relative to `Data/` (coremltools' modelpackage/src/ModelPackage.cpp: `m_packageDataDirPath / path`; every entry has
path, name, author and description, and its item must exist), `rootModelIdentifier` names the model (model.mlmodel)
and the item named "weights" by author "com.apple.CoreML" is the weights directory coremltools reads blobs from
(coremltools.models.utils._try_get_weights_dir_path). coremltools follows whatever these paths say, absolute paths
and `..` included, and follows symlinks; so a package could run a program or weights from anywhere on disk while
its seal covers only the files inside it. Here, before anything else reads a package:

- the tree is walked without following links (directory descriptors opened with O_NOFOLLOW): a symlink, a FIFO, a
  device or a socket anywhere in it is refused, and so are more than MAX_PACKAGE_ENTRIES entries or a depth over
  MAX_PACKAGE_DEPTH (core/limits.py);
- every item path must be relative, without `.`, `..`, empty or backslash parts, and name an entry of that walk
  (so it resolves inside the package); the root model must be a regular file and the weights item a directory.

`copy_tree` makes the private copy a verified package runs from: the same walk, each file opened relative to its
directory's descriptor with O_NOFOLLOW and checked with fstat to be a regular file, so the copy holds every byte that
will run and nothing read through a link.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ...core.json_documents import NON_EMPTY_STRING, STRING, open_object, read_json
from ...core.limits import MAX_PACKAGE_DEPTH, MAX_PACKAGE_ENTRIES, host_memory_bound
from ...core.regular_files import kind_of, open_regular
from .errors import ProgramLoadError

MANIFEST = "Manifest.json"
DATA = "Data"
WEIGHTS_ITEM = ("weights", "com.apple.CoreML")  # (name, author): coremltools' _WEIGHTS_DIR_NAME, _MLPACKAGE_AUTHOR_NAME
SUPPORTED_FORMAT = (1, 0, 0)  # ModelPackage.cpp: kModelPackageFileFormat{Major,Minor,Patch}Version
_DIRECTORY_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                    | getattr(os, "O_CLOEXEC", 0))

ITEM = open_object({"path": NON_EMPTY_STRING, "name": STRING, "author": STRING, "description": STRING})
COREML_MANIFEST_SCHEMA = open_object({
    "fileFormatVersion": {"type": "string", "pattern": r"^[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}$",
                          "description": "a version major.minor.patch"},
    "itemInfoEntries": {"type": "object", "minProperties": 1, "additionalProperties": ITEM},
    "rootModelIdentifier": STRING,
})


@dataclass(frozen=True)
class PackageFiles:
    """A checked .mlpackage: its root, the model file and weights directory its manifest names, every file in it."""

    root: Path
    manifest: dict
    model_file: Path
    weights_dir: Path | None
    files: tuple[str, ...]  # every regular file, relative to root (posix), sorted
    directories: tuple[str, ...]


def _open_directory(name, dir_fd: int | None, shown: str) -> int:
    try:
        return os.open(name,
                       _DIRECTORY_FLAGS if dir_fd is not None else _DIRECTORY_FLAGS & ~getattr(os, "O_NOFOLLOW", 0),
                       dir_fd=dir_fd)
    except OSError as problem:
        raise ProgramLoadError(f"{shown}: cannot open the directory ({problem.strerror or problem})") from None


def walk(root: Path) -> Iterator[tuple[str, int, str, os.stat_result]]:
    """(relative posix path, descriptor of its directory, name, lstat) of every entry under `root`, each directory
    before its contents, names sorted; refuses links, special files, too many entries and too deep a tree. The
    descriptor is valid until the next entry is taken."""
    if not Path(root).is_dir():
        raise ProgramLoadError(f"{root}: not an .mlpackage directory")
    stack = [(_open_directory(str(root), None, str(root)), "", 0)]
    count = 0
    try:
        while stack:
            descriptor, prefix, depth = stack.pop()
            try:
                children = []
                for name in sorted(os.listdir(descriptor)):
                    relative = prefix + name
                    info = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
                    count += 1
                    if count > MAX_PACKAGE_ENTRIES:
                        raise ProgramLoadError(f"{root}: more than {MAX_PACKAGE_ENTRIES} entries; not an ML package")
                    if stat.S_ISDIR(info.st_mode):
                        if depth + 1 > MAX_PACKAGE_DEPTH:
                            raise ProgramLoadError(f"{root}: {relative} is nested more than {MAX_PACKAGE_DEPTH} "
                                                   "directories deep; not an ML package")
                        yield relative, descriptor, name, info
                        children.append((_open_directory(name, descriptor, f"{root}/{relative}"), relative + "/",
                                         depth + 1))
                    elif stat.S_ISREG(info.st_mode):
                        yield relative, descriptor, name, info
                    else:
                        problem = "leads elsewhere" if stat.S_ISLNK(info.st_mode) else "is no file of a package"
                        raise ProgramLoadError(f"{root}: {relative} is {kind_of(info.st_mode)} and {problem}; "
                                               "refused (a package holds only its own files and directories)")
                stack.extend(reversed(children))
            finally:
                os.close(descriptor)
    finally:
        for descriptor, _, _ in stack:
            os.close(descriptor)


def _item_path(root: Path, identifier: str, path: str, entries: dict[str, bool]) -> str:
    """The item's path relative to the package root, after checking it stays inside; `entries`: relative path ->
    is a directory, from the walk."""
    parts = path.split("/")
    if (path.startswith("/") or "\\" in path or "\0" in path or (len(path) > 1 and path[1] == ":")
            or any(part in ("", ".", "..") for part in parts)):
        raise ProgramLoadError(f"{root}: {MANIFEST} item {identifier[:40]!r} has path {path[:80]!r}; an item path "
                               f"must be relative to {DATA}/ and stay inside the package (no absolute path, no '..')")
    relative = str(PurePosixPath(DATA, *parts))
    if relative not in entries:
        raise ProgramLoadError(f"{root}: {MANIFEST} item {identifier[:40]!r} names {relative}, which the package "
                               "does not hold")
    return relative


def read_coreml_manifest(root: Path, entries: dict[str, bool]) -> tuple[dict, str, str | None]:
    """(the manifest, relative path of the root model, relative path of the weights directory or None)."""
    if entries.get(MANIFEST) is not False:
        raise ProgramLoadError(f"{root}: no {MANIFEST} file; not an .mlpackage")
    manifest = read_json(Path(root) / MANIFEST, COREML_MANIFEST_SCHEMA, ProgramLoadError)
    version = tuple(int(p) for p in manifest["fileFormatVersion"].split("."))
    if version > SUPPORTED_FORMAT:
        raise ProgramLoadError(f"{root}: {MANIFEST} fileFormatVersion {manifest['fileFormatVersion']} is newer than "
                               f"the {'.'.join(map(str, SUPPORTED_FORMAT))} this reader knows")
    items = manifest["itemInfoEntries"]
    paths = {identifier: _item_path(root, identifier, item["path"], entries) for identifier, item in items.items()}
    if len(set(paths.values())) != len(paths):
        raise ProgramLoadError(f"{root}: two {MANIFEST} items name the same path")
    identifier = manifest["rootModelIdentifier"]
    if identifier not in items:
        raise ProgramLoadError(f"{root}: {MANIFEST} rootModelIdentifier names no item; the package is damaged")
    if entries[paths[identifier]]:
        raise ProgramLoadError(f"{root}: the root model {paths[identifier]} is a directory, not a model file")
    weights = [key for key, item in items.items() if (item["name"], item["author"]) == WEIGHTS_ITEM]
    if len(weights) > 1:
        raise ProgramLoadError(f"{root}: {MANIFEST} names {len(weights)} weights directories; Core ML reads one")
    weights_dir = paths[weights[0]] if weights else None
    if weights_dir is not None and not entries[weights_dir]:
        raise ProgramLoadError(f"{root}: the weights item {weights_dir} is a file, not a directory")
    return manifest, paths[identifier], weights_dir


def open_package(path: Path) -> PackageFiles:
    """Check the package at `path` (module docstring) and say where its model and weights are."""
    root = Path(path)
    entries = {relative: stat.S_ISDIR(info.st_mode) for relative, _, _, info in walk(root)}
    manifest, model, weights = read_coreml_manifest(root, entries)
    return PackageFiles(root=root, manifest=manifest, model_file=root / model,
                        weights_dir=root / weights if weights is not None else None,
                        files=tuple(sorted(p for p, is_dir in entries.items() if not is_dir)),
                        directories=tuple(sorted(p for p, is_dir in entries.items() if is_dir)))


def copy_tree(source: Path, target: Path, skip: frozenset[str] = frozenset(), directory_mode: int = 0o700) -> None:
    """Copy the package at `source` into the new directory `target` (directories made with `directory_mode`, private
    by default), never through a link; files whose relative path is in `skip` are left out. Each file must be a
    regular file of at most host_memory_bound bytes."""
    target = Path(target)
    target.mkdir(mode=directory_mode)
    for relative, descriptor, name, info in walk(source):
        destination = target / relative
        if stat.S_ISDIR(info.st_mode):
            destination.mkdir(mode=directory_mode)
            continue
        if relative in skip:
            continue
        with open_regular(name, host_memory_bound(), "package file", follow_links=False, error=ProgramLoadError,
                          dir_fd=descriptor, name=f"{source}/{relative}") as reader, \
                open(destination, "xb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
