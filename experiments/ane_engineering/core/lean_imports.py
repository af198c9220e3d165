"""A command that only reads and runs Core ML programs imports coremltools without the ML frameworks it probes.

`import coremltools` (any submodule, `coremltools.proto` included: Python runs the package's __init__ first) imports
`coremltools._deps`, which tries `import torch`, `sklearn`, `transformers`, `tensorflow`, `xgboost`, `libsvm`, ...
only to record which converters can be offered (apple/coremltools, coremltools/_deps/__init__.py: each probe is a
`try: import X / except: _HAS_X = False`). Those frameworks are most of the cost of importing coremltools
(benchmarks/evidence/execute_startup.json), and reading a .mlpackage, building its PyMIL program and running it
needs none of them: the `execute` command imports none of them.

`refuse_frameworks()` makes those imports fail for the rest of the process, as they would where the frameworks are
not installed: coremltools then behaves as it does in such an environment (a supported one: none of them is a
dependency of coremltools). It is for a command's own process (`python -m ...execute`), never for a library
import: a user's process that later converts a torch model needs coremltools to have seen torch. A framework
already imported is left alone (Python answers a second import from sys.modules, without asking a finder).
"""

from __future__ import annotations

import importlib.abc
import sys

# The optional frameworks coremltools 9.0 probes at import (coremltools/_deps/__init__.py), none of which the mil
# executor uses. scipy, which coremltools also probes, stays importable: the executor's erf/erfc come from it.
FRAMEWORKS = ("torch", "torchvision", "torchaudio", "torchao", "executorch", "sklearn", "transformers",
              "tensorflow", "xgboost", "libsvm")


class _Refuse(importlib.abc.MetaPathFinder):
    """A finder that answers the frameworks' names (and their submodules) with ModuleNotFoundError."""

    def __init__(self, names: tuple[str, ...]):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not imported by this command: it runs Core ML "
                                      "programs without the ML frameworks)", name=fullname)
        return None  # noqa: RET501, PLR1711 - a finder's "not mine": the next finder looks


def refuse_frameworks(names: tuple[str, ...] = FRAMEWORKS) -> None:
    """From now on in this process, importing any of `names` fails as if it were not installed (idempotent)."""
    if not any(isinstance(finder, _Refuse) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Refuse(tuple(names)))
