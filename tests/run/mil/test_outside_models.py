"""Models the project never saw, as an outside user converts them, through MLModel.predict (after the opt-in call) and
the execute command: a multifunction package holding a classifier and an image model, pictures of 16-bit samples,
int32 inputs with values their dtype cannot hold, a model with two states of different shapes. Each test compares
with torch FP32 and pins a refusal that used to run silently or with a traceback.

Tolerance of FP16 programs: 1e-2 of the output's scale (plus 1e-3 absolute). FP16 keeps 11 significant bits
(unit roundoff 2**-11, about 4.9e-4 relative); these graphs round a handful of times (a linear, a softmax, a few
adds), so a correct run stays within a few units of 4.9e-4, and 1e-2 (about 20 units) still lies far below what a
wrong channel order, a lost state update or a wrong label would change. Integer outputs must be exact."""

from __future__ import annotations

import numpy as np
import pytest

# The imports below need what these lines skip the module without (E402: they follow on purpose).
ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")
from coremltools.models import MLModel  # noqa: E402

from experiments.ane_engineering.core.cli import run_main  # noqa: E402
from experiments.ane_engineering.execute import (  # noqa: E402
    install_coremltools_predict,
    uninstall_coremltools_predict,
)
from experiments.ane_engineering.execute import main as execute_main  # noqa: E402
from experiments.ane_engineering.run.mil.images import ImageInputError  # noqa: E402
from experiments.ane_engineering.run.mil.predictor import Predictor  # noqa: E402
from image_state_support import HEIGHT, SCALE, WIDTH, convert_image_model  # noqa: E402

pytestmark = pytest.mark.slow  # every test here converts with coremltools


@pytest.fixture
def shim():
    install_coremltools_predict()
    yield
    uninstall_coremltools_predict()


def _close(got, want) -> bool:
    want = np.asarray(want, np.float32)
    return float(np.max(np.abs(np.asarray(got, np.float32) - want))) <= 1e-2 * float(np.abs(want).max()) + 1e-3


def _convert(net, example, inputs, path, **options):
    # check_trace=False: the trace check reruns a stateful module, whose buffers the first run already changed
    model = ct.convert(torch.jit.trace(net, example, check_trace=False), inputs=inputs, convert_to="mlprogram",
                       skip_model_load=True,
                       **{"minimum_deployment_target": ct.target.iOS18, **options})
    model.save(str(path))
    return str(path)


def test_a_multifunction_classifier_gives_coreml_label_types(shim, tmp_path):
    # a multifunction package leaves the model's description.output empty; the label's type is the function's
    torch.manual_seed(3)
    classifier = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4),
                                     torch.nn.Softmax(-1)).eval()
    labels = [10, 20, 5, 7]
    single = _convert(classifier, torch.zeros(1, 5), [ct.TensorType(name="feat", shape=(1, 5))],
                      tmp_path / "c.mlpackage",
                      classifier_config=ct.ClassifierConfig(labels))
    image_net, image_pkg = convert_image_model(tmp_path / "img.mlpackage", ct.colorlayout.BGR, 3)
    descriptor = ct.utils.MultiFunctionDescriptor()
    descriptor.add_function(single, src_function_name="main", target_function_name="cls")
    descriptor.add_function(str(image_pkg), src_function_name="main", target_function_name="img")
    descriptor.default_function_name = "img"
    package = str(tmp_path / "both.mlpackage")
    ct.utils.save_multifunction(descriptor, package)

    rng = np.random.default_rng(1)
    model = MLModel(package, function_name="cls")
    for _ in range(3):
        x = rng.standard_normal((1, 5)).astype(np.float32) * 2
        with torch.no_grad():
            want = classifier(torch.from_numpy(x)).numpy()[0]
        out = model.predict({"feat": x})
        assert type(out["classLabel"]) is int and out["classLabel"] == labels[int(np.argmax(want))]
        probabilities = out["classLabel_probs"]
        assert list(probabilities) == labels and all(type(p) is float for p in probabilities.values())
        assert _close([probabilities[label] for label in labels], want)
    assert out == MLModel(single).predict({"feat": x})  # as the one-function package answers
    pixels = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    (got,) = MLModel(package).predict({"image": Image.fromarray(pixels)}).values()  # the default function
    with torch.no_grad():
        want = image_net(torch.from_numpy(pixels[:, :, ::-1].transpose(2, 0, 1)[None] * np.float32(SCALE))).numpy()
    assert _close(got, want)


