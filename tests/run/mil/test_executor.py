"""The numpy MIL executor: its fp16 casts, fp16-strict accumulation, weight.bin integrity, load-time refusal of
unknown ops, memory release, a package round trip of the builder programs, and a real BC1S body against its
FP32 torch twin. The ops' own semantics are tested per family in tests/run/mil/ops/test_<family>.py.

Tolerances (fp32-accumulate mode). An op computed exactly and rounded once to fp16 is within half an fp16 step
of the exact value. Each output element may differ from a float64 reference of the op's semantics (computed from
the same fp16 inputs and fp16 weights) by at most

    ulp16(|ref|) + 2^-24 + [dot products only] K * 2^-24 * sum_k |a_k b_k|

i.e. one fp16 step at the reference's magnitude (twice the rounding bound, so the float32 evaluation of the
op can never tip an element over), the smallest fp16 subnormal, and the float32 accumulation bound of a K-term
sum. A correct op always passes; an op whose semantics differ by more than about one fp16 step fails, which the
broken-op tests of the op families demonstrate.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from conversion_support import convert_tiny_body  # noqa: E402
from executor_packages import (  # noqa: E402
    B1,
    CX,
    NS,
    NX,
    PW,
    PX,
    RNG,
    TARGET,
    W1,
    P,
    X,
    Y,
    conv2d64,
    conv_mlmodel,
    dot_feeds,
    dot_package,
    elementwise_package,
    norm_package,
    norm_refs,
    swap_handler,
    to_package,
    violation,
)
from experiments.ane_engineering.run.mil import kernels  # noqa: E402
from experiments.ane_engineering.run.mil.executor import ExecutionError, InputError, MILExecutor  # noqa: E402
from experiments.ane_engineering.run.mil.numerics import FP16_STRICT  # noqa: E402
from experiments.ane_engineering.run.mil.registry import OPS, UnsupportedOpError  # noqa: E402
from fp16_support import U16, f16  # noqa: E402
from package_edits import weight_bin, weight_blobs  # noqa: E402


@pytest.fixture(scope="module")
def conv_model():
    """The palettizable conv stack (an MLModel), converted once for this module."""
    return conv_mlmodel()


@pytest.fixture(scope="module")
def dot_pkg(tmp_path_factory):
    """The dot-product package, converted once for this module."""
    return dot_package(tmp_path_factory)


@pytest.fixture(scope="module")
def elementwise_pkg(tmp_path_factory):
    """The elementwise package, converted once for this module."""
    return elementwise_package(tmp_path_factory)


@pytest.fixture(scope="module")
def norm_pkg(tmp_path_factory):
    """The norm, softmax and reduction package, converted once for this module."""
    return norm_package(tmp_path_factory)


# ----------------------------------------------------------------------------------------------- fp16 casts

def test_fast_fp16_casts_equal_numpy_bit_for_bit():
    if kernels._load_kernels() is None:
        pytest.skip("numba kernels unavailable (numba missing or self-check failed): numpy casts are used")
    rng = np.random.default_rng(7)
    every_half = np.arange(65536, dtype=np.uint16).view(np.float16)
    f32 = every_half.astype(np.float32)
    # all fp16 values, every midpoint between neighbours (the ties), their float32 neighbours, random bit patterns
    finite = f32[np.isfinite(f32)]
    finite = np.sort(finite[finite >= 0])  # 0 .. 65504 ascending; midpoints mirrored for negatives
    mids = ((finite[1:].astype(np.float64) + finite[:-1]) / 2).astype(np.float32)
    mids = np.concatenate([mids, -mids, np.float32([65520.0, -65520.0])])
    bits = np.concatenate([f32.view(np.uint32), mids.view(np.uint32), mids.view(np.uint32) + 1,
                           mids.view(np.uint32) - 1,
                           rng.integers(0, 2 ** 32, 2_000_000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x477FEFFF, 0x477FF000, 0x477FF001, 0x33000000, 0x33000001, 0x387FFFFF],
                                    np.uint32)])
    values = bits.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(np.float16)
    got = kernels.to_float16(values)
    # bit for bit, except NaN payloads: NaN stays NaN (the hardware conversion quiets signalling NaNs)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), values[~same][:5]
    halves = np.tile(every_half, 2)  # above the kernel's size threshold
    wide, ref = kernels.to_float32(halves), halves.astype(np.float32)
    assert np.all((wide.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(wide) & np.isnan(ref)))
    # the fused binary kernel: compute in float32, round once
    a = every_half[np.isfinite(every_half)]
    b = rng.permutation(a)
    for op, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("real_div", np.divide),
                   ("maximum", np.maximum), ("minimum", np.minimum)):
        with np.errstate(all="ignore"):
            want = fn(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
            got = kernels.binary16(op, a, b)
            got_scalar = kernels.binary16(op, a, b[:1])
            want_scalar = fn(a.astype(np.float32), b[:1].astype(np.float32)).astype(np.float16)
        assert np.all((got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))), op
        assert np.all((got_scalar.view(np.uint16) == want_scalar.view(np.uint16))
                      | (np.isnan(got_scalar) & np.isnan(want_scalar))), op


# ----------------------------------------------------------------------------------------------- fp16-strict

@pytest.mark.slow
def test_fp16_strict_accumulates_in_fp16(tmp_path):
    """4096 products of 1 * 1: float32 accumulation gives 4096, a sequential fp16 accumulator stalls at 2048."""
    w = np.ones((1, 4096, 1, 1), np.float16)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4096, 1, 2), dtype=types.fp16)], opset_version=TARGET)
    def prog(x):
        return mb.conv(x=x, weight=w, name="o")

    path = to_package(prog, tmp_path, "acc")
    feeds = {"x": np.ones((1, 4096, 1, 2), np.float16)}
    assert MILExecutor(path).run(feeds)["o"].ravel().tolist() == [4096.0, 4096.0]
    strict = MILExecutor(path, mode=FP16_STRICT)
    assert strict.run(feeds)["o"].ravel().tolist() == [2048.0, 2048.0]
    assert strict.describe()["mode"] == FP16_STRICT
    assert "sequential fp16" in strict.describe()["accumulation"]


@pytest.mark.slow
def test_fp16_strict_stays_close_on_small_ops(norm_pkg, dot_pkg):
    """Strict mode rounds every step: it differs from the exact value by a few fp16 steps per accumulated term."""
    out = MILExecutor(norm_pkg, mode=FP16_STRICT).run({"x": NX, "s": NS})
    for name, ref in norm_refs().items():
        assert violation(out[name], ref, extra=24 * U16 * np.abs(ref) + 24 * U16) <= 1.0, name
    out = MILExecutor(dot_pkg, mode=FP16_STRICT).run(dot_feeds())
    ref, absref, k = conv2d64(CX.astype(np.float64), W1, B1)
    assert violation(out["o_conv1x1"], ref, extra=(k + 1) * U16 * absref) <= 1.0


# ----------------------------------------------------------------------------------------------- weight.bin integrity

@pytest.mark.slow
def test_flipped_weight_byte_changes_outputs(conv_model, tmp_path):
    path = tmp_path / "clean.mlpackage"
    conv_model.save(str(path))
    clean_ex = MILExecutor(path)
    clean = clean_ex.run({"x": PX})[clean_ex.output_names[0]]
    bad = tmp_path / "flipped.mlpackage"
    shutil.copytree(path, bad)
    blobs = [b for b in weight_blobs(weight_bin(bad)) if b[2] == PW.size * 2]  # the fp16 64x96 weight
    assert len(blobs) == 1
    _, _, size, offset = blobs[0]
    raw = bytearray(weight_bin(bad).read_bytes())
    element = 1234
    raw[offset + 2 * element + 1] ^= 0x40  # high byte of one fp16: an exponent bit
    weight_bin(bad).write_bytes(bytes(raw))
    bad_ex = MILExecutor(bad)
    flipped = bad_ex.run({"x": PX})[bad_ex.output_names[0]]
    assert not np.array_equal(clean, flipped)
    weights = [n for n in bad_ex.constant_names() if getattr(bad_ex.constant(n), "shape", None) == PW.shape]
    changed = bad_ex.constant(weights[0]) != clean_ex.constant(weights[0])
    assert changed.sum() == 1 and np.flatnonzero(changed)[0] == element


# ------------------------------------------------------------------------------------ load-time refusal, inputs, memory

@pytest.mark.slow
def test_unsupported_op_fails_at_load_naming_type_and_op(norm_pkg, monkeypatch):
    monkeypatch.delitem(OPS, "softmax")
    with pytest.raises(UnsupportedOpError) as err:
        MILExecutor(norm_pkg)
    msg = str(err.value)
    assert "unsupported MIL op 'softmax'" in msg and "o_softmax1" in msg and "op #" in msg and "function main" in msg


@pytest.mark.slow
def test_inputs_are_checked(norm_pkg):
    ex = MILExecutor(norm_pkg)
    with pytest.raises(InputError, match="missing"):
        ex.run({"x": NX})
    with pytest.raises(InputError, match="unexpected"):
        ex.run({"x": NX, "s": NS, "z": NS})
    with pytest.raises(InputError, match="shape"):
        ex.run({"x": NX[..., :5], "s": NS})
    out32 = ex.run({"x": NX.astype(np.float32), "s": NS.astype(np.float64)}, as_float32=True)
    assert all(v.dtype == np.float32 for v in out32.values())


@pytest.mark.slow
def test_handler_failure_names_the_op(norm_pkg, monkeypatch):
    def boom(node, args, num):
        raise ValueError("bad")

    swap_handler(monkeypatch, "reduce_sum", boom)
    ex = MILExecutor(norm_pkg)
    with pytest.raises(ExecutionError, match=r"o_sum.*reduce_sum.*bad"):
        ex.run({"x": NX, "s": NS})


@pytest.mark.slow
def test_intermediates_are_released(dot_pkg, elementwise_pkg):
    for path, feeds in ((dot_pkg, dot_feeds()), (elementwise_pkg, {"x": X, "y": Y, "p": P})):
        ex = MILExecutor(path)
        ex.run(feeds)
        assert sorted(ex.last_run["live_after_run"]) == sorted(ex.output_names)
        plan = ex.free_plan()
        runtime_values = set(ex.step_value_names()) - set(ex.output_names)
        assert set(plan) == runtime_values  # every non-output value has exactly one release point


# ------------------------------------------------------------------------------------------ a package round trip

@pytest.mark.slow
def test_new_ops_survive_a_package_round_trip(tmp_path):
    """The same ops saved as an .mlpackage by coremltools and read back by the executor's loader (defaults
    materialised by the loader, consts read from weight.bin) give the builder program's results."""
    from coremltools.converters.mil.mil import Function, Program

    from experiments.ane_engineering.run.mil.executor import MILExecutor

    x = f16(RNG.standard_normal((1, 4, 6, 6)))
    mask = np.array([[1, 1, 1, 0, 0, 0]], np.int32)
    w = f16(RNG.standard_normal((4, 2, 3, 3)) * 0.3)

    def build(v, m):
        h = mb.max_pool(x=v, kernel_sizes=[3, 3], strides=[2, 2], pad_type="custom", pad=[1, 1, 1, 1], ceil_mode=True)
        h = mb.batch_norm(x=h, mean=f16(np.zeros(4)), variance=f16(np.ones(4) * 2), epsilon=np.float16(1e-3))
        h = mb.upsample_nearest_neighbor(x=mb.leaky_relu(x=h, alpha=np.float16(0.1)), scale_factor_height=2,
                                         scale_factor_width=2)
        h = mb.conv_transpose(x=mb.pad(x=h, pad=[0, 0, 1, 1], mode="reflect"), weight=w, strides=[1, 1])
        pos = mb.cumsum(x=m, axis=1)  # RoBERTa's position ids
        last = mb.gather_nd(x=mb.avg_pool(x=v, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid"),
                            indices=np.array([[0, 1, 2]], np.int32))
        return h, pos, last, mb.topk(x=mb.reshape(x=v, shape=[4, 36]), k=3)[1]

    from conversion_support import save_program
    from executor_ops_support import loaded, spec

    with Function({"v": spec(x), "m": spec(mask)}, ct.target.iOS17) as func:
        func.set_outputs(list(build(func.inputs["v"], func.inputs["m"])))
    prog = Program()
    prog.add_function("main", func)
    want = MILExecutor(loaded(prog, "iOS17")).run({"v": x, "m": mask})
    ex = MILExecutor(save_program(prog, tmp_path / "ops.mlpackage", ct.target.iOS17))
    got = ex.run({"v": x, "m": mask})
    assert {"max_pool", "batch_norm", "conv_transpose", "cumsum", "gather_nd", "topk"} <= set(ex.op_type_counts)
    for (name, a), b in zip(want.items(), got.values()):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------- a real BC1S body (tiny)

BODY_L = 96
BODY_QUESTIONS = 8
DEPTH_SAFETY = 4


@pytest.fixture(scope="module")
def tiny_body(tmp_path_factory):
    pytest.importorskip("torch")
    from experiments.ane_engineering.checkpoint import load_checkpoint

    ck = load_checkpoint("builtin:tiny")
    body, model = convert_tiny_body(ck, BODY_L, TARGET)
    path = tmp_path_factory.mktemp("body") / "body.mlpackage"
    model.save(str(path))
    return ck, body, path


def _body_cases(ck, body, n):
    import torch

    from experiments.ane_engineering.package.inputs.device_inputs import body_inputs
    from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions

    cases = []
    for q in load_questions():
        e = encode_question(ck.tokenizer, ck.config.head, q)
        if e.num_tokens > BODY_L:
            continue
        inputs = body_inputs(ck.config, ck.tensors, e.input_ids, e.token_types, e.marker_positions, BODY_L)
        with torch.no_grad():
            ref = body(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()[0, 0, 0, :len(q.options)]
        cases.append((q.id, inputs, ref.astype(np.float64)))
        if len(cases) == n:
            break
    return cases


def body_tolerance(ck, refs) -> float:
    """u16 * max|logit| * depth * safety: one fp16 rounding (u16 = 2^-11) of the largest reference logit, grown
    by each of the encoder + head layers it passed through (depth 6 + 2 = 8 for builtin:tiny), times 4. The
    fp16-strict test allows twice this; a softmax over the wrong axis fails it (test below)."""
    depth = ck.config.encoder.num_hidden_layers + ck.config.head.num_layers
    magnitude = max(float(np.max(np.abs(r))) for r in refs)
    return U16 * magnitude * depth * DEPTH_SAFETY


def _body_errors(path, cases, **kw):
    ex = MILExecutor(path, **kw)
    errors = []
    for _, inputs, ref in cases:
        out = ex.run(inputs, as_float32=True)["option_logits"][0, 0, 0, :len(ref)]
        assert np.all(np.isfinite(out))
        errors.append(float(np.max(np.abs(out - ref))))
    return ex, errors


@pytest.mark.slow
def test_tiny_body_matches_fp32_torch(tiny_body):
    ck, body, path = tiny_body
    cases = _body_cases(ck, body, BODY_QUESTIONS)
    assert len(cases) == BODY_QUESTIONS
    tol = body_tolerance(ck, [c[2] for c in cases])
    ex, errors = _body_errors(path, cases)
    assert max(errors) <= tol, (errors, tol)
    assert max(errors) > 0  # fp16 storage is visible: this is not the torch model in disguise
    assert sorted(ex.last_run["live_after_run"]) == ["option_logits"]
    counts = ex.op_type_counts
    assert counts["conv"] > 0 and counts["einsum"] > 0 and counts["layer_norm"] > 0


@pytest.mark.slow
def test_tiny_body_with_broken_softmax_axis_fails(tiny_body, monkeypatch):
    ck, body, path = tiny_body
    cases = _body_cases(ck, body, 3)
    tol = body_tolerance(ck, [c[2] for c in cases])
    original = OPS["softmax"].handler

    def wrong_axis(node, args, num):
        args = dict(args)
        args["axis"] = np.int32(3)  # the query axis instead of the key axis
        return original(node, args, num)

    swap_handler(monkeypatch, "softmax", wrong_axis)
    _, errors = _body_errors(path, cases)
    assert max(errors) > tol, (errors, tol)


@pytest.mark.slow
def test_tiny_body_fp16_strict_runs_and_stays_near(tiny_body):
    ck, body, path = tiny_body
    cases = _body_cases(ck, body, 1)
    tol = body_tolerance(ck, [c[2] for c in cases])
    _, errors = _body_errors(path, cases, mode=FP16_STRICT)
    assert max(errors) <= 2 * tol, (errors, tol)


# ----------------------------------------------------------------------------------------- the original-layout baseline

@pytest.fixture(scope="module")
def tiny_baseline(tmp_path_factory):
    pytest.importorskip("torch")
    kinds = pytest.importorskip("experiments.ane_engineering.package.kinds")
    convert = pytest.importorskip("experiments.ane_engineering.package.convert")
    from experiments.ane_engineering.checkpoint import load_checkpoint

    ck = load_checkpoint("builtin:tiny")
    spec = kinds.build_export_spec(ck, "baseline", BODY_L)
    path = tmp_path_factory.mktemp("baseline") / "baseline.mlpackage"
    convert.convert(spec).save(str(path))
    return ck, spec, path


@pytest.mark.slow
def test_baseline_export_with_enumerated_lengths_runs(tiny_baseline):
    """B x L x C export: embedding gather, linear, reshape/split/squeeze, RoPE from range_1d/sin/cos, bool-masked
    SDPA, gather read-out, and enumerated input lengths (96 and 192 here)."""
    import torch

    from experiments.ane_engineering.package.inputs.questions import encode_question, load_questions

    ck, spec, path = tiny_baseline
    ex = MILExecutor(path)
    for t in ("linear", "reshape", "scaled_dot_product_attention", "gather", "gather_along_axis", "range_1d", "cast"):
        assert t in ex.op_type_counts, t
    info = {t.name: t for t in ex.inputs}
    assert (1, 96) in info["input_ids"].enumerated and (1, 192) in info["input_ids"].enumerated
    with pytest.raises(InputError, match="one of"):
        ex.run({"input_ids": np.zeros((1, 100), np.int32), "attention_mask": np.zeros((1, 100), np.int32),
                "token_types": np.zeros((1, 100), np.int32), "marker_positions": np.zeros((1, 32), np.int32)})
    refs, errors = [], []
    questions = [encode_question(ck.tokenizer, ck.config.head, q) for q in load_questions()[:2]]
    for length in (96, 192):
        for e in questions:
            k = len(e.marker_positions)
            feeds = {"input_ids": np.full((1, length), ck.config.encoder.pad_token_id, np.int32),
                     "attention_mask": np.zeros((1, length), np.int32), "token_types": np.zeros((1, length), np.int32),
                     "marker_positions": np.zeros((1, 32), np.int32)}
            feeds["input_ids"][0, :e.num_tokens] = e.input_ids
            feeds["attention_mask"][0, :e.num_tokens] = 1
            feeds["token_types"][0, :e.num_tokens] = e.token_types
            feeds["marker_positions"][0, :k] = e.marker_positions
            with torch.no_grad():
                ref = spec.module(*[torch.from_numpy(feeds[c.name]) for c in spec.inputs]).numpy()[0, :k]
            out = ex.run(feeds, as_float32=True)["option_logits"][0, :k]
            refs.append(ref)
            errors.append(float(np.max(np.abs(out - ref))))
    assert max(errors) <= body_tolerance(ck, refs), (errors, body_tolerance(ck, refs))


def test_strict_sum_over_every_axis_and_over_no_terms():
    """fp16-strict sums: reducing every axis without keepdims gives a 0-d result (it used to fail on a numpy
    scalar), and a sum over an empty axis is 0."""
    from experiments.ane_engineering.run.mil.numerics import _sequential_sum16

    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    assert _sequential_sum16(x, (0, 1), keepdims=False) == np.float16(15)
    assert _sequential_sum16(x, (0, 1), keepdims=True).shape == (1, 1)
    np.testing.assert_array_equal(_sequential_sum16(np.zeros((0, 3), np.float16), (0,), keepdims=False),
                                  np.zeros(3, np.float16))
