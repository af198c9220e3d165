"""A pytest plugin that runs coremltools' own MIL op tests through the mil executor.

coremltools ships its op test suite inside the wheel (coremltools/converters/mil/mil/ops/tests/iOS14 ... iOS18).
Each case builds a MIL program, converts it with `ct.convert` and, on macOS only, predicts with Core ML and compares
the prediction with the test's expected numpy outputs (`testing_utils.compare_backend`). On Linux the prediction
is skipped silently (`_IS_MACOS` is False), so every case "passes" without running anything. This plugin turns the
prediction back on and routes it to the executor:

- `coremltools.converters.mil.testing_utils._IS_MACOS` is set, and that module's view of
  `coremltools.models.utils` answers a macOS version (`--mil-macos-version`, default 15.0), so `compare_backend`
  runs its prediction and its comparison (the test's own `atol`/`rtol`, widened by compare_backend itself for
  fp16 programs). While the test files are collected, `coremltools.models.utils._macos_version` itself answers the
  same version, so coremltools' collection-time marks (`skipif(_macos_version() <= (15, 1), reason="Bug fixed in
  macOS 15.2")`) see it too: with 15.2 those cases run;
- `testing_utils.run_core_ml_predict` and `MLModel.predict` (some tests call it directly) run the converted
  package (`mlmodel.package_path`, the .mlpackage ct.convert wrote) through `MILExecutor`; an op that refuses its
  inputs at run time raises RuntimeError, as Core ML's predict does (the suite's error-path cases expect that type);
- stateful programs (iOS18 `read_state` / `coreml_update_state`, `MLModel.make_state`) and programs with image
  inputs (PIL images) are answered by the predict shim (predict_shim.predict_with_executor: the executor's model
  state, Core ML's picture conventions), the same path `install_coremltools_predict` gives users.

Exclusions, each an explicit pytest skip with its reason (nothing is dropped silently):
- neuralnetwork-backend cases (skipped at collection, from the case's `backend` parameter): not ML programs;
- programs with list ops (`make_list`, `list_read`, `list_write`, `list_gather`, `list_scatter`, `list_length`:
  coremltools' TensorArray): the executor's values are tensors, it has no list values;
- programs with a value of unknown rank (a variadic shape, e.g. `fill` of a shape given at run time): coremltools'
  milproto loader, which the executor reads packages with, raises NotImplementedError("Variadic dimensions not yet
  implemented") for it (coremltools/converters/mil/frontend/milproto/helper.py).
- FP16 cases whose prediction differs from coremltools' expected values only where those values lie beyond the
  FP16 range (the prediction holds the infinity of the same sign there, every other element within the tolerances
  compare_backend uses): IEEE FP16 arithmetic cannot hold them, so they are skipped with FP16_RANGE_REASON after
  running (coremltools computes such expected values in FP32, e.g. scatter's `div` mode over many repeated indices).
Cases that coremltools itself skips for the reported macOS version, or for a missing framework (TensorFlow), stay
skipped with coremltools' reason.

Use: `pytest -p experiments.ane_engineering.run.mil.coremltools_suite --mil-report out.jsonl <test files>`.
`--mil-sample-every N --mil-sample-offset K` runs the cases whose index within their test function is K modulo N
(offsets 0 .. N-1 together cover every case once); the others are reported as not_sampled.
`--mil-report` writes one JSON line per case: node id, outcome, the reason of a failure or skip (first line),
the opset of the case's backend and the op types of the program(s) the executor ran.
"""

from __future__ import annotations

import contextlib
import json
import types as pytypes
from pathlib import Path

import numpy as np
import pytest

