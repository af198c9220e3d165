"""Block rearrangements (ops/block_rearrange.py) in the mil executor, against torch and numpy: exact copies."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from executor_ops_support import ct, f16, mb, run

RNG = np.random.default_rng(77)


def test_layout_ops_match_torch():
    """pixel_shuffle, depth_to_space, space_to_batch and their inverses here; flatten2d (ops/reshape.py), reverse and
    sliding_windows (ops/slicing.py) in the same program."""
    x = f16(RNG.standard_normal((2, 8, 4, 6)))
    t = torch.from_numpy(x.astype(np.float32))
    outs = run(lambda v: (mb.pixel_shuffle(x=v, upscale_factor=2),
                          mb.pixel_unshuffle(x=v, downscale_factor=np.uint32(2)),
                          mb.depth_to_space(x=v, block_size=2), mb.space_to_depth(x=v, block_size=2),
                          mb.space_to_depth(x=mb.depth_to_space(x=v, block_size=2), block_size=2),
                          mb.space_to_batch(x=v, block_shape=[2, 3], paddings=[[0, 2], [3, 0]]),
                          mb.batch_to_space(x=mb.space_to_batch(x=v, block_shape=[2, 3], paddings=[[0, 2], [3, 0]]),
                                            block_shape=[2, 3], crops=[[0, 2], [3, 0]]),
                          mb.flatten2d(x=v, axis=-2), mb.flatten2d(x=v),
                          mb.reverse(x=v, axes=[1, -1]), mb.reverse(x=v),
                          mb.sliding_windows(x=v, axis=-1, size=3, stride=2)),
               {"x": x}, opset=ct.target.iOS16)
    np.testing.assert_array_equal(outs[0], F.pixel_shuffle(t, 2).numpy().astype(np.float16))
    np.testing.assert_array_equal(outs[1], F.pixel_unshuffle(t, 2).numpy().astype(np.float16))
    # depth_to_space in DCR order: out[n, c, 2h + i, 2w + j] = in[n, (2i + j) * C/4 + c, h, w]
    d2s = np.empty((2, 2, 8, 12), np.float16)
    for i in range(2):
        for j in range(2):
            d2s[:, :, i::2, j::2] = x[:, (2 * i + j) * 2:(2 * i + j) * 2 + 2]
    np.testing.assert_array_equal(outs[2], d2s)
    s2d = np.concatenate([x[:, :, i::2, j::2] for i in range(2) for j in range(2)], axis=1)
    np.testing.assert_array_equal(outs[3], s2d)
    np.testing.assert_array_equal(outs[4], x)
    padded = np.pad(x, [(0, 0), (0, 0), (0, 2), (3, 0)])
    s2b = np.concatenate([padded[:, :, i::2, j::3] for i in range(2) for j in range(3)], axis=0)
    np.testing.assert_array_equal(outs[5], s2b)
    np.testing.assert_array_equal(outs[6], x)
    np.testing.assert_array_equal(outs[7], x.reshape(2 * 8, 4 * 6))
    np.testing.assert_array_equal(outs[8], x.reshape(2, -1))
    np.testing.assert_array_equal(outs[9], x[:, ::-1, :, ::-1])
    np.testing.assert_array_equal(outs[10], x[::-1, ::-1, ::-1, ::-1])
    np.testing.assert_array_equal(outs[11], np.stack([x[..., s:s + 3] for s in (0, 2)], axis=-2))
