"""Where an exported package runs: the Backend interface, the numpy MIL executor and Core ML itself.

Backend names (`choose_backend`, `BACKEND_CHOICES` for argparse):

    auto              Core ML on macOS (platform.system() == "Darwin", compute units CPU_AND_NE), mil elsewhere
    mil               MILExecutor, mode fp32-accumulate (fp16 storage, float32 accumulation); any platform
    mil-fp16-strict   MILExecutor, mode fp16-strict (every step rounded to fp16, sequential fp16 sums); slow
    mil-ane           MILExecutor, mode ane: fp32-accumulate plus the Neural Engine's published cliffs of one chip
                      family (commands: --ane-family pre-a16|a16, default pre-a16, the stricter; run/mil/cliffs.py).
                      The family travels in the name: `backend_name("mil-ane", "a16")` is "mil-ane-a16", and
                      "mil-ane" alone means pre-a16. After each predict, `last_cliff()` names the first op where a
                      cliff fired (or None)
    coreml            Core ML, compute units CPU_AND_NE (the ANE target); macOS only
    coreml-cpu        Core ML, CPU_ONLY
    coreml-gpu        Core ML, CPU_AND_GPU
    coreml-all        Core ML, ALL

Every backend: `load(package_path)` -> LoadedModel (with load_seconds and compile_seconds, timed separately),
`predict({name: array}) -> {name: float32 array}`, `describe()` -> backend, mode or compute units, platform,
Python and tool versions. Outputs are returned as float32 arrays on every backend (for FP16 programs they hold
the fp16 values the model produced).

Core ML prediction exists only on macOS. On any other platform the coreml backends raise
BackendUnavailableError at construction; nothing is mocked, nothing falls back silently.

Every backend's `load` first loads the package through the MIL module (package/mil/load.py: no links or special
files, Core ML's manifest items inside the package, consistent blob headers and program, a program PyMIL can build):
the mil backend runs that program, the coreml backends let Core ML compile the package only after it passed. No
backend runs bytes from outside the package it was given, and a damaged package is one `error:` line on every
backend (a failure inside Core ML's own compile or load is reported the same way).
"""

from __future__ import annotations

import platform
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import HarnessError
from .mil.cliffs import DEFAULT_FAMILY, FAMILIES
from .mil.numerics import ANE, FP16_STRICT, FP32_ACCUMULATE, MODES

BACKEND_CHOICES = ("auto", "mil", "mil-fp16-strict", "mil-ane", "coreml", "coreml-cpu", "coreml-gpu", "coreml-all")
ANE_BACKEND = "mil-ane"
COMPUTE_UNITS = ("CPU_AND_NE", "CPU_ONLY", "CPU_AND_GPU", "ALL")
_COREML_NAMES = {"coreml": "CPU_AND_NE", "coreml-cpu": "CPU_ONLY", "coreml-gpu": "CPU_AND_GPU", "coreml-all": "ALL"}


class BackendError(HarnessError):
    """A backend used out of order (predict before load) or given a package it cannot run."""


class BackendUnavailableError(BackendError):
    """The backend cannot run on this machine."""