SUITE_PACKAGE = "coremltools.converters.mil.mil.ops.tests"
FAKE_MACOS_VERSION = (15, 0)  # default: the newest opset the suite targets (iOS18) pairs with macOS 15
NEURALNETWORK_REASON = "neuralnetwork backend: not an ML program (the mil executor runs ML programs only)"
NON_PROGRAM_REASON = "not an ML program model"
LIST_OPS = frozenset({"make_list", "list_read", "list_write", "list_gather", "list_scatter", "list_length"})
LIST_REASON = "list ops (make_list, list_read/write/gather/scatter/length): the mil executor has no list values"
VARIADIC_REASON = ("a value of unknown rank (variadic shape): coremltools' milproto loader, which the executor "
                   "reads packages with, cannot load it")
FP16_RANGE_REASON = ("ran, and differs only where coremltools' expected value lies beyond the FP16 range (an FP16 "
                     "program's IEEE arithmetic gives inf there, as the executor does; whether a Mac's Core ML keeps "
                     "more range for such an op cannot be checked here)")
CONTROL_OPS = {"const"}  # not counted as "the ops a case tests"

_current: dict = {"item": None}


def suite_directory() -> Path:
    import importlib

    return Path(importlib.import_module(SUITE_PACKAGE).__file__).parent


def _backend_of(item):
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for name, value in callspec.params.items():
        if name == "backend" or name.startswith("backend"):
            return value
    return None


def backend_kind(backend) -> tuple[str | None, str | None]:
    """(backend, opset) of a case's backend parameter: a BackendConfig or an old-style (backend, precision) tuple."""
    if backend is None:
        return None, None
    if hasattr(backend, "backend"):
        opset = getattr(backend.opset_version, "name", str(backend.opset_version))
        return backend.backend, opset
    if isinstance(backend, (tuple, list)) and backend:
        return str(backend[0]), None
    return None, None


def _record_ops(op_types: list[str]) -> None:
    item = _current["item"]
    if item is not None:
        item.user_properties.append(("mil_ops", op_types))


def program_op_types(block) -> set[str]:
    """Op types of a block and of every block nested in it (cond / while_loop bodies)."""
    found = set()
    for op in block.operations:
        found.add(op.op_type)
        for inner in getattr(op, "blocks", None) or []:
            found |= program_op_types(inner)
    return found


def executor_predict(mlmodel, data: dict, state=None) -> dict:
    """Core ML's predict, answered by the mil executor from the converted package."""
    from ...package.mil.errors import ProgramLoadError
    from ...package.mil.load import load_program
    from .executor import ExecutionError, MILExecutor

    spec = mlmodel.get_spec()
    if spec.WhichOneof("Type") == "neuralNetwork":
        pytest.skip(NEURALNETWORK_REASON)
    if spec.WhichOneof("Type") != "mlProgram":
        pytest.skip(f"{NON_PROGRAM_REASON}: {spec.WhichOneof('Type')}")
    if state is not None or mlmodel._is_stateful() or _has_image_inputs(spec):
        return _shim_predict(mlmodel, data, state)
    feeds = {name: np.asarray(value) for name, value in data.items()}
    try:
        loaded = load_program(mlmodel.package_path, mlmodel.function_name or "main")
    except ProgramLoadError as error:
        if "Variadic dimensions not yet implemented" in str(error):
            pytest.skip(VARIADIC_REASON)
        raise
    op_types = program_op_types(loaded.function)
    _record_ops(sorted(op_types - CONTROL_OPS))  # recorded even if loading fails next
    if op_types & LIST_OPS:
        pytest.skip(LIST_REASON)
    executor = MILExecutor(loaded)
    expected = {t.name: t for t in executor.inputs}
    for name, value in list(feeds.items()):
        info = expected.get(name)
        if info is not None and value.ndim == 0 and len(info.shape) == 1:
            feeds[name] = value.reshape(1)  # Core ML takes a scalar as a 1-element array
    try:
        return executor.run(feeds)
    except ExecutionError as error:
        # An op that refuses its inputs at run time (e.g. scatter with validate_indices and an out-of-range index):
        # Core ML's predict reports that as a RuntimeError, which is what the suite's error-path cases expect.
        # Load-time refusals (an unsupported op) are not mapped: they stay failures.
        raise RuntimeError(f"Unable to compute the prediction using ML Program (mil executor): {error}") from error


