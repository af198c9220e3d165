"""`execute --inputs A.npz B.npz ... | DIR`: many input files run in one process, in order, one output file each.

- Input files: the paths in the order given; a directory stands for its .npz files and pictures (images.py's
  PICTURE_SUFFIXES), sorted by name, not recursive, hidden files skipped. An .npz holds one array per (non-state)
  input (npz_inputs.py, with every size checked before it is inflated; an image input takes an H x W x C uint8
  picture array or the (1, C, H, W) tensor); a picture file is the whole input of a program whose one input is an
  image.
- Outputs: one input file and an --output ending in .npz: that file. Otherwise --output is a new directory holding
  <input file stem>.npz per input file (two inputs with one stem are refused before anything runs); the directory
  is staged and published only when every run succeeded (core/staging.py), so a refusal half-way leaves nothing.
- State: a stateful program (ct.StateType) gets one state at the start, carried from each run to the next, so the
  files are the steps of one sequence.
"""

from __future__ import annotations

from pathlib import Path

from ...core.errors import HarnessError
from .images import PICTURE_SUFFIXES, ImageInfo, read_picture

MAX_INPUT_FILES = 100_000  # files one command may run (a directory listing is refused beyond it)


class BatchError(HarnessError):
    """Input files or an output location that do not make a batch."""


def _runnable(path: Path) -> bool:
    return path.suffix.lower() in (".npz", *PICTURE_SUFFIXES) and not path.name.startswith(".")


def input_files(paths: list[Path]) -> list[Path]:
    """The files to run, in order (module docstring)."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            entries = sorted(p for p in path.iterdir() if _runnable(p) and not p.is_dir())
            if not entries:
                raise BatchError(f"{path}: holds no .npz or picture files")
            files.extend(entries)
        else:
            files.append(path)
        if len(files) > MAX_INPUT_FILES:
            raise BatchError(f"more than {MAX_INPUT_FILES} input files")
    return files


def is_batch(paths: list[Path]) -> bool:
    """Several input paths or a directory: outputs go to a directory."""
    return len(paths) > 1 or any(Path(p).is_dir() for p in paths)


def output_names(files: list[Path]) -> list[str]:
    """<stem>.npz per input file; refuses two inputs that would write one output."""
    names: dict[str, Path] = {}
    for path in files:
        name = f"{path.stem}.npz"
        if name in names:
            raise BatchError(f"{names[name]} and {path} would both write {name}; give inputs with distinct names")
        names[name] = path
    return list(names)


def read_input_file(path: Path, inputs: list) -> dict:
    """{input name: value} of one input file, for inputs (Predictor.inputs: TensorInfo or ImageInfo)."""
    from .npz_inputs import read_inputs

    if path.suffix.lower() in PICTURE_SUFFIXES:
        if len(inputs) != 1 or not isinstance(inputs[0], ImageInfo):
            raise BatchError(f"{path}: a picture file is the whole input of a program whose one input is an image; "
                             f"this one takes {[i.name for i in inputs]} (give an .npz)")
        return {inputs[0].name: read_picture(path, inputs[0])}
    return read_inputs(path, inputs)
