"""Images (ct.ImageType), states (ct.StateType) and batches through the executor's Python API and the execute command:
pictures (files, H x W x C uint8 arrays) give the channels-first tensor's outputs in the right colour order for RGB,
BGR and grayscale models; --describe names the layout, size and baked-in preprocessing; a KV-cache model matches
torch at every step with its state carried by make_state() and across the command's input sequence; many input
files run in one process into a new output directory, or nothing is written."""

from __future__ import annotations

import numpy as np
import pytest

# The imports below need what these lines skip the module without (E402: they follow on purpose).
ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")
from experiments.ane_engineering.core.cli import run_main  # noqa: E402
from experiments.ane_engineering.execute import main as execute_main  # noqa: E402
from experiments.ane_engineering.run.mil import tool  # noqa: E402
from experiments.ane_engineering.run.mil.images import ImageInputError  # noqa: E402
from experiments.ane_engineering.run.mil.predictor import Predictor  # noqa: E402
from experiments.ane_engineering.run.mil.state import StateError  # noqa: E402
from fp16_support import U16  # noqa: E402
from image_state_support import (  # noqa: E402
    BIAS,
    HEIGHT,
    SCALE,
    WIDTH,
    KVCache,
    convert_image_model,
    convert_kv_model,
    kv_step_inputs,
)

pytestmark = pytest.mark.slow  # every test here converts with coremltools

U32 = 2.0 ** -24  # float32 unit roundoff


def _fp32_bound(want) -> float:
    """FP32 programs of a 1x1 conv over at most 3 channels: a handful of float32 roundings at the output's scale (16
    of them allowed), far below what a swapped channel order changes (checked where it matters)."""
    return 16 * U32 * (float(np.abs(want).max()) + 1.0)


@pytest.fixture(scope="module")
def image_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    return {layout: convert_image_model(root / f"{layout}.mlpackage", getattr(ct.colorlayout, layout), 3, bias=BIAS)
            for layout in ("RGB", "BGR")}


@pytest.fixture(scope="module")
def picture():
    return np.random.default_rng(0).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)  # H x W x RGB


def _torch(net, tensor) -> np.ndarray:
    with torch.no_grad():
        return net(torch.from_numpy(np.ascontiguousarray(tensor, dtype=np.float32))).numpy()


def _preprocessed(chw):  # what the graph's baked-in mul / add compute: scale * pixel + bias, per channel
    return chw * np.float32(SCALE) + np.asarray(BIAS, np.float32).reshape(1, 3, 1, 1)


@pytest.mark.parametrize("layout", ["RGB", "BGR"])
def test_pictures_give_the_channels_first_outputs_in_the_model_colour_order(image_models, picture, layout, tmp_path):
    net, pkg = image_models[layout]
    model = Predictor(pkg)
    rgb_chw = picture.transpose(2, 0, 1)[None].astype(np.float32)  # (1, 3, H, W) R, G, B
    model_chw = rgb_chw[:, ::-1] if layout == "BGR" else rgb_chw  # the tensor in the model's channel order
    Image.fromarray(picture).save(tmp_path / "picture.png")
    from_array = model.predict({"image": picture})["var_13"]
    from_file = model.predict({"image": tmp_path / "picture.png"})["var_13"]
    from_pil = model.predict({"image": Image.fromarray(picture)})["var_13"]
    from_tensor = model.predict({"image": model_chw})["var_13"]
    np.testing.assert_array_equal(from_array, from_tensor)
    np.testing.assert_array_equal(from_file, from_tensor)
    np.testing.assert_array_equal(from_pil, from_tensor)
    want = _torch(net, _preprocessed(model_chw))
    assert np.max(np.abs(from_array - want)) <= _fp32_bound(want)
    wrong = _torch(net, _preprocessed(model_chw[:, ::-1]))  # the other colour order: the defect this guards against
    assert np.max(np.abs(wrong - want)) > 1000 * _fp32_bound(want)


