"""Models as coremltools users convert them, for the image, state and MLModel.predict tests: tiny torch modules with
ct.ImageType inputs (RGB, BGR, grayscale, FP16 grayscale, enumerated sizes) or outputs, a KV-cache module with
ct.StateType buffers, and a classifier. Every function here converts: a test that calls one is marked slow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

HEIGHT, WIDTH = 4, 5
SCALE = 1 / 255.0
BIAS = [0.1, -0.2, 0.3]


class Pointwise(torch.nn.Module):
    """A 1x1 conv mixing the channels: each output channel weighs the input channels differently, so feeding them
    in the wrong order changes every output."""

    def __init__(self, channels_in: int, channels_out: int, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = torch.nn.Conv2d(channels_in, channels_out, 1)

    def forward(self, x):
        return self.conv(x)


def convert_image_model(path: Path, layout, channels: int, *, scale=SCALE, bias=None, shape=None, outputs=None,
                        target=None, precision=None, channels_out: int = 2):
    """(torch module, saved package) of Pointwise with an ImageType input of `layout`."""
    net = Pointwise(channels, channels_out).eval()
    traced = torch.jit.trace(net, torch.rand(1, channels, HEIGHT, WIDTH))
    shape = shape if shape is not None else (1, channels, HEIGHT, WIDTH)
    kwargs = {"scale": scale} if layout != ct.colorlayout.GRAYSCALE_FLOAT16 else {}
    if bias is not None:
        kwargs["bias"] = bias
    model = ct.convert(traced, inputs=[ct.ImageType(name="image", shape=shape, color_layout=layout, **kwargs)],
                       outputs=outputs, convert_to="mlprogram",
                       compute_precision=precision or ct.precision.FLOAT32,
                       minimum_deployment_target=target or ct.target.iOS16, skip_model_load=True)
    model.save(str(path))
    return net, Path(path)


class KVCache(torch.nn.Module):
    """One attention head over a key/value cache of CACHE positions, as an LLM export holds it: each step writes its
    key and value at the position `onehot` selects and attends over the positions `mask` leaves open."""

    CACHE, DIM = 6, 8

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(self.DIM, self.DIM)
        self.k = torch.nn.Linear(self.DIM, self.DIM)
        self.v = torch.nn.Linear(self.DIM, self.DIM)
        self.register_buffer("k_cache", torch.zeros(1, self.CACHE, self.DIM))
        self.register_buffer("v_cache", torch.zeros(1, self.CACHE, self.DIM))

    def forward(self, x, onehot, mask):  # x (1, 1, D), onehot (1, CACHE, 1), mask (1, 1, CACHE) additive
        keep = 1.0 - onehot
        self.k_cache[:, :, :] = self.k_cache * keep + onehot * self.k(x)
        self.v_cache[:, :, :] = self.v_cache * keep + onehot * self.v(x)
        scores = self.q(x) @ self.k_cache.transpose(1, 2) / self.DIM ** 0.5 + mask  # (1, 1, CACHE)
        return torch.softmax(scores, dim=-1) @ self.v_cache  # (1, 1, D)


def kv_step_inputs(step: int, rng) -> dict[str, np.ndarray]:
    onehot = np.zeros((1, KVCache.CACHE, 1), np.float32)
    onehot[0, step, 0] = 1
    mask = np.full((1, 1, KVCache.CACHE), -1e4, np.float32)
    mask[..., : step + 1] = 0
    return {"x": rng.standard_normal((1, 1, KVCache.DIM)).astype(np.float32), "onehot": onehot, "mask": mask}


def convert_kv_model(path: Path):
    """(a fresh KVCache for the torch reference, saved package) converted with ct.StateType at iOS18 (FP16)."""
    net = KVCache().eval()
    example = kv_step_inputs(0, np.random.default_rng(0))
    traced = torch.jit.trace(KVCache().eval(), tuple(torch.from_numpy(v) for v in example.values()))
    state_shape = (1, KVCache.CACHE, KVCache.DIM)
    model = ct.convert(traced, inputs=[ct.TensorType(name=n, shape=v.shape) for n, v in example.items()],
                       outputs=[ct.TensorType(name="attended")],
                       states=[ct.StateType(wrapped_type=ct.TensorType(shape=state_shape), name=n)
                               for n in ("k_cache", "v_cache")],
                       convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18, skip_model_load=True)
    model.save(str(path))
    return net, Path(path)


def convert_classifier(path: Path, labels=("cat", "dog", "bird")):
    """(torch module, saved package) of a softmax MLP with a ct.ClassifierConfig."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, len(labels)),
                              torch.nn.Softmax(dim=-1)).eval()
    traced = torch.jit.trace(net, torch.zeros(1, 4))
    model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(1, 4))], convert_to="mlprogram",
                       classifier_config=ct.ClassifierConfig(list(labels)),
                       minimum_deployment_target=ct.target.iOS16, skip_model_load=True)
    model.save(str(path))
    return net, Path(path)
