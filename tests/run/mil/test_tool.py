"""The executor as a tool of its own: packages the project did not export (coremltools.convert of a torch
MLP, a multifunction package), the command's --describe and --inputs/--output, every unsupported op named in one
error, inputs refused against RangeDim bounds before running, and a failing op named with its inputs. A classifier
and programs with cond/while_loop are run with their op families (tests/run/mil/ops/test_classifier.py,
test_control_flow.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

# The imports below need what these lines skip the module without (E402: they follow on purpose).
ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
from coremltools.converters.mil import Builder as mb  # noqa: E402

from executor_packages import _convert_program, _mlp, _npz, _save  # noqa: E402
from experiments.ane_engineering.core.cli import run_main  # noqa: E402
from experiments.ane_engineering.execute import main as execute_main  # noqa: E402
from experiments.ane_engineering.run.mil import tool  # noqa: E402
from experiments.ane_engineering.run.mil.executor import ExecutionError, InputError, MILExecutor  # noqa: E402
from experiments.ane_engineering.run.mil.registry import OPS, UnsupportedOpError  # noqa: E402
from fp16_support import U16  # noqa: E402

pytestmark = pytest.mark.slow  # every test here converts, exports or starts Python


@pytest.fixture(scope="module")
def mlp_pkg(tmp_path_factory):
    """A torch MLP converted the ordinary way, batch a RangeDim(1, 4): nothing of ours in it."""
    net = _mlp()
    traced = torch.jit.trace(net, torch.zeros(2, 4))
    model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(ct.RangeDim(1, 4, default=2), 4))],
                       convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17)
    return net, _save(model, tmp_path_factory.mktemp("mlp") / "mlp.mlpackage")


# ----------------------------------------------------------------------------------------------- the command

def test_describe_and_run_a_package_the_project_did_not_export(mlp_pkg, tmp_path, capsys):
    net, pkg = mlp_pkg
    assert run_main(execute_main, ["--package", str(pkg), "--describe"]) == 0
    text = capsys.readouterr().out
    assert "x: fp16 ['?', 4], dims in [1, 4] x [4, 4]" in text and "every op is supported" in text
    assert "opset: iOS17" in text and "linear 2" in text

    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    out = tmp_path / "out.npz"
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(_npz(tmp_path / "in.npz", x=x)),
                                   "--output", str(out)]) == 0
    with np.load(out, allow_pickle=False) as data:
        (name,) = data.files
        got = data[name]
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy().astype(np.float64)
    # fp16 weights and activations, float32 accumulation: a few fp16 roundings of values of size |h| per layer
    scale = np.abs(want).max() + 1.0
    assert np.max(np.abs(got - want)) <= 16 * U16 * scale, np.max(np.abs(got - want))
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(tmp_path / "in.npz"),
                                   "--output", str(out)]) == 2


def test_command_refusals(mlp_pkg, tmp_path):
    _, pkg = mlp_pkg
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object))
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(pickled),
                                   "--output", str(tmp_path / "o.npz")]) == 2
    assert not (tmp_path / "o.npz").exists()
    good = _npz(tmp_path / "in.npz", x=np.zeros((2, 4), np.float32))
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(good),
                                   "--output", str(tmp_path / "o.txt")]) == 2
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(good)]) == 2


def test_multifunction_package_runs_the_named_function(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS18)
    def relu_prog(x):
        return mb.relu(x=x, name="y")

    @mb.program(input_specs=[mb.TensorSpec(shape=(4,))], opset_version=ct.target.iOS18)
    def double_prog(x):
        return mb.mul(x=x, y=2.0, name="y")

    desc = ct.utils.MultiFunctionDescriptor()
    desc.add_function(str(_convert_program(relu_prog, tmp_path / "a.mlpackage", ct.target.iOS18)), "main", "relu_fn")
    desc.add_function(str(_convert_program(double_prog, tmp_path / "b.mlpackage", ct.target.iOS18)), "main",
                      "double_fn")
    desc.default_function_name = "double_fn"
    ct.utils.save_multifunction(desc, str(tmp_path / "mf.mlpackage"))
    pkg = tmp_path / "mf.mlpackage"

    info = tool.describe_package(pkg)
    assert info["function"] == "double_fn" and info["functions"] == ["double_fn", "relu_fn"]
    x = np.array([[-1, 2, 3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(tool.run_package(pkg, {"x": x}, function_name="relu_fn")["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(tool.run_package(pkg, {"x": np.arange(4, dtype=np.float32)})["y"], [0, 2, 4, 6])
    with pytest.raises(InputError, match=r"shape \(2, 3\).*\(4,\)"):
        tool.run_package(pkg, {"x": x})  # the default function takes (4,)


# --------------------------------------------------------------------------------------------- errors a user can act on

def test_every_unsupported_op_is_named_at_once(mlp_pkg):
    _, pkg = mlp_pkg
    registry = {t: d for t, d in OPS.items() if t != "linear"}
    registry["relu"] = dataclasses.replace(OPS["relu"], opsets=("iOS15", "iOS16"))  # not at the program's iOS17
    with pytest.raises(UnsupportedOpError) as err:
        MILExecutor(pkg, registry=registry)
    msg = str(err.value)
    assert "2 op type(s)" in msg
    assert "unsupported MIL op 'linear' (no handler): 2 ops, first op #" in msg
    assert "unsupported MIL op 'relu' (implemented for iOS15, iOS16, the program is iOS17): 1 op, first op #" in msg


def test_command_names_every_unsupported_op(mlp_pkg, tmp_path, monkeypatch, capsys):
    _, pkg = mlp_pkg
    monkeypatch.delitem(OPS, "linear")
    monkeypatch.delitem(OPS, "relu")
    assert run_main(execute_main, ["--package", str(pkg), "--describe"]) == 1
    text = capsys.readouterr().out
    assert "NOT supported (2 op types)" in text and "linear: 2 op(s)" in text and "relu: 1 op(s)" in text
    inputs = _npz(tmp_path / "in.npz", x=np.zeros((2, 4), np.float32))
    assert run_main(execute_main, ["--package", str(pkg), "--inputs", str(inputs),
                                   "--output", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'linear'" in err and "'relu'" in err  # one line naming both
    assert not (tmp_path / "o.npz").exists()


def test_inputs_outside_the_range_are_refused_before_running(mlp_pkg):
    _, pkg = mlp_pkg
    ex = MILExecutor(pkg)
    ran = []
    for rows in (1, 4):
        ex.run({"x": np.zeros((rows, 4), np.float32)}, observe=lambda *a: ran.append(a[0]))
    assert ran
    ran.clear()
    for shape in ((5, 4), (0, 4), (2, 5), (2, 4, 1)):
        with pytest.raises(InputError, match=r"the program expects \(1\.\.4, 4\)"):
            ex.run({"x": np.zeros(shape, np.float32)}, observe=lambda *a: ran.append(a[0]))
    assert not ran  # refused before any op ran


def test_a_failing_op_is_named_with_its_inputs(mlp_pkg, monkeypatch):
    _, pkg = mlp_pkg

    def broken(node, args, num):
        raise ValueError("boom")

    monkeypatch.setitem(OPS, "relu", dataclasses.replace(OPS["relu"], handler=broken))
    with pytest.raises(ExecutionError,
                       match=r"of type 'relu' in function main failed on inputs \(x=float16\(3, 16\)\): "
                             r"ValueError: boom"):
        MILExecutor(pkg).run({"x": np.zeros((3, 4), np.float32)})
