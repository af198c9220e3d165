"""MILExecutor: run a saved ML program (.mlpackage) on the CPU with numpy, the way Core ML's FP16 path stores it.

What it reads: only the package. The program is loaded back with PyMIL (package/mil/load.py, every check first); weights
are the const values read from the package's weight.bin (fp16 as stored; palettized / quantized weights are decompressed
from the stored indices and tables by the constexpr handlers). No torch model, no checkpoint, no fallback to torch.

What it does:
- ops run in program order, one numpy handler per MIL op type (registry.OPS, filled by the families in ops/);
- every op's output is stored in the op's declared dtype: for FP16 programs each output is rounded to fp16
  (np.float16), as Core ML's FP16 path stores activations;
- const ops and ops whose inputs are all constant (constexpr decompression and anything the converter left
  foldable) are evaluated once at load, through the same handlers, and kept;
- every intermediate is released right after the last op that reads it (last uses computed once at load), so
  memory holds the constants, the live frontier of activations and the outputs;
- every op is checked at load, nested blocks included: one UnsupportedOpError lists every op type without a
  handler (or not implemented at the program's opset) with its count and first op, before anything runs;
- control flow (cond, while_loop): each nested block is compiled into its own steps; the op's handler runs them
  through `node.blocks`; values a block reads from outside stay alive until the op finishes; one run takes at most
  `max_loop_iterations` loop iterations (all loops counted) and a loop's values at most `max_loop_bytes`
  (ops/control_flow.py: a loop that never ends or grows without end is refused, naming it);
- an op that fails at run time raises ExecutionError naming the op, its type and the shapes of its inputs.

Accumulation precision (`mode`, see numerics.py for the exact definitions):
- "fp32-accumulate" (default): each op converts its fp16 inputs to float32, computes in float32 (float32 BLAS for
  conv/matmul/linear/einsum dot products, float32 reductions) and rounds its output once to fp16;
- "fp16-strict": every elementary step inside an op is rounded to fp16 and every dot product and reduction is
  accumulated sequentially in fp16 (a pessimistic bound; O(K) numpy calls per dot product, so slow at full size);
- "ane": fp32-accumulate plus the Neural Engine's published cliffs of one chip family (`ane_family`, cliffs.py): a
  cliff that fires turns the op's values into +/-inf (or rounds a reduce_sum total) and `last_run["ane_cliff"]`
  names the first op where one fired (name, type, output, cliff, the value), or is None.

Hooks: `run(inputs, inspect=...)` calls `inspect(node, args, values)` after every run-time op (constants and folded ops
excluded) with the op's inputs and its stored outputs; headroom.py measures per-op magnitudes with it.
`run(..., apply_cliffs=False)` runs an `ane` executor without its cliffs (the values an fp32-accumulate run gives).

Speed: conv/matmul/einsum products are float32 BLAS calls (1x1 conv = (Cout x Cin) @ (Cin x L) against a float32
weight matrix cached at load; per-head einsums = one matmul each); fp16 <-> fp32 conversion and the fused fp16
binary ops run in small numba kernels when numba is installed (kernels.py); large products and kernels are split
over `threads` Python threads (default: the CPUs this process may use) with BLAS pinned to one thread per call.
Its time against the BC1S torch FP32 forward and its peak RSS at full size are measured by benchmarks/
mil_executor.py (benchmarks/evidence/mil_executor_mmbert_base_shape.json, ANE_BENCHMARKS.md "The mil executor at
full size").

Inputs: {name: array} with exactly the program's input names and shapes (an input with enumerated shapes, as in
the original-layout baseline export, accepts any of its enumerated shapes, one with a shape range any shape within
its bounds; shapes inside the program then follow the data), checked before any op runs; values are cast to the
input dtype (fp16 for our exports), as Core ML casts them. Outputs: {name: array} in the output's declared dtype
(np.float16 for our exports; a classifier's label is a str or int and its probabilities a {class: float} dict);
`run(..., as_float32=True)` returns float32 copies of the same fp16 values.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import HarnessError
from ...core.limits import MAX_LOOP_ITERATIONS, value_bound
from ...package.mil.load import LoadedProgram, load_program
from ...package.mil.tensors import static_shape, var_dtype
from ...package.mil.walk import walk_operations
from . import ops as _families  # noqa: F401 - importing the package registers every op in registry.OPS
from .cliffs import DEFAULT_FAMILY, AneCliffs
from .numerics import ANE, FP32_ACCUMULATE, MODES, Numerics, cast_to
from .ops.control_flow import LoopBudget, LoopLimitError
from .registry import CONSTEXPR_PREFIX, OPS, OPSETS, OpDef, OpNode, UnsupportedOpError


class ExecutionError(HarnessError):
    """An op failed while running; the message names the op."""


class InputError(HarnessError):
    """Inputs that do not match the program's input names, shapes or types."""