def _has_image_inputs(spec) -> bool:
    return any(feature.type.WhichOneof("Type") == "imageType" for feature in spec.description.input)


def _shim_predict(mlmodel, data: dict, state=None) -> dict:
    """A stateful or picture-taking model: the predict shim's path (its state objects, Core ML's picture rules)."""
    from . import predict_shim

    _record_ops(sorted(set(predict_shim._predictor(mlmodel).executor.op_type_counts) - CONTROL_OPS))
    return predict_shim.predict_with_executor(mlmodel, dict(data), state)


def _make_state(mlmodel):
    """MLModel.make_state: a coremltools MLState over the executor's state for this model."""
    from coremltools.models.model import MLState

    from . import predict_shim

    return MLState(predict_shim._predictor(mlmodel).make_state())


def _run_core_ml_predict(mlmodel, input_key_values, state=None):
    # coremltools' own run_core_ml_predict casts array inputs to float32 first; keep that, then predict here
    for key, value in input_key_values.items():
        if isinstance(value, (np.ndarray, np.generic)) and value.shape != ():
            input_key_values[key] = value.astype(np.float32)
        elif np.isscalar(value) or (isinstance(value, np.ndarray) and value.shape == ()):
            input_key_values[key] = np.array([value], dtype=np.float32)
    _current["prediction"] = prediction = executor_predict(mlmodel, input_key_values, state)
    return prediction


def beyond_fp16_only(actual, expected, atol: float, rtol: float) -> bool:
    """Whether `actual` differs from `expected` (numpy's isclose with these tolerances) only at elements whose
    expected value lies beyond the FP16 range and where `actual` is the infinity of the same sign."""
    from .cliffs import FP16_MAX

    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        return False
    differ = ~np.isclose(actual, expected, atol=atol, rtol=rtol)
    overflow = np.isinf(actual) & (np.abs(expected) > FP16_MAX) & (np.sign(actual) == np.sign(expected))
    return bool(differ.any()) and bool(np.all(overflow[differ]))


def _compare_backend(mlmodel, input_key_values, expected_outputs, dtype="fp32", atol=1e-04, rtol=1e-05, *args,
                     **kwargs):
    """coremltools' compare_backend; an FP16 case whose only differences are FP16 overflows of values beyond its
    range (beyond_fp16_only, with the tolerances compare_backend widens for FP16) is skipped with that reason."""
    from coremltools.converters.mil import testing_utils

    _current["prediction"] = None
    try:
        return _ORIGINAL_COMPARE["compare_backend"](mlmodel, input_key_values, expected_outputs, dtype, atol, rtol,
                                                    *args, **kwargs)
    except AssertionError:
        prediction = _current.get("prediction")
        if dtype != "fp16" or not prediction:
            raise
        wide_atol, wide_rtol = max(atol * 100.0, 5e-1), max(rtol * 100.0, 5e-2)  # as compare_backend widens
        arrays = [(out, expected) for name, expected in expected_outputs.items()
                  if isinstance(out := testing_utils._get_coreml_out_from_dict(prediction, name), np.ndarray)]
        overflowed = [beyond_fp16_only(out, expected, wide_atol, wide_rtol) for out, expected in arrays]
        if any(overflowed) and all(o or np.allclose(out, expected, atol=wide_atol, rtol=wide_rtol)
                                   for o, (out, expected) in zip(overflowed, arrays, strict=True)):
            pytest.skip(FP16_RANGE_REASON)
        raise


_ORIGINAL_COMPARE: dict = {}


