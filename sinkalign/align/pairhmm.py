"""Probabilistic Needleman-Wunsch: affine-gap pair-HMM posteriors and their MEA alignment.

A reference point for the OT aligner that uses the same evidence as Needleman-Wunsch
(substitution scores and affine gaps, :class:`~sinkalign.align.baselines.Scoring`) but sums
over alignments instead of maximising. With ``score(A)`` the Needleman-Wunsch score of a global
alignment ``A`` (end gaps charged, a gap of length ``g`` costs ``gap_open + (g - 1) *
gap_extend``; see :mod:`sinkalign.align.baselines`) and ``lam > 0`` a temperature in nats per
score unit, the partition function is

    Z = sum_A exp(lam * score(A))

over the Gotoh paths (match, query-gap and target-gap states; a query gap may follow a target
gap directly, at the gap-open cost, as in Needleman-Wunsch). The posterior that residues ``i``
and ``j`` are aligned is ``P_ij = d log Z / d (lam s_ij)``, taken here by automatic
differentiation of the forward recursion (a scan over anti-diagonals in float64). As ``lam``
grows, ``log Z / lam`` tends to the Needleman-Wunsch score and the posteriors concentrate on
its alignment. :func:`pairhmm_align` decodes the posteriors by maximum expected accuracy
(:func:`~sinkalign.align.decode.mea_from_posteriors`, gaps free), as ProbCons does.

BLOSUM62 is in half-bit units, so ``lam = ln(2) / 2`` is its own log-odds scale (the default).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from sinkalign.align.baselines import Scoring, _clean, _residue_indices, _score_lookup
from sinkalign.align.decode import Alignment, alignment_of_pairs, mea_from_posteriors
from sinkalign.errors import InputError

__all__ = ["BLOSUM62_LAMBDA", "MAX_LENGTH", "log_partition", "match_posteriors", "pairhmm_align", "pairhmm_posteriors"]

BLOSUM62_LAMBDA = math.log(2.0) / 2.0  # BLOSUM62 entries are log-odds in half-bits
MAX_LENGTH = 4096  # the backward pass keeps ~170 bytes per cell of [m + n, min(m, n)]: ~6 GB here
_NEG = -1e30  # log of zero that stays finite under addition (no inf - inf in the gradient)
_BUCKET = 64  # shapes are padded to multiples of this, so jit compiles once per bucket


@jax.jit
def _log_partition(s, m, n, go, ge):
    """``log Z`` of the global affine-gap model; ``s [Mp, Np]`` (padded), true sizes ``m, n``.

    Cells are indexed by ``(i, j)``, ``0 <= i <= m, 0 <= j <= n`` (prefix lengths); diagonal
    ``d = i + j`` is a vector over ``i``. State values are log sums over paths ending at the
    cell in that state: match ``M`` (``i`` aligned to ``j``), query gap ``X`` (``i``
    unaligned), target gap ``Y`` (``j`` unaligned); ``M1, X1, Y1`` and ``M2, X2, Y2`` hold
    diagonals ``d - 1`` and ``d - 2``. The start is ``M[0, 0] = 0``.
    """
    Mp, Np = s.shape
    rows = jnp.arange(Mp + 1)  # [Mp + 1] i on every diagonal
    neg1 = jnp.full(1, _NEG)

    def shift(v):  # value at i - 1, i.e. the cell one row up on the same diagonal vector
        return jnp.concatenate([neg1, v[:-1]])

    def step(carry, d):
        M1, X1, Y1, M2, X2, Y2 = carry  # diagonals d - 1 and d - 2, [Mp + 1] each
        cols = d - rows
        inside = (rows <= m) & (cols >= 0) & (cols <= n)
        interior = inside & (rows >= 1) & (cols >= 1)
        sv = s[jnp.clip(rows - 1, 0, Mp - 1), jnp.clip(cols - 1, 0, Np - 1)]  # s[i-1, j-1]
        # match: from cell (i-1, j-1) = diagonal d - 2, row i - 1
        Mv = sv + jax.nn.logsumexp(jnp.stack([shift(M2), shift(X2), shift(Y2)]), axis=0)
        # query gap: from (i-1, j) = diagonal d - 1, row i - 1
        Xv = jax.nn.logsumexp(jnp.stack([shift(M1) - go, shift(X1) - ge, shift(Y1) - go]), axis=0)
        # target gap: from (i, j-1) = diagonal d - 1, row i
        Yv = jax.nn.logsumexp(jnp.stack([M1 - go, Y1 - ge, X1 - go]), axis=0)
        Mv = jnp.where(interior, Mv, _NEG)
        Xv = jnp.where(inside & (rows >= 1), Xv, _NEG)
        Yv = jnp.where(inside & (cols >= 1), Yv, _NEG)
        end = (rows == m) & (cols == n)
        total = jax.nn.logsumexp(jnp.where(end, jax.nn.logsumexp(jnp.stack([Mv, Xv, Yv]), axis=0), _NEG))
        return (Mv, Xv, Yv, M1, X1, Y1), total

    none = jnp.full(Mp + 1, _NEG, dtype=s.dtype)
    start = none.at[0].set(0.0)  # diagonal 0: the empty prefix pair, "in" the match state
    d1_x = none.at[1].set(-go)  # diagonal 1: (1, 0) query gap, (0, 1) target gap
    d1_y = none.at[0].set(-go)
    _, totals = jax.lax.scan(step, (none, d1_x, d1_y, start, none, none), jnp.arange(2, Mp + Np + 1))
    return jax.nn.logsumexp(totals)


_value_and_grad = jax.jit(jax.value_and_grad(_log_partition))


def _check_gaps(gap_open: float, gap_extend: float) -> None:
    for name, v in (("gap_open", gap_open), ("gap_extend", gap_extend)):
        if not np.isfinite(v) or v < 0:
            raise InputError(f"{name}={v} must be finite and >= 0")


def _padded(scores: np.ndarray) -> tuple[np.ndarray, int, int, bool]:
    """Scores with the shorter side first, padded up to the bucket size (pads never reached)."""
    s = np.asarray(scores, dtype=np.float64)
    flip = s.shape[0] > s.shape[1]
    if flip:
        s = s.T
    m, n = s.shape
    Mp, Np = (max(_BUCKET, -(-x // _BUCKET) * _BUCKET) for x in (m, n))
    out = np.zeros((Mp, Np))
    out[:m, :n] = s
    return out, m, n, flip


def _check_scores(scores) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise InputError(f"scores must be [m, n], got shape {s.shape}")
    if max(s.shape) > MAX_LENGTH:
        raise InputError(f"scores have shape {s.shape}; sequences longer than {MAX_LENGTH} are not supported")
    if not np.all(np.isfinite(s)):
        raise InputError(f"scores must be finite, found {int((~np.isfinite(s)).sum())} non-finite values")
    return s


def _gap_log_weight(length: int, gap_open: float, gap_extend: float) -> float:
    return 0.0 if length == 0 else -(gap_open + (length - 1) * gap_extend)


def _run(scores, gap_open, gap_extend, want_grad: bool):
    s = _check_scores(scores)
    _check_gaps(gap_open, gap_extend)
    m, n = s.shape
    if m == 0 or n == 0:  # the only alignment leaves the other sequence in one gap
        return _gap_log_weight(m + n, gap_open, gap_extend), np.zeros((m, n))
    sp, mm, nn, flip = _padded(s)
    with jax.enable_x64(True):
        args = (jnp.asarray(sp), mm, nn, float(gap_open), float(gap_extend))
        if want_grad:
            value, grad = _value_and_grad(*args)
            post = np.asarray(grad, dtype=np.float64)[:mm, :nn]
        else:
            value, post = _log_partition(*args), None
        value = float(value)
    if post is not None and flip:
        post = post.T
    return value, post


def log_partition(scores, gap_open: float, gap_extend: float) -> float:
    """``log Z`` of the global affine-gap model (see the module doc), in float64.

    Args:
        scores: ``[m, n]`` match log weights ``lam * s(query_i, target_j)``, finite.
        gap_open, gap_extend: gap log costs ``lam * gap_open`` and ``lam * gap_extend`` (>= 0).
    """
    return _run(scores, gap_open, gap_extend, want_grad=False)[0]


def match_posteriors(scores, gap_open: float, gap_extend: float) -> np.ndarray:
    """``float64 [m, n]`` posterior that query ``i`` is aligned to target ``j`` (arguments as
    :func:`log_partition`). Row and column sums are the residues' aligned probabilities."""
    return _run(scores, gap_open, gap_extend, want_grad=True)[1]


