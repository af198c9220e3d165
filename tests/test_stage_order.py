"""The pipeline's import order: a stage imports only itself, earlier stages and the shared modules.

checkpoint -> model -> package -> placement -> run -> validation -> evidence (README "Pipeline"). Commands (the
top-level command modules, cli.py and `python -m` entry points) sit above every stage. The few imports that still
point up the pipeline are listed in UPWARD with the reason; the test fails if one is added, and also if a listed
one is gone (so the list cannot go stale).
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "experiments" / "ane_engineering"
STAGES = ("checkpoint", "model", "package", "placement", "run", "validation", "evidence")
STAGE_OF_PACKAGE = {"checkpoint": "checkpoint", "model": "model", "bc1s": "model", "export": "package",
                    "palettize": "package", "placement": "placement", "execute": "run", "runtime": "run",
                    "decision": "run", "embedding": "run", "validation": "validation", "evidence": "evidence",
                    "benchmarking": "evidence", "baselines": "evidence"}
# Imported by every stage; they import no stage themselves (checked below).
SHARED = {"errors", "buckets", "gates", "tolerances", "torch_threads", "figures", "reference_run", "json_documents",
          "limits", "evidence.provenance"}
UPWARD = {  # (module, imported module): why it still points up the pipeline
    ("export.layout_check", "decision.adapter"): "the layout check runs LoRA packages with an adapter's inputs",
    ("export.layout_check", "decision.device_inputs"): "the layout check feeds the host's device inputs",
    ("export.layout_check", "decision.questions"): "the layout check runs the fixture questions",
    ("export.probe_run", "placement.compute_plan"): "probe exports, then predicts placement, in one step",
    ("export.probe_run", "placement.rules"): "probe exports, then predicts placement, in one step",
    ("export.probe_run", "placement.static_check"): "probe exports, then predicts placement, in one step",
    ("export.attention_choice", "evidence.cost_model"): "--attention auto counts both layouts' programs",
    ("export.attention_choice", "evidence.calibration"): "--attention auto picks the layout predicted faster",
    ("palettize.candidate", "placement.rules"): "palettize counts the LUT ops of the program it wrote",
    ("palettize.candidate", "placement.static_check"): "palettize counts the LUT ops of the program it wrote",
    ("palettize.sweep_run", "runtime"): "the sweep validates every candidate it palettizes",
    ("palettize.sweep_run", "validation.gate_run"): "the sweep validates every candidate it palettizes",
    ("palettize.sweep_run", "validation.golden"): "the sweep validates every candidate it palettizes",
    ("palettize.sweep_run", "embedding.agent"): "the sweep validates every candidate it palettizes",
    ("palettize.sweep_run", "validation.embedding_golden"): "the sweep validates every candidate it palettizes",
    ("palettize.sweep_run", "validation.embedding_run"): "the sweep validates every candidate it palettizes",
    ("evidence.fp16_range", "cli"): "the FP16 range evidence is written with the commands' atomic_file",
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(HARNESS).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Harness modules `path` imports (relative or absolute), as dotted names under experiments.ane_engineering."""
    module = _module(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)]
            if node.module:
                found.add(".".join(base + node.module.split(".")))
            else:
                found.update(".".join(base + [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("experiments.ane_engineering."):
            found.add(node.module.split(".", 2)[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 2)[2] for a in node.names if a.name.startswith("experiments.ane_engineering."))
    return {name for name in found if name}


def _rank(module: str) -> int | None:
    """0 for shared modules, 1.. for the stages, None for commands (above every stage)."""
    if module in SHARED or any(module.startswith(s + ".") for s in SHARED):
        return 0
    parts = module.split(".")
    if parts[-1] == "__main__" or parts[0] not in STAGE_OF_PACKAGE:
        return None
    return 1 + STAGES.index(STAGE_OF_PACKAGE[parts[0]])


def _upward_imports() -> set[tuple[str, str]]:
    upward = set()
    for path in sorted(HARNESS.rglob("*.py")):
        module = _module(path)
        rank = _rank(module)
        if rank is None:
            continue
        for imported in _imports(path):
            target = _rank(imported)
            if target is None or target > rank:
                upward.add((module, imported))
    return upward


def test_stages_import_only_earlier_stages():
    assert _upward_imports() == set(UPWARD)


def test_the_checkpoint_stage_imports_no_later_stage():
    checkpoint = {(m, i) for m, i in _upward_imports() if m.startswith("checkpoint")}
    assert checkpoint == set()
    imported = set().union(*(_imports(p) for p in (HARNESS / "checkpoint").rglob("*.py")))
    assert {name for name in imported if not name.startswith("checkpoint")} <= SHARED


def test_the_scanner_sees_an_upward_import(tmp_path, monkeypatch):
    """The scan is not blind: a relative import of a later stage from checkpoint/ is found."""
    fake = tmp_path / "experiments" / "ane_engineering"
    (fake / "checkpoint").mkdir(parents=True)
    (fake / "checkpoint" / "late.py").write_text("from ..model.reference import ReferenceDecisionModel\n"
                                                 "from ..decision import host\n")
    monkeypatch.setitem(globals(), "HARNESS", fake)
    assert _upward_imports() == {("checkpoint.late", "model.reference"), ("checkpoint.late", "decision")}
