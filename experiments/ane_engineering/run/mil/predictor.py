"""The Python API of the executor for what models take and give beyond tensors: pictures, states, classifiers.

    model = Predictor("Model.mlpackage")              # any ML program package (ours or not)
    out = model.predict({"image": "cat.png"})          # a picture file, a PIL image, H x W x C uint8, or (1, C, H, W)
    state = model.make_state()                         # iOS18 stateful programs (ct.StateType), as coremltools
    out = model.predict({"x": x}, state=state)         # reads and updates `state`; carry it to the next call

Inputs: {name: value} for every program input that is not a state. An image input (ct.ImageType) takes a picture as
images.py converts it (RGB order, swapped for a BGR model, HWC -> (1, C, H, W)); every other input an array, cast to
the input's dtype by the executor. Outputs: {name: value}; tensors in their declared dtype, a classifier's label
(str or int) and probabilities ({class: probability}), an image output as a picture array (images.to_picture) or,
with `pictures="pil"`, a PIL image as coremltools' predict returns it.

States (state.py): a stateful program refuses a run without a state; the state's buffers are read and written in
place by the program's read_state / coreml_update_state ops, so a sequence of runs with one state is a sequence of
steps (a KV cache filling up); a run that fails leaves the state as it was before it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.limits import MAX_LOOP_ITERATIONS
from .images import ImageInfo, as_pil, image_features, to_picture, to_tensor
from .numerics import FP32_ACCUMULATE
from .state import ModelState, StateError, state_infos

PICTURE_FORMS = ("array", "pil")


def package_path(path: Path) -> Path:
    """The .mlpackage itself, or the model.mlpackage inside one of our export directories."""
    path = Path(path)
    inner = path / "model.mlpackage"
    if path.is_dir() and not (path / "Manifest.json").exists() and inner.is_dir():
        return inner
    return path


class Predictor:
    """Load a package once, predict many times (module docstring)."""

    def __init__(self, package: str | Path, mode: str = FP32_ACCUMULATE, function_name: str | None = None,
                 max_loop_iterations: int = MAX_LOOP_ITERATIONS, **executor_options):
        from ...package.mil.load import load_program
        from .executor import MILExecutor

        loaded = load_program(package_path(package), function_name)
        self.image_inputs, self.image_outputs = image_features(loaded.spec, loaded.function_name, loaded.function)
        self.executor = MILExecutor(loaded, mode=mode, max_loop_iterations=max_loop_iterations, **executor_options)
        self.states = state_infos(self.executor.inputs)
        self.spec = loaded.spec

    @property
    def inputs(self) -> list:
        """The inputs a caller gives (states excluded): ImageInfo for an image input, TensorInfo otherwise; both
        offer name / accepts / largest / expected, what npz_inputs.read_inputs asks of an input."""
        return [self.image_inputs.get(t.name, t) for t in self.executor.inputs if not t.state]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return self.executor.output_names

    def make_state(self) -> ModelState:
        """A new state for this program (zeros), as coremltools' MLModel.make_state()."""
        if not self.states:
            raise StateError(f"{self.executor.package_path} has no states (ct.StateType); make_state() is for "
                             "stateful programs")
        return ModelState(self.states)

    def feeds(self, inputs: dict, state: ModelState | None = None) -> dict:
        """What the executor runs on: pictures converted, the state's buffers added under the state names."""
        if self.states and state is None:
            raise StateError(f"{self.executor.package_path} is stateful (states {[s.name for s in self.states]}); "
                             "pass state=make_state() and keep it across calls")
        if state is not None and not self.states:
            raise StateError(f"{self.executor.package_path} has no states; it takes no state=")
        feeds = {}
        for name, value in inputs.items():
            info = self.image_inputs.get(name)
            feeds[name] = value if info is None else _image_tensor(info, value)
        if state is not None:
            if not isinstance(state, ModelState):
                raise StateError(f"state= takes what make_state() returned, not a {type(state).__name__}")
            state.check(self.states)
            clash = sorted(set(feeds) & set(state.buffers))
            if clash:
                raise StateError(f"{clash} are states of the program, carried by state=, not inputs")
            feeds.update(state.buffers)
        return feeds

    def predict(self, inputs: dict, state: ModelState | None = None, pictures: str = "array") -> dict:
        if pictures not in PICTURE_FORMS:
            raise ValueError(f"pictures must be one of {PICTURE_FORMS}, not {pictures!r}")
        feeds = self.feeds(inputs, state)
        # a run that fails half-way (an op refusing its inputs) leaves the state as it was, not with only its first
        # states updated: a caller who catches the error and goes on would carry a half-applied step. Updates
        # replace a buffer's array (state.py), so keeping the old arrays costs no copy
        before = {name: buffer.value for name, buffer in state.buffers.items()} if state is not None else {}
        try:
            outputs = self.executor.run(feeds)
        except BaseException:
            for name, value in before.items():
                state.buffers[name].value = value
            raise
        for name, info in self.image_outputs.items():
            if name in outputs:
                picture = to_picture(info, outputs[name])
                outputs[name] = as_pil(picture) if pictures == "pil" else picture
        return outputs


def _image_tensor(info: ImageInfo, value) -> np.ndarray:
    from .executor import InputError

    tensor = to_tensor(info, value)
    if tensor.ndim == 4 and not info.accepts(tensor.shape):
        raise InputError(f"input {info.name!r} has shape {tuple(tensor.shape)}, the program expects {info.expected()}")
    return tensor