def _scores(q: str, t: str, scoring: Scoring) -> np.ndarray:
    """``[len(q), len(t)]`` substitution scores of two cleaned sequences."""
    table = _score_lookup(scoring)[1]
    return table[_residue_indices(q, scoring)][:, _residue_indices(t, scoring)]


def _check_lam(lam: float) -> float:
    if not np.isfinite(lam) or lam <= 0:
        raise InputError(f"lam={lam} must be finite and > 0")
    return float(lam)


def pairhmm_posteriors(query: str, target: str, *, scoring: Scoring | None = None,
                       lam: float = BLOSUM62_LAMBDA) -> np.ndarray:
    """Match posteriors ``float64 [len(query), len(target)]`` of two sequences under
    ``scoring`` (default BLOSUM62, open 11, extend 1) at temperature ``lam``."""
    scoring = scoring or Scoring()
    lam = _check_lam(lam)
    q = _clean(query, "query", scoring)
    t = _clean(target, "target", scoring)
    return match_posteriors(lam * _scores(q, t, scoring), lam * scoring.gap_open, lam * scoring.gap_extend)


def pairhmm_align(query: str, target: str, *, scoring: Scoring | None = None,
                  lam: float = BLOSUM62_LAMBDA, threshold: float = 0.0) -> Alignment:
    """Maximum-expected-accuracy alignment over :func:`pairhmm_posteriors` (gaps free:
    the monotone chain of pairs with the largest summed match posterior). The gap posteriors
    of the result are one minus each residue's aligned probability.

    ``threshold`` in ``[0, 1)``: the chain maximises ``sum (P_ij - threshold)`` instead (the
    maximum accuracy alignment of HHalign's MAC, ``-mact``), so no pair below the threshold
    is aligned and pairs just above it only where they fit a confident path; 0 is plain MEA.
    The score and posteriors reported are the plain ones (``sum P_ij`` over the pairs).
    """
    if not (np.isfinite(threshold) and 0.0 <= threshold < 1.0):
        raise InputError(f"{threshold=} must be in [0, 1)")
    post = pairhmm_posteriors(query, target, scoring=scoring, lam=lam)
    qg, tg = 1.0 - post.sum(1), 1.0 - post.sum(0)
    if threshold == 0.0:
        return mea_from_posteriors(post, qg, tg, gap_weight=0.0)
    pairs = mea_from_posteriors(post - threshold, qg, tg, gap_weight=0.0).pairs
    return alignment_of_pairs(pairs, post[pairs[:, 0], pairs[:, 1]], qg, tg)
