"""Turning a transport plan into an alignment: maximum-expected-accuracy (MEA) decoding.

Alignments follow the conventions of :mod:`sinkalign.alignment` (0-based aligned residue
pairs, half-open spans); its data model is re-exported here.

The plan produced by the aligner is ``P [m+1, n+1]``: ``P[:m, :n]`` is the transport
between residues, ``P[:m, n]`` the mass of each query residue sent to the dustbin (gap
evidence for query residues), ``P[m, :n]`` the mass of each target residue sent to the
dustbin (gap evidence for target residues); ``P[m, n]`` is ignored.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from sinkalign.alignment import (
    Alignment,
    AlignmentStats,
    alignment_columns,
    alignment_stats,
    as_pairs,
    check_pairs,
    cigar,
    to_gapped,
)

__all__ = [
    "Alignment",
    "AlignmentStats",
    "Posteriors",
    "alignment_columns",
    "alignment_stats",
    "as_pairs",
    "check_pairs",
    "cigar",
    "mea_align",
    "mea_from_posteriors",
    "plan_posteriors",
    "to_gapped",
]

NORMALISE = ("row", "none")


class Posteriors(NamedTuple):
    """Posteriors read off a transport plan.

    match: ``[m, n]`` posterior that query ``i`` is aligned to target ``j``.
    query_gap: ``[m]`` posterior that query ``i`` is unaligned.
    target_gap: ``[n]`` posterior that target ``j`` is unaligned.
    """

    match: np.ndarray
    query_gap: np.ndarray
    target_gap: np.ndarray


# --------------------------------------------------------------------------- plan -> posteriors


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    return arr


def plan_posteriors(plan: Any, *, normalise: str = "row") -> Posteriors:
    """Posterior match and gap probabilities from a dustbin transport plan ``P [m+1, n+1]``.

    ``normalise="row"`` (default): query residue ``i`` has total mass
    ``r_i = sum_j P[i, :n] + P[i, n]`` and target residue ``j`` total mass
    ``c_j = sum_i P[:m, j] + P[m, j]``. Row posteriors ``P[i, j] / r_i`` (with the gap
    posterior ``P[i, n] / r_i``) form a distribution over the partners of query ``i``, and
    column posteriors ``P[i, j] / c_j`` likewise for target ``j``. The match posterior is
    their geometric mean ``M_ij = P[i, j] / sqrt(r_i c_j)``. We take the geometric rather
    than the arithmetic mean because (a) it is near zero unless *both* residues put mass on
    the pair (the arithmetic mean gives 0.5 to a pair one side rejects outright), (b) it is
    symmetric in query/target and invariant to a global rescaling of the plan (total mass 1
    or one unit per residue give the same ``M``), and (c) it stays in ``[0, 1]``. The
    gap posteriors are ``P[i, n] / r_i`` and ``P[m, j] / c_j``. A residue with zero total
    mass gets zero posteriors everywhere.

    ``normalise="none"``: the plan is already on the posterior scale (each residue carries
    unit mass): ``M = P[:m, :n]``, gaps ``P[:m, n]`` and ``P[m, :n]``.

    Args:
        plan: ``[m+1, n+1]`` non-negative, finite (numpy, jax, or torch array).
        normalise: ``"row"`` or ``"none"``.

    Returns:
        :class:`Posteriors` with ``match [m, n]``, ``query_gap [m]``, ``target_gap [n]``.
    """
    if normalise not in NORMALISE:
        raise ValueError(f"{normalise=} is not one of {NORMALISE}")
    P = _to_numpy(plan)
    if P.ndim != 2 or P.shape[0] < 2 or P.shape[1] < 2:
        raise ValueError(f"plan must have shape [m+1, n+1] with m, n >= 1, got {P.shape}")
    if not np.all(np.isfinite(P)):
        i, j = np.argwhere(~np.isfinite(P))[0]
        raise ValueError(f"plan must be finite, got plan[{i}, {j}]={P[i, j]}")
    if np.any(P < 0):
        i, j = np.argwhere(P < 0)[0]
        raise ValueError(f"plan must be non-negative, got plan[{i}, {j}]={P[i, j]}")
    m, n = P.shape[0] - 1, P.shape[1] - 1
    R = P[:m, :n]
    qd = P[:m, n]
    td = P[m, :n]
    if normalise == "none":
        return Posteriors(R.copy(), qd.copy(), td.copy())
    r = R.sum(axis=1) + qd  # [m]
    c = R.sum(axis=0) + td  # [n]
    inv_r = np.divide(1.0, r, out=np.zeros_like(r), where=r > 0)
    inv_c = np.divide(1.0, c, out=np.zeros_like(c), where=c > 0)
    match = R * np.sqrt(inv_r)[:, None] * np.sqrt(inv_c)[None, :]
    # Guard the last ulp: sqrt rounding may push an isolated pair a hair above 1.
    np.minimum(match, 1.0, out=match)
    return Posteriors(match, qd * inv_r, td * inv_c)


# --------------------------------------------------------------------------- MEA


def _mea_table(W: np.ndarray) -> np.ndarray:
    """``S [m+1, n+1]``: best sum of ``W`` over monotone pair chains in each prefix.

    ``S[i, j] = max(S[i-1, j], S[i, j-1], S[i-1, j-1] + W[i-1, j-1])``, computed one row at
    a time: the diagonal/vertical candidates are a vectorised max and the horizontal moves
    (free) are a running maximum along the row.
    """
    m, n = W.shape
    S = np.zeros((m + 1, n + 1), dtype=np.float64)
    for i in range(1, m + 1):
        prev = S[i - 1]
        row = S[i]
        np.maximum(prev[1:], prev[:-1] + W[i - 1], out=row[1:])  # [n]
        np.maximum.accumulate(row, out=row)  # horizontal moves; row[0] = 0
    return S


def _traceback(S: np.ndarray) -> np.ndarray:
    """Pairs of one optimal chain in ``S`` (ties go to gaps, so no zero-gain match is taken)."""
    i, j = S.shape[0] - 1, S.shape[1] - 1
    Sl = S  # local name for speed
    out: list[tuple[int, int]] = []
    while i > 0 and j > 0:
        s = Sl[i, j]
        if s == Sl[i - 1, j]:
            i -= 1
        elif s == Sl[i, j - 1]:
            j -= 1
        else:  # s was set by the diagonal candidate (bitwise-identical recomputation)
            out.append((i - 1, j - 1))
            i -= 1
            j -= 1
    if not out:
        return np.zeros((0, 2), dtype=np.int64)
    return np.asarray(out[::-1], dtype=np.int64)


def mea_from_posteriors(
    match: Any, query_gap: Any, target_gap: Any, *, gap_weight: float = 1.0
) -> Alignment:
    """Maximum-expected-accuracy alignment from posteriors (Holmes & Durbin 1998).

    Maximises, over monotone alignments ``A``,
    ``sum_{(i,j) in A} match[i, j] + gap_weight * (sum_{i unaligned} query_gap[i]
    + sum_{j unaligned} target_gap[j])``. With ``W_ij = match[i, j] - gap_weight *
    (query_gap[i] + target_gap[j])`` this is ``sum_A W + gap_weight * (sum(query_gap) +
    sum(target_gap))``, i.e. a heaviest monotone chain in ``W`` (no gap penalties), solved
    exactly by an ``O(m n)`` time and memory dynamic programme vectorised along rows.
    ``gap_weight=1`` is the Holmes-Durbin expected accuracy; ``gap_weight=0`` is the
    ProbCons-style objective that only rewards matches.

    Args:
        match: ``[m, n]`` match posteriors, finite.
        query_gap: ``[m]`` query gap posteriors, finite.
        target_gap: ``[n]`` target gap posteriors, finite.
        gap_weight: weight of the gap posteriors, finite and ``>= 0``.
    """
    if not np.isfinite(gap_weight) or gap_weight < 0:
        raise ValueError(f"{gap_weight=} must be finite and >= 0")
    M = _to_numpy(match)
    qg = _to_numpy(query_gap)
    tg = _to_numpy(target_gap)
    if M.ndim != 2:
        raise ValueError(f"match must be [m, n], got shape {M.shape}")
    m, n = M.shape
    if qg.shape != (m,):
        raise ValueError(f"query_gap must have shape [{m}], got {qg.shape}")
    if tg.shape != (n,):
        raise ValueError(f"target_gap must have shape [{n}], got {tg.shape}")
    for name, arr in (("match", M), ("query_gap", qg), ("target_gap", tg)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite, found {int((~np.isfinite(arr)).sum())} non-finite values")
    W = M - gap_weight * (qg[:, None] + tg[None, :])  # [m, n]
    S = _mea_table(W)
    pairs = _traceback(S)
    mp = M[pairs[:, 0], pairs[:, 1]] if pairs.size else np.zeros(0)
    q_un = np.ones(m, dtype=bool)
    t_un = np.ones(n, dtype=bool)
    q_un[pairs[:, 0]] = False
    t_un[pairs[:, 1]] = False
    gaps = qg[q_un].sum() + tg[t_un].sum()
    score = float(S[m, n] + gap_weight * (qg.sum() + tg.sum()))
    ea = float((2.0 * mp.sum() + gaps) / (m + n)) if m + n else float("nan")
    return Alignment(pairs, mp, qg, tg, ea, score)


def mea_align(plan: Any, *, gap_weight: float = 1.0, normalise: str = "row") -> Alignment:
    """MEA alignment of a dustbin transport plan ``P [m+1, n+1]``.

    Posteriors come from :func:`plan_posteriors` (``normalise``), the alignment from
    :func:`mea_from_posteriors` (``gap_weight``). See those for the definitions.
    """
    post = plan_posteriors(plan, normalise=normalise)
    return mea_from_posteriors(post.match, post.query_gap, post.target_gap, gap_weight=gap_weight)
