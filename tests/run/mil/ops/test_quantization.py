"""quantize / dequantize and the iOS18 sparse compression constexprs (ops/quantization.py) in the mil executor,
against numpy and coremltools' own `decompress`."""

from __future__ import annotations

import numpy as np
import pytest

from executor_ops_support import MODES, assert_fp16, f16, mb, run

RNG = np.random.default_rng(99)


@pytest.mark.parametrize("mode", MODES)
def test_quantize_dequantize(mode):
    x = f16(RNG.standard_normal((2, 3, 4)) * 3)
    scale = f16([0.05, 0.1, 0.02])
    zp = np.array([3, -2, 0], np.int8)
    outs = run(lambda v: (mb.quantize(input=v, scale=scale, zero_point=zp, axis=1, output_dtype="int8"),
                          mb.quantize(input=v, scale=np.float16(0.1), output_dtype="uint8"),
                          mb.dequantize(input=mb.quantize(input=v, scale=scale, zero_point=zp, axis=1,
                                                          output_dtype="int8"),
                                        scale=scale, zero_point=zp, axis=1)), {"v": x}, mode)
    s, z = scale.astype(np.float64).reshape(1, 3, 1), zp.astype(np.float64).reshape(1, 3, 1)
    q = np.clip(np.around(x / s) + z, -128, 127)
    assert outs[0].dtype == np.int8
    # fp16-strict rounds x / scale to fp16 before rounding to an integer: off by at most one step
    np.testing.assert_allclose(outs[0], q, atol=0 if mode == "fp32-accumulate" else 1)
    assert outs[1].dtype == np.uint8
    np.testing.assert_allclose(outs[1], np.clip(np.around(x.astype(np.float64) / float(np.float16(0.1))), 0, 255),
                               atol=0 if mode == "fp32-accumulate" else 1)
    assert_fp16(outs[2], s * (outs[0].astype(np.float64) - z), what="dequantize")


def test_sparse_compression_constexprs_match_coremltools_decompress():
    # called directly: the builder wants uint1/uint2 typed consts, which these handlers receive unpacked as uint8
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import (
        constexpr_lut_to_sparse,
        constexpr_sparse_blockwise_shift_scale,
    )

    from experiments.ane_engineering.run.mil.numerics import Numerics
    from experiments.ane_engineering.run.mil.registry import OPS, OpNode

    def node(op_type):
        return OpNode(0, op_type, op_type, "main", ["m", "v"], [None, None], [np.dtype(np.uint8), np.dtype(np.float16)])

    mask = (RNG.random((4, 6)) < 0.5).astype(np.uint8)
    mask[0, 0] = 1
    nnz = int(mask.sum())
    idx = RNG.integers(0, 4, nnz).astype(np.uint8)  # 2-bit palette indices
    cases = [(f16(RNG.standard_normal((2, 1, 4, 1))), None),  # two blocks along axis 0, scalar palettes
             (f16(RNG.standard_normal((1, 1, 4, 3))), np.int32(1))]  # vector palettes of 3 along axis 1
    for lut, axis in cases:
        args = {"indices_mask": mask, "indices_nonzero_data": idx, "lut": lut}
        if axis is not None:
            args["vector_axis"] = axis
        got_m, got_v = OPS["constexpr_lut_to_sparse"].handler(node("constexpr_lut_to_sparse"), args, Numerics())
        want_m, want_v = constexpr_lut_to_sparse.decompress(mask, idx, lut, axis)
        np.testing.assert_array_equal(got_m, want_m)
        np.testing.assert_array_equal(got_v, want_v)
    data = RNG.integers(-8, 8, nnz).astype(np.int8)
    scale, offset = f16(RNG.uniform(0.1, 1, (1, 6))), RNG.integers(-2, 3, (1, 6)).astype(np.int8)
    got_m, got_v = OPS["constexpr_sparse_blockwise_shift_scale"].handler(
        node("constexpr_sparse_blockwise_shift_scale"),
        {"data_mask": mask, "nonzero_data": data, "scale": scale, "offset": offset}, Numerics())
    want_m, want_v = constexpr_sparse_blockwise_shift_scale.decompress(mask, data, scale, offset)
    np.testing.assert_array_equal(got_m, want_m)
    np.testing.assert_array_equal(got_v, want_v)
