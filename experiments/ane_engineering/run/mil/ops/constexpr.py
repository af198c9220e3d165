"""Constants: const, and the constexpr_* decompression ops (constant inputs only; run once at load).
Formulas follow each op's `decompress` in coremltools (defs/iOS16/constexpr_ops.py, defs/iOS18/compression.py).
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import register
from .common import as_axis, as_ints


@register("const")
def op_const(node, args, num):
    # The executor reads a const's value from the loaded program (weight.bin) and passes it in as `val`.
    return args["val"]


def _unpack_bits(packed: np.ndarray, nbits: int, count: int) -> np.ndarray:
    """Elements packed LSB-first into bytes (the order coremltools writes sub-byte data in)."""
    bits = np.unpackbits(np.asarray(packed).astype(np.uint8).reshape(-1), bitorder="little")[: count * nbits]
    bits = bits.reshape(count, nbits).astype(np.uint16)
    return (bits << np.arange(nbits, dtype=np.uint16)).sum(axis=1).astype(np.uint8)


def _block_ids(shape: tuple[int, ...], blocks: tuple[int, ...]) -> np.ndarray:
    """For every element of `shape`, the flat id of its block when dim d is split into blocks[d] equal blocks."""
    ids = np.zeros((1,) * len(shape), dtype=np.int64)
    for d, (size, nb) in enumerate(zip(shape, blocks)):
        if size % nb:
            raise ValueError(f"dimension {d} of size {size} is not divisible into {nb} blocks")
        per = size // nb
        b = (np.arange(size) // per).reshape([size if i == d else 1 for i in range(len(shape))])
        ids = ids * nb + b
    return np.broadcast_to(ids, shape)


@register("constexpr_lut_to_dense")
def op_constexpr_lut_to_dense(node, args, num):
    lut = np.asarray(args["lut"])
    if "shape" in args:  # iOS16: packed uint8 indices, 1-D lut of 2^nbits entries, output shape
        shape = as_ints(args["shape"])
        nbits = round(math.log2(lut.size))
        idx = _unpack_bits(args["indices"], nbits, int(np.prod(shape)))
        return lut[idx].reshape(shape)
    # iOS18: indices (uintN, unpacked by PyMIL, one per element), lut [*blocks, 2^nbits, VECTOR_SIZE]
    indices = np.asarray(args["indices"]).astype(np.int64)
    rank = indices.ndim
    if lut.ndim != rank + 2:
        raise ValueError(f"lut rank {lut.ndim} != indices rank {rank} + 2 ({node.where()})")
    palettes, vsize = lut.shape[-2], lut.shape[-1]
    flat_lut = lut.reshape(-1, palettes, vsize)
    blocks = _block_ids(indices.shape, lut.shape[:rank])  # each index reads the table of its block
    values = flat_lut[blocks, indices]  # (*indices.shape, VECTOR_SIZE)
    if vsize == 1:
        return values[..., 0]
    axis = as_axis(args["vector_axis"], rank)
    values = np.moveaxis(values, -1, axis + 1)  # the vector fills `vsize` consecutive positions along `axis`
    shape = list(indices.shape)
    shape[axis] *= vsize
    return values.reshape(shape)


@register("constexpr_affine_dequantize")
def op_constexpr_affine_dequantize(node, args, num):
    # unquantized = scale * (quantized - zero_point), scale/zero_point broadcast along `axis`
    q = np.asarray(args["quantized_data"])
    scale = np.asarray(args["scale"])
    zp = np.asarray(args["zero_point"])
    axis = as_axis(args["axis"], q.ndim)

    def along(p):
        if p.ndim == q.ndim:
            return p
        if p.ndim == 0:
            return p.reshape((1,) * q.ndim)
        return p.reshape([p.size if i == axis else 1 for i in range(q.ndim)])

    out = q.astype(np.float32) - along(zp).astype(np.float32)
    out = out * along(scale).astype(np.float32)
    return out.astype(scale.dtype)


@register("constexpr_blockwise_shift_scale")
def op_constexpr_blockwise_shift_scale(node, args, num):
    # output = scale * (data - offset); scale/offset blocks repeat over data.shape / scale.shape elements
    data = np.asarray(args["data"])
    scale = np.asarray(args["scale"])
    offset = args.get("offset")
    values = data.astype(scale.dtype)
    reps = [d // s for d, s in zip(data.shape, scale.shape)]

    def expand(p):
        p = np.asarray(p)
        for axis, r in enumerate(reps):
            if r > 1:
                p = np.repeat(p, r, axis=axis)
        return p

    if offset is not None:
        values = values - expand(offset)
    return expand(scale) * values


@register("constexpr_sparse_to_dense")
def op_constexpr_sparse_to_dense(node, args, num):
    data = np.asarray(args["nonzero_data"])
    if "shape" in args:  # iOS16: bit mask packed LSB-first into uint8, explicit shape
        shape = as_ints(args["shape"])
        mask = np.unpackbits(np.asarray(args["mask"]).astype(np.uint8), bitorder="little")[: int(np.prod(shape))]
        out = np.zeros(int(np.prod(shape)), dtype=data.dtype)
        out[mask != 0] = data
        return out.reshape(shape)
    mask = np.asarray(args["mask"])  # iOS18: uint1 mask with the output shape
    out = np.zeros(mask.shape, dtype=data.dtype)
    out[mask != 0] = data
    return out


@register("constexpr_cast")
def op_constexpr_cast(node, args, num):
    return np.asarray(args["source_val"]).astype(node.output_dtypes[0])
