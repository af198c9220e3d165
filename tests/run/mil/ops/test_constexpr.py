"""The constexpr decompressions (ops/constexpr.py) in the mil executor: the handlers against coremltools' own
`decompress`, and palettized packages that decompress exactly and run."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import ct, f16
from executor_packages import PW, PW3, PX, _node, assert_close16, conv2d64, conv_mlmodel, dot_extra
from experiments.ane_engineering.run.mil.executor import MILExecutor
from experiments.ane_engineering.run.mil.numerics import Numerics
from experiments.ane_engineering.run.mil.registry import OPS
from package_edits import weight_bin, weight_blobs


@pytest.fixture(scope="module")
def conv_model():
    """The palettizable conv stack (an MLModel), converted once for this module."""
    return conv_mlmodel()


def test_constexpr_handlers_equal_coremltools_decompression():
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import constexpr_affine_dequantize as affine16
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import constexpr_lut_to_dense as lut16
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import constexpr_sparse_to_dense as sparse16
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_blockwise_shift_scale as shift18
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_lut_to_dense as lut18
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_sparse_to_dense as sparse18

    num = Numerics()
    rng = np.random.default_rng(3)
    h = {op_type: op_def.handler for op_type, op_def in OPS.items()}
    # iOS18 LUT, per-grouped-channel scalar and vector palettization
    idx = rng.integers(0, 16, size=(8, 6, 1, 1)).astype(np.uint8)
    lut = rng.standard_normal((4, 1, 1, 1, 16, 1)).astype(np.float16)
    got = h["constexpr_lut_to_dense"](_node("constexpr_lut_to_dense", [(8, 6, 1, 1)], [np.float16]),
                                      {"indices": idx, "lut": lut}, num)
    np.testing.assert_array_equal(got, lut18.decompress(idx, lut, None))
    vlut = rng.standard_normal((2, 1, 1, 1, 4, 3)).astype(np.float16)
    vidx = rng.integers(0, 4, size=(4, 6, 1, 1)).astype(np.uint8)
    got = h["constexpr_lut_to_dense"](_node("constexpr_lut_to_dense", [(4, 18, 1, 1)], [np.float16]),
                                      {"indices": vidx, "lut": vlut, "vector_axis": np.int32(1)}, num)
    np.testing.assert_array_equal(got, lut18.decompress(vidx, vlut, np.int32(1)))
    # iOS16 LUT with packed indices
    lut1 = rng.standard_normal(16).astype(np.float16)
    packed = rng.integers(0, 256, size=12).astype(np.uint8)
    got = h["constexpr_lut_to_dense"](_node("constexpr_lut_to_dense", [(4, 6)], [np.float16]),
                                      {"indices": packed, "lut": lut1, "shape": np.array([4, 6], np.uint32)}, num)
    np.testing.assert_array_equal(got, lut16.decompress(lut1, packed, np.array([4, 6], np.uint32)))
    # affine dequantize (per-channel scale and zero point)
    q = rng.integers(-128, 127, size=(5, 7)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, 5).astype(np.float16)
    zp = rng.integers(-3, 3, 5).astype(np.int8)
    got = h["constexpr_affine_dequantize"](_node("constexpr_affine_dequantize", [(5, 7)], [np.float16]),
                                           {"quantized_data": q, "scale": scale, "zero_point": zp, "axis": np.int32(0)},
                                           num)
    np.testing.assert_array_equal(got, affine16.decompress(q, zp, scale, 0))
    # blockwise shift/scale (iOS18), block of 4 along the input axis
    data = rng.integers(-8, 8, size=(6, 8)).astype(np.int8)
    bscale = rng.uniform(0.01, 0.1, (6, 2)).astype(np.float16)
    boff = rng.integers(-2, 2, (6, 2)).astype(np.int8)
    got = h["constexpr_blockwise_shift_scale"](_node("constexpr_blockwise_shift_scale", [(6, 8)], [np.float16]),
                                               {"data": data, "scale": bscale, "offset": boff}, num)
    np.testing.assert_array_equal(got, shift18.decompress(data, bscale, boff))
    # sparse to dense, iOS18 and iOS16
    mask = (rng.random((4, 5)) < 0.4).astype(np.uint8)
    nz = rng.standard_normal(int(mask.sum())).astype(np.float16)
    got = h["constexpr_sparse_to_dense"](_node("constexpr_sparse_to_dense", [(4, 5)], [np.float16]),
                                         {"nonzero_data": nz, "mask": mask}, num)
    np.testing.assert_array_equal(got, sparse18.decompress(nz, mask))
    packed_mask = np.packbits(mask.ravel(), bitorder="little")
    got = h["constexpr_sparse_to_dense"](_node("constexpr_sparse_to_dense", [(4, 5)], [np.float16]),
                                         {"nonzero_data": nz, "mask": packed_mask,
                                          "shape": np.array([4, 5], np.uint32)}, num)
    np.testing.assert_array_equal(got, sparse16.decompress(nz, packed_mask, np.array([4, 5], np.uint32)))


@pytest.mark.slow
@pytest.mark.parametrize("nbits,mode", [(8, "kmeans"), (4, "uniform")])
def test_palettized_weights_decompress_exactly_and_run(conv_model, tmp_path, nbits, mode):
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_lut_to_dense as lut18

    from experiments.ane_engineering.package.mil.load import load_program

    cfg = ct.optimize.coreml.OpPalettizerConfig(mode=mode, nbits=nbits, granularity="per_grouped_channel",
                                                group_size=16, weight_threshold=1024)
    model = ct.optimize.coreml.palettize_weights(conv_model,
                                                 ct.optimize.coreml.OptimizationConfig(op_type_configs={"conv": cfg}))
    path = tmp_path / f"w{nbits}.mlpackage"
    model.save(str(path))
    ex = MILExecutor(path, keep_program=True)
    assert ex.op_type_counts.get("constexpr_lut_to_dense") == 2

    # coremltools' own decompression of the same package, loaded from disk
    dense_path = tmp_path / f"w{nbits}_dense.mlpackage"
    ct.optimize.coreml.decompress_weights(ct.models.MLModel(str(path), skip_model_load=True)).save(str(dense_path))
    dense = {op.outputs[0].name: op.outputs[0].val
             for op in load_program(dense_path).operations() if op.op_type == "const"}
    decompressed = {}
    for op in ex.program.operations():
        if op.op_type != "constexpr_lut_to_dense":
            continue
        indices, lut = op.indices.val, op.lut.val
        # PyMIL unpacked the uint{nbits} indices to one uint8 per weight element, with the weight's shape
        assert indices.dtype == np.uint8 and indices.max() < 2 ** nbits
        assert lut.shape == (indices.shape[0] // 16, 1, 1, 1, 2 ** nbits, 1)
        mine = ex.constant(op.outputs[0].name)
        np.testing.assert_array_equal(mine, lut18.decompress(indices, lut, None))
        theirs = [v for v in dense.values() if isinstance(v, np.ndarray) and v.shape == mine.shape]
        assert len(theirs) == 1
        np.testing.assert_array_equal(mine, theirs[0])
        decompressed[mine.shape] = mine.astype(np.float64)
        if nbits == 4 and indices.shape == PW.shape:
            # the raw blob: 4-bit indices packed little-endian, two per byte
            raw = weight_bin(path).read_bytes()
            blob = [b for b in weight_blobs(weight_bin(path)) if b[2] == indices.size // 2]
            assert len(blob) == 1
            packed = np.frombuffer(raw, np.uint8, count=blob[0][2], offset=blob[0][3])
            bits = np.unpackbits(packed, bitorder="little").reshape(-1, 4)
            np.testing.assert_array_equal(bits @ np.array([1, 2, 4, 8]), indices.ravel())

    out = ex.run({"x": PX})
    name = ex.output_names[0]
    h, habs, k1 = conv2d64(PX.astype(np.float64), decompressed[PW.shape])
    h = np.maximum(f16(h).astype(np.float64), 0)  # the executor stores conv1's output in fp16
    ref, absref, k2 = conv2d64(h, decompressed[PW3.shape], pads=((1, 1), (1, 1)))
    assert_close16(out[name], ref, dot_extra(k2, absref), f"W{nbits} conv stack")
    # the palettized weights are not the original ones
    assert not np.array_equal(decompressed[PW.shape], PW.astype(np.float64))
