"""Active supports of the transport problem, stored blockwise in O(L * W) memory.

A support is a disjoint union of rectangular *pieces* of the (augmented) score
matrix. Each piece covers rows ``[r0, r0 + nr)`` and columns ``[c0, c0 + nc)`` and is
either dense or a band ``|i - j| <= band`` in the piece's local coordinates
(``band`` is the half-width: a row has up to ``2 * band + 1`` keys).

A piece is stored as ``nb`` query blocks of ``bq`` rows; block ``b`` sees a
contiguous key window of ``window`` columns starting at ``b * bq - band``
(``window = bq + 2 * band``), or all ``nc`` columns when the piece is dense. Every
tensor living on the piece therefore has shape ``[..., nb, bq, window]``: O(L * W)
for a band, O(Lq * Lk) for a dense piece. Column reductions scatter the window
positions back to key indices, so nothing of size Lq x Lk is ever formed for a band.

The balanced problem is one piece. The band-preserving dustbin variant is three:
the band, an always-active dustbin column and an always-active dustbin row.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Piece", "Support"]

_NEG_INF = -jnp.inf


@dataclass(frozen=True)
class Piece:
    """One rectangular block of the support: rows [r0, r0+nr), columns [c0, c0+nc)."""

    r0: int
    nr: int
    c0: int
    nc: int
    band: int | None = None
    block: int = 128

    def __post_init__(self) -> None:
        if min(self.nr, self.nc) < 1:
            raise ValueError(f"piece must be non-empty, got nr={self.nr}, nc={self.nc}")
        if self.band is not None and self.band < 0:
            raise ValueError(f"band={self.band} must be >= 0 or None")
        if self.block < 1:
            raise ValueError(f"block={self.block} must be positive")

    # ---- static geometry (numpy, computed once per piece) -------------------------
    @property
    def dense(self) -> bool:
        if self.band is None or self.band >= max(self.nr, self.nc) - 1:
            return True
        # A band wider than the piece costs more as windows than as one dense block.
        return min(self.block, self.nr) + 2 * self.band >= self.nc

    @property
    def bq(self) -> int:
        return self.nr if self.dense else min(self.block, self.nr)

    @property
    def nb(self) -> int:
        return -(-self.nr // self.bq)

    @property
    def window(self) -> int:
        return self.nc if self.dense else self.bq + 2 * self.band

    @functools.cached_property
    def col_index(self) -> np.ndarray:
        """Key index (local) of every window slot, [nb, window]; ``nc`` marks out of range."""
        if self.dense:
            return np.broadcast_to(np.arange(self.nc), (self.nb, self.nc)).copy()
        start = np.arange(self.nb)[:, None] * self.bq - self.band
        idx = start + np.arange(self.window)[None, :]
        return np.where((idx >= 0) & (idx < self.nc), idx, self.nc)

    @functools.cached_property
    def static_mask(self) -> np.ndarray:
        """Slots inside the piece and inside the band, [nb, bq, window] bool."""
        rows = np.arange(self.nb * self.bq).reshape(self.nb, self.bq)
        cols = self.col_index
        inside = (rows[:, :, None] < self.nr) & (cols[:, None, :] < self.nc)
        if self.band is not None:
            inside &= np.abs(rows[:, :, None] - cols[:, None, :]) <= self.band
        return inside

    @property
    def identity_columns(self) -> bool:
        return self.nb == 1 and self.window == self.nc

    # ---- gathers: full-length arrays -> piece layout ------------------------------
    def row_blocks(self, x: jnp.ndarray) -> jnp.ndarray:
        """[..., Lq] -> [..., nb, bq, 1] (padding rows are zero)."""
        return self._rows(x[..., None])

    def row_blocks_mat(self, x: jnp.ndarray) -> jnp.ndarray:
        """[..., Lq, e] -> [..., nb, bq, e]."""
        return self._rows(x)

    def _rows(self, x: jnp.ndarray) -> jnp.ndarray:
        part = x[..., self.r0 : self.r0 + self.nr, :]
        pad = self.nb * self.bq - self.nr
        if pad:
            part = jnp.pad(part, [(0, 0)] * (part.ndim - 2) + [(0, pad), (0, 0)])
        return part.reshape(part.shape[:-2] + (self.nb, self.bq, part.shape[-1]))

    def col_windows(self, y: jnp.ndarray) -> jnp.ndarray:
        """[..., Lk] -> [..., nb, 1, window] (out-of-range slots are zero)."""
        return self._cols(y[..., None])[..., 0][..., None, :]

    def col_windows_mat(self, y: jnp.ndarray) -> jnp.ndarray:
        """[..., Lk, e] -> [..., nb, window, e]."""
        return self._cols(y)

    def _cols(self, y: jnp.ndarray) -> jnp.ndarray:
        part = y[..., self.c0 : self.c0 + self.nc, :]
        if self.identity_columns:
            return part[..., None, :, :]
        part = jnp.pad(part, [(0, 0)] * (part.ndim - 2) + [(0, 1), (0, 0)])
        return jnp.take(part, jnp.asarray(self.col_index.reshape(-1)), axis=-2).reshape(
            part.shape[:-2] + (self.nb, self.window, part.shape[-1])
        )

    # ---- reductions: piece layout -> piece-local vectors --------------------------
    def unblock_rows(self, x: jnp.ndarray) -> jnp.ndarray:
        """[..., nb, bq] -> [..., nr]."""
        return x.reshape(x.shape[:-2] + (self.nb * self.bq,))[..., : self.nr]

    def unblock_rows_mat(self, x: jnp.ndarray) -> jnp.ndarray:
        """[..., nb, bq, e] -> [..., nr, e]."""
        return x.reshape(x.shape[:-3] + (self.nb * self.bq, x.shape[-1]))[..., : self.nr, :]

    def scatter_cols(self, x: jnp.ndarray, how: str = "add") -> jnp.ndarray:
        """[..., nb, window] -> [..., nc], combining slots of the same key by sum or max."""
        if self.identity_columns:
            return x[..., 0, :]
        fill = 0.0 if how == "add" else _NEG_INF
        out = jnp.full(x.shape[:-2] + (self.nc + 1,), fill, dtype=x.dtype)
        flat = x.reshape(x.shape[:-2] + (self.nb * self.window,))
        idx = jnp.asarray(self.col_index.reshape(-1))
        out = out.at[..., idx].add(flat) if how == "add" else out.at[..., idx].max(flat)
        return out[..., : self.nc]

    def scatter_cols_mat(self, x: jnp.ndarray) -> jnp.ndarray:
        """[..., nb, window, e] -> [..., nc, e] (sum over slots of the same key)."""
        if self.identity_columns:
            return x[..., 0, :, :]
        out = jnp.zeros(x.shape[:-3] + (self.nc + 1, x.shape[-1]), dtype=x.dtype)
        flat = x.reshape(x.shape[:-3] + (self.nb * self.window, x.shape[-1]))
        out = out.at[..., jnp.asarray(self.col_index.reshape(-1)), :].add(flat)
        return out[..., : self.nc, :]


@jax.tree_util.register_static  # no arrays, all static: a solve's result passes through jit and vmap
@dataclass(frozen=True)
class Support:
    """A disjoint union of pieces over an ``lq x lk`` (augmented) score matrix."""

    lq: int
    lk: int
    pieces: tuple[Piece, ...]

    def __post_init__(self) -> None:
        for p in self.pieces:
            if p.r0 < 0 or p.c0 < 0 or p.r0 + p.nr > self.lq or p.c0 + p.nc > self.lk:
                raise ValueError(f"{p} does not fit a {self.lq} x {self.lk} support")

    @staticmethod
    def single(lq: int, lk: int, band: int | None, block: int = 128) -> Support:
        return Support(lq, lk, (Piece(0, lq, 0, lk, band, block),))

    # ---- per-piece masks ----------------------------------------------------------
    def masks(self, q_valid: jnp.ndarray, k_valid: jnp.ndarray) -> list[jnp.ndarray]:
        """Active slots per piece: band AND valid query AND valid key, [..., nb, bq, window]."""
        out = []
        for p in self.pieces:
            qv = p.row_blocks(q_valid.astype(jnp.int8)) > 0
            kv = p.col_windows(k_valid.astype(jnp.int8)) > 0
            out.append(jnp.asarray(p.static_mask) & qv & kv)
        return out

    # ---- assembling piece-local vectors into full-length vectors ------------------
    def _place_rows(self, parts: list[jnp.ndarray], fill: float, combine) -> jnp.ndarray:
        full = None
        for p, part in zip(self.pieces, parts):
            vec = jnp.full(part.shape[:-1] + (self.lq,), fill, dtype=part.dtype)
            vec = vec.at[..., p.r0 : p.r0 + p.nr].set(part)
            full = vec if full is None else combine(full, vec)
        return full

    def _place_cols(self, parts: list[jnp.ndarray], fill: float, combine) -> jnp.ndarray:
        full = None
        for p, part in zip(self.pieces, parts):
            vec = jnp.full(part.shape[:-1] + (self.lk,), fill, dtype=part.dtype)
            vec = vec.at[..., p.c0 : p.c0 + p.nc].set(part)
            full = vec if full is None else combine(full, vec)
        return full

    def row_sum(self, xs: list[jnp.ndarray]) -> jnp.ndarray:
        """Sum over keys of piece tensors [..., nb, bq, window] -> [..., lq]."""
        parts = [p.unblock_rows(x.sum(-1)) for p, x in zip(self.pieces, xs)]
        return self._place_rows(parts, 0.0, jnp.add)

    def col_sum(self, xs: list[jnp.ndarray]) -> jnp.ndarray:
        """Sum over queries of piece tensors [..., nb, bq, window] -> [..., lk]."""
        parts = [p.scatter_cols(x.sum(-2)) for p, x in zip(self.pieces, xs)]
        return self._place_cols(parts, 0.0, jnp.add)

    def row_max(self, xs: list[jnp.ndarray]) -> jnp.ndarray:
        parts = [p.unblock_rows(x.max(-1)) for p, x in zip(self.pieces, xs)]
        return self._place_rows(parts, _NEG_INF, jnp.maximum)

    def col_max(self, xs: list[jnp.ndarray]) -> jnp.ndarray:
        parts = [p.scatter_cols(x.max(-2), how="max") for p, x in zip(self.pieces, xs)]
        return self._place_cols(parts, _NEG_INF, jnp.maximum)

    def rows(self, vec: jnp.ndarray) -> list[jnp.ndarray]:
        """Broadcast a row vector [..., lq] onto every piece: [..., nb, bq, 1]."""
        return [p.row_blocks(vec) for p in self.pieces]

    def cols(self, vec: jnp.ndarray) -> list[jnp.ndarray]:
        """Broadcast a column vector [..., lk] onto every piece: [..., nb, 1, window]."""
        return [p.col_windows(vec) for p in self.pieces]

    # ---- matrix products with piece tensors ---------------------------------------
    def scores(self, q: jnp.ndarray, k: jnp.ndarray, scale) -> list[jnp.ndarray]:
        """S = scale * q k^T on each piece. q [..., lq, d], k [..., lk, d]."""
        out = []
        for p in self.pieces:
            qb = p.row_blocks_mat(q)  # [..., nb, bq, d]
            kw = p.col_windows_mat(k)  # [..., nb, window, d]
            out.append(jnp.einsum("...bqd,...bwd->...bqw", qb, kw) * scale)
        return out

    def matmul(self, xs: list[jnp.ndarray], y: jnp.ndarray) -> jnp.ndarray:
        """X @ y for piece tensors X (lq x lk) and y [..., lk, e] -> [..., lq, e]."""
        full = None
        for p, x in zip(self.pieces, xs):
            part = p.unblock_rows_mat(jnp.einsum("...bqw,...bwe->...bqe", x, p.col_windows_mat(y)))
            vec = jnp.zeros(part.shape[:-2] + (self.lq, part.shape[-1]), dtype=part.dtype)
            vec = vec.at[..., p.r0 : p.r0 + p.nr, :].set(part)
            full = vec if full is None else full + vec
        return full

    def matmul_t(self, xs: list[jnp.ndarray], y: jnp.ndarray) -> jnp.ndarray:
        """X^T @ y for piece tensors X (lq x lk) and y [..., lq, e] -> [..., lk, e]."""
        full = None
        for p, x in zip(self.pieces, xs):
            part = p.scatter_cols_mat(jnp.einsum("...bqw,...bqe->...bwe", x, p.row_blocks_mat(y)))
            vec = jnp.zeros(part.shape[:-2] + (self.lk, part.shape[-1]), dtype=part.dtype)
            vec = vec.at[..., p.c0 : p.c0 + p.nc, :].set(part)
            full = vec if full is None else full + vec
        return full

    def densify(self, xs: list[jnp.ndarray]) -> jnp.ndarray:
        """Piece tensors -> dense [..., lq, lk] (zeros off the support). For small problems."""
        full = None
        for p, x in zip(self.pieces, xs):
            rows = np.arange(p.nb * p.bq).reshape(p.nb, p.bq)
            r_idx = np.broadcast_to(rows[:, :, None], p.static_mask.shape)
            c_idx = np.broadcast_to(p.col_index[:, None, :], p.static_mask.shape)
            keep = p.static_mask
            vals = jnp.where(jnp.asarray(keep), x, 0.0)
            flat_r = np.where(keep, r_idx, p.nr) + 0
            flat_c = np.where(keep, c_idx, p.nc) + 0
            block = jnp.zeros(x.shape[:-3] + (p.nr + 1, p.nc + 1), dtype=x.dtype)
            block = block.at[..., flat_r.reshape(-1), flat_c.reshape(-1)].add(
                vals.reshape(x.shape[:-3] + (-1,))
            )[..., : p.nr, : p.nc]
            dense = jnp.zeros(x.shape[:-3] + (self.lq, self.lk), dtype=x.dtype)
            dense = dense.at[..., p.r0 : p.r0 + p.nr, p.c0 : p.c0 + p.nc].set(block)
            full = dense if full is None else full + dense
        return full
