"""The static cost model: exact FLOP and byte counts on hand-built MIL programs, the roofline floor, the chip table,
the reference check, and the L x L attention share of tiny BC1S bodies."""

from __future__ import annotations

import json
import math

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from command_support import REPO
from experiments.ane_engineering.core import reference_run
from experiments.ane_engineering.core.buckets import MARKER_SLOTS
from experiments.ane_engineering.core.errors import HarnessError
from experiments.ane_engineering.core.json_documents import read_json
from experiments.ane_engineering.placement import cost_model, roofline
from experiments.ane_engineering.placement.chips import chip_key, load_chips
from experiments.ane_engineering.placement.cost_model import cost_report, op_cost, program_cost, window_fraction
from experiments.ane_engineering.placement.roofline import latency_floor, reference_check

OPSET = ct.target.macOS15
FP16 = types.fp16


def _ops(program):
    return [op for op in program.functions["main"].operations if not cost_model.is_const_like(op.op_type)]


def _only(program, op_type, length=None):
    (op,) = [op for op in _ops(program) if op.op_type == op_type]
    return op_cost(op, length)


def _w(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def test_conv_1x1_flops_and_bytes():
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 1, 96), dtype=FP16)], opset_version=OPSET)
    def prog(x):
        return mb.conv(x=x, weight=_w(128, 64, 1, 1))

    cost = _only(prog, "conv", 96)
    assert cost["flops"] == 2 * 128 * 64 * 96  # a multiply-add is 2 FLOPs
    assert cost["category"] == "linear"
    assert cost["activation_bytes_read"] == 64 * 96 * 2
    assert cost["weight_bytes_read"] == 128 * 64 * 2
    assert cost["bytes_written"] == 128 * 96 * 2


def test_grouped_kxk_conv_with_bias():
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 8, 8), dtype=FP16)], opset_version=OPSET)
    def prog(x):
        return mb.conv(x=x, weight=_w(32, 32, 3, 3), bias=_w(32), groups=2, pad_type="valid")

    cost = _only(prog, "conv")
    out = 32 * 6 * 6
    assert cost["flops"] == 2 * out * 32 * 3 * 3 + out  # 2*Cout*Cin/groups*kh*kw*Hout*Wout + bias
    assert cost["weight_bytes_read"] == (32 * 32 * 9 + 32) * 2


@pytest.mark.parametrize("equation, shapes, out_shape, flops, category", [
    # scores: K (1, Lk, 1, D) x Q (1, D, 1, Lq) -> (1, Lk, 1, Lq)
    ("bkhc,bchq->bkhq", [(1, 96, 1, 32), (1, 32, 1, 96)], (1, 96, 1, 96), 2 * 96 * 32 * 96, "attention_scores"),
    # values: V (1, D, 1, Lk) x W (1, Lk, 1, Lq) -> (1, D, 1, Lq)
    ("bchk,bkhq->bchq", [(1, 64, 1, 96), (1, 96, 1, 96)], (1, 64, 1, 96), 2 * 64 * 96 * 96, "attention_values"),
    # the marker read-out: scores (1, 1, 1, L) x one-hot selector (1, L, 1, 32): not L x L
    ("bchk,bkhq->bchq", [(1, 1, 1, 96), (1, 96, 1, 32)], (1, 1, 1, 32), 2 * 1 * 96 * 32, "other"),
])
def test_einsum_forms(equation, shapes, out_shape, flops, category):
    @mb.program(input_specs=[mb.TensorSpec(shape=s, dtype=FP16) for s in shapes], opset_version=OPSET)
    def prog(a, b):
        return mb.einsum(values=(a, b), equation=equation)

    cost = _only(prog, "einsum", 96)
    assert tuple(cost["output_shape"]) == out_shape
    assert cost["flops"] == flops  # 2 * product of every distinct index size
    assert cost["category"] == category
    assert cost["activation_bytes_read"] == sum(math.prod(s) for s in shapes) * 2
    assert cost["weight_bytes_read"] == 0


def test_softmax_and_layer_norm_constants():
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 96, 1, 96), dtype=FP16),
                             mb.TensorSpec(shape=(1, 64, 1, 96), dtype=FP16)], opset_version=OPSET)
    def prog(scores, x):
        return mb.softmax(x=scores, axis=1), mb.layer_norm(x=x, axes=[1], gamma=_w(64), epsilon=np.float16(1e-5))

    softmax = _only(prog, "softmax", 96)
    assert softmax["flops"] == cost_model.SOFTMAX_FLOPS * 96 * 96
    assert softmax["category"] == "softmax"
    norm = _only(prog, "layer_norm", 96)
    assert norm["flops"] == cost_model.LAYER_NORM_FLOPS * 64 * 96
    assert norm["category"] == "norm"
    assert norm["weight_bytes_read"] == 64 * 2  # gamma; epsilon and axes are parameters, not bytes moved
    assert norm["activation_bytes_read"] == norm["bytes_written"] == 64 * 96 * 2