def parse_macos_version(text: str) -> tuple[int, ...]:
    """"15.2" -> (15, 2): the version the plugin reports to coremltools (macOS 15 or later: the iOS18 opset)."""
    try:
        version = tuple(int(part) for part in str(text).split("."))
    except ValueError:
        raise pytest.UsageError(f"--mil-macos-version: {text!r} is not a version like 15.2") from None
    if not version or version < (15, 0):
        raise pytest.UsageError(f"--mil-macos-version: {text!r} is below 15.0, which the suite's iOS18 cases need")
    return version


def sampled(index: int, every: int, offset: int) -> bool:
    """Whether the case at `index` (0-based, within its test function) is run: index = offset modulo every."""
    return index % every == offset


def select(nodeids: list[str], every: int, offset: int) -> tuple[list[int], list[int]]:
    """(kept, dropped) positions of `nodeids` (pytest collection order): within each test function (the node id
    before its parameters), the cases at offset, offset + every, offset + 2 every ... are kept."""
    if every < 1:
        raise pytest.UsageError(f"--mil-sample-every must be at least 1, not {every}")
    if not 0 <= offset < every:
        raise pytest.UsageError(f"--mil-sample-offset must be in [0, {every}) for --mil-sample-every {every}, "
                                f"not {offset}")
    seen: dict[str, int] = {}
    kept, dropped = [], []
    for position, nodeid in enumerate(nodeids):
        function = nodeid.split("[", 1)[0]
        index = seen.get(function, 0)
        seen[function] = index + 1
        (kept if sampled(index, every, offset) else dropped).append(position)
    return kept, dropped


def _patches(version: tuple[int, ...] = FAKE_MACOS_VERSION) -> list[tuple[object, str, object]]:
    """(object, attribute, new value) for every name the plugin replaces."""
    import coremltools.models.utils as model_utils
    from coremltools.converters.mil import testing_utils
    from coremltools.converters.mil.mil.ops.tests import testing_utils as suite_utils
    from coremltools.models import MLModel

    _ORIGINAL_COMPARE.setdefault("compare_backend", testing_utils.compare_backend)
    shim = pytypes.SimpleNamespace(**{k: getattr(model_utils, k) for k in dir(model_utils) if not k.startswith("__")})
    shim._macos_version = lambda: version
    shim._is_macos = lambda: False  # keeps macos_compatible_with_deployment_target from filtering opsets
    return [
        (testing_utils, "coremltoolsutils", shim),
        (testing_utils, "_IS_MACOS", True),
        (testing_utils, "run_core_ml_predict", _run_core_ml_predict),
        (testing_utils, "compare_backend", _compare_backend),
        (suite_utils, "compare_backend", _compare_backend),  # the op tests' helpers import it by name
        (MLModel, "predict", lambda self, data, state=None: executor_predict(self, data, state)),
        (MLModel, "make_state", _make_state),  # stateful cases make a state first
    ]


def install(version: tuple[int, ...] = FAKE_MACOS_VERSION) -> None:
    """Point the suite's macOS prediction path at the executor for the rest of the process (the plugin's way)."""
    for owner, name, value in _patches(version):
        setattr(owner, name, value)


@contextlib.contextmanager
def installed():
    """The same patches for the duration of a `with` block, then the originals back (for use inside other tests)."""
    patches = _patches()
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


# ----------------------------------------------------------------------------------------------- pytest hooks

def pytest_addoption(parser):
    parser.addoption("--mil-report", default=None, help="write one JSON line per case (outcome, reason, ops)")
    parser.addoption("--mil-sample-every", type=int, default=1,
                     help="run the 1st, (N+1)th, (2N+1)th ... case of every test function; the others are "
                          "deselected and reported as not_sampled (a documented subset when time is short)")
    parser.addoption("--mil-sample-offset", type=int, default=0,
                     help="with --mil-sample-every N: run the cases at index K, K+N, K+2N ... of every test function "
                          "(0 <= K < N); offsets 0..N-1 together cover every case once")
    parser.addoption("--mil-macos-version", default=".".join(map(str, FAKE_MACOS_VERSION)),
                     help="the macOS version reported to coremltools (at least 15.0); coremltools skips some cases "
                          "below 15.2 ('Bug fixed in macOS 15.2')")


