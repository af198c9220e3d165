"""The pipeline's import order: a module imports only its own layer, earlier layers and `core`; nothing imports in
a cycle.

The layers are the folders of experiments/ane_engineering, in pipeline order (README "Pipeline"):
core -> checkpoint -> model -> package -> placement -> run -> validation -> evidence -> workflows, and the
commands (the modules at the package root) above them all. There is no list of exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "experiments" / "ane_engineering"
LAYERS = ("core", "checkpoint", "model", "package", "placement", "run", "validation", "evidence", "workflows")
COMMANDS = len(LAYERS)  # the rank of a module at the package root


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path) -> dict[str, Path]:
    return {_module(path, root): path for path in sorted(root.rglob("*.py")) if "__pycache__" not in path.parts}


def _imports(path: Path, root: Path, modules: dict[str, Path]) -> set[str]:
    """Harness modules `path` imports anywhere in the file (relative or absolute), as dotted names under
    experiments.ane_engineering; `from pkg import name` counts as importing pkg.name when that is a module."""
    module = _module(path, root)
    package = (module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]) if module else []
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + (node.module.split(".") if node.module else []))
            elif (node.module or "").startswith("experiments.ane_engineering"):
                target = node.module[len("experiments.ane_engineering") + 1:]
            else:
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}" if target else alias.name
                found.add(full if full in modules else target)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 2)[2]
                         for a in node.names if a.name.startswith("experiments.ane_engineering."))
    return {name for name in found if name}


def _rank(module: str) -> int:
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else COMMANDS


def _graph(root: Path = HARNESS) -> dict[str, set[str]]:
    modules = _modules(root)
    return {module: _imports(path, root, modules) for module, path in modules.items()}


def upward_imports(root: Path = HARNESS) -> set[tuple[str, str]]:
    return {(module, imported) for module, imports in _graph(root).items() for imported in imports
            if _rank(imported) > _rank(module)}


def import_cycles(root: Path = HARNESS) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), imports inside functions included."""
    graph = _graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return cycles


def test_every_folder_is_a_layer_and_the_root_holds_commands():
    folders = {p.name for p in HARNESS.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    assert folders == set(LAYERS)
    root_modules = {p.stem for p in HARNESS.glob("*.py")} - {"__init__"}
    for name in root_modules:
        source = (HARNESS / f"{name}.py").read_text(encoding="utf-8")
        assert 'if __name__ == "__main__":' in source, f"{name}.py sits at the root but is not a command"


def test_no_module_imports_a_later_layer():
    assert upward_imports() == set()


def test_no_import_cycle():
    assert import_cycles() == []


def test_core_imports_no_stage():
    imported = {name for module, names in _graph().items() if module.startswith("core") for name in names}
    assert {name for name in imported if not name.startswith("core")} == set()


def test_the_scanner_sees_an_upward_import_and_a_cycle(tmp_path):
    """The scan is not blind: a relative import of a later layer and a two-module cycle are both found."""
    fake = tmp_path / "experiments" / "ane_engineering"
    (fake / "checkpoint").mkdir(parents=True)
    (fake / "model").mkdir()
    (fake / "checkpoint" / "late.py").write_text("from ..model.reference import ReferenceDecisionModel\n")
    (fake / "model" / "reference.py").write_text("def f():\n    from ..model import other\n")
    (fake / "model" / "other.py").write_text("from .reference import f\n")
    assert upward_imports(fake) == {("checkpoint.late", "model.reference")}
    assert import_cycles(fake) == [["model.other", "model.reference"]]


def test_the_readme_table_names_exactly_the_folders_in_order():
    import re

    readme = (HARNESS.parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Pipeline"):].split("\n## ")[0]
    folders = re.findall(r"^\| `(\w+)/` \|", table, flags=re.MULTILINE)
    assert folders == list(LAYERS)
