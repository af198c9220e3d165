"""Rules on tensor layout and size: rank, the (B, C, 1, S) form, dimension limits, row padding, batch, large
copies and the on-chip working set."""

from __future__ import annotations

import math

from ...core.limits import MAX_DIMENSION
from .context import CheckContext, finding, is_symbolic_dim, shape_str, tensor_info
from .registry import Finding, Orion, rule
from .sources import (
    PLACEMENT,
    SRC_ANE_LIMITS,
    SRC_APPLE_ARTICLE,
    SRC_CT_2536,
    SRC_ML_ANE,
    SRC_ORION,
    SRC_REFERENCE_RUN,
)

ANE_ROW_BYTES = 64                    # the ANE pads the last axis of a tensor to 64 bytes
SRAM_CLIFF_BYTES = 32 * 1024 * 1024   # Orion: throughput falls off a cliff near 32 MB of working set
LARGE_TRANSPOSE_BYTES = 4 * 1024 * 1024

# The input through which a windowed-attention package (model/window_tiles.py) declares its query tiles.
TILE_MASK_INPUT = "window_mask"


@rule("ANE-R01-rank",
      statement="No non-constant tensor of rank above 4.",
      source=f"{SRC_APPLE_ARTICLE} (Principle 1: the 4D channels-first data format); {SRC_CT_2536}",
      severity="error")
