"""Render ANE_BENCHMARKS.md from evidence JSON: every figure is printed from a field of a JSON file, none typed here.

How a section prints (ledger.py): it opens each JSON file with `ledger.open(path)`, an `Evidence`, and prints every
figure -- and every string of the evidence that may hold digits -- as `ev.fig(*json_path, fmt=...)` (formats:
core/figures.py); `link(ev)` links the file with its SHA256. `ev.value(*json_path)` reads a field for the section's own
logic (which rows, a pass/fail word, a hash in a code span) and is not printed as a number. Nothing is computed
here: a derived figure (a ratio, a share) belongs in the evidence file. Rendering returns the text and its ledger
(`Rendered`): for every figure, the file, the JSON path, the format and where it landed. `check_report` re-reads
each figure from its file and finds every printed number inside one (`render --check`, tests/evidence/test_render.py).

To add a section:
- full-size evidence (one file under benchmarks/evidence): `def section_x(ev: Evidence) -> list[str]`, and add
  (file name, section_x) to FULL_SIZE_SECTIONS (sections_full_size.py); another file it needs is `ev.ledger.open(path)`;
- a reproduce run directory: `def section_x(ledger: Ledger, root: Path) -> list[str]` ([] when its file is
  absent), and add it to RUN_SECTIONS (sections_run.py).
Facts from outside the project (the reference run) are printed from core/reference_run.json the same way.
"""

from __future__ import annotations

from pathlib import Path

from ..core.provenance import REPOSITORY_ROOT
from .ledger import Ledger
from .report import Rendered
from .sections_executor import sections as executor_sections
from .sections_full_size import FULL_SIZE_SECTIONS
from .sections_latency import sections as latency_sections
from .sections_numerics import section_numerics
from .sections_numpy_pin import sections as numpy_pin_sections
from .sections_run import run_sections
from .sections_startup import sections as startup_sections
from .sections_suite_offsets import sections as suite_offset_sections

REPOSITORY = REPOSITORY_ROOT


def render_directory(root: Path, title: str = "ANE benchmarks") -> Rendered:
    """The report of one reproduce directory (or any directory laid out the same way); links start from `root`."""
    ledger = Ledger(root)
    header = [f"# {title}", "",
              ("Rendered from the evidence JSON files linked in each section; nothing here is typed by hand. "
              "Regenerate with `python -m experiments.ane_engineering.reproduce`."), ""]
    text, figures = ledger.finish("\n".join(header + run_sections(ledger, root)).rstrip() + "\n")
    return Rendered(text, figures)


# ---------------------------------------------------------------------------------------- full-size evidence


REPRODUCE_DIR = "reproduce-builtin-tiny"
EVIDENCE_DIR = "benchmarks/evidence"


def render_repository(repo: Path, evidence_dir: str = EVIDENCE_DIR) -> Rendered:
    """ANE_BENCHMARKS.md of the repository: full-size evidence, then the committed builtin:tiny reproduce run."""
    repo = Path(repo)
    ledger = Ledger(repo)
    root = repo / evidence_dir
    lines = ["# ANE benchmarks", "",
             ("Rendered by `python -m experiments.ane_engineering.render` from the evidence JSON under "
             f"`{evidence_dir}/` and the reference run's figures; every figure links the file it came from, whose "
             "SHA256 is shown and which records the package, source and harness hashes that produced it. No number "
             "here is typed by hand: the renderer records each figure's file and JSON path, and `--check` re-reads "
             "them. Figures measured with the `mil` backend are CPU timings of the project's reference executor on "
             "the Linux build machine each evidence file names (`machine`), not Neural Engine figures; cost-model "
             "floors are predictions."), "",
             "## Full-size model (`builtin:mmbert-base-shape`: mmBERT-base dimensions, random weights)", ""]
    for name, section in FULL_SIZE_SECTIONS:
        path = root / name
        lines += section(ledger.open(path)) if path.is_file() else [f"(no `{name}` yet)", ""]
    lines += executor_sections(ledger, root)  # the executor as a tool, when its evidence exists
    lines += latency_sections(ledger, root)  # the latency predictor's checks, when their evidence exists
    lines += section_numerics(ledger, root)  # benchmarks/evidence/ane-numerics-*.json, when present
    lines += suite_offset_sections(ledger, root)  # the op suite's later offsets, when their evidence exists
    lines += startup_sections(ledger, root)  # the execute command's start, when its evidence exists
    lines += numpy_pin_sections(ledger, root)  # the convert extra's NumPy pin, when its evidence exists
    reproduce_root = root / REPRODUCE_DIR
    if reproduce_root.is_dir():
        body = "\n".join(run_sections(ledger, reproduce_root))
        lines += ["## The reproduce chain on `builtin:tiny`", "",
                  "The README's main command, run once with its evidence committed under "
                  f"`{evidence_dir}/{REPRODUCE_DIR}/`.",
                  "", ("\n" + body).replace("\n## ", "\n### ").lstrip("\n")]
    from .sections_real_weights import (
        section_real_weights,  # benchmarks/evidence/real-weights-minilm, when present
    )

    lines += section_real_weights(ledger, root, reproduce_root, root / "fp16_range_mmbert_base_shape.json")
    from .sections_stress import section_stress  # benchmarks/evidence/stress_rescale_*.json, when present

    lines += section_stress(ledger, root)
    text, figures = ledger.finish("\n".join(lines).rstrip() + "\n")
    return Rendered(text, figures)


def reports(repo: Path) -> list[tuple[Path, Path, Rendered]]:
    """(report file, the root its links start from, fresh render) of every committed report: the repository's
    ANE_BENCHMARKS.md and the committed reproduce run's own."""
    repo = Path(repo)
    out = [(repo / "ANE_BENCHMARKS.md", repo, render_repository(repo))]
    run = repo / EVIDENCE_DIR / REPRODUCE_DIR
    if run.is_dir():
        out.append((run / "ANE_BENCHMARKS.md", run, render_directory(run)))
    return out
