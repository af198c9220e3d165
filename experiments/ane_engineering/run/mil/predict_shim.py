"""`coremltools.models.MLModel.predict` (and `make_state`) off macOS, through the mil executor: one opt-in call.

    from experiments.ane_engineering.execute import install_coremltools_predict
    install_coremltools_predict()
    model = coremltools.models.MLModel("Model.mlpackage")        # or what ct.convert returned
    out = model.predict({"image": PIL.Image.open("cat.png")})       # runs here, on Linux

Without the call nothing of coremltools changes (its predict raises off macOS). After it, an MLModel that Core ML
did not load (no `__proxy__`: every MLModel on Linux) predicts through a Predictor (predictor.py) loaded once per
MLModel from its package (`package_path`, also the temporary package of a model ct.convert returned, and its
`function_name`); an MLModel Core ML did load (macOS) keeps coremltools' own predict. `uninstall_coremltools_predict`
restores coremltools' methods.

Core ML's conventions, as coremltools' predict applies them (coremltools/models/model.py, the binding
coremlpython/CoreMLPythonUtils.mm):
- inputs go through coremltools' own checks and conversions first (`_verify_input_dict`: known input names, and an
  image input must be a PIL image of mode RGB for RGB/BGR, L for GRAYSCALE, F for GRAYSCALE_FLOAT16;
  `_convert_tensor_to_numpy`: torch tensors and lists to numpy; fp16 arrays to float32), so a call refused on a Mac
  is refused here; what the program then refuses (a shape, a missing input, a picture of another size, an integer
  its int32 cannot hold, no state for a stateful model) or an op that fails raises RuntimeError, as Core ML's
  predict does, and a failed run leaves its state as it was
  (coremltools reads the model's description.input for these checks, which a multifunction package leaves empty: there
  it checks no picture mode, and the executor converts a picture to the function's mode as images.py says);
- `data` may be a dict or a list of dicts (a batch, list of output dicts back; no state with a batch);
- outputs: a dict of numpy arrays; int64, double and string features (a classifier's label) as Python int, float
  and str (read from the function's own description in a multifunction package), a classifier's probabilities as
  {class: float}; an image output as a PIL image: mode RGBA for RGB/BGR (the binding turns Core ML's 32BGRA pixel
  buffer into an RGBA image; alpha 255 here), L for GRAYSCALE, F for GRAYSCALE_FLOAT16;
- `make_state()` returns a coremltools MLState whose read_state / write_state reach the executor's state (state.py);
  `predict(data, state=...)` reads and updates it.
"""

from __future__ import annotations

import numpy as np

from .numerics import FP32_ACCUMULATE

_ORIGINAL: dict = {}
_OPTIONS: dict = {}
_CACHE_ATTRIBUTE = "_mil_executor_predictor"
_SCALARS = {"int64Type": int, "doubleType": float, "stringType": str}  # what the binding returns for these features


def _predictor(mlmodel):
    from ...core.errors import HarnessError
    from .predictor import Predictor

    cached = getattr(mlmodel, _CACHE_ATTRIBUTE, None)
    if cached is None:
        if not getattr(mlmodel, "package_path", None):
            raise HarnessError("the mil executor runs ML programs (.mlpackage); this MLModel has no package "
                               "(a neural network .mlmodel?)")
        cached = Predictor(mlmodel.package_path, _OPTIONS.get("mode", FP32_ACCUMULATE), mlmodel.function_name)
        setattr(mlmodel, _CACHE_ATTRIBUTE, cached)
    return cached


def _as_coreml_picture(picture: np.ndarray, layout: str):
    from PIL import Image

    if layout in ("RGB", "BGR"):  # H x W x 3 RGB -> RGBA, alpha opaque
        picture = np.concatenate([picture, np.full(picture.shape[:2] + (1,), 255, np.uint8)], axis=-1)
    return Image.fromarray(picture)


def predict_with_executor(mlmodel, data: dict, state=None) -> dict:
    """One prediction of a coremltools MLModel through the executor with Core ML's conventions (module docstring),
    whatever machine this is: what the patched predict runs, also for plugins that route predictions themselves."""
    return _predict_one(mlmodel, data, state)


def _predict_one(mlmodel, data: dict, state):
    mlmodel._verify_input_dict(data)  # coremltools' own checks and conversions, as its predict applies them
    mlmodel._convert_tensor_to_numpy(data)
    mlmodel._update_float16_multiarray_input_to_float32(data)
    from ...core.errors import HarnessError

    model = _predictor(mlmodel)
    inner = None if state is None else getattr(state, "__proxy__", state)
    try:
        outputs = model.predict(data, state=inner)
    except HarnessError as error:  # inputs the program refuses, an op failing: Core ML's predict raises RuntimeError
        raise RuntimeError(f"mil executor: {error}") from error
    for name, info in model.image_outputs.items():
        if name in outputs:
            outputs[name] = _as_coreml_picture(outputs[name], info.layout)
    from .images import function_description

    # int64 / double / string features (a classifier's label): Python scalars; the function's own features, since a
    # multifunction package leaves the model's description.output empty
    for feature in function_description(mlmodel._spec, mlmodel.function_name).output:
        kind = feature.type.WhichOneof("Type")
        if feature.name in outputs and kind in _SCALARS:
            outputs[feature.name] = _SCALARS[kind](np.asarray(outputs[feature.name]).item())
    return outputs


def _predict(self, data, state=None):
    if getattr(self, "__proxy__", None):  # Core ML loaded it (macOS): coremltools' own predict
        return _ORIGINAL["predict"](self, data, state)
    type(self)._check_predict_data(data)
    if isinstance(data, dict):
        return _predict_one(self, data, state)
    if state is not None:
        raise AssertionError("State can only be used for unbatched predictions")  # as coremltools asserts
    return [_predict_one(self, item, None) for item in data]


def _make_state(self):
    if getattr(self, "__proxy__", None):
        return _ORIGINAL["make_state"](self)
    from coremltools.models.model import MLState

    return MLState(_predictor(self).make_state())


def install_coremltools_predict(mode: str = FP32_ACCUMULATE) -> None:
    """Patch coremltools.models.MLModel.predict and make_state (module docstring); calling it again only updates
    `mode` for models loaded from then on."""
    from coremltools.models import MLModel

    from .numerics import MODES

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    _OPTIONS["mode"] = mode
    if not _ORIGINAL:
        _ORIGINAL["predict"] = MLModel.predict
        _ORIGINAL["make_state"] = MLModel.make_state
        MLModel.predict = _predict
        MLModel.make_state = _make_state


def uninstall_coremltools_predict() -> None:
    """coremltools' own predict and make_state again."""
    if not _ORIGINAL:
        return
    from coremltools.models import MLModel

    MLModel.predict = _ORIGINAL.pop("predict")
    MLModel.make_state = _ORIGINAL.pop("make_state")


def installed() -> bool:
    return bool(_ORIGINAL)