def pytest_configure(config):
    config._mil_macos_version = parse_macos_version(config.getoption("--mil-macos-version"))
    install(config._mil_macos_version)
    path = config.getoption("--mil-report")
    config._mil_report = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 - closed at unconfigure


def pytest_unconfigure(config):
    handle = getattr(config, "_mil_report", None)
    if handle is not None:
        handle.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """coremltools' collection-time skip marks read `coremltools.models.utils._macos_version` (directly or bound by
    `from ... import`): it answers the plugin's version while the test modules are imported."""
    import coremltools.models.utils as model_utils

    version = getattr(session.config, "_mil_macos_version", FAKE_MACOS_VERSION)
    original = model_utils._macos_version
    model_utils._macos_version = lambda: version
    try:
        yield
    finally:
        model_utils._macos_version = original


def pytest_collection_modifyitems(config, items):
    every = int(config.getoption("--mil-sample-every"))
    offset = int(config.getoption("--mil-sample-offset"))
    for item in items:
        kind, opset = backend_kind(_backend_of(item))
        item.user_properties.append(("mil_backend", kind))
        item.user_properties.append(("mil_opset", opset))
        if kind == "neuralnetwork":
            item.add_marker(pytest.mark.skip(reason=NEURALNETWORK_REASON))
    keep, drop = select([item.nodeid for item in items], every, offset)
    kept, dropped = [items[i] for i in keep], [items[i] for i in drop]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        handle = getattr(config, "_mil_report", None)
        for item in dropped if handle is not None else []:
            props = dict(item.user_properties)
            handle.write(json.dumps({"nodeid": item.nodeid, "outcome": "not_sampled", "reason": "", "predicted": False,
                                     "backend": props.get("mil_backend"), "opset": props.get("mil_opset"),
                                     "ops": [], "seconds": 0.0}) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _current["item"] = item
    try:
        yield
    finally:
        _current["item"] = None


def first_line(text: str) -> str:
    """The first line of an error; a bare heading ("AssertionError:") keeps the lines that say what differed."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return ""
    out = lines[0]
    if out.endswith(":") and len(lines) > 1:
        out = " ".join([out] + [line for line in lines[1:4]])
    return out[:300]


def _reason(report) -> str:
    if report.skipped:
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            return first_line(longrepr[2]).removeprefix("Skipped: ")
        return first_line(str(longrepr))
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return first_line(crash.message)
    return first_line(str(report.longrepr))


def pytest_runtest_logreport(report):
    handle = getattr(_config_ref, "handle", None)
    if handle is None:
        return
    final = (report.when == "call") or (report.when == "setup" and not report.passed) or \
        (report.when == "teardown" and report.failed)
    if not final:
        return
    props = dict(report.user_properties)
    ops = [op for key, value in report.user_properties if key == "mil_ops" for op in value]
    outcome = "error" if report.when != "call" and report.failed else report.outcome
    reason = "" if report.passed else _reason(report)
    if hasattr(report, "wasxfail"):  # coremltools marks known Core ML bugs with pytest.xfail
        outcome = "xfailed" if report.skipped else "xpassed"
        reason = first_line(report.wasxfail)
    record = {
        "nodeid": report.nodeid,
        "outcome": outcome,
        "reason": reason,
        "backend": props.get("mil_backend"),
        "opset": props.get("mil_opset"),
        "predicted": bool(ops),  # the executor ran this case's program (False: builder/type-inference-only case)
        "ops": sorted(set(ops)),
        "seconds": round(report.duration, 4),
    }
    handle.write(json.dumps(record) + "\n")
    handle.flush()


class _ConfigRef:
    handle = None


_config_ref = _ConfigRef()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    _config_ref.handle = getattr(session.config, "_mil_report", None)
