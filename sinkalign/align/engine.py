"""A NumPy inference engine for the diagonal-substitution aligner: the same plans, without JAX.

For models whose score is the diagonal substitution sum alone (``feature_dim == 0``, the
shipped protein and DNA models), with the band-preserving dustbin (``dustbin="banded"``),
the transport plan of one pair is computed here in float64, pair by pair, with no padding
and nothing to compile:

* **Scores.** ``S[i, j] = sum_k sub[k][a[i+k], b[j+k]] / eps`` (see
  :mod:`sinkalign.align.model`). When ``sub[k] = w_k * base`` with triangular weights
  ``w_k = 1 - |k| / (K + 1)`` (how :func:`~sinkalign.align.model.init_params` makes it and
  how the shipped models keep it, to the float32 resolution of their stored parameters),
  the sum along each diagonal is a triangular filter of ``base[a[p], b[q]]``: two box
  filters of width ``K + 1`` along the diagonals, ``O(m n log K)`` instead of the
  ``O(m n (2K + 1) A)`` of ``Q K^T``. The engine uses ``base = sub[K]`` and the exact
  triangular weights, so for parameters stored in float32 its scores differ from a float64
  evaluation of the stored tensor by that tensor's own rounding (< 2^-23 relative; the
  float32 forward pass rounds more than that). The dustbin row and column scores are
  windowed lookups of the stored dustbin tokens (exact for any tokens).
* **Solve.** The operator's forward (``T`` centred base steps from ``v = 0``, then ``R``
  tail steps; :mod:`sinkalign.sinkhorn.core`) in scaling form: with ``K = exp(S - max S)``
  a full step is ``x = a / (K y)``, ``y = b / (K^T x)`` and the plan is
  ``diag(x) K diag(y)``. This is the same iteration (centering is a gauge change that
  leaves every plan unchanged) and is exact to float64 rounding as long as ``exp`` neither
  overflows nor underflows, which :meth:`NumpyEngine.from_model` guarantees by bounding
  the score range from the parameters (``MAX_SPREAD``).

The plan returned is the one :meth:`sinkalign.align.aligner.Aligner` decodes:
``[m + 1, n + 1]`` with the real block, each query residue's dustbin mass in the last
column and ``1 - sum_i P[i, j]`` in the last row (:func:`sinkalign.align.model.pair_plan`).
``tests/test_aligner_engine.py`` checks it against the JAX operator run in float64.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from sinkalign.align.decode import Posteriors
from sinkalign.align.model import ALPHABETS, AlignerConfig, encode_residues

__all__ = ["MAX_SPREAD", "NumpyEngine", "Solution", "engine_support"]

# Largest range of scores (natural-log units) the scaling form takes: exp(-MAX_SPREAD) and the
# scaling vectors stay far inside float64's range (e^-708) for any marginal up to 8192.
MAX_SPREAD = 300.0
_TILE = 2**17  # elements of one tile of the score filters (1 MiB of float64: cache-sized)


def engine_support(params: dict, config: AlignerConfig) -> str | None:
    """``None`` when :class:`NumpyEngine` computes this model's plans, else the reason it cannot."""
    if config.feature_dim:
        return "the model has learned context features (feature_dim > 0)"
    if config.dustbin_variant != "banded":
        return f"dustbin={config.dustbin_variant!r} (the engine implements the 'banded' dustbin)"
    sub = np.asarray(params["sub"], np.float64)
    if _triangular_base(sub, config.window) is None:
        return "the substitution weights are not triangular-separable (sub[k] != w_k * sub[K])"
    spread = _spread_bound(params, config)
    if not spread <= MAX_SPREAD:
        return f"scores may span {spread:.0f} > {MAX_SPREAD:.0f} (eps too small for the scaling form)"
    return None


def _triangular_weights(window: int) -> np.ndarray:
    return 1.0 - np.abs(np.arange(-window, window + 1)) / (window + 1)


def _triangular_base(sub: np.ndarray, window: int) -> np.ndarray | None:
    """``base`` with ``sub[k] == w_k * base`` to the float32 resolution of the stored
    parameters (``w_k`` triangular), or None."""
    base = sub[window]
    w = _triangular_weights(window)
    scale = float(np.abs(sub).max())
    if scale == 0.0:
        return base
    # each stored entry is the float32 rounding of w_k * base: off by at most 2^-24 relative
    tol = 2.0**-23 * scale
    return base if float(np.abs(sub - w[:, None, None] * base[None]).max()) <= tol else None


def _spread_bound(params: dict, config: AlignerConfig) -> float:
    """An upper bound on max S - min S over one pair's augmented score matrix."""
    sub = np.abs(np.asarray(params["sub"], np.float64))
    qdb = np.abs(np.asarray(params["q_dustbin"], np.float64))
    kdb = np.abs(np.asarray(params["k_dustbin"], np.float64))
    d = config.qk_dim
    real = sub.reshape(sub.shape[0], -1).max(1).sum()
    to_kdb = kdb.reshape(sub.shape[0], -1).max(1).sum()
    from_qdb = (qdb.reshape(sub.shape[0], -1, 1) * sub).sum(1).max(1).sum() / math.sqrt(d)
    corner = float(qdb @ kdb) / math.sqrt(d)
    return 2.0 * max(real, to_kdb, from_qdb, corner) / config.sinkhorn.eps


