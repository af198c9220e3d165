"""The `ane` executor mode: each published Neural Engine cliff (run/mil/ane_cliffs.json) fires at the FP16 value just
above its threshold and not at the one just below, per chip family, on hand-built MIL programs (builder only, no
conversion); the run records the first op where a cliff fired; the headroom report names the tightest op."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import build_program, loaded, mb, spec
from experiments.ane_engineering.run.mil.cliffs import (
    FP16_MAX,
    MATMUL_CLASS,
    REDUCE_SUM,
    WIDTH_OFFSET_SLICE,
    AneCliffs,
    CliffError,
    load_cliffs,
)
from experiments.ane_engineering.run.mil.executor import MILExecutor
from experiments.ane_engineering.run.mil.headroom import measure_headroom

CLIFFS = {c["op_class"]: c for c in load_cliffs()["cliffs"].values()}
MATMUL_CLIFF = CLIFFS[MATMUL_CLASS]["value"]
SLICE_CLIFF = CLIFFS[WIDTH_OFFSET_SLICE]["value"]
REDUCE_CLIFF = CLIFFS[REDUCE_SUM]["value"]


def next_up16(v: float) -> float:
    return float(np.nextafter(np.float16(v), np.float16(np.inf)))


def execute(prog, inputs, mode="ane", family="pre-a16"):
    ex = MILExecutor(loaded(prog, "iOS17"), mode=mode, threads=1, ane_family=family)
    out = ex.run(dict(inputs))
    return [out[n] for n in ex.output_names], ex.last_run


def test_published_values_are_the_fp16_boundaries_the_source_derives():
    # the source: 32752 = fp16_max / 2, 4094 = 65504 / 16, FP16 holds every integer through 2048
    assert MATMUL_CLIFF == FP16_MAX / 2 and SLICE_CLIFF == FP16_MAX / 16
    assert float(np.float16(REDUCE_CLIFF + 1)) != REDUCE_CLIFF + 1 and float(np.float16(REDUCE_CLIFF)) == REDUCE_CLIFF
    for v in (MATMUL_CLIFF, SLICE_CLIFF):  # each is an FP16 value; the next FP16 value is where a cliff fires
        assert float(np.float16(v)) == v
    assert AneCliffs("a16").by_class.keys() == {MATMUL_CLASS, REDUCE_SUM}
    with pytest.raises(CliffError, match="unknown Neural Engine family"):
        AneCliffs("a15")


def _contraction(kind):
    w = np.ones((4, 2), np.float16)
    if kind == "matmul":
        return lambda x: mb.matmul(x=x, y=w, name="product")
    if kind == "linear":
        return lambda x: mb.linear(x=x, weight=w.T.copy(), name="product")
    # conv: x (1, 4) seen as (1, Cin=4, 1); a 1x1 conv with Cout=2
    return lambda x: mb.squeeze(x=mb.conv(x=mb.expand_dims(x=x, axes=[-1]), weight=w.T.copy()[:, :, None],
                                          name="product"), axes=[-1])


@pytest.mark.parametrize("family", ["pre-a16", "a16"])
@pytest.mark.parametrize("kind", ["matmul", "linear", "conv"])
def test_matmul_cliff_fires_just_above_and_not_at_its_value(kind, family):
    prog = build_program(_contraction(kind), {"x": spec(np.zeros((1, 4), np.float16))})
    below = np.full((1, 4), MATMUL_CLIFF / 4, np.float16)            # output exactly the cliff value
    above = np.full((1, 4), next_up16(MATMUL_CLIFF) / 4, np.float16)  # the next FP16 output value
    (out,), run = execute(prog, {"x": below}, family=family)
    assert np.all(out == MATMUL_CLIFF) and run["ane_cliff"] is None
    (out,), run = execute(prog, {"x": above}, family=family)
    assert np.all(np.isposinf(out))
    first = run["ane_cliff"]
    assert first["op"] == "product" and first["cliff"] == "matmul_output" and first["value"] == next_up16(MATMUL_CLIFF)
    (out,), _ = execute(prog, {"x": -above}, family=family)
    assert np.all(np.isneginf(out))  # the sign is kept
    (out,), run = execute(prog, {"x": above}, mode="fp32-accumulate")  # IEEE FP16 holds it
    assert np.all(out == next_up16(MATMUL_CLIFF)) and "ane_cliff" not in run


def _slices():
    return {
        "slice_by_index": lambda x, b: mb.slice_by_index(x=x, begin=[0, 0, 0, b], end=[1, 1, 1, 8], name="cut"),
        "slice_by_size": lambda x, b: mb.slice_by_size(x=x, begin=[0, 0, 0, b], size=[1, 1, 1, -1], name="cut"),
        "crop": lambda x, b: mb.crop(x=x, crop_height=[0, 0], crop_width=[b, 0], name="cut"),
        "split": lambda x, b: _last(mb.split(x=x, split_sizes=[4, 4] if b else [8], axis=-1, name="cut")),
    }


def _last(outputs):
    return outputs[-1] if isinstance(outputs, (list, tuple)) else outputs


@pytest.mark.parametrize("op", ["slice_by_index", "slice_by_size", "crop", "split"])
def test_width_offset_slice_cliff_fires_on_pre_a16_only(op):
    build = _slices()[op]
    x = np.zeros((1, 1, 1, 8), np.float16)
    for begin in (4, 0):
        prog = build_program(lambda v: build(v, begin), {"x": spec(x)})
        for value, fires in ((SLICE_CLIFF, False), (next_up16(SLICE_CLIFF), True)):
            x[..., 4] = value
            x[..., 5] = -value
            (out,), run = execute(prog, {"x": x})
            kept = out[..., 4 - begin:6 - begin]
            if fires and begin:
                assert np.isposinf(kept[..., 0]).all() and np.isneginf(kept[..., 1]).all()
                assert run["ane_cliff"]["cliff"] == "width_offset_slice" and run["ane_cliff"]["type"] == op
            else:  # below the cliff, or a slice beginning at 0 on the last axis
                assert (kept[..., 0] == value).all() and run["ane_cliff"] is None
            (out,), run = execute(prog, {"x": x}, family="a16")  # absent on A16 / M5
            assert (out[..., 4 - begin] == value).all() and run["ane_cliff"] is None


def test_a_slice_with_its_offset_on_another_axis_is_not_a_width_offset_slice():
    x = np.zeros((1, 1, 4, 8), np.float16)
    x[..., 2:, :] = next_up16(SLICE_CLIFF)
    prog = build_program(lambda v: mb.slice_by_index(x=v, begin=[0, 0, 2, 0], end=[1, 1, 4, 8]), {"x": spec(x)})
    (out,), run = execute(prog, {"x": x})
    assert np.isfinite(out).all() and run["ane_cliff"] is None


@pytest.mark.parametrize("family", ["pre-a16", "a16"])
def test_integer_reduce_sum_cliff(family):
    def build(v):
        return mb.reduce_sum(x=mb.reshape(x=v, shape=[1, 8]), axes=[1], name="total")

    for dtype in (np.float16, np.float32):
        prog = build_program(build, {"x": spec(np.zeros(8, dtype))})
        at = np.full(8, REDUCE_CLIFF / 8, dtype)  # total exactly the cliff value
        above = at.copy()
        above[0] += 1  # total one above: not an FP16 value
        (out,), run = execute(prog, {"x": at}, family=family)
        assert float(out[0]) == REDUCE_CLIFF and run["ane_cliff"] is None
        (out,), run = execute(prog, {"x": above}, family=family)
        assert float(out[0]) == float(np.float16(REDUCE_CLIFF + 1))  # on the FP16 grid
        assert run["ane_cliff"]["op"] == "total" and run["ane_cliff"]["value"] == REDUCE_CLIFF + 1
        (out,), _ = execute(prog, {"x": above}, mode="fp32-accumulate")
        assert float(out[0]) == (REDUCE_CLIFF + 1 if dtype == np.float32 else float(np.float16(REDUCE_CLIFF + 1)))


def test_the_first_cliff_is_recorded_and_later_ones_counted():
    w = np.ones((4, 8), np.float16)

    def build(x):
        y = mb.matmul(x=x, y=w, name="first_product")
        return mb.slice_by_index(x=mb.expand_dims(x=y, axes=[0, 1]), begin=[0, 0, 0, 1], end=[1, 1, 1, 8], name="cut")

    prog = build_program(build, {"x": spec(np.zeros((1, 4), np.float16))})
    (out,), run = execute(prog, {"x": np.full((1, 4), 1100, np.float16)})  # 4400: past the slice cliff only
    assert run["ane_cliff"]["op"] == "cut" and run["ane_cliffs_fired"] == {"width_offset_slice": 7}
    (out,), run = execute(prog, {"x": np.full((1, 4), 9000, np.float16)})
    assert run["ane_cliff"]["op"] == "first_product" and run["ane_cliffs_fired"]["matmul_output"] == 8


def test_headroom_names_the_tightest_op_and_its_cliff():
    w = np.ones((4, 8), np.float16)

    def build(x):
        y = mb.matmul(x=x, y=w, name="product")          # 4 * x: faces the matmul cliff
        z = mb.mul(x=x, y=np.float16(6), name="scaled")  # 6 * x: faces the FP16 limit only
        cut = mb.slice_by_index(x=mb.expand_dims(x=y, axes=[0, 1]), begin=[0, 0, 0, 1], end=[1, 1, 1, 8], name="cut")
        return cut, z

    prog = build_program(build, {"x": spec(np.zeros((1, 4), np.float16))})
    inputs = [{"x": np.full((1, 4), 100, np.float16)}, {"x": np.full((1, 4), -200, np.float16)}]
    pre = measure_headroom(loaded(prog, "iOS17"), inputs, "pre-a16")
    assert pre.inputs_measured == 2
    assert pre.minimum.op == "cut" and pre.minimum.cliff == "width_offset_slice"
    assert pre.minimum.max_abs == 800 and pre.minimum.headroom == pytest.approx(SLICE_CLIFF / 800)
    by_op = {e.op: e for e in pre.ops}
    assert by_op["product"].cliff == "matmul_output" and by_op["product"].headroom == pytest.approx(MATMUL_CLIFF / 800)
    assert by_op["scaled"].cliff == "fp16-max" and by_op["scaled"].headroom == pytest.approx(FP16_MAX / 1200)
    a16 = measure_headroom(loaded(prog, "iOS17"), inputs, "a16")
    assert a16.minimum.op == "product"  # no slice cliff on A16: the matmul is the tightest
    doc = pre.to_json()
    assert doc["minimum"]["op"] == "cut" and [t["op"] for t in doc["tightest"]][:2] == ["cut", "product"]
