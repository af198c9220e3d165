"""Slicing ops (ops/slicing.py) in the mil executor, against numpy: exact copies."""

from __future__ import annotations

import numpy as np

from executor_ops_support import ct, f16, mb, run

RNG = np.random.default_rng(77)


def test_reverse_sequence_fill_like_reshape_like_slice_update():
    """reverse_sequence and slice_update here; fill_like (ops/shape_construction.py) and reshape_like
    (ops/reshape.py) in the same program."""
    x = f16(RNG.standard_normal((3, 5, 2)))
    lengths = np.array([2, 5, 0], np.int32)
    upd = f16(RNG.standard_normal((3, 2, 2)))
    r = f16(np.zeros((2, 15)))
    outs = run(lambda v, n, u, r: (mb.reverse_sequence(x=v, lengths=n, seq_axis=1, batch_axis=0),
                                mb.fill_like(ref_tensor=v, value=np.float16(4.5)),
                                mb.reshape_like(x=v, ref_tensors=(r, v), begins=(1, 2), ends=(2, 3),
                                                end_masks=(True, False)),
                                mb.slice_update(x=v, update=u, begin=[0, 1, 0], end=[3, 5, 2], stride=[1, 2, 1]),
                                mb.slice_update(x=v, update=mb.slice_by_index(x=u, begin=[0, 0, 0], end=[3, 1, 2],
                                                                             squeeze_mask=[False, True, False]),
                                                begin=[0, 4, 0], end=[3, 5, 2], squeeze_mask=[False, True, False])),
               {"v": x, "n": lengths, "u": upd, "r": r}, opset=ct.target.iOS18)
    ref = x.copy()
    for b, n in enumerate(lengths):
        ref[b, :n] = x[b, :n][::-1]
    np.testing.assert_array_equal(outs[0], ref)
    np.testing.assert_array_equal(outs[1], np.full(x.shape, 4.5, np.float16))
    np.testing.assert_array_equal(outs[2], x.reshape(15, 2))  # r.shape[1:] + v.shape[2:3]
    ref = x.copy()
    ref[:, 1:5:2] = upd
    np.testing.assert_array_equal(outs[3], ref)
    ref = x.copy()
    ref[:, 4] = upd[:, 0]
    np.testing.assert_array_equal(outs[4], ref)
