"""ANE principle: op count matters as much as bytes, so all tiles of a head go through one op.

Windowed local attention for sliding-window layers (geometry and mask rule: model/window_tiles.py). The tiles ride
in the spare height axis of (B, C, 1, S): queries (1, C, nT, T), key/value windows (1, C, nT, W) with W = T + 2r.
Per head h (D channels), one op each for all nT tiles:

    scores  (1, W, nT, T) = einsum('bchq,bkhc->bkhq', q_h (1, D, nT, T), k_h (1, W, nT, D)) + window_mask
    weights = softmax(scores, dim=1)                                   # over the window's keys
    out_h   (1, D, nT, T) = einsum('bkhq,bchk->bchq', weights, v_h (1, D, nT, W))

This is MIL's native einsum (B, C, H, W1) x (B, W1, H, W2) with H = nT. The windows of K and of V are built once
per layer for all heads, each with static slices and no gather: pad the sequence (1, C, 1, L) with r zero columns
on the left and zeros up to (nT + P - 1) * T on the right (one concat with constant zeros), view it as
(1, C, nT + P - 1, T) blocks (a reshape), and take P = ceil(W / T) shifted block ranges [p, p + nT) of width
min(T, W - p*T) (P slices), laid side by side on the last axis (one concat): slot w of tile t is key t*T - r + w.
K is transposed once, as blocks before the pieces are cut (the windows overlap, so they are larger), then split
into heads; the V windows are split into heads. Zero keys are hidden by
the mask; zero values are multiplied by exact zero weights. (Stacking K and V on the channel axis to build both
windows in one pass costs a concat of K and V and a split of the 2x wider windows: more bytes than the few ops
it saves, ANE_MATH.md section 16.)
"""

from __future__ import annotations

import torch
from torch import nn

from ..model.window_tiles import WindowTiles


class WindowTiling(nn.Module):
    """Static tiling of one bucket: queries (1, C, 1, L), keys and values (1, C, 1, L). One instance is shared by
    every sliding layer, so each zero block is one constant of the package."""

    def __init__(self, tiles: WindowTiles, channels: int):
        super().__init__()
        self.tiles, self.channels = tiles, channels
        self.query_pad = tiles.padded_length - tiles.length
        if self.query_pad:
            self.register_buffer("query_zeros", torch.zeros(1, channels, 1, self.query_pad))  # (1, C, 1, pad)
        for side, width in (("left", tiles.left_pad), ("right", tiles.right_pad)):
            if width:
                self.register_buffer(f"{side}_zeros", torch.zeros(1, channels, 1, width))  # (1, C, 1, width)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """(1, C, 1, L) -> (1, C, nT, T); positions L..nT*T-1 are zero padding queries."""
        t = self.tiles
        if self.query_pad:
            x = torch.cat((x, self.query_zeros), dim=3)  # (1, C, 1, nT*T)
        return x.reshape(1, self.channels, t.n_tiles, t.tile)  # (1, C, nT, T)

    def untile(self, y: torch.Tensor) -> torch.Tensor:
        """(1, C, nT, T) -> (1, C, 1, L), dropping the padding queries of the last tile."""
        t = self.tiles
        y = y.reshape(1, y.shape[1], 1, t.padded_length)  # (1, C, 1, nT*T)
        return y[..., :t.length] if self.query_pad else y  # (1, C, 1, L)

    def windows(self, x: torch.Tensor, keys_first: bool = False) -> torch.Tensor:
        """(1, C, 1, L) -> (1, C, nT, W): [.., t, w] is column t*T - r + w (zero outside [0, L)).
        keys_first: (1, W, nT, C) instead, the layout of K in the score einsum. The blocks are transposed before
        the overlapping pieces are cut, so the transpose moves (nT+P-1)*T columns, not nT*W."""
        t = self.tiles
        parts = ([self.left_zeros] if t.left_pad else []) + [x] + ([self.right_zeros] if t.right_pad else [])
        padded = torch.cat(parts, dim=3) if len(parts) > 1 else x  # (1, C, 1, (nT+P-1)*T)
        blocks = padded.reshape(1, self.channels, t.key_blocks, t.tile)  # (1, C, nT+P-1, T)
        if keys_first:
            blocks = blocks.permute(0, 3, 2, 1)  # (1, T, nT+P-1, C): the one K transpose
            pieces = [blocks[:, :width, p:p + t.n_tiles, :] for p, width in enumerate(t.piece_widths())]  # (1, <=T, nT, C)
            return torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0]  # (1, W, nT, C)
        pieces = [blocks[:, :, p:p + t.n_tiles, :width] for p, width in enumerate(t.piece_widths())]  # (1, C, nT, <=T)
        return torch.cat(pieces, dim=3) if len(pieces) > 1 else pieces[0]  # (1, C, nT, W)


def windowed_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, tiling: WindowTiling,
                   head_dim: int, observe=None) -> torch.Tensor:
    """Attention of every head over its window. q, k (rotated), v: (1, C, 1, L); mask (1, W, nT, T).
    Returns the concatenated head outputs (1, C, 1, L)."""
    q_tiles = tiling.queries(q)  # (1, C, nT, T)
    k_windows = tiling.windows(k, keys_first=True)  # (1, W, nT, C)
    v_windows = tiling.windows(v)  # (1, C, nT, W)
    qs, ks = q_tiles.split(head_dim, dim=1), k_windows.split(head_dim, dim=3)  # H x (1, D, nT, T) / (1, W, nT, D)
    vs = v_windows.split(head_dim, dim=1)  # H x (1, D, nT, W)
    heads = []
    for q_h, k_h, v_h in zip(qs, ks, vs):
        scores = torch.einsum("bchq,bkhc->bkhq", q_h, k_h)  # (1, W, nT, T)
        weights = (scores + mask).softmax(dim=1)  # (1, W, nT, T)
        heads.append(torch.einsum("bkhq,bchk->bchq", weights, v_h))  # (1, D, nT, T)
        if observe is not None:
            observe("activation", "heads", tiling.untile(heads[-1]))
    return tiling.untile(torch.cat(heads, dim=1))  # (1, C, 1, L)