def test_pictures_of_wide_samples_are_refused_not_clipped(tmp_path, capsys):
    # Pillow clips 16-bit samples to 255 when it converts to "L" / "RGB": a 16-bit PNG used to run as a white picture
    gray_net, gray = convert_image_model(tmp_path / "gray.mlpackage", ct.colorlayout.GRAYSCALE, 1)
    _, rgb = convert_image_model(tmp_path / "rgb.mlpackage", ct.colorlayout.RGB, 3)
    rng = np.random.default_rng(2)
    eight = rng.integers(0, 256, (HEIGHT, WIDTH), dtype=np.uint8)
    Image.fromarray(eight).save(tmp_path / "eight.png")
    Image.fromarray(eight.astype(np.uint16) * 257).save(tmp_path / "sixteen.png")
    assert Image.open(tmp_path / "sixteen.png").mode == "I;16"
    out = tmp_path / "eight.npz"
    assert run_main(execute_main, ["--package", str(gray), "--inputs", str(tmp_path / "eight.png"),
                                   "--output", str(out)]) == 0
    with torch.no_grad():
        want = gray_net(torch.from_numpy(eight[None, None] * np.float32(SCALE))).numpy()
    with np.load(out) as data:
        assert _close(next(iter(data.values())), want)
    capsys.readouterr()
    for package in (gray, rgb):
        refused = tmp_path / "sixteen.npz"
        assert run_main(execute_main, ["--package", str(package), "--inputs", str(tmp_path / "sixteen.png"),
                                       "--output", str(refused)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "sixteen.png" in err and "'I;16'" in err and err.count("\n") == 1
        assert not refused.exists()
    # picture arrays no 8-bit picture can be: uint16 samples, negative or NaN values
    predictor = Predictor(rgb)
    for array in (eight[:, :, None].repeat(3, 2).astype(np.uint16) * 257, np.full((HEIGHT, WIDTH, 3), -1.0),
                  np.full((HEIGHT, WIDTH, 3), np.nan)):
        with pytest.raises(ImageInputError, match="8-bit pixel values 0..255"):
            predictor.predict({"image": array})


class Gather(torch.nn.Module):
    """Several inputs and outputs: float and int32 inputs, a table lookup by an int32 index, int32 outputs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.table = torch.nn.Parameter(torch.randn(10, 3))
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, a, idx, n):  # a (2, 3) float, idx (4,) int32, n (1,) int32
        rows = self.table[idx.long()]
        return self.linear(a) * n.float(), rows.sum(0, keepdim=True), torch.argmax(rows, 1).to(torch.int32), idx * 2 + n


def test_int32_inputs_match_torch_and_refuse_values_their_dtype_cannot_hold(shim, tmp_path):
    inputs = [ct.TensorType(name="a", shape=(2, 3)), ct.TensorType(name="idx", shape=(4,), dtype=np.int32),
              ct.TensorType(name="n", shape=(1,), dtype=np.int32)]
    example = (torch.randn(2, 3), torch.arange(4, dtype=torch.int32), torch.ones(1, dtype=torch.int32))
    package = _convert(Gather().eval(), example, inputs, tmp_path / "g.mlpackage",
                       outputs=[ct.TensorType(name=n) for n in ("h", "rows", "arg", "twice")])
    net, model, rng = Gather().eval(), MLModel(package), np.random.default_rng(3)
    feeds = [{"a": rng.standard_normal((2, 3)).astype(np.float32), "idx": rng.integers(0, 10, 4).astype(np.int32),
              "n": np.array([rng.integers(-3, 4)], np.int32)} for _ in range(3)]
    for feed, out in zip(feeds, model.predict(feeds)):  # a batch: a list of dicts, a list of output dicts back
        with torch.no_grad():
            h, rows, arg, twice = (t.numpy() for t in net(*(torch.from_numpy(v) for v in feed.values())))
        assert _close(out["h"], h) and _close(out["rows"], rows)
        assert out["arg"].dtype == np.int32 and np.array_equal(out["arg"], arg) and np.array_equal(out["twice"], twice)
    # 2**40 used to wrap to 0 in the cast to int32 and run on as index 0
    with pytest.raises(RuntimeError, match=r"input 'idx' holds values in \[0, 1099511627776\]; its int32"):
        model.predict({**feeds[0], "idx": np.array([2 ** 40, 0, 1, 2])})


class TwoStates(torch.nn.Module):
    """Two states of different shapes: a running sum and a window of the last three steps."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("total", torch.zeros(1, 4))
        self.register_buffer("window", torch.zeros(1, 3, 4))

    def forward(self, x, step):  # x (1, 4), step (1,) int32
        h = self.linear(x) * (step.float() + 1.0)
        self.total.add_(h)
        self.window[:, :, :] = torch.cat([self.window[:, 1:, :], h[:, None, :]], dim=1)
        return self.total * 0.5 + self.window.sum(1), self.window.max(1).values


def test_two_states_match_torch_at_every_step_through_predict_and_the_command(shim, tmp_path, capsys):
    states = [ct.StateType(wrapped_type=ct.TensorType(shape=shape), name=name)
              for name, shape in (("total", (1, 4)), ("window", (1, 3, 4)))]
    package = _convert(TwoStates().eval(), (torch.zeros(1, 4), torch.zeros(1, dtype=torch.int32)),
                       [ct.TensorType(name="x", shape=(1, 4)), ct.TensorType(name="step", shape=(1,), dtype=np.int32)],
                       tmp_path / "s.mlpackage", states=states,
                       outputs=[ct.TensorType(name="y"), ct.TensorType(name="peak")])
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((1, 4)).astype(np.float32), "step": np.array([i], np.int32)} for i in range(4)]
    model, reference = MLModel(package), TwoStates().eval()
    state = model.make_state()
    wants = []
    folder = tmp_path / "steps"
    folder.mkdir()
    for number, feed in enumerate(feeds):
        np.savez(folder / f"step{number}.npz", **feed)
        with torch.no_grad():
            wants.append([t.numpy() for t in reference(*(torch.from_numpy(v) for v in feed.values()))])
        out = model.predict(feed, state=state)
        assert _close(out["y"], wants[-1][0]) and _close(out["peak"], wants[-1][1])
        assert _close(state.read_state("total"), reference.total)
        assert _close(state.read_state("window"), reference.window)
    assert run_main(execute_main, ["--package", package, "--inputs", str(folder), "--output", str(tmp_path / "o")]) == 0
    for number, (y, peak) in enumerate(wants):  # one state carried across the command's input sequence
        with np.load(tmp_path / "o" / f"step{number}.npz") as data:
            assert _close(data["y"], y) and _close(data["peak"], peak)
    # a state that is not make_state()'s used to end in an AttributeError
    with pytest.raises(RuntimeError, match=r"state= takes what make_state\(\) returned, not a ndarray"):
        model.predict(feeds[0], state=np.zeros((1, 4), np.float16))
    with pytest.raises(RuntimeError, match="is stateful"):
        model.predict(feeds[0])