def _diag_box_flat(x: np.ndarray, stride: int, width: int) -> np.ndarray:
    """A box filter of ``width`` along the diagonals of a row-major matrix, on its flat buffer.

    With ``x`` the flat buffer of an ``[R, C]`` matrix and ``stride = C + 1``, one step down a
    diagonal is ``stride`` elements, so ``out[f] = sum_{s < width} x[f + s * stride]``
    (``len(x) - (width - 1) * stride`` entries). Entries whose diagonal leaves the matrix
    through its right edge wrap into the next row and hold garbage; callers read only
    entries whose whole window stays inside. By doubling: ``O(len(x) log width)``, every
    step one contiguous add.
    """
    out = None  # sum over the low bits of width seen so far
    span = 0  # how many diagonal steps ``out`` covers
    part, size = x, 1  # part[f] = sum_{s < size} x[f + s * stride]
    rest = width
    while True:
        if rest & 1:
            if out is None:
                out, span = part, size
            else:
                n = min(len(out), len(part) - span * stride)
                out = out[:n] + part[span * stride : span * stride + n]
                span += size
        rest >>= 1
        if not rest:
            return out
        part = part[: len(part) - size * stride] + part[size * stride :]
        size *= 2


@dataclass(frozen=True, eq=False)
class NumpyEngine:
    """Plans of the triangular-diagonal-substitution model with banded dustbins, in NumPy.

    Build with :meth:`from_model`; :meth:`plan` gives one pair's plan, :meth:`scores` its
    augmented score matrix (``[m + 1, n + 1]``, already divided by ``eps``).
    """

    alphabet: str
    window: int
    eps: float
    band: int | None
    length_mass: bool
    n_steps: int
    base: np.ndarray  # [A + 1, A + 1], the extra symbol (beyond the sequence ends) scores 0
    to_kdb: np.ndarray  # [2K + 1, A + 1]: query residue at offset k -> its score with the key dustbin
    from_qdb: np.ndarray  # [2K + 1, A + 1]: the query dustbin's score with a target residue at offset k
    corner: float  # the two dustbins' score

    @classmethod
    def from_model(cls, params: dict, config: AlignerConfig) -> NumpyEngine:
        """Raises ``ValueError`` naming the reason when the model is outside the engine."""
        reason = engine_support(params, config)
        if reason is not None:
            raise ValueError(f"the NumPy engine cannot run this model: {reason}")
        K, A = config.window, config.n_symbols
        sub = np.asarray(params["sub"], np.float64)  # [2K + 1, A, A]
        qdb = np.asarray(params["q_dustbin"], np.float64).reshape(2 * K + 1, A)
        kdb = np.asarray(params["k_dustbin"], np.float64).reshape(2 * K + 1, A)
        sqrt_d = math.sqrt(config.qk_dim)
        base = np.zeros((A + 1, A + 1))
        base[:A, :A] = sub[K]
        to_kdb = np.zeros((2 * K + 1, A + 1))
        to_kdb[:, :A] = kdb  # S[i, db] = sum_k kdb[k, a[i+k]] (q is pre-scaled by sqrt(d))
        from_qdb = np.zeros((2 * K + 1, A + 1))
        from_qdb[:, :A] = np.einsum("kc,kcb->kb", qdb, sub) / sqrt_d  # S[db, j] = q_db . k_j / sqrt(d)
        corner = float(np.dot(qdb.ravel(), kdb.ravel())) / sqrt_d
        sk = config.sinkhorn
        return cls(config.alphabet, K, float(sk.eps), sk.band, config.dustbin.mass == "length", sk.n_iters + sk.tail,
                   base, to_kdb, from_qdb, corner)

    def encode(self, seq: str) -> np.ndarray:
        return encode_residues(seq, self.alphabet)

    def _padded(self, idx: np.ndarray) -> np.ndarray:
        null = len(ALPHABETS[self.alphabet])
        pad = np.full(self.window, null, np.intp)
        return np.concatenate([pad, idx.astype(np.intp), pad])

    def scores(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Augmented scores ``[m + 1, n + 1]`` / eps for residue indices ``a [m]``, ``b [n]``."""
        K = self.window
        m, n = len(a), len(b)
        ax, bx = self._padded(a), self._padded(b)
        C = n + 2 * K
        S = np.empty((m + 1, n + 1))
        rows = max(64, _TILE // C)  # query rows per tile: the filters' temporaries stay small
        for r0 in range(0, m, rows):
            r1 = min(m, r0 + rows)
            # [r1 - r0 + 2K, C]: base[a[p], b[q]] / ((K + 1) eps) for the tile's windows
            pairs = np.take(self._scaled_base[ax[r0 : r1 + 2 * K]], bx, axis=1)
            # triangular weights (K + 1 - |k|) / (K + 1) = (box * box) / (K + 1), box of width
            # K + 1, both along the diagonals: S[r0 + i, j] = tri[i * C + j] (window at [i, j])
            tri = _diag_box_flat(_diag_box_flat(pairs.ravel(), C + 1, K + 1), C + 1, K + 1)
            assert len(tri) == (r1 - r0) * C - 2 * K
            S[r0:r1, :n] = np.lib.stride_tricks.as_strided(tri, shape=(r1 - r0, n),
                                                           strides=(C * tri.itemsize, tri.itemsize))
        if self._dustbin_scores:
            offsets = np.arange(2 * K + 1)
            win_a = ax[np.arange(m)[:, None] + offsets]  # [m, 2K + 1]
            win_b = bx[np.arange(n)[:, None] + offsets]
            S[:m, n] = self.to_kdb[offsets, win_a].sum(1) / self.eps
            S[m, :n] = self.from_qdb[offsets, win_b].sum(1) / self.eps
        else:
            S[:m, n] = S[m, :n] = 0.0
        S[m, n] = self.corner / self.eps
        return S

    @functools.cached_property
    def _scaled_base(self) -> np.ndarray:
        return self.base / ((self.window + 1) * self.eps)

    @functools.cached_property
    def _dustbin_scores(self) -> bool:
        return bool(self.to_kdb.any() or self.from_qdb.any())

    def plan(self, query: str, target: str) -> np.ndarray:
        """The decoded plan ``[m + 1, n + 1]`` of one pair (see the module docstring)."""
        return self.solve(query, target).plan()

    def solve(self, query: str, target: str) -> Solution:
        """The operator's final duals for one pair, in scaling form (see :class:`Solution`)."""
        if not query or not target:
            raise ValueError(f"cannot align an empty sequence (query {len(query)}, target {len(target)} residues)")
        return self.solve_scores(self.scores(self.encode(query), self.encode(target)))

    def solve_scores(self, S: np.ndarray) -> Solution:
        """:meth:`solve` from the augmented scores ``S [m + 1, n + 1]`` (overwritten)."""
        m, n = S.shape[0] - 1, S.shape[1] - 1
        S -= S.max()
        Kx = np.exp(S, out=S)
        if self.band is not None and self.band < max(m, n) - 1:
            i, j = np.ogrid[:m, :n]
            Kx[:m, :n][np.abs(i - j) > self.band] = 0.0
        a = np.ones(m + 1)
        b = np.ones(n + 1)
        if self.length_mass:
            a[m], b[n] = n, m
        y = np.ones(n + 1)
        x = a
        for _ in range(self.n_steps):  # T centred base steps + R tail steps; centring is a gauge
            x = a / (Kx @ y)
            y = b / (x @ Kx)
        return Solution(Kx, x, y)


@dataclass(frozen=True, eq=False)
class Solution:
    """One pair's final plan ``P = diag(x) K diag(y)`` (``K [m + 1, n + 1]``, the last row
    and column the dustbins), with what the aligner reads off it."""

    K: np.ndarray
    x: np.ndarray
    y: np.ndarray

    def plan(self) -> np.ndarray:
        """The decoded plan ``[m + 1, n + 1]``: the real block, each query residue's dustbin
        mass in the last column, ``1 - sum_i P[i, j]`` in the last row, 0 in the corner
        (:func:`sinkalign.align.model.pair_plan`)."""
        m, n = self.K.shape[0] - 1, self.K.shape[1] - 1
        P = self.K * self.x[:, None]
        P *= self.y[None, :]
        P[m, :n] = np.clip(1.0 - P[:m, :n].sum(0), 0.0, None)
        P[m, n] = 0.0
        return P

    def posteriors(self) -> Posteriors:
        """:func:`~sinkalign.align.decode.plan_posteriors` of :meth:`plan` (``normalise="row"``)
        without forming the plan: row and column masses are the scaling products
        ``x_i (K y)_i`` and ``y_j (x^T K)_j``, and the match posterior one rescaling of
        ``K``. Equal to the posteriors of the plan up to float64 rounding."""
        K, x, y = self.K, self.x, self.y
        m, n = K.shape[0] - 1, K.shape[1] - 1
        r = x[:m] * (K[:m] @ y)  # query residue masses, dustbin column included
        col = y[:n] * (x[:m] @ K[:m, :n])  # target residues' mass over the real rows
        td = np.clip(1.0 - col, 0.0, None)
        c = col + td
        row_scale = x[:m] / np.sqrt(r)
        match = K[:m, :n] * row_scale[:, None]
        match *= (y[:n] / np.sqrt(c))[None, :]
        np.minimum(match, 1.0, out=match)
        return Posteriors(match, x[:m] * K[:m, n] * y[n] / r, td / c)