@dataclass
class _Step:
    node: OpNode
    handler: Callable
    const_args: dict[str, Any]
    slot_args: list[tuple[str, int]]
    tuple_args: list[tuple[str, list[tuple[bool, Any]]]]  # (is_slot, slot or constant value)
    out_slots: list[int]
    free_after: list[int] = field(default_factory=list)
    outer_reads: list[int] = field(default_factory=list)  # slots its nested blocks read from outside them
    inner_slots: list[int] = field(default_factory=list)  # slots produced inside its blocks; cleared after the op


@dataclass
class _BlockPlan:
    """A nested block (cond branch, while_loop condition or body): its input slots, steps and output slots."""
    input_slots: list[int]
    steps: list[_Step]
    output_slots: list[int]


def _nbytes(value) -> int:
    return value.nbytes if isinstance(value, np.ndarray) else 0


def _summarise_args(args: dict) -> str:
    """'x=float16(1, 4, 1, 96), axes=[1]': what an op received, for the message of an op that failed."""
    def one(v):
        if isinstance(v, np.ndarray):
            return f"{v.dtype}{tuple(v.shape)}" if v.size > 8 else f"{v.dtype}{v.tolist()}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(one(np.asarray(x)) for x in v) + "]"
        return repr(v)
    return ", ".join(f"{k}={one(v)}" for k, v in args.items())


def _reads(plans: list[_BlockPlan]) -> set[int]:
    """Every slot the steps of these blocks (and blocks nested in them) read, and their outputs."""
    read: set[int] = set()
    for plan in plans:
        read.update(plan.output_slots)
        for step in plan.steps:
            read.update(s for _, s in step.slot_args)
            read.update(s for _, items in step.tuple_args for is_slot, s in items if is_slot)
            read.update(step.outer_reads)
    return read


def unsupported_ops(operations: list, opset: str, registry: dict[str, OpDef] | None = None) -> dict[str, dict]:
    """{op type: {count, first, reason}} for every op (nested blocks included) the registry cannot run at `opset`.
    Ops are numbered in walk order (nested blocks right after their op), as OpNode.index."""
    registry = OPS if registry is None else registry
    problems: dict[str, dict] = {}
    for index, op in enumerate(walk_operations(operations)):
        op_def = registry.get(op.op_type)
        if op_def is None:
            reason = "no handler"
        elif opset in OPSETS and opset not in op_def.opsets:
            reason = f"implemented for {', '.join(op_def.opsets)}, the program is {opset}"
        else:
            continue
        entry = problems.setdefault(op.op_type, {"count": 0, "first": f"op #{index} {op.name!r}", "reason": reason})
        entry["count"] += 1
    return problems


def _const_value(var):
    val = var.val
    if isinstance(val, str):
        return val
    if val is None:
        raise ValueError(f"const {var.name!r} has no value")
    arr = np.asarray(val)
    want = var_dtype(var)
    if arr.dtype != want and arr.dtype.kind in "fiub" and want.kind in "fiub":
        arr = arr.astype(want)
    return arr


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


_controller: list = []


@contextlib.contextmanager
def _single_threaded_blas():
    """BLAS runs one thread per call while a program runs; the executor's own threads split large products."""
    if not _controller:
        try:
            from threadpoolctl import ThreadpoolController

            _controller.append(ThreadpoolController())
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn (the convert extra)
            _controller.append(None)
    controller = _controller[0]
    if controller is None:
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield


