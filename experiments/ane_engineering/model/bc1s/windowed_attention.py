"""ANE principle: op count matters as much as bytes, so all tiles of a head go through one op.

Windowed local attention for sliding-window layers (geometry and mask rule: model/window_tiles.py). The tiles ride
in the spare height axis of (B, C, 1, S): queries (1, C, nT, T), key/value windows (1, C, nT, W) with W = T + 2r.
Per head h (D channels), one op each for all nT tiles:

    scores  (1, W, nT, T) = einsum('bchq,bkhc->bkhq', q_h (1, D, nT, T), k_h (1, W, nT, D)) + window_mask
    weights = softmax(scores, dim=1)                                   # over the window's keys
    out_h   (1, D, nT, T) = einsum('bkhq,bchk->bchq', weights, v_h (1, D, nT, W))

This is MIL's native einsum (B, C, H, W1) x (B, W1, H, W2) with H = nT. A sliding layer works in tiles from its
input on: the normed input is tiled once (1, C, 1, L) -> (1, C, nT, T) (zero columns pad the last tile), and the
Q, K and V convs run on the tiles (a 1x1 conv does not care how the columns are arranged), RoPE with tables laid
out the same way. The windows of K and of V are then cut from the tiles with static slices and no gather: tile t's
window is the last r columns before it, the tile itself and the first r columns after it,

    window(t) = [ X[t-a..t-1] (last r columns) | X[t] | X[t+1..t+a] (first r columns) ],   a = ceil(r / T)

where X[t+s] for all t at once is X shifted along the tile axis by s tiles (a slice and a concat with zero tiles),
so a window is 2a + 1 pieces laid side by side in one concat; slot w of tile t is key t*T - r + w. For r <= T
(mmBERT: r = 64, T = 128) that is a left and a right edge piece around the tile. K is transposed once, as tiles
(1, T, nT, C), before the overlapping windows are cut, then split into heads; the V windows are split into heads.
Keys outside [0, L) are zero or the convs' output at zero padding columns: either way finite, and hidden by the
mask; their values are multiplied by exact zero weights. The heads' output is untiled once (1, C, nT, T) ->
(1, C, 1, L) for the output projection and the residual. (Cutting the windows of the untiled sequence instead --
pad, view as blocks, slice, concat -- moves the padded sequence twice more; stacking K and V to cut both at once
costs a concat and a split of the 2x wider windows: ANE_MATH.md section 16.)
"""

from __future__ import annotations

import torch
from torch import nn

from ..window_tiles import WindowTiles


