"""State objects of iOS18 stateful programs (ct.StateType, e.g. a KV cache), as coremltools' `MLModel.make_state()`
hands them out: one buffer per state of the program, zero-filled when made (Core ML documents a new state's content
as undefined; zeros are what a KV cache export expects), read by `read_state` and overwritten by
`coreml_update_state` (ops/stateful.py) while a run goes, and kept by the caller across runs.

    state = predictor.make_state()
    predictor.predict({"x": x0}, state=state)   # reads and updates state's buffers
    state.read("cache")                          # a copy of the buffer (the program's dtype, e.g. fp16)

A state belongs to the program it was made for: a run refuses a state whose names, shapes or dtypes differ.
"""

from __future__ import annotations

import numpy as np

from ...core.errors import HarnessError


class StateError(HarnessError):
    """A state that does not fit the program, or a stateful program run without one."""


class StateBuffer:
    """One state of a program: its current value (the stored dtype and shape) and the rules for writing it."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype):
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.value = np.zeros(self.shape, dtype=self.dtype)  # (shape) in the state's dtype

    def read(self) -> np.ndarray:
        return self.value.copy()

    def write(self, value) -> None:
        value = np.asarray(value)
        if value.shape != self.shape:
            raise StateError(f"state {self.name!r} holds {self.shape}; a write of {value.shape} is refused")
        self.value = value.astype(self.dtype, copy=True)


class ModelState:
    """Every state of one program, by name (what `make_state()` returns)."""

    def __init__(self, infos):
        self.buffers = {info.name: StateBuffer(info.name, info.shape, info.dtype) for info in infos}

    def read(self, name: str) -> np.ndarray:
        """A copy of one state's current value."""
        if name not in self.buffers:
            raise StateError(f"no state named {name!r} (states: {sorted(self.buffers)})")
        return self.buffers[name].read()

    def write(self, name: str, value) -> None:
        """Overwrite one state's value (same shape; cast to the state's dtype)."""
        if name not in self.buffers:
            raise StateError(f"no state named {name!r} (states: {sorted(self.buffers)})")
        self.buffers[name].write(value)

    # coremltools 8+ MLState spells these read_state / write_state
    read_state = read
    write_state = write

    def check(self, infos) -> None:
        """Refuse a state made for another program."""
        want = {i.name: (tuple(i.shape), np.dtype(i.dtype)) for i in infos}
        have = {n: (b.shape, b.dtype) for n, b in self.buffers.items()}
        if want != have:
            raise StateError(f"the state holds {sorted((n, list(s), str(d)) for n, (s, d) in have.items())[:4]}; the "
                             f"program's states are {sorted((n, list(s), str(d)) for n, (s, d) in want.items())[:4]}")


def state_infos(inputs) -> list:
    """The program inputs that are states (TensorInfo.state)."""
    return [info for info in inputs if getattr(info, "state", False)]
