"""coremltools' own MLModel.predict on Linux after the opt-in call (run/mil/predict_shim.py): models we did not export
(a torch MLP, RGB / BGR / grayscale image models, a classifier, a KV-cache model with ct.StateType) predict with
Core ML's conventions; without the call coremltools' behaviour is its own; the pytest plugin does the same for a
user's test file run by pytest in its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# The imports below need what these lines skip the module without (E402: they follow on purpose).
ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")
from coremltools.models import MLModel  # noqa: E402

from experiments.ane_engineering.core.provenance import REPOSITORY_ROOT  # noqa: E402
from experiments.ane_engineering.execute import install_coremltools_predict, uninstall_coremltools_predict  # noqa: E402
from experiments.ane_engineering.run.mil import predict_shim  # noqa: E402
from experiments.ane_engineering.run.mil.predictor import Predictor  # noqa: E402
from fp16_support import U16  # noqa: E402
from image_state_support import (  # noqa: E402
    BIAS,
    HEIGHT,
    WIDTH,
    KVCache,
    convert_classifier,
    convert_image_model,
    convert_kv_model,
    kv_step_inputs,
)

pytestmark = pytest.mark.slow  # converts with coremltools, starts pytest in a process of its own

ORIGINAL_PREDICT = MLModel.predict


@pytest.fixture
def shim():
    install_coremltools_predict()
    yield
    uninstall_coremltools_predict()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("shim")
    return {"RGB": convert_image_model(root / "rgb.mlpackage", ct.colorlayout.RGB, 3, bias=BIAS),
            "BGR": convert_image_model(root / "bgr.mlpackage", ct.colorlayout.BGR, 3, bias=BIAS),
            "GRAY": convert_image_model(root / "gray.mlpackage", ct.colorlayout.GRAYSCALE, 1),
            "classifier": convert_classifier(root / "cls.mlpackage"),
            "kv": convert_kv_model(root / "kv.mlpackage"),
            "picture_out": convert_image_model(root / "out.mlpackage", ct.colorlayout.RGB, 3, scale=1.0,
                                               channels_out=3, outputs=[ct.ImageType(name="picture",
                                                                                    color_layout=ct.colorlayout.BGR)])}


def test_without_the_opt_in_predict_is_coremltools_own(models):
    assert MLModel.predict is ORIGINAL_PREDICT and not predict_shim.installed()
    model = MLModel(str(models["classifier"][1]))
    with pytest.raises(Exception, match="CoreML.framework|macOS|Core ML"):  # coremltools' own refusal off macOS
        model.predict({"x": np.zeros((1, 4), np.float32)})
    with pytest.raises(Exception, match="macOS"):
        MLModel(str(models["kv"][1])).make_state()


@pytest.mark.parametrize("layout", ["RGB", "BGR", "GRAY"])
def test_images_as_pil_pictures(shim, models, layout):
    net, pkg = models[layout]
    rng = np.random.default_rng(0)
    shape = (HEIGHT, WIDTH, 3) if layout != "GRAY" else (HEIGHT, WIDTH)
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    out = MLModel(str(pkg)).predict({"image": Image.fromarray(pixels)})
    expected = Predictor(pkg).predict({"image": pixels})  # the executor's own picture path (its own tests)
    assert sorted(out) == sorted(expected)
    for name in out:
        assert isinstance(out[name], np.ndarray)
        np.testing.assert_array_equal(out[name], expected[name])
    with pytest.raises(TypeError, match="must be of type PIL.Image.Image"):  # coremltools' own check, as on a Mac
        MLModel(str(pkg)).predict({"image": pixels})
    with pytest.raises(RuntimeError, match="pictures are not resized"):  # what the program refuses: RuntimeError
        MLModel(str(pkg)).predict({"image": Image.fromarray(pixels[:-1])})


def test_image_output_as_a_pil_picture(shim, models):
    _, pkg = models["picture_out"]
    pixels = np.random.default_rng(1).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    picture = MLModel(str(pkg)).predict({"image": Image.fromarray(pixels)})["picture"]
    assert isinstance(picture, Image.Image) and picture.mode == "RGBA" and picture.size == (WIDTH, HEIGHT)
    rgba = np.asarray(picture)
    np.testing.assert_array_equal(rgba[..., :3], Predictor(pkg).predict({"image": pixels})["picture"])
    assert (rgba[..., 3] == 255).all()


def test_classifier_label_and_probabilities(shim, models):
    net, pkg = models["classifier"]
    x = np.array([[0.5, -1.0, 2.0, 0.1]], np.float32)
    out = MLModel(str(pkg)).predict({"x": x})
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()[0]
    assert out["classLabel"] == ["cat", "dog", "bird"][int(np.argmax(want))] and isinstance(out["classLabel"], str)
    probabilities = out["classLabel_probs"]
    assert list(probabilities) == ["cat", "dog", "bird"] and all(isinstance(p, float) for p in probabilities.values())
    np.testing.assert_allclose(list(probabilities.values()), want, atol=8 * U16)
    batch = MLModel(str(pkg)).predict([{"x": x}, {"x": torch.from_numpy(-x)}])  # a list of dicts, a torch tensor
    assert len(batch) == 2 and batch[0]["classLabel"] == out["classLabel"]


def test_integer_labels_come_back_as_int(shim, tmp_path):
    _, pkg = convert_classifier(tmp_path / "ints.mlpackage", labels=(10, 20, 30))
    out = MLModel(str(pkg)).predict({"x": np.array([[0.5, -1.0, 2.0, 0.1]], np.float32)})
    assert type(out["classLabel"]) is int and out["classLabel"] in (10, 20, 30)
    assert sorted(out["classLabel_probs"]) == [10, 20, 30]


def test_stateful_model_steps_with_make_state(shim, models):
    net, pkg = models["kv"]
    reference = KVCache().eval()
    reference.load_state_dict(net.state_dict())
    model = MLModel(str(pkg))
    state = model.make_state()
    assert isinstance(state, ct.models.model.MLState)
    rng = np.random.default_rng(7)
    for step in range(4):
        feeds = kv_step_inputs(step, rng)
        got = model.predict(feeds, state=state)["attended"].astype(np.float64)
        with torch.no_grad():
            want = reference(*[torch.from_numpy(v) for v in feeds.values()]).numpy()
        assert np.max(np.abs(got - want)) <= 16 * U16 * (np.abs(want).max() + 1.0), step
    np.testing.assert_allclose(state.read_state("v_cache"), reference.v_cache.numpy(), atol=16 * U16 * 2)
    state.write_state("v_cache", np.zeros((1, KVCache.CACHE, KVCache.DIM), np.float16))
    assert not state.read_state("v_cache").any()
    with pytest.raises(RuntimeError, match="stateful"):
        model.predict(kv_step_inputs(0, rng))


def test_a_model_ct_convert_returned_predicts_too(shim):
    net = torch.nn.Sequential(torch.nn.Linear(3, 2)).eval()
    model = ct.convert(torch.jit.trace(net, torch.zeros(1, 3)), inputs=[ct.TensorType(name="x", shape=(1, 3))],
                       convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS16)
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    (value,) = model.predict({"x": x}).values()
    with torch.no_grad():
        np.testing.assert_allclose(value, net(torch.from_numpy(x)).numpy(), rtol=1e-6, atol=1e-6)


USER_TESTS = '''
    import os
    import numpy as np
    import pytest
    from coremltools.models import MLModel

    PACKAGE = os.environ["USER_PACKAGE"]


    def test_predict_with_the_fixture(coremltools_predict_on_linux):
        out = MLModel(PACKAGE).predict({"x": np.array([[0.5, -1.0, 2.0, 0.1]], np.float32)})
        assert out["classLabel"] in ("cat", "dog", "bird")


    def test_without_it_coremltools_refuses():
        with pytest.raises(Exception):
            MLModel(PACKAGE).predict({"x": np.zeros((1, 4), np.float32)})
'''


SESSION_TEST = '''
    import os
    import numpy as np
    from coremltools.models import MLModel


    def test_predict_without_a_fixture():
        out = MLModel(os.environ["USER_PACKAGE"]).predict({"x": np.array([[0.5, -1.0, 2.0, 0.1]], np.float32)})
        assert out["classLabel"] in ("cat", "dog", "bird")
'''


def test_the_pytest_plugin_in_a_user_project(models, tmp_path):
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    env = {**os.environ, "USER_PACKAGE": str(models["classifier"][1]),
           "PYTHONPATH": os.pathsep.join([str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                             "experiments.ane_engineering.run.mil.pytest_plugin", str(tmp_path / "test_user.py")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout
    # the option: every test of the session predicts through the executor, no fixture needed
    (tmp_path / "test_session.py").write_text(textwrap.dedent(SESSION_TEST))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                             "experiments.ane_engineering.run.mil.pytest_plugin", "--coremltools-predict-on-linux",
                             str(tmp_path / "test_session.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