def test_describe_names_layout_size_and_preprocessing(image_models, tmp_path, capsys):
    _, pkg = image_models["BGR"]
    info = tool.describe_package(pkg)
    image = info["inputs"][0]["image"]
    assert image["layout"] == "BGR" and image["size"] == "fixed" and image["sizes"] == f"{HEIGHT}x{WIDTH}"
    np.testing.assert_allclose(image["preprocessing"]["scale"], [SCALE], rtol=1e-6)
    np.testing.assert_allclose(image["preprocessing"]["bias"], BIAS, rtol=1e-6)
    assert run_main(execute_main, ["--package", str(pkg), "--describe"]) == 0
    text = capsys.readouterr().out
    assert f"image: BGR, fixed size {HEIGHT}x{WIDTH} (height x width); the graph computes 0.00392157 * pixel + " \
           "[0.1, -0.2, 0.3]" in text


def test_grayscale_and_enumerated_sizes(tmp_path):
    net, pkg = convert_image_model(tmp_path / "gray.mlpackage", ct.colorlayout.GRAYSCALE, 1, scale=2.0,
                                   shape=ct.EnumeratedShapes(shapes=[(1, 1, HEIGHT, WIDTH), (1, 1, 6, 3)]))
    model = Predictor(pkg)
    image = model.image_inputs["image"]
    assert image.layout == "GRAYSCALE" and image.size_kind == "enumerated" and image.sizes == ((HEIGHT, WIDTH), (6, 3))
    gray = np.random.default_rng(2).integers(0, 256, (6, 3), dtype=np.uint8)
    Image.fromarray(gray).save(tmp_path / "gray.png")
    (name,) = model.output_names
    want = _torch(net, gray[None, None].astype(np.float32) * 2.0)
    for given in (gray, tmp_path / "gray.png", gray[:, :, None]):
        assert np.max(np.abs(model.predict({"image": given})[name] - want)) <= _fp32_bound(want)
    Image.fromarray(np.stack([gray] * 3, axis=-1)).save(tmp_path / "colour.png")  # converted to L, as Core ML takes it
    np.testing.assert_allclose(model.predict({"image": tmp_path / "colour.png"})[name], want, atol=_fp32_bound(want))
    with pytest.raises(ImageInputError, match=r"a 5x5 picture; the input takes one of 4x5, 6x3"):
        model.predict({"image": np.zeros((5, 5), np.uint8)})
    with pytest.raises(ImageInputError, match="3 channel"):
        model.predict({"image": np.zeros((6, 3, 3), np.uint8)})


def test_fp16_grayscale_input_and_image_output(tmp_path):
    net, pkg = convert_image_model(tmp_path / "g16.mlpackage", ct.colorlayout.GRAYSCALE_FLOAT16, 1,
                                   precision=ct.precision.FLOAT16, channels_out=1)
    model = Predictor(pkg)
    assert model.image_inputs["image"].layout == "GRAYSCALE_FLOAT16"
    pixels = np.random.default_rng(3).uniform(0, 1, (HEIGHT, WIDTH)).astype(np.float32)
    (name,) = model.output_names
    got = model.predict({"image": Image.fromarray(pixels, mode="F")})[name]  # mode F, as coremltools takes it
    np.testing.assert_array_equal(got, model.predict({"image": pixels[None, None]})[name])
    want = _torch(net, pixels[None, None].astype(np.float16).astype(np.float32))
    assert np.max(np.abs(got.astype(np.float64) - want)) <= 8 * U16 * (np.abs(want).max() + 1)

    net, pkg = convert_image_model(tmp_path / "out.mlpackage", ct.colorlayout.RGB, 3, scale=1.0, channels_out=3,
                                   outputs=[ct.ImageType(name="picture", color_layout=ct.colorlayout.BGR)])
    model = Predictor(pkg)
    assert tool.describe_package(pkg)["outputs"][0]["image"]["layout"] == "BGR"
    picture = np.random.default_rng(4).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    tensor = _torch(net, picture.transpose(2, 0, 1)[None])[0]  # (3, H, W) in the output's B, G, R order
    want = np.clip(np.rint(tensor[::-1].transpose(1, 2, 0)), 0, 255).astype(np.uint8)  # H x W x RGB
    got = model.predict({"image": picture})["picture"]
    assert got.dtype == np.uint8 and got.shape == (HEIGHT, WIDTH, 3)
    assert np.max(np.abs(got.astype(int) - want)) <= 1  # rounding of values within FP32 noise of a half
    pil = model.predict({"image": picture}, pictures="pil")["picture"]
    assert pil.mode == "RGB" and pil.size == (WIDTH, HEIGHT)
    np.testing.assert_array_equal(np.asarray(pil), got)