def test_elementwise_slice_and_scalar_constants():
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 1, 96), dtype=FP16)], opset_version=OPSET)
    def prog(x):
        y = mb.mul(x=x, y=np.float16(0.5))  # a scalar is an immediate, not bytes
        z = mb.add(x=y, y=_w(1, 64, 1, 96))  # a (1, C, 1, L) table is read
        return mb.slice_by_index(x=z, begin=[0, 0, 0, 0], end=[1, 32, 1, 96])

    ops = {op.op_type: op_cost(op, 96) for op in _ops(prog)}
    assert ops["mul"]["flops"] == 64 * 96 and ops["mul"]["weight_bytes_read"] == 0
    assert ops["add"]["weight_bytes_read"] == 64 * 96 * 2 and ops["add"]["category"] == "elementwise"
    assert ops["slice_by_index"]["flops"] == 0 and ops["slice_by_index"]["category"] == "data_movement"
    assert ops["slice_by_index"]["activation_bytes_read"] == 32 * 96 * 2  # reads only what it keeps


def test_palettized_weight_moves_indices_and_lut():
    nbits, cout, cin, groups = 4, 128, 64, 4
    indices = np.random.default_rng(1).integers(0, 2 ** nbits, (cout, cin, 1, 1)).astype(types.np_uint4_dtype)
    lut = _w(groups, 1, 1, 1, 2 ** nbits, 1)  # per-grouped-channel LUTs (group of 32 output channels)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, cin, 1, 96), dtype=FP16)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.conv(x=x, weight=mb.constexpr_lut_to_dense(indices=indices, lut=lut))

    cost = _only(prog, "conv", 96)
    stored = cout * cin * nbits // 8 + groups * 2 ** nbits * 2
    assert cost["weight_bytes_read"] == stored
    assert cost["category"] == "linear"
    totals = program_cost(prog, length=96)["totals"]
    assert totals["weight_bytes"] == stored
    assert totals["weight_bytes_as_dense_fp16"] == cout * cin * 2


def test_shared_constant_counts_once_in_totals():
    table = _w(1, 64, 1, 96)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 1, 96), dtype=FP16)], opset_version=OPSET)
    def prog(x):
        c = mb.const(val=table)
        return mb.add(x=mb.mul(x=x, y=c), y=c)

    cost = program_cost(prog, length=96)
    assert cost["by_category"]["elementwise"]["weight_bytes_read"] == 2 * table.nbytes  # per op
    assert cost["totals"]["weight_bytes"] == table.nbytes  # once per program
    assert cost["totals"]["compulsory_bytes"] == table.nbytes + 2 * 64 * 96 * 2  # weights + input + output


def _cost(flops, compulsory, unfused):
    return {"totals": {"flops": flops, "compulsory_bytes": compulsory, "unfused_bytes": unfused},
            "by_category": {}, "lxl": None}


def test_floor_picks_the_larger_of_compute_and_memory():
    chip = {"peak_fp16_tflops": 10.0, "ane_bandwidth_gbs": 100.0}
    compute_bound = latency_floor(_cost(flops=1e11, compulsory=1e8, unfused=5e8), chip)
    assert compute_bound["compute_ms"] == pytest.approx(10.0) and compute_bound["memory_ms"] == pytest.approx(1.0)
    assert compute_bound["floor_ms"] == pytest.approx(10.0) and compute_bound["bound"] == "compute"
    assert compute_bound["unfused_floor_ms"] == pytest.approx(10.0)
    assert compute_bound["no_overlap_ms"] == pytest.approx(15.0)
    memory_bound = latency_floor(_cost(flops=1e9, compulsory=1e9, unfused=3e9), chip)
    assert memory_bound["floor_ms"] == pytest.approx(10.0) and memory_bound["bound"] == "memory"
    assert memory_bound["unfused_floor_ms"] == pytest.approx(30.0) and memory_bound["unfused_bound"] == "memory"


