"""classify (ops/classifier.py): a torch classifier converted with a ClassifierConfig, run by `execute`; the label and
the probability table come out as arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from executor_ops_support import U16, ct
from executor_packages import _mlp, _npz, _save
from experiments.ane_engineering.core.cli import run_main
from experiments.ane_engineering.execute import main as execute_main

pytestmark = pytest.mark.slow  # every test here converts


@pytest.fixture(scope="module")
def classifier_pkg(tmp_path_factory):
    net = torch.nn.Sequential(_mlp(), torch.nn.Softmax(dim=-1)).eval()
    traced = torch.jit.trace(net, torch.zeros(1, 4))
    model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(1, 4))], convert_to="mlprogram",
                       classifier_config=ct.ClassifierConfig(["cat", "dog", "bird"]),
                       minimum_deployment_target=ct.target.iOS16)
    return net, _save(model, tmp_path_factory.mktemp("cls") / "cls.mlpackage")


def test_classifier_outputs_label_and_probabilities_as_arrays(classifier_pkg, tmp_path):
    net, pkg = classifier_pkg
    x = np.array([[0.5, -1.0, 2.0, 0.1]], np.float32)
    out = tmp_path / "cls.npz"
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(_npz(tmp_path / "in.npz", x=x)),
                                   "--output", str(out)]) == 0
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()[0]
    with np.load(out, allow_pickle=False) as data:
        label, table = data["classLabel"], data["classLabel_probs"]
    assert label.shape == () and str(label) == ["cat", "dog", "bird"][int(np.argmax(want))]
    assert table["class"].tolist() == ["cat", "dog", "bird"]
    np.testing.assert_allclose(table["probability"], want, atol=8 * U16)