@pytest.fixture(scope="module")
def kv_model(tmp_path_factory):
    return convert_kv_model(tmp_path_factory.mktemp("kv") / "kv.mlpackage")


def _kv_bound(want) -> float:
    # FP16 program: fp16 weights, activations and cache; a few fp16 roundings of values of size |want| per step
    return 16 * U16 * (np.abs(want).max() + 1.0)


def test_kv_cache_matches_torch_at_every_step(kv_model):
    net, pkg = kv_model
    reference = KVCache().eval()
    reference.load_state_dict(net.state_dict())  # fresh zero caches, the same weights
    model = Predictor(pkg)
    assert [s.name for s in model.states] == ["k_cache", "v_cache"]
    state = model.make_state()
    rng = np.random.default_rng(1)
    steps = [kv_step_inputs(step, rng) for step in range(KVCache.CACHE)]
    for step, feeds in enumerate(steps):
        got = model.predict(feeds, state=state)["attended"].astype(np.float64)
        with torch.no_grad():
            want = reference(*[torch.from_numpy(v) for v in feeds.values()]).numpy()
        assert np.max(np.abs(got - want)) <= _kv_bound(want), step
    np.testing.assert_allclose(state.read("k_cache"), reference.k_cache.numpy(), atol=_kv_bound(reference.k_cache))
    # the defect the state guards against: the last step run on a fresh state forgets the earlier keys and values
    forgot = model.predict(steps[-1], state=model.make_state())["attended"].astype(np.float64)
    assert np.max(np.abs(forgot - want)) > 10 * _kv_bound(want)
    with pytest.raises(StateError, match="stateful"):
        model.predict(steps[0])


def test_the_command_carries_state_across_its_input_sequence(kv_model, tmp_path, capsys):
    net, pkg = kv_model
    assert run_main(execute_main, ["--package", str(pkg), "--describe"]) == 0
    assert "states (carried across runs" in capsys.readouterr().out
    reference = KVCache().eval()
    reference.load_state_dict(net.state_dict())
    rng = np.random.default_rng(5)
    inputs = tmp_path / "steps"
    inputs.mkdir()
    wants = []
    for step in range(4):
        feeds = kv_step_inputs(step, rng)
        np.savez(inputs / f"step{step}.npz", **feeds)
        with torch.no_grad():
            wants.append(reference(*[torch.from_numpy(v) for v in feeds.values()]).numpy())
    out = tmp_path / "out"
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(inputs), "--output", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [f"step{s}.npz" for s in range(4)]
    for step, want in enumerate(wants):
        with np.load(out / f"step{step}.npz", allow_pickle=False) as data:
            assert np.max(np.abs(data["attended"].astype(np.float64) - want)) <= _kv_bound(want), step
    # the same files named one by one run in the order given; a refused output leaves nothing
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", *[str(inputs / f"step{s}.npz") for s in range(4)],
                                   "--output", str(out)]) == 2  # exists
    again = tmp_path / "again"
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", *[str(inputs / f"step{s}.npz") for s in range(4)],
                                   "--output", str(again)]) == 0
    for step in range(4):
        with np.load(again / f"step{step}.npz") as a, np.load(out / f"step{step}.npz") as b:
            np.testing.assert_array_equal(a["attended"], b["attended"])