def test_chip_table_has_a_source_for_every_figure():
    chips = load_chips()
    assert {"m1", "m2", "m3", "m3-max", "m4", "m4-max", "m5"} <= set(chips)
    for name, chip in chips.items():
        assert chip_key(chip["name"]) == name
        for figure, source in (("ane_tops", "ane_tops_source"), ("peak_fp16_tflops", "fp16_basis"),
                               ("ane_bandwidth_gbs", "bandwidth_source")):
            assert isinstance(chip[source], str) and len(chip[source]) > 20, (name, source)
            if chip[figure] is None:  # unknown: the source field says why, and the model's stand-in is stated
                assert figure != "ane_bandwidth_gbs" and chip["assumed_peak_fp16_tflops"] > 0, (name, figure)
                assert len(chip["assumed_peak_basis"]) > 20 and chip["ane_tops_precision"].startswith("unknown")
                continue
            assert chip[figure] > 0, (name, figure)
        if chip["peak_fp16_tflops"] is not None:
            assert chip["ane_tops_precision"].split()[0] in ("FP16", "INT8"), name
            assert chip["peak_fp16_tflops_if_int8_counted"] <= chip["peak_fp16_tflops"]
        assert chip["bandwidth_kind"], name
        for figure, source in (("measured_fp16_gemm_tflops", "measured_fp16_gemm_source"),
                               ("dispatch_overhead_ms", "dispatch_source")):
            assert chip[figure] is None or chip[figure] > 0
            assert len(chip[source]) > 20, (name, source)
    for name in ("m3-max", "m4-max"):  # about 120 GB/s on M3 Max / M4 Max class chips, with a public measurement
        assert chips[name]["ane_bandwidth_gbs"] == 120.0 and "ANEMLL-Bench" in chips[name]["bandwidth_source"]
    assert chips["m4"]["ane_tops"] == 38.0 and chips["m4"]["peak_fp16_tflops"] == 19.0
    assert "maderix" in chips["m4"]["fp16_basis"]


def test_reference_run_names_its_source_and_machine(tmp_path):
    reference = reference_run.load()
    assert reference_run.citation(reference) == ("reference run reported by the project's user (date unknown): "
                                                 "Apple M3 Max, macOS 27.2, coremltools 9.0, torch 2.7.0")
    assert chip_key(reference_run.chip()) in load_chips()
    for measurement in reference["timings"]["measurements"]:
        assert measurement["p50_ms"] > 0 and measurement["what"] and measurement["scope"] in ("body", "full_path")
    # the file is read through its schema: a timing without its figure is refused, not half-read
    broken = json.loads(reference_run.PATH.read_text(encoding="utf-8"))
    del broken["timings"]["measurements"][0]["p50_ms"]
    path = tmp_path / "reference_run.json"
    path.write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(HarnessError, match="p50_ms"):
        read_json(path, reference_run.SCHEMA)


def test_reference_check_reports_measured_over_floor():
    p50 = {m["id"]: m["p50_ms"] for m in reference_run.load()["timings"]["measurements"]}
    chips = {"m3-max": {"name": "M3 Max", "peak_fp16_tflops": 18.0, "ane_bandwidth_gbs": 120.0, "fp16_basis": "x",
                        "bandwidth_source": "y"}}
    costs = {96: _cost(flops=18e9, compulsory=240e6, unfused=600e6),     # compute 1 ms, memory 2 ms
             1024: _cost(flops=360e9, compulsory=240e6, unfused=6e9)}    # compute 20 ms, unfused 50 ms
    rows = {row["id"]: row for row in reference_check(costs, chips)["rows"]}
    assert rows["L96-body"]["floor_ms"] == pytest.approx(2.0) and rows["L96-body"]["bound"] == "memory"
    assert rows["L96-body"]["ratio_to_floor"] == pytest.approx(p50["L96-body"] / 2.0)
    assert rows["L1024-request"]["ratio_to_floor"] == pytest.approx(p50["L1024-request"] / 20.0)
    assert rows["L1024-request"]["ratio_to_unfused_floor"] == pytest.approx(p50["L1024-request"] / 50.0)
    assert rows["L1024-request"]["host_overhead_ms"] == pytest.approx(p50["L96-full-path"] - p50["L96-body"])


def test_window_fraction():
    assert window_fraction(4, 1) == pytest.approx(10 / 16)
    assert window_fraction(96, 64) == pytest.approx(1.0 - (31 * 32) / (96 * 96))
    assert window_fraction(1024, 1023) == 1.0