class MILExecutor:
    """Load once, run many times: `MILExecutor(path).run({"embeddings": ..., ...})`."""

    def __init__(self, package: str | Path | LoadedProgram, mode: str = FP32_ACCUMULATE, *,
                 strict_chunk: int = 1, function_name: str | None = None, keep_program: bool = False,
                 registry: dict[str, OpDef] | None = None, threads: int | None = None,
                 max_loop_iterations: int = MAX_LOOP_ITERATIONS, max_loop_bytes: int | None = None,
                 ane_family: str = DEFAULT_FAMILY):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        self.cliffs = AneCliffs(ane_family) if mode == ANE else None  # checks the family before any loading
        self._loop_budget = LoopBudget(max_loop_iterations,
                                       value_bound() if max_loop_bytes is None else max_loop_bytes)
        started = time.perf_counter()
        loaded = package if isinstance(package, LoadedProgram) else load_program(package, function_name)
        self.read_seconds = time.perf_counter() - started
        self.package_path = Path(loaded.path)
        self.function_name = loaded.function_name
        self.inputs = list(loaded.inputs)
        self.outputs = list(loaded.outputs)
        self.opset = loaded.opset
        self.specification_version = loaded.specification_version
        self.op_type_counts = loaded.op_type_counts()
        self.threads = _available_cpus() if threads is None else max(1, int(threads))
        self.num = Numerics(mode, strict_chunk, self.threads)
        self._registry = OPS if registry is None else registry
        self._build(loaded)
        self.program = loaded if keep_program else None  # the plan holds everything needed to run
        self.load_seconds = time.perf_counter() - started
        self.last_run: dict = {}

    # ------------------------------------------------------------------------------------------- load

    @property
    def mode(self) -> str:
        return self.num.mode

    def _check_supported(self, operations: list) -> None:
        """Every unsupported op type at once, before anything runs."""
        problems = unsupported_ops(operations, self.opset, self._registry)
        if problems:
            listed = "; ".join(f"unsupported MIL op {t!r} ({p['reason']}): {p['count']} "
                               f"op{'s' if p['count'] > 1 else ''}, "
                               f"first {p['first']}" for t, p in sorted(problems.items()))
            raise UnsupportedOpError(
                f"function {self.function_name} of {self.package_path} uses {len(problems)} op type(s) the mil "
                f"executor cannot run: {listed} (supported ops and opsets: docs/EXECUTOR_OPS.md)")

    def _build(self, loaded: LoadedProgram) -> None:
        function = loaded.function
        operations = list(function.operations)
        self._check_supported(operations)  # before anything is evaluated

        slot_of: dict[int, int] = {}  # id(var) -> slot
        self._slot_names: list[str] = []

        def new_slot(var) -> int:
            slot = len(self._slot_names)
            slot_of[id(var)] = slot
            self._slot_names.append(var.name)
            return slot

        self._input_slots = {}
        for name, var in function.inputs.items():
            self._input_slots[name] = new_slot(var)

        self._consts: dict[int, Any] = {}
        self.n_folded = 0
        self._env: list[Any] = []  # the running call's values; nested blocks read and write it
        self._cliffs_on = False  # set per run: mode ane and apply_cliffs
        self._inspect = None
        self._steps = self._compile(operations, slot_of, new_slot, iter(range(1 << 62)), "")

        self._output_slots = {}
        for var in function.outputs:
            self._output_slots[var.name] = slot_of[id(var)]
        self._plan_frees()

    def _compile(self, operations: list, slot_of: dict, new_slot, counter, block: str) -> list[_Step]:
        """The steps of one op list (the function's, or a nested block's); const and foldable ops are evaluated
        here, once. `counter` numbers ops in walk order (nested blocks right after their op)."""
        steps: list[_Step] = []
        for op in operations:
            index = next(counter)
            node = OpNode(
                index=index, name=op.name, op_type=op.op_type, function=self.function_name,
                output_names=[v.name for v in op.outputs],
                output_shapes=[static_shape(v) for v in op.outputs],
                output_dtypes=[var_dtype(v) for v in op.outputs],
                block=block,
            )
            op_def = self._registry[op.op_type]
            handler = op_def.handler
            if op.op_type == "while_loop":
                node.cache["loop_budget"] = self._loop_budget
            out_slots = [new_slot(v) for v in op.outputs]
            if op.op_type == "const":
                value = self._finish(node, handler(node, {"val": _const_value(op.outputs[0])}, self.num))
                self._consts[out_slots[0]] = value[0]
                continue
            const_args: dict[str, Any] = {}
            slot_args: list[tuple[str, int]] = []
            tuple_args: list[tuple[str, list[tuple[bool, Any]]]] = []
            all_const = not op.blocks  # an op with blocks may read run-time values inside them
            for param, arg in op.inputs.items():
                if isinstance(arg, (list, tuple)):
                    items = []
                    for v in arg:
                        s = slot_of[id(v)]
                        if s in self._consts:
                            items.append((False, self._consts[s]))
                        else:
                            items.append((True, s))
                            all_const = False
                    if all(not is_slot for is_slot, _ in items):
                        const_args[param] = [v for _, v in items]
                    else:
                        tuple_args.append((param, items))
                else:
                    s = slot_of[id(arg)]
                    if s in self._consts:
                        const_args[param] = self._consts[s]
                    else:
                        slot_args.append((param, s))
                        all_const = False
            if op.op_type.startswith(CONSTEXPR_PREFIX) and not all_const:
                raise UnsupportedOpError(f"{node.where()} has a non-constant input")
            if all_const:  # evaluate once now, through the same handler
                values = self._call(node, handler, dict(const_args))
                for s, v in zip(out_slots, values):
                    self._consts[s] = v
                self.n_folded += 1
                continue
            if op_def.prepare is not None:
                op_def.prepare(node, const_args, self.num)
            step = _Step(node, handler, const_args, slot_args, tuple_args, out_slots)
            if op.blocks:
                first_inner = len(self._slot_names)
                plans = []
                for number, nested in enumerate(op.blocks):
                    inputs = [new_slot(v) for v in nested.inputs]
                    nested_steps = self._compile(list(nested.operations), slot_of, new_slot, counter,
                                                 f"block {number} of {op.name!r}")
                    plans.append(_BlockPlan(inputs, nested_steps, [slot_of[id(v)] for v in nested.outputs]))
                inner = set(range(first_inner, len(self._slot_names)))
                step.inner_slots = sorted(inner - set(self._consts))
                step.outer_reads = sorted(_reads(plans) - inner - set(self._consts))
                node.blocks = [self._block_runner(plan) for plan in plans]
            steps.append(step)
        return steps

    def _block_runner(self, plan: _BlockPlan) -> Callable[[list], list]:
        """run_block(input values) -> output values, on the running call's values (what cond/while_loop call)."""
        def run_block(values: list) -> list:
            env = self._env
            for s, v in zip(plan.input_slots, values):
                env[s] = v
            for step in plan.steps:
                self._run_step(step, env)
            return [self._consts[s] if s in self._consts else env[s] for s in plan.output_slots]
        return run_block

    def _run_step(self, step: _Step, env: list) -> list:
        args = dict(step.const_args)
        for param, s in step.slot_args:
            args[param] = env[s]
        for param, items in step.tuple_args:
            args[param] = [env[v] if is_slot else v for is_slot, v in items]
        values = self._call(step.node, step.handler, args)
        if self._cliffs_on:
            values = self.cliffs.apply(step.node, args, values)
        if self._inspect is not None:
            self._inspect(step.node, args, values)
        del args
        for s, v in zip(step.out_slots, values):
            env[s] = v
        for s in step.inner_slots:
            env[s] = None
        return values

    def _plan_frees(self) -> None:
        """Last use of every non-constant slot; free it right after that step (or at once if never read)."""
        keep = set(self._output_slots.values())
        last_use: dict[int, int] = {}
        for i, step in enumerate(self._steps):
            for _, s in step.slot_args:
                last_use[s] = i
            for s in step.outer_reads:
                last_use[s] = i
            for _, items in step.tuple_args:
                for is_slot, s in items:
                    if is_slot:
                        last_use[s] = i
        self._free_at_start = [s for s in self._input_slots.values() if s not in last_use and s not in keep]
        for i, step in enumerate(self._steps):
            for s in step.out_slots:
                if s not in last_use and s not in keep:
                    last_use[s] = i  # dead output: dropped right after it is produced
        for s, i in last_use.items():
            if s not in keep and s not in self._consts:
                self._steps[i].free_after.append(s)

    # ------------------------------------------------------------------------------------------- run

    def _finish(self, node: OpNode, result) -> list:
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(values) != len(node.output_dtypes):
            raise ExecutionError(f"{node.where()}: handler returned {len(values)} outputs, the op has "
                                 f"{len(node.output_dtypes)}")
        out = []
        for value, dtype, shape, name in zip(values, node.output_dtypes, node.output_shapes, node.output_names):
            if isinstance(value, (str, dict)):  # string consts; classify's label and probabilities
                out.append(value)
                continue
            value = np.asarray(value)
            if value.dtype != dtype:
                # the one rounding of the op's output (fp16 for FP16 programs)
                value = cast_to(value, dtype, self.threads)
            if shape is not None and value.shape != shape:
                if value.size == int(np.prod(shape)) and (value.ndim == 0 or shape == ()):
                    value = value.reshape(shape)
                else:
                    raise ExecutionError(f"{node.where()}: output {name!r} has shape {value.shape}, "
                                         f"the program declares {shape}")
            out.append(value)
        return out

    def _call(self, node: OpNode, handler: Callable, args: dict) -> list:
        try:
            result = handler(node, args, self.num)
        except (UnsupportedOpError, ExecutionError, LoopLimitError):
            raise
        except Exception as exc:  # name the op and what it received, keep the cause
            raise ExecutionError(f"{node.where()} failed on inputs ({_summarise_args(args)}): "
                                 f"{type(exc).__name__}: {exc}") from exc
        return self._finish(node, result)

    def check_inputs(self, inputs: dict) -> dict[str, np.ndarray]:
        expected = {t.name: t for t in self.inputs}
        missing = [n for n in expected if n not in inputs]
        extra = [n for n in inputs if n not in expected]
        if missing or extra:
            raise InputError(f"inputs do not match the program: missing {missing}, unexpected {extra}; "
                             f"expected {sorted(expected)}")
        out = {}
        for name, info in expected.items():
            if info.state:  # a state.StateBuffer the run reads and updates in place (state.py, ops/stateful.py)
                out[name] = inputs[name]
                continue
            arr = np.asarray(inputs[name])
            if not info.accepts(arr.shape):
                raise InputError(f"input {name!r} has shape {tuple(arr.shape)}, the program expects {info.expected()}")
            if arr.dtype.kind not in "fiub":
                raise InputError(f"input {name!r} has dtype {arr.dtype}; numeric arrays only")
            _check_integer_range(name, arr, np.dtype(info.dtype))
            value = cast_to(arr, info.dtype, self.threads)  # cast to the input type (fp16), as Core ML does
            out[name] = value.copy() if value is arr else value  # our own copy: the caller's array is never touched
        return out

    def run(self, inputs: dict, *, as_float32: bool = False,
            observe: Callable[[str, str, np.ndarray], None] | None = None,
            inspect: Callable[[OpNode, dict, list], None] | None = None,
            apply_cliffs: bool = True) -> dict[str, np.ndarray]:
        """Run the program. `observe(op_type, value_name, value)`, if given, sees every value as it is produced
        (for debugging and layer-by-layer comparisons; it must not keep references if memory matters);
        `inspect(node, args, values)` sees every run-time op with its inputs and outputs; `apply_cliffs=False`
        leaves out an `ane` executor's cliffs for this run."""
        feeds = self.check_inputs(inputs)
        self._cliffs_on = self.cliffs is not None and apply_cliffs
        self._inspect = inspect
        if self.cliffs is not None:
            self.cliffs.reset()
        try:
            with _single_threaded_blas():
                return self._run(feeds, as_float32, observe)
        finally:
            self._cliffs_on, self._inspect = False, None

    def _run(self, feeds, as_float32, observe):
        started = time.perf_counter()
        self._loop_budget.reset()
        env: list[Any] = [None] * len(self._slot_names)
        for name, slot in self._input_slots.items():
            env[slot] = feeds.pop(name)
        for s in self._free_at_start:
            env[s] = None
        live_bytes = sum(_nbytes(v) for v in env)
        peak_bytes = live_bytes
        self._env = env
        try:
            for step in self._steps:
                values = self._run_step(step, env)
                for s, v in zip(step.out_slots, values):
                    live_bytes += _nbytes(v)
                    if observe is not None:
                        observe(step.node.op_type, self._slot_names[s], v)
                del values
                peak_bytes = max(peak_bytes, live_bytes)
                for s in step.free_after:
                    v = env[s]
                    if v is not None:
                        live_bytes -= _nbytes(v)
                    env[s] = None
        finally:
            self._env = []
        outputs = {}
        for name, slot in self._output_slots.items():
            value = self._consts[slot] if slot in self._consts else env[slot]
            is_float = isinstance(value, np.ndarray) and value.dtype.kind == "f"
            outputs[name] = value.astype(np.float32) if as_float32 and is_float else value
        self.last_run = {
            "seconds": time.perf_counter() - started,
            "peak_live_activation_bytes": int(peak_bytes),
            "live_after_run": [self._slot_names[s] for s, v in enumerate(env) if v is not None],
            "steps": len(self._steps),
        }
        if self.cliffs is not None:
            self.last_run["ane_family"] = self.cliffs.family
            self.last_run["cliffs_applied"] = self._cliffs_on
            self.last_run["ane_cliff"] = self.cliffs.first
            self.last_run["ane_cliffs_fired"] = dict(self.cliffs.fired)
        return outputs

    predict = run

    # ------------------------------------------------------------------------------------------- introspection

    def constant(self, name: str):
        """A constant (const, decompressed constexpr or folded op output) by var name, as stored here."""
        for slot, value in self._consts.items():
            if self._slot_names[slot] == name:
                return value
        raise KeyError(f"no constant named {name!r}")

    def constant_names(self) -> list[str]:
        return [self._slot_names[s] for s in self._consts]

    def free_plan(self) -> dict[str, str]:
        """For every non-constant, non-output value: the op after which it is released."""
        plan = {}
        for s in self._free_at_start:
            plan[self._slot_names[s]] = "<start>"
        for step in self._steps:
            for s in step.free_after:
                plan[self._slot_names[s]] = step.node.name
        return plan

    def step_value_names(self) -> list[str]:
        """Names of every value produced at run time (function inputs and non-constant op outputs)."""
        names = list(self._input_slots)
        for step in self._steps:
            names.extend(self._slot_names[s] for s in step.out_slots)
        return names

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    def describe(self) -> dict:
        weight_bytes = sum(v.nbytes for v in self._consts.values() if isinstance(v, np.ndarray))
        cache_bytes = sum(v.nbytes for st in self._steps for v in st.node.cache.values() if isinstance(v, np.ndarray))
        return {
            "executor": "mil",
            **self.num.describe(),
            **(self.cliffs.describe() if self.cliffs is not None else {}),
            "storage": "each op output stored in its declared dtype (fp16 for FP16 programs)",
            "package": str(self.package_path),
            "function": self.function_name,
            "opset": self.opset,
            "specification_version": self.specification_version,
            "inputs": [t.describe() for t in self.inputs],
            "outputs": [t.describe() for t in self.outputs],
            "op_types": self.op_type_counts,
            "runtime_steps": len(self._steps),
            "folded_ops": self.n_folded,
            "constant_bytes": int(weight_bytes),
            "compute_cache_bytes": int(cache_bytes),
            "threads": self.threads,
            "load_seconds": round(self.load_seconds, 4),
        }


def _check_integer_range(name: str, arr: np.ndarray, dtype: np.dtype) -> None:
    """An integer input refuses values its dtype cannot hold (and NaN): astype would wrap 2**40 to 0 and run on."""
    if dtype.kind not in "iu" or not arr.size or arr.dtype.kind not in "fiu":
        return
    low, high = arr.min(), arr.max()
    limits = np.iinfo(dtype)
    if not (limits.min <= low and high <= limits.max):
        raise InputError(f"input {name!r} holds values in [{low}, {high}]; its {dtype} takes "
                         f"[{limits.min}, {limits.max}]")