class UpdateThenLookUp(torch.nn.Module):
    """Updates its first state, then looks a row up by an int32 index, then updates its second state."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(5, 3))
        self.register_buffer("a", torch.zeros(1, 3))
        self.register_buffer("b", torch.zeros(1, 3))

    def forward(self, x, idx):
        self.a.add_(x)
        self.b.add_(self.table[idx.long()])
        return self.a * 2.0 + self.b


def test_a_run_that_fails_half_way_leaves_the_state_as_it_was(shim, tmp_path):
    package = _convert(UpdateThenLookUp().eval(), (torch.zeros(1, 3), torch.zeros(1, dtype=torch.int32)),
                       [ct.TensorType(name="x", shape=(1, 3)), ct.TensorType(name="idx", shape=(1,), dtype=np.int32)],
                       tmp_path / "h.mlpackage", outputs=[ct.TensorType(name="y")],
                       states=[ct.StateType(wrapped_type=ct.TensorType(shape=(1, 3)), name=n) for n in "ab"])
    model, reference = MLModel(package), UpdateThenLookUp().eval()
    state = model.make_state()
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    with pytest.raises(RuntimeError, match="gather"):  # row 7 of 5: the lookup fails after the first update ran
        model.predict({"x": x, "idx": np.array([7], np.int32)}, state=state)
    assert not state.read_state("a").any() and not state.read_state("b").any()  # used to hold x in `a`
    for idx in (3, 1):  # the sequence goes on as if the failed run had not happened
        feed = {"x": x, "idx": np.array([idx], np.int32)}
        with torch.no_grad():
            want = reference(*(torch.from_numpy(v) for v in feed.values())).numpy()
        assert _close(model.predict(feed, state=state)["y"], want)


def test_an_image_output_is_described_as_an_output_and_written_as_torch_computes_it(tmp_path, capsys):
    net, package = convert_image_model(tmp_path / "o.mlpackage", ct.colorlayout.RGB, 3, scale=1.0, channels_out=3,
                                       outputs=[ct.ImageType(name="picture", color_layout=ct.colorlayout.BGR)])
    assert run_main(execute_main, ["--package", str(package), "--describe"]) == 0
    text = capsys.readouterr().out
    described = text[text.index("outputs:"):]  # the output used to read "pixels enter as they are: 0..255"
    assert "image: BGR" in described and "rounded and clipped to 0..255" in described and "enter" not in described
    pixels = np.random.default_rng(4).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "in.png")
    assert run_main(execute_main, ["--package", str(package), "--inputs", str(tmp_path / "in.png"),
                                   "--output", str(tmp_path / "out.npz")]) == 0
    with torch.no_grad():  # the program's channels are B, G, R; the written picture is RGB
        bgr = net(torch.from_numpy(pixels.transpose(2, 0, 1)[None].astype(np.float32))).numpy()[0]
    want = np.clip(bgr[::-1].transpose(1, 2, 0), 0, 255)
    with np.load(tmp_path / "out.npz") as data:
        assert data["picture"].dtype == np.uint8
        assert np.max(np.abs(data["picture"] - want)) <= 0.5 + 1e-3  # an FP32 program: the rounding to pixels only
