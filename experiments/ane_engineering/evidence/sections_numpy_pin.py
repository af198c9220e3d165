"""ANE_BENCHMARKS.md section of the `convert` extra's NumPy pin (benchmarks/evidence/numpy_pin.json): which
environment converts the tiny ordinary models with plain coremltools, and whether the project's exports are
byte-identical in both. Every figure and version is a field of that file (ledger.py)."""

from __future__ import annotations

from .ledger import Evidence

FILE = "numpy_pin.json"
ENVIRONMENTS = ("unpinned", "pinned")


def section_numpy_pin(ev: Evidence) -> list[str]:
    from .report import harness_label, link

    envs = ("environments",)
    versions = ", ".join(f"{label}: NumPy {ev.fig(*envs, label, 'versions', 'numpy')}" for label in ENVIRONMENTS)
    lines = ["### NumPy pin of the `convert` extra", "",
             (f"The same checkout in two environments ({versions}; coremltools "
              f"{ev.fig(*envs, 'pinned', 'versions', 'coremltools')}, torch "
              f"{ev.fig(*envs, 'pinned', 'versions', 'torch')}). Tiny ordinary models converted by plain coremltools, "
              "none of the project's converter fixes (`workflows/benchmarks/ordinary_conversions.py`), and the "
              f"project's own exports' content hashes. Evidence {link(ev)}, {harness_label(ev)}."), "",
             "| model | unpinned | pinned | error outside the pin |", "|---|---|---|---|"]
    for name in ev.value("ordinary_conversions_converted"):
        row = ev.value("ordinary_conversions_converted", name)
        error = ev.value(*envs, "unpinned", "ordinary_conversions", name, "error")
        lines.append(f"| `{name}` | {'converts' if row['unpinned'] else 'fails'} | "
                     f"{'converts' if row['pinned'] else 'fails'} | {f'`{error}`' if error else '-'} |")
    lines += ["", "| export | byte-identical | content hash (pinned) |", "|---|---|---|"]
    for name, same in ev.value("exports_identical").items():
        digest = ev.value(*envs, "pinned", "export_content_hashes", name)
        lines.append(f"| `{name}` | {'yes' if same else 'NO'} | `{digest[:16]}` |")
    return lines + [""]


def sections(ledger, root) -> list[str]:
    """The pin's section when its evidence file is present under `root` (benchmarks/evidence)."""
    path = root / FILE
    return section_numpy_pin(ledger.open(path)) if path.is_file() else []