def check_rank(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [finding(rule_id, t, f"rank {len(t.shape)} tensor {shape_str(t.shape)}")
            for t in ctx.non_constant_tensors() if len(t.shape) > 4]


def tile_axes(ctx: CheckContext) -> set[int]:
    """Sizes dim 2 may take as a tile axis: from a (1, W, nT, T) tile mask input, nT (query tiles) and nT - s for
    s = 1..ceil(r / T), r = (W - T) / 2 (the tiles a window piece shifted by s tiles is cut from,
    model/bc1s/windowed_attention.py). Empty without such an input."""
    var = ctx.inputs.get(TILE_MASK_INPUT)
    shape = tuple(var.shape) if var is not None and var.shape is not None else ()
    if len(shape) != 4 or any(is_symbolic_dim(d) for d in shape):
        return set()
    width, tiles, tile = int(shape[1]), int(shape[2]), int(shape[3])
    if tile <= 0:
        return set()
    reach = math.ceil((width - tile) // 2 / tile)
    return {tiles} | {tiles - s for s in range(1, reach + 1) if tiles - s > 0}


@rule("ANE-R02-bc1s-form",
      statement="Every non-constant tensor is in (B, C, 1, S) form: rank 4 with dim 2 equal to 1, or equal to the "
                "tile axis a windowed package declares in its tile mask input.",
      source=f"{SRC_APPLE_ARTICLE} (Principle 1: the (B, C, 1, S) data format); {SRC_REFERENCE_RUN} (the B x L x C "
             f"export ran all {PLACEMENT['bxlxc_export']['assigned_ops']:,} ops on the CPU; the BC1S rewrite ran all "
             f"{PLACEMENT['bc1s_export']['non_constant_ops']:,} on the ANE)",
      severity="error",
      note="Attention scores (1, L, 1, L) and the marker selector (1, L, 1, 32) are of this form. Windowed "
           "attention carries query tiles in dim 2 ((1, C, nT, T), scores (1, T+2r, nT, T)): the ANE's native "
           "4D layout is (N, C, H, W), and MIL's native einsum '(B, C, H, W1) x (B, W1, H, W2)' keeps H as a "
           "batch axis. Dim 2 may therefore equal the tile count nT that the package's window_mask input "
           "(1, W, nT, T) declares, or nT - s for the s = 1..ceil(r/T) tiles a window piece is shifted by, and "
           "nothing else: a (B, heads, L, D) tensor is "
           "still an error. R18 still warns on einsums over tiles, as no compute plan has confirmed them yet. "
           "Boundary casts of an fp32 interface are left to "
           "ANE-R14-fp32-io.")
def check_bc1s_form(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    tiles = tile_axes(ctx)
    for t in ctx.non_constant_tensors(include_boundary_casts=False):
        rank = len(t.shape)
        if rank > 4:
            continue  # reported by the rank rule
        if rank != 4:
            found.append(finding(rule_id, t, f"rank {rank} tensor {shape_str(t.shape)}, not (B, C, 1, S)"))
        elif is_symbolic_dim(t.shape[2]) or int(t.shape[2]) not in {1} | tiles:
            found.append(finding(rule_id, t, f"tensor {shape_str(t.shape)} has dim 2 = {t.shape[2]}, not 1"
                                             + (f" or a tile axis {sorted(tiles)}" if tiles else "")))
    return found


@rule("ANE-R03-dimension-limit",
      statement=f"No tensor dimension (constants included) above {MAX_DIMENSION}.",
      source=SRC_ANE_LIMITS,
      severity="error",
      note="The ANE compiler message allows N and C up to 65536 but D, H and W only up to 16384; the stricter "
           "limit is applied to every axis.")
def check_dimension_limit(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for t in ctx.non_constant_tensors():
        big = [d for d in t.shape if not is_symbolic_dim(d) and int(d) > MAX_DIMENSION]
        if big:
            found.append(finding(rule_id, t, f"tensor {shape_str(t.shape)}: dimension {max(big)} > {MAX_DIMENSION}"))
    for op, var in ctx.constant_outputs():
        info = tensor_info(var)
        if info:
            big = [d for d in info[0] if not is_symbolic_dim(d) and int(d) > MAX_DIMENSION]
            if big:
                found.append(finding(rule_id, op,
                                     f"constant {shape_str(info[0])}: dimension {max(big)} > {MAX_DIMENSION}"))
    return found


@rule("ANE-R17-last-axis-padding",
      statement="The last axis of a non-constant tensor does not waste more than half of its 64-byte-padded row.",
      source=f"{SRC_APPLE_ARTICLE} (Principle 1: the last axis is padded to 64 bytes)",
      severity="warning",
      note="fp16 last dims of 1..15 waste more than half; 16 wastes exactly half.")
def check_last_axis_padding(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for t in ctx.non_constant_tensors():
        if not t.shape or is_symbolic_dim(t.shape[-1]):
            continue
        row = int(t.shape[-1]) * t.itemsize
        padded = max(ANE_ROW_BYTES, -(-row // ANE_ROW_BYTES) * ANE_ROW_BYTES)
        waste = padded - row
        if waste * 2 > padded:
            found.append(finding(rule_id, t, f"last axis {t.shape[-1]} x {t.itemsize} B = {row} B padded to {padded} B "
                                             f"({waste / padded:.0%} padding)"))
    return found


@rule("ANE-R21-large-transpose",
      statement=f"No transpose of a non-constant tensor above {LARGE_TRANSPOSE_BYTES // 2**20} MiB.",
      source=f"{SRC_APPLE_ARTICLE} (Principle 3: minimise memory copies); {SRC_ML_ANE} (K is transposed once)",
      severity="warning",
      note="The BC1S body transposes K once per layer: (1, 768, 1, 1024) fp16 is 1.5 MiB, under the threshold.")
def check_large_transpose(ctx: CheckContext, rule_id: str) -> list[Finding]:
    found = []
    for t in ctx.non_constant_tensors():
        if t.op_type == "transpose" and t.nbytes is not None and t.nbytes > LARGE_TRANSPOSE_BYTES:
            found.append(finding(rule_id, t, f"transpose copies {t.nbytes / 2**20:.1f} MiB "
                                             f"(> {LARGE_TRANSPOSE_BYTES / 2**20:.0f} MiB), {shape_str(t.shape)}"))
    return found


@rule("ANE-R22-batch-one",
      statement="Rank-4 non-constant tensors have batch dimension 1.",
      source=f"{SRC_REFERENCE_RUN} (batch 1; questions run one after another)",
      severity="warning")
def check_batch(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [finding(rule_id, t, f"batch dimension {t.shape[0]} in {shape_str(t.shape)}")
            for t in ctx.non_constant_tensors()
            if len(t.shape) == 4 and (is_symbolic_dim(t.shape[0]) or int(t.shape[0]) != 1)]


@rule("ANE-R24-sram-cliff",
      statement=f"No non-constant tensor above {SRAM_CLIFF_BYTES // 2**20} MiB.",
      source=SRC_ORION + " (SRAM cliff near 32 MB)",
      severity="warning",
      orion=Orion("warned", "Core ML tiles large tensors itself, so they still run, but past the on-chip SRAM "
                            "they spill to DRAM and throughput drops."))
def check_sram_cliff(ctx: CheckContext, rule_id: str) -> list[Finding]:
    return [finding(rule_id, t, f"tensor {shape_str(t.shape)} {t.dtype} is {t.nbytes / 2**20:.1f} MiB "
                                f"(> {SRAM_CLIFF_BYTES / 2**20:.0f} MiB)")
            for t in ctx.non_constant_tensors() if t.nbytes is not None and t.nbytes > SRAM_CLIFF_BYTES]