class WindowTiling(nn.Module):
    """Static tiling of one bucket: (1, C, 1, L) <-> (1, C, nT, T), and the windows of one head's tiled K and V
    of D = head_dim channels. One instance is shared by every sliding layer, so each zero block is one constant of
    the package."""

    def __init__(self, tiles: WindowTiles, hidden: int, head_dim: int):
        super().__init__()
        self.tiles, self.hidden, self.head_dim = tiles, hidden, head_dim
        self.query_pad = tiles.padded_length - tiles.length
        if self.query_pad:
            self.register_buffer("query_zeros", torch.zeros(1, hidden, 1, self.query_pad))  # (1, C, 1, pad)
        channels = head_dim
        for keys_first in (False, True):
            for shift, width in self._pieces():
                tiles_off = min(abs(shift), tiles.n_tiles)
                if shift:
                    shape = (1, width, tiles_off, channels) if keys_first else (1, channels, tiles_off, width)
                    self.register_buffer(self._zeros_name(keys_first, shift), torch.zeros(shape))

    def _pieces(self) -> list[tuple[int, int]]:
        """(tile shift s, width) of each window piece, left to right: the last `width` columns of X[t+s] for s < 0,
        all of X[t], the first `width` columns for s > 0."""
        t = self.tiles
        reach = t.reach  # a: tiles a window reaches on each side
        outer = t.radius - (reach - 1) * t.tile  # columns taken from the farthest tile
        left = [(-s, outer if s == reach else t.tile) for s in range(reach, 0, -1)]
        right = [(s, outer if s == reach else t.tile) for s in range(1, reach + 1)]
        return left + [(0, t.tile)] + right

    @staticmethod
    def _zeros_name(keys_first: bool, shift: int) -> str:
        return f"{'key' if keys_first else 'value'}_zeros_{'before' if shift < 0 else 'after'}_{abs(shift)}"

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """(1, C, 1, L) -> (1, C, nT, T); positions L..nT*T-1 are zero padding columns."""
        t = self.tiles
        if self.query_pad:
            x = torch.cat((x, self.query_zeros), dim=3)  # (1, C, 1, nT*T)
        return x.reshape(1, x.shape[1], t.n_tiles, t.tile)  # (1, C, nT, T)

    def untile(self, y: torch.Tensor) -> torch.Tensor:
        """(1, C, nT, T) -> (1, C, 1, L), dropping the padding queries of the last tile."""
        t = self.tiles
        y = y.reshape(1, y.shape[1], 1, t.padded_length)  # (1, C, 1, nT*T)
        return y[..., :t.length] if self.query_pad else y  # (1, C, 1, L)

    def windows(self, x: torch.Tensor, keys_first: bool = False) -> torch.Tensor:
        """One head's tiles (1, D, nT, T) -> (1, D, nT, W): [.., t, w] is column t*T - r + w (zero outside the
        tiles). keys_first: transposed tiles (1, T, nT, D) -> (1, W, nT, D), the layout of K in the score einsum."""
        n = self.tiles.n_tiles
        slot_axis = 1 if keys_first else 3
        pieces = []
        for shift, width in self._pieces():
            if shift == 0:
                pieces.append(x)  # (1, C, nT, T) / (1, T, nT, C)
                continue
            columns = slice(x.shape[slot_axis] - width, None) if shift < 0 else slice(0, width)
            index = [slice(None)] * 4
            index[slot_axis] = columns
            zeros = getattr(self, self._zeros_name(keys_first, shift))  # (.., |s| tiles, ..)
            if abs(shift) >= n:  # every tile of this piece lies outside the sequence
                pieces.append(zeros)
                continue
            index[2] = slice(0, n + shift) if shift < 0 else slice(shift, n)
            part = x[tuple(index)]  # (1, C, nT - |s|, width) / (1, width, nT - |s|, C)
            pieces.append(torch.cat((zeros, part) if shift < 0 else (part, zeros), dim=2))  # (.., nT, ..)
        return torch.cat(pieces, dim=slot_axis) if len(pieces) > 1 else pieces[0]  # (1, C, nT, W) / (1, W, nT, C)


def windowed_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, tiling: WindowTiling,
                   head_dim: int, observe=None) -> torch.Tensor:
    """Attention of every head over its window: q, k (rotated) and v as tiles (1, C, nT, T), mask (1, W, nT, T).
    Returns the concatenated head outputs (1, C, nT, T)."""
    qs = q.split(head_dim, dim=1)  # H x (1, D, nT, T)
    ks = k.permute(0, 3, 2, 1).split(head_dim, dim=3)  # H x (1, T, nT, D): the one K transpose
    vs = v.split(head_dim, dim=1)  # H x (1, D, nT, T)
    heads = []
    for q_h, k_h, v_h in zip(qs, ks, vs):
        k_h, v_h = tiling.windows(k_h, keys_first=True), tiling.windows(v_h)  # (1, W, nT, D) / (1, D, nT, W)
        scores = torch.einsum("bchq,bkhc->bkhq", q_h, k_h)  # (1, W, nT, T)
        weights = (scores + mask).softmax(dim=1)  # (1, W, nT, T)
        heads.append(torch.einsum("bkhq,bchk->bchq", weights, v_h))  # (1, D, nT, T)
        if observe is not None:
            observe("activation", "heads", heads[-1])
    return torch.cat(heads, dim=1)  # (1, C, nT, T)
