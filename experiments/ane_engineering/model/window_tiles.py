"""Attention layouts of an export, and the geometry of windowed (tiled) local attention shared by graph and host.

Two layouts exist. `dense`: every layer scores all L x L (key, query) pairs and sliding-window layers mask the far
ones (model/masks.py). `windowed`: sliding-window layers cut the queries into nT = ceil(L / T) tiles of T tokens;
tile t sees only the W = T + 2r keys its window can reach,

    query positions  t*T + j            j in [0, T)
    key positions    t*T - r + w        w in [0, W)      (r = local_attention // 2, the reference's radius)

so a tile's scores are (W, T) instead of (L, T). Keys outside [0, L) are padding the graph adds itself; the host's
tile-local mask hides them. Global layers stay dense in both layouts.

Mask rule in the tile layout (one definition; the FP32 reference's rule for every valid query):
- a key is visible only if it is a valid token (0 <= position < n);
- a valid query (position < n) additionally needs |key - query| <= r. Every such key lies inside its tile's window
  (the window is [t*T - r, t*T + T - 1 + r] and covers [q - r, q + r] for every q of the tile), so a valid query
  sees exactly the keys the reference lets it see;
- a padding query (position >= n, including the positions L..nT*T-1 of a last partial tile) sees the valid keys of
  its window: the reference's padded-query rule restricted to what the tile holds. Its output is never read (later
  layers mask padding keys; the read-outs read valid positions), and when its window holds no valid key the row is
  all -1e4, whose softmax is uniform and finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.buckets import MASK_BIAS
from ..core.errors import HarnessError

LAYOUTS = ("dense", "windowed", "reference-run")  # reference-run: model/bc1s/reference_attention.py
# Default tile: the calibrated cost model's lowest predicted L1024 body among T = 32, 64, 128, 256 on the
# mmBERT-base shape (ANE_MATH.md section 15; the long-attention evidence records the scan, and
# workflows/attention_choice.py `tile_scan` recomputes it for any checkpoint).
DEFAULT_TILE = 128


class LayoutError(HarnessError):
    """An attention layout this checkpoint or bucket cannot be exported or run with."""


@dataclass(frozen=True)
class WindowTiles:
    """Static geometry of one windowed bucket: length L, radius r, tile T."""

    length: int
    radius: int
    tile: int

    def __post_init__(self):
        if self.length < 1 or self.radius < 0 or self.tile < 1:
            raise LayoutError(f"window tiles need L >= 1, r >= 0, T >= 1; got L={self.length}, r={self.radius}, "
                              f"T={self.tile}")

    @property
    def n_tiles(self) -> int:  # nT
        return math.ceil(self.length / self.tile)

    @property
    def padded_length(self) -> int:  # nT * T >= L: queries are padded to whole tiles
        return self.n_tiles * self.tile

    @property
    def width(self) -> int:  # W: keys per tile
        return self.tile + 2 * self.radius

    @property
    def pieces(self) -> int:
        """How many tile-wide blocks a window spans: the window of tile t is blocks t..t+pieces-1 of the key sequence
        shifted right by r, the last one cut to width - (pieces - 1) * T."""
        return math.ceil(self.width / self.tile)

    @property
    def reach(self) -> int:
        """How many neighbouring tiles a window reaches into on each side: ceil(r / T)."""
        return math.ceil(self.radius / self.tile)

    def mask_shape(self) -> tuple[int, int, int, int]:
        return (1, self.width, self.n_tiles, self.tile)

    def key_positions(self) -> torch.Tensor:
        """(W, nT) absolute key position of window slot w of tile t (negative or >= L: graph padding)."""
        w = torch.arange(self.width)[:, None]
        t = torch.arange(self.n_tiles)[None, :]
        return t * self.tile - self.radius + w  # (W, nT)

    def query_positions(self) -> torch.Tensor:
        """(nT, T) absolute query position of slot j of tile t (>= L: padding of the last tile)."""
        return torch.arange(self.padded_length).reshape(self.n_tiles, self.tile)  # (nT, T)

    def to_json(self) -> dict:
        return {"tile": self.tile, "radius": self.radius, "n_tiles": self.n_tiles, "window_keys": self.width,
                "padded_length": self.padded_length}


def window_visible(tiles: WindowTiles, num_tokens: int) -> torch.Tensor:
    """Boolean (W, nT, T) visibility in the tile layout for the first `num_tokens` valid tokens (rule above)."""
    keys = tiles.key_positions()[:, :, None]  # (W, nT, 1)
    queries = tiles.query_positions()[None, :, :]  # (1, nT, T)
    key_valid = (keys >= 0) & (keys < num_tokens)  # (W, nT, 1)
    near = (keys - queries).abs() <= tiles.radius  # (W, nT, T)
    query_padding = queries >= num_tokens  # (1, nT, T)
    return key_valid & (near | query_padding)  # (W, nT, T)


def additive_window(tiles: WindowTiles, num_tokens: int) -> torch.Tensor:
    """Finite additive tile-local mask (1, W, nT, T): 0 where visible, MASK_BIAS elsewhere."""
    visible = window_visible(tiles, num_tokens)  # (W, nT, T)
    return torch.where(visible, 0.0, MASK_BIAS).to(torch.float32).unsqueeze(0)  # (1, W, nT, T)


@dataclass(frozen=True)
class AttentionLayout:
    """How sliding-window layers are exported: `dense` (L x L scores, masked) or `windowed` with tile T."""

    name: str = "dense"
    tile: int | None = None

    def __post_init__(self):
        if self.name not in LAYOUTS:
            raise LayoutError(f"attention layout must be one of {LAYOUTS}, got {self.name!r}")
        if self.name == "windowed" and (self.tile is None or self.tile < 1):
            raise LayoutError(f"the windowed layout needs a tile size >= 1, got {self.tile}")
        if self.name != "windowed" and self.tile is not None:
            raise LayoutError(f"the {self.name} layout has no tile size")

    @property
    def windowed(self) -> bool:
        return self.name == "windowed"

    @property
    def reference_run(self) -> bool:
        """The masked dense graph with split RoPE the reference run measured (model/bc1s/reference_attention.py)."""
        return self.name == "reference-run"

    def tiles(self, length: int, radius: int) -> WindowTiles | None:
        return WindowTiles(length, radius, self.tile) if self.windowed else None

    def to_json(self, length: int | None = None, radius: int | None = None) -> dict:
        out = {"layout": self.name, "tile": self.tile}
        if self.windowed and length is not None and radius is not None:
            out.update(WindowTiles(length, radius, self.tile).to_json())
        return out

    @classmethod
    def from_json(cls, value: dict | None) -> AttentionLayout:
        """The layout a manifest records; a manifest without the field predates windowed exports: dense."""
        if not value:
            return DENSE
        return cls(value["layout"], value.get("tile"))


DENSE = AttentionLayout()


def windowed(tile: int = DEFAULT_TILE) -> AttentionLayout:
    return AttentionLayout("windowed", tile)


def reference_run_layout() -> AttentionLayout:
    return AttentionLayout("reference-run")
