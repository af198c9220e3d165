"""iOS18 states: `read_state` and `coreml_update_state` (coremltools' defs/iOS18/states.py and
defs/coreml_dialect/ops.py; PyMIL's loader turns a saved `write_state` into `coreml_update_state`,
frontend/milproto/load.py). A state input carries a state.StateBuffer (the caller's, from make_state()):
read_state returns a copy of its value; coreml_update_state writes `value` into it and returns a copy of `value`,
which later read_state ops of the same run see."""

from __future__ import annotations

from ..registry import register
from ..state import StateBuffer, StateError


def _buffer(node, value) -> StateBuffer:
    if not isinstance(value, StateBuffer):
        raise StateError(f"{node.where()} reads a state, but the run was given {type(value).__name__}; pass "
                         "state=make_state()")
    return value


@register("read_state", since="iOS18")
def op_read_state(node, args, num):
    return _buffer(node, args["input"]).read()


@register("coreml_update_state")  # a coreml-dialect op, in no opset of coremltools' core registry (states: iOS18+)
def op_coreml_update_state(node, args, num):
    buffer = _buffer(node, args["state"])
    buffer.write(args["value"])
    return buffer.read()
