"""resample and affine (ops/resample.py) in the mil executor, against PyTorch's grid_sample / affine_grid."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from executor_ops_support import assert_fp16, ct, f16, mb, run

RNG = np.random.default_rng(99)


GRID_CASES = [  # (sampling, torch padding, align_corners) -> Core ML padding as coremltools' converter maps it
    ("bilinear", "zeros", True), ("bilinear", "zeros", False), ("bilinear", "border", False),
    ("bilinear", "reflection", True), ("bilinear", "reflection", False), ("nearest", "border", True),
    ("nearest", "zeros", False),
]


def _coreml_padding(padding, align):
    return {"zeros": "constant", "border": "border"}.get(padding, "reflection" if align else "symmetric")


def test_resample_matches_torch_grid_sample():
    x = f16(RNG.standard_normal((2, 3, 5, 6)))
    grid = f16(RNG.uniform(-1.4, 1.4, (2, 4, 7, 2)))
    outs = run(lambda v, g: tuple(mb.resample(x=v, coordinates=g, sampling_mode=s, padding_mode=_coreml_padding(p, a),
                                              padding_value=np.float16(0),
                                              coordinates_mode="normalized_minus_one_to_one",
                                              align_corners=a) for s, p, a in GRID_CASES),
               {"v": x, "g": grid}, opset=ct.target.iOS16)
    xt, gt = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(grid.astype(np.float64))
    for out, (s, p, a) in zip(outs, GRID_CASES):
        ref = F.grid_sample(xt, gt, mode=s, padding_mode=p, align_corners=a).numpy()
        assert_fp16(out, ref, extra=1e-5, what=f"resample {s} {p} align={a}")


def test_resample_unnormalized_constant_value_and_affine():
    x = f16(RNG.standard_normal((1, 2, 4, 4)))
    pts = f16([[[[0, 0], [3, 3], [1.5, 0.5], [-1, 2], [3.5, 1]]]])  # (w, h) in pixels; two outside
    theta = f16([[0.8, -0.3, 0.1, 0.2, 1.1, -0.2]])
    outs = run(lambda v, p, t: (mb.resample(x=v, coordinates=p, sampling_mode="bilinear", padding_mode="constant",
                                            padding_value=np.float16(0), coordinates_mode="unnormalized",
                                            align_corners=True),
                                mb.affine(x=v, transform_matrix=t, output_height=3, output_width=5,
                                          sampling_mode="bilinear",
                                          padding_mode="constant", padding_value=np.float16(0),
                                          coordinates_mode="normalized_minus_one_to_one", align_corners=True)),
               {"v": x, "p": pts, "t": theta})
    x64 = x.astype(np.float64)
    assert_fp16(outs[0][..., :2], np.stack([x64[0, :, 0, 0], x64[0, :, 3, 3]], -1)[None, :, None], what="corners")
    mid = 0.5 * (0.5 * x64[0, :, 0, 1] + 0.5 * x64[0, :, 0, 2]) + 0.5 * (0.5 * x64[0, :, 1, 1] + 0.5 * x64[0, :, 1, 2])
    assert_fp16(outs[0][0, :, 0, 2], mid, extra=1e-5, what="midpoint")
    # (w=-1, h=2): all weight on the tap left of the image -> padding_value 0; (3.5, 1): half on x[1, 3], half outside
    assert_fp16(outs[0][0, :, 0, 3], np.zeros(2), what="outside left")
    assert_fp16(outs[0][0, :, 0, 4], 0.5 * x64[0, :, 1, 3], extra=1e-5, what="half outside right")
    grid = F.affine_grid(torch.from_numpy(theta.astype(np.float64)).reshape(1, 2, 3), (1, 2, 3, 5), align_corners=True)
    ref = F.grid_sample(torch.from_numpy(x64), grid, align_corners=True).numpy()
    assert_fp16(outs[1], ref, extra=1e-5, what="affine")