@pytest.mark.slow
def test_lxl_share_grows_with_length(tiny_packages):
    reports = {}
    for length in (96, 1024):
        directory, _ = tiny_packages.get("body", length)
        reports[length] = cost_report(directory)
    short, long = (reports[n]["cost"] for n in (96, 1024))
    assert short["length"] == 96 and long["length"] == 1024  # from the manifest
    assert reports[96]["manifest"]["package_sha256"]
    assert short["unmodelled_op_types"] == [] and long["unmodelled_op_types"] == []
    for cost in (short, long):
        lxl = cost["lxl"]
        assert lxl["einsum"]["ops"] > 0
        assert set(lxl["blocks_by_mask"]) == {"global_mask", "local_mask"}
        assert lxl["tensor_ops"]["bytes"] > lxl["einsum"]["bytes"]
        # one full-head score einsum per AV einsum (ANE_MATH.md section 4)
        assert cost["by_category"]["attention_scores"]["ops"] == cost["by_category"]["attention_values"]["ops"]
    assert long["lxl"]["einsum"]["flops_share"] > 2 * short["lxl"]["einsum"]["flops_share"]
    assert long["lxl"]["tensor_ops"]["bytes_share"] > short["lxl"]["tensor_ops"]["bytes_share"]
    assert long["lxl"]["tensor_ops"]["bytes_share"] > 0.5  # dense L x L traffic dominates the long bucket
    # Linear work scales with L -- except the last head layer's queries, FFN and scorer, which run on the 32 marker
    # columns at every length (ANE_MATH.md section 7) -- and score and AV einsums with L^2.
    linear = {}
    for length in (96, 1024):
        records = cost_report(tiny_packages.get("body", length)[0], per_op=True)["cost"]["per_op"]
        by_width = {}
        for record in records:
            if record["category"] == "linear":
                width = record["output_shape"][-1]
                by_width[width] = by_width.get(width, 0) + record["flops"]
        assert set(by_width) == {length, MARKER_SLOTS}
        assert sum(by_width.values()) == reports[length]["cost"]["by_category"]["linear"]["flops"]
        linear[length] = by_width
    assert linear[1024][1024] / linear[96][96] == pytest.approx(1024 / 96, rel=1e-9)
    assert linear[1024][MARKER_SLOTS] == linear[96][MARKER_SLOTS] > 0
    ratio = long["lxl"]["einsum"]["flops"] / short["lxl"]["einsum"]["flops"]
    assert ratio == pytest.approx((1024 / 96) ** 2, rel=1e-9)
    floor = reports[1024]["floors"]["m3-max"]
    assert floor["floor_ms"] >= max(floor["compute_ms"], floor["memory_ms"])
    assert floor["lxl_tensor_ops_share_of_category_sum"] > 0.5


def test_reference_model_dimensions():
    assert roofline.reference_model_mismatches(
        {"encoder": {"hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
                     "intermediate_size": 1152, "local_attention": 128}, "head": {"num_layers": 2}}) == []
    assert roofline.reference_model_mismatches(
        {"encoder": {"hidden_size": 128, "num_hidden_layers": 6, "num_attention_heads": 2,
                     "intermediate_size": 192, "local_attention": 128}, "head": {"num_layers": 2}})


@pytest.mark.slow
def test_benchmark_script_writes_evidence_and_refuses_existing(tiny_packages, tmp_path):
    import importlib.util
    import json

    from experiments.ane_engineering.core.staging import OutputExistsError

    spec = importlib.util.spec_from_file_location(
        "cost_model_benchmark", REPO / "benchmarks" / "cost_model.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    directories = [tiny_packages.get("body", n)[0] for n in (96, 1024)]
    output = tmp_path / "cost.json"
    args = [a for d in directories for a in ("--package", str(d))] + ["--output", str(output)]
    assert script.main(args) == 0
    evidence = json.loads(output.read_text())
    assert [b["length"] for b in evidence["buckets"]] == [96, 1024]
    manifests = [json.loads((d / "manifest.json").read_text()) for d in directories]
    assert [p["content_sha256"] for p in evidence["provenance"]["packages"]] == [
        m["package"]["content_hash"]["sha256"] for m in manifests]
    assert evidence["provenance"]["harness"]["sha256"] and evidence["provenance"]["tools"]["coremltools"]
    assert set(evidence["buckets"][0]["floors"]) == set(load_chips())
    # builtin:tiny is not the reference run's model: its floors are not set beside the M3 Max timings.
    assert evidence["reference_check"]["rows"] == [] and len(evidence["reference_check"]["not_compared"]) == 2
    with pytest.raises(OutputExistsError):
        script.main(args)