def is_macos() -> bool:
    return platform.system() == "Darwin"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def platform_facts() -> dict:
    facts = {
        "platform": platform.platform(),
        "system": platform.system(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "versions": {d: _version(d) for d in ("coremltools", "numpy", "scipy", "torch")},
    }
    if is_macos():
        facts["macos"] = platform.mac_ver()[0]
    return facts


@dataclass
class LoadedModel:
    backend: str
    package_path: Path
    handle: Any
    input_names: list[str]
    output_names: list[str]
    load_seconds: float  # reading / loading the (compiled) model, compile excluded
    compile_seconds: float | None  # .mlpackage -> .mlmodelc (Core ML); None when nothing is compiled
    details: dict = field(default_factory=dict)


class Backend(ABC):
    """Run an exported package: load once, predict many times."""

    name: str = "backend"

    def __init__(self):
        self.loaded: LoadedModel | None = None

    @abstractmethod
    def load(self, package_path: str | Path) -> LoadedModel:
        ...

    @abstractmethod
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ...

    @abstractmethod
    def describe(self) -> dict:
        ...

    def _require_loaded(self) -> LoadedModel:
        if self.loaded is None:
            raise BackendError(f"the {self.name} backend has no model: call load(package_path) first")
        return self.loaded

    def close(self) -> None:
        self.loaded = None

    def last_cliff(self) -> dict | None:
        """The first op where a Neural Engine cliff fired in the last predict (mil-ane only; None elsewhere)."""
        return None

    def headroom(self, inputs_list, ane_family: str = DEFAULT_FAMILY):
        """HeadroomReport (run/mil/headroom.py) of the loaded package on these inputs, or None when this backend
        cannot look inside the program (Core ML)."""
        return None


class MILBackend(Backend):
    """The numpy MIL executor (any platform). Modes: fp32-accumulate (default), fp16-strict and ane."""

    def __init__(self, mode: str = FP32_ACCUMULATE, *, strict_chunk: int = 1, threads: int | None = None,
                 ane_family: str = DEFAULT_FAMILY):
        super().__init__()
        if mode not in MODES:
            raise BackendError(f"unknown mil mode {mode!r}; choose one of {MODES}")
        if ane_family not in FAMILIES:
            raise BackendError(f"unknown Neural Engine family {ane_family!r}; choose one of {', '.join(FAMILIES)}")
        self.mode = mode
        self.strict_chunk = strict_chunk
        self.threads = threads  # None: the CPUs this process may use
        self.ane_family = ane_family
        self.name = "mil" if mode == FP32_ACCUMULATE else f"mil-{mode}"

    def load(self, package_path: str | Path) -> LoadedModel:
        from .mil.executor import MILExecutor

        # fp16-strict keeps the program so that headroom can be measured by an fp32-accumulate executor
        executor = MILExecutor(package_path, mode=self.mode, strict_chunk=self.strict_chunk, threads=self.threads,
                               ane_family=self.ane_family, keep_program=self.mode == FP16_STRICT)
        self.loaded = LoadedModel(
            backend=self.name, package_path=Path(package_path), handle=executor,
            input_names=executor.input_names, output_names=executor.output_names,
            load_seconds=executor.load_seconds, compile_seconds=None,
            details={"read_seconds": executor.read_seconds, "runtime_steps": len(executor._steps)},
        )
        return self.loaded

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        executor = self._require_loaded().handle
        return executor.run(inputs, as_float32=True)

    def last_cliff(self) -> dict | None:
        executor = self._require_loaded().handle
        return executor.last_run.get("ane_cliff")

    def headroom(self, inputs_list, ane_family: str | None = None):
        """Measured with this backend's executor, cliffs off (fp16-strict: a second, fp32-accumulate executor)."""
        from .mil.executor import MILExecutor
        from .mil.headroom import measure_headroom

        executor = self._require_loaded().handle
        if self.mode == FP16_STRICT:
            executor = MILExecutor(executor.program, mode=FP32_ACCUMULATE, threads=self.threads)
        return measure_headroom(executor, inputs_list, ane_family or self.ane_family)

    def describe(self) -> dict:
        out = {"backend": self.name, "mode": self.mode, **platform_facts()}
        if self.mode == FP16_STRICT:
            out["strict_chunk"] = self.strict_chunk
        if self.mode == ANE:
            out["ane_family"] = self.ane_family
        if self.loaded is not None:
            info = self.loaded.handle.describe()
            out["accumulation"] = info["accumulation"]
            out["storage"] = info["storage"]
            out["threads"] = info["threads"]
            out["package"] = info["package"]
        else:
            out["accumulation"] = ("float32" if self.mode == FP32_ACCUMULATE else "sequential fp16")
        return out


_NUMPY_FOR_MULTIARRAY = {"FLOAT16": np.float16, "FLOAT32": np.float32, "DOUBLE": np.float64, "INT32": np.int32}


class CoreMLBackend(Backend):
    """Core ML through coremltools' documented API (macOS only).

    load: `coremltools.models.utils.compile_model(package, destination)` compiles the .mlpackage to an .mlmodelc
    (compile_seconds), then `coremltools.models.CompiledMLModel(path, compute_units=ComputeUnit[...])` loads it
    (load_seconds). predict: `CompiledMLModel.predict({name: array})` with each input cast to the dtype the model
    declares (FLOAT16 -> np.float16, FLOAT32 -> np.float32).
    """

    def __init__(self, compute_units: str = "CPU_AND_NE"):
        super().__init__()
        if compute_units not in COMPUTE_UNITS:
            raise BackendError(f"unknown compute units {compute_units!r}; choose one of {COMPUTE_UNITS}")
        self.compute_units = compute_units
        self.name = "coreml" if compute_units == "CPU_AND_NE" else f"coreml-{compute_units.lower()}"
        if not is_macos():
            raise BackendUnavailableError(
                f"the coreml backend needs macOS; this is {platform.system()} ({platform.platform()}), where "
                "coremltools can convert and palettize but Core ML cannot compile or run a model. "
                "Use --backend mil (the numpy MIL executor) here.")
        self._workdir: str | None = None
        self._input_dtypes: dict[str, Any] = {}

    def load(self, package_path: str | Path) -> LoadedModel:
        import coremltools as ct
        from coremltools.models.utils import compile_model

        from ..package.mil.load import load_program

        path = Path(package_path)
        spec = load_program(path).spec  # before Core ML reads anything: it follows whatever Manifest.json says
        self._input_dtypes = {}
        for feature in spec.description.input:
            if feature.type.WhichOneof("Type") == "multiArrayType":
                kind = ct.proto.FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(
                    feature.type.multiArrayType.dataType)
                self._input_dtypes[feature.name] = _NUMPY_FOR_MULTIARRAY.get(kind, np.float32)
        self.close()
        self._workdir = tempfile.mkdtemp(prefix="ane-coreml-")
        try:
            started = time.perf_counter()
            compiled = compile_model(str(path), destination_path=str(Path(self._workdir) / f"{path.stem}.mlmodelc"))
            compile_seconds = time.perf_counter() - started
            started = time.perf_counter()
            model = ct.models.CompiledMLModel(str(compiled), compute_units=ct.ComputeUnit[self.compute_units])
            load_seconds = time.perf_counter() - started
        except Exception as error:  # noqa: BLE001 - Core ML's own refusal, reported as one line
            first = (str(error).strip().splitlines() or [""])[0][:200]
            raise BackendError(f"{path}: Core ML cannot compile or load it "
                               f"({type(error).__name__}: {first})") from error
        self.loaded = LoadedModel(
            backend=self.name, package_path=path, handle=model,
            input_names=[f.name for f in spec.description.input],
            output_names=[f.name for f in spec.description.output],
            load_seconds=load_seconds, compile_seconds=compile_seconds,
            details={"compiled_path": str(compiled)},
        )
        return self.loaded

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        loaded = self._require_loaded()
        missing = [n for n in loaded.input_names if n not in inputs]
        extra = [n for n in inputs if n not in loaded.input_names]
        if missing or extra:
            raise BackendError(f"inputs do not match the model: missing {missing}, unexpected {extra}")
        feeds = {n: np.ascontiguousarray(np.asarray(v), dtype=self._input_dtypes.get(n, np.float32))
                 for n, v in inputs.items()}
        result = loaded.handle.predict(feeds)
        return {n: np.asarray(result[n], dtype=np.float32) for n in loaded.output_names}

    def describe(self) -> dict:
        return {"backend": self.name, "compute_units": self.compute_units, "mode": f"coreml:{self.compute_units}",
                **platform_facts()}

    def close(self) -> None:
        super().close()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __del__(self):  # the compiled .mlmodelc lives in a temporary directory
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - closing is best effort at interpreter exit
            pass


def backend_name(name: str, ane_family: str | None) -> str:
    """The backend name a command passes on: mil-ane with its family ("mil-ane-a16"); --ane-family is refused with
    any other backend (it would change nothing)."""
    if ane_family is None:
        return name
    if name != ANE_BACKEND:
        raise BackendError(f"--ane-family applies to --backend {ANE_BACKEND} only, not {name!r}")
    if ane_family not in FAMILIES:
        raise BackendError(f"unknown Neural Engine family {ane_family!r}; choose one of {', '.join(FAMILIES)}")
    return f"{ANE_BACKEND}-{ane_family}"


def add_ane_family_argument(parser) -> None:
    """The --ane-family flag of every command that takes --backend."""
    parser.add_argument("--ane-family", choices=FAMILIES, default=None,
                        help=f"with --backend {ANE_BACKEND}: the Neural Engine generation whose published numeric "
                             f"cliffs apply (run/mil/ane_cliffs.json): pre-a16 (M1/M2-era engines, every cliff; the "
                             f"default, the stricter) or a16 (A16/M5, no width-offset slice cliff)")


def resolve_backend_name(name: str | None) -> str:
    """'auto' / None -> the concrete name this platform uses."""
    if name is None or name == "auto":
        return "coreml" if is_macos() else "mil"
    return name


def choose_backend(name: str | None = None, mode: str | None = None) -> Backend:
    """A backend by name (see BACKEND_CHOICES). `mode` overrides the mil precision mode."""
    concrete = resolve_backend_name(name)
    if concrete == "mil":
        return MILBackend(mode or FP32_ACCUMULATE)
    if concrete in ("mil-fp16-strict", f"mil-{FP16_STRICT}"):
        if mode not in (None, FP16_STRICT):
            raise BackendError(f"backend {concrete!r} fixes mode fp16-strict; got mode {mode!r}")
        return MILBackend(FP16_STRICT)
    if concrete == f"mil-{FP32_ACCUMULATE}":
        return MILBackend(FP32_ACCUMULATE)
    if concrete == ANE_BACKEND or concrete.startswith(ANE_BACKEND + "-"):
        family = concrete[len(ANE_BACKEND) + 1:] or DEFAULT_FAMILY
        if family not in FAMILIES:
            raise BackendError(f"unknown backend {name!r}: the Neural Engine family must be one of "
                               f"{', '.join(FAMILIES)}")
        if mode not in (None, ANE):
            raise BackendError(f"backend {concrete!r} fixes mode ane; got mode {mode!r}")
        return MILBackend(ANE, ane_family=family)
    if concrete in _COREML_NAMES:
        if mode is not None:
            raise BackendError(f"mode {mode!r} applies to the mil backend only; {concrete!r} picks "
                               "compute units by name")
        return CoreMLBackend(_COREML_NAMES[concrete])
    raise BackendError(f"unknown backend {name!r}; choose one of {BACKEND_CHOICES}")

