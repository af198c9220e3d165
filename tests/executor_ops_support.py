"""Helpers for the per-op executor tests: build a MIL program with coremltools' builder and run it through the
mil executor directly (no package round trip: the builder materialises every default input as a const, as the
package loader does), and fp16 tolerances derived from the reference value."""

from __future__ import annotations

import numpy as np
import pytest

from fp16_support import TINY16, U16, f16, ulp16  # noqa: F401  (U16 and f16: for the per-op test modules)

# The imports below need what these lines skip the module without (E402: they follow on purpose).
ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from experiments.ane_engineering.package.mil.load import LoadedProgram  # noqa: E402
from experiments.ane_engineering.run.mil.executor import MILExecutor  # noqa: E402

MODES = ("fp32-accumulate", "fp16-strict")
DTYPES = {np.float16: types.fp16, np.float32: types.fp32, np.int32: types.int32, np.bool_: types.bool}


def spec(a: np.ndarray):
    return mb.TensorSpec(shape=a.shape, dtype=DTYPES[np.asarray(a).dtype.type])


def loaded(prog, opset: str) -> LoadedProgram:
    return LoadedProgram.built(prog, opset, path=f"<builder program, {opset}>")


def build_program(build, specs: dict, opset=None):
    """A one-function PyMIL program: build(*input vars, in `specs` order) -> var or tuple of vars."""
    from coremltools.converters.mil.mil import Function, Program

    with Function(dict(specs), opset or ct.target.iOS17) as func:
        out = build(*[func.inputs[n] for n in specs])
        func.set_outputs(list(out) if isinstance(out, (tuple, list)) else [out])
    prog = Program()
    prog.add_function("main", func)
    return prog


def run_program(prog, inputs: dict, mode: str = "fp32-accumulate", opset=None) -> list[np.ndarray]:
    """The program's outputs in order, run by the mil executor."""
    ex = MILExecutor(loaded(prog, (opset or ct.target.iOS17).name), mode=mode, threads=1)
    out = ex.run(dict(inputs))
    return [out[n] for n in ex.output_names]


def run(build, inputs: dict, mode: str = "fp32-accumulate", opset=None) -> list[np.ndarray]:
    """build(*input vars) -> var or tuple of vars, built at `opset` (default iOS17); the outputs in order."""
    prog = build_program(build, {n: spec(inputs[n]) for n in inputs}, opset)
    return run_program(prog, inputs, mode, opset)


def assert_fp16(out, ref, ulps: float = 1.0, extra=0.0, what: str = ""):
    """|out - ref| <= ulps * ulp16(ref) + extra (+ the fp16 subnormal step): `ulps` = 1 is the one rounding of an
    exact result to fp16 (half an ulp) with slack for float32 evaluation; more for fp16-strict's inner roundings."""
    out = np.asarray(out)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    o = out.astype(np.float64)
    with np.errstate(over="ignore"):
        overflow = np.isfinite(ref) & np.isinf(ref.astype(np.float16))  # beyond 65520: fp16 stores +-inf
    same_special = ((np.isnan(o) & np.isnan(ref))
                    | ((np.isinf(ref) | overflow) & (o == np.where(ref > 0, np.inf, -np.inf))))
    tol = ulps * ulp16(ref) + TINY16 + extra
    bad = ~same_special & ~(np.abs(o - ref) <= tol)
    assert not bad.any(), f"{what}: {int(bad.sum())} values off, e.g. got {o[bad][:4]} want {ref[bad][:4]}"

