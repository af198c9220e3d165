"""The ledger of a rendered report: for every figure it prints, the JSON file, the path in it and the format.

A renderer opens each JSON file through `Ledger.open(path)` and prints every figure with `Evidence.fig(*path,
fmt=...)`; the text it gets back carries an invisible mark, and `Ledger.finish(text)` strips the marks and records
where each figure landed in the report. `check_report(markdown, figures, root)` then holds a report to its
evidence:
- each figure is re-read from its file at its path, printed with its format, and must be exactly the text at its
  place in the report (an edit of the evidence or of the report shows up as a mismatch);
- every number printed in the report must lie inside a figure (a number typed into the renderer or into the
  report is not covered by any and is reported).
Numbers inside code spans (hashes, paths) and link targets are not figures, nor are digits that are part of a word
(L96, W8, p50, FP16, M3).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.errors import HarnessError
from ..core.figures import Document, format_value, value_at
from ..core.json_documents import ANY_OBJECT, read_json

NUMBER = re.compile(r"(?<![\w.\-/])(\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w.])")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")

# A marked figure in a report under construction: OPEN index SEPARATOR text CLOSE (none occurs in JSON text we print).
OPEN, SEPARATOR, CLOSE = "\x02", "\x03", "\x04"
MARK = re.compile(f"{OPEN}(\\d+){SEPARATOR}([^{CLOSE}]*){CLOSE}")


class ReportError(HarnessError):
    """A report that cannot be rendered from its evidence (a figure outside its file, stale evidence)."""


@dataclass(frozen=True)
class Figure:
    file: str          # the JSON file, POSIX path relative to the ledger's root
    path: tuple        # keys and list indices into that file
    fmt: str           # figures.format_value format
    text: str          # what was printed
    start: int = -1    # offset of the text in the finished report

    def describe(self) -> str:
        return f"{self.file} {'/'.join(map(str, self.path))} ({self.fmt or 'str'})"


class Evidence(Document):
    """One JSON file of a report; `fig` prints a field and records it in the ledger."""

    def __init__(self, ledger: "Ledger", path: Path):
        super().__init__(read_json(path, ANY_OBJECT))
        self.ledger, self.path = ledger, Path(path)
        if not self.path.resolve().is_relative_to(ledger.root):
            raise ReportError(f"{path} is outside the report's root {ledger.root}: a link to it would not resolve")
        self.name = self.path.resolve().relative_to(ledger.root).as_posix()

    def fig(self, *path, fmt: str = "") -> str:
        return self.ledger.mark(Figure(self.name, tuple(path), fmt, super().fig(*path, fmt=fmt)))


class Ledger:
    """The figures of one report, and the root its files are named from (the directory the report's links start
    from: the repository for ANE_BENCHMARKS.md, the run directory for a reproduce run's report)."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.figures: list[Figure] = []

    def open(self, path: Path) -> Evidence:
        return Evidence(self, path)

    def mark(self, figure: Figure) -> str:
        if any(mark in figure.text for mark in (OPEN, SEPARATOR, CLOSE)):
            raise ReportError(f"{figure.describe()}: the printed text holds a control character")
        self.figures.append(figure)
        return f"{OPEN}{len(self.figures) - 1}{SEPARATOR}{figure.text}{CLOSE}"

    def finish(self, marked: str) -> tuple[str, list[Figure]]:
        """The report without marks, and its figures in order with their offsets in it."""
        out, placed, position, cursor = [], [], 0, 0
        for match in MARK.finditer(marked):
            out.append(marked[cursor:match.start()])
            position += match.start() - cursor
            placed.append(replace(self.figures[int(match.group(1))], start=position))
            out.append(match.group(2))
            position += len(match.group(2))
            cursor = match.end()
        out.append(marked[cursor:])
        text = "".join(out)
        if any(mark in text for mark in (OPEN, SEPARATOR, CLOSE)):
            raise ReportError("a figure mark was cut by the renderer")
        return text, placed


def printed_numbers(markdown: str) -> list[re.Match]:
    """The numbers a reader sees in `markdown` (code spans and link targets excluded)."""
    hidden = [m.span() for pattern in (CODE_SPAN, LINK_TARGET) for m in pattern.finditer(markdown)]
    return [m for m in NUMBER.finditer(markdown) if not any(a <= m.start() < b for a, b in hidden)]


def check_report(markdown: str, figures: list[Figure], root: Path) -> list[str]:
    """Problems of `markdown` against its figures and their files (see the module docstring); [] if none."""
    root, problems, documents = Path(root), [], {}
    for figure in figures:
        if figure.file not in documents:
            documents[figure.file] = read_json(root / figure.file, ANY_OBJECT)
        try:
            expected = format_value(value_at(documents[figure.file], figure.path), figure.fmt)
        except (KeyError, IndexError, TypeError, ValueError) as error:
            problems.append(f"{figure.describe()}: cannot be read ({error!r})")
            continue
        printed = markdown[figure.start:figure.start + len(figure.text)]
        if expected != figure.text or printed != expected:
            problems.append(f"offset {figure.start}: the report prints {printed!r} where {figure.describe()} "
                            f"gives {expected!r}")
    spans = sorted((f.start, f.start + len(f.text)) for f in figures)
    starts = [a for a, _ in spans]
    for match in printed_numbers(markdown):
        index = bisect.bisect_right(starts, match.start()) - 1
        if index < 0 or match.end() > spans[index][1]:
            line = markdown.count("\n", 0, match.start()) + 1
            problems.append(f"line {line}: {match.group(1)!r} is not a figure of any evidence file")
    return problems