def test_batch_of_pictures_and_refusals(image_models, picture, tmp_path, capsys):
    net, pkg = image_models["BGR"]
    folder = tmp_path / "pictures"
    folder.mkdir()
    pictures = [picture, picture[::-1].copy(), 255 - picture]
    for number, array in enumerate(pictures):
        Image.fromarray(array).save(folder / f"p{number}.png")
    np.savez(folder / "p3.npz", image=pictures[0])  # an .npz holding the H x W x 3 uint8 picture
    out = tmp_path / "out"
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(folder), "--output", str(out)]) == 0
    for number, array in enumerate([*pictures, pictures[0]]):
        want = _torch(net, _preprocessed(array.transpose(2, 0, 1)[None, ::-1].astype(np.float32)))
        with np.load(out / f"p{number}.npz") as data:
            assert np.max(np.abs(data["var_13"] - want)) <= _fp32_bound(want)
    # one picture file and an .npz output
    single = tmp_path / "single.npz"
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(folder / "p0.png"),
                                   "--output", str(single)]) == 0
    capsys.readouterr()
    # a batch that meets a bad file publishes nothing
    Image.fromarray(np.zeros((3, 3, 3), np.uint8)).save(folder / "p9.png")
    failed = tmp_path / "failed"
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(folder), "--output", str(failed)]) == 2
    assert "p9.png: a 3x3 picture" in capsys.readouterr().err
    assert not failed.exists() and not list(tmp_path.glob(".failed*"))
    # two inputs with one stem; an .npz output for several inputs
    np.savez(tmp_path / "p0.npz", image=picture)
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(folder / "p0.png"), str(tmp_path / "p0.npz"),
                                   "--output", str(tmp_path / "clash")]) == 2
    assert "would both write p0.npz" in capsys.readouterr().err
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(folder), "--output",
                                   str(tmp_path / "x.npz")]) == 2


def test_a_state_described_with_another_shape_is_refused(kv_model, tmp_path):
    import shutil

    from experiments.ane_engineering.package.mil.errors import ProgramLoadError

    _, pkg = kv_model
    damaged = tmp_path / "damaged.mlpackage"
    shutil.copytree(pkg, damaged)
    spec_file = damaged / "Data" / "com.apple.CoreML" / "model.mlmodel"
    spec = ct.proto.Model_pb2.Model()
    spec.ParseFromString(spec_file.read_bytes())
    spec.description.state[0].type.stateType.arrayType.shape[1] += 1
    spec_file.write_bytes(spec.SerializeToString())
    with pytest.raises(ProgramLoadError, match=r"state 'k_cache' has shape \[1, 7, 8\] in the model description"):
        Predictor(damaged)


def test_a_models_own_leading_mul_is_not_taken_for_preprocessing(tmp_path):
    class Doubled(torch.nn.Module):
        def forward(self, x):
            return x * 2.0 + 1.0

    traced = torch.jit.trace(Doubled().eval(), torch.rand(1, 3, HEIGHT, WIDTH))
    model = ct.convert(traced, inputs=[ct.ImageType(name="image", shape=(1, 3, HEIGHT, WIDTH))], convert_to="mlprogram",
                       minimum_deployment_target=ct.target.iOS16, skip_model_load=True)
    model.save(str(tmp_path / "doubled.mlpackage"))
    image = tool.describe_package(tmp_path / "doubled.mlpackage")["inputs"][0]["image"]
    assert image["preprocessing"] == {"scale": [], "bias": []}
    assert tool.image_preprocessing(image) == "no scale or bias in the graph (pixels enter as they are: 0..255)"
