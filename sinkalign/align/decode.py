"""Turning a transport plan into an alignment: maximum-expected-accuracy (MEA) decoding.

Alignments follow the conventions of :mod:`sinkalign.alignment` (0-based aligned residue
pairs, half-open spans); its data model is re-exported here.

The plan produced by the aligner is ``P [m+1, n+1]``: ``P[:m, :n]`` is the transport
between residues, ``P[:m, n]`` the mass of each query residue sent to the dustbin (gap
evidence for query residues), ``P[m, :n]`` the mass of each target residue sent to the
dustbin (gap evidence for target residues); ``P[m, n]`` is ignored.
"""

from __future__ import annotations

import functools
import threading
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
    "alignment_of_pairs",
    "alignment_stats",
    "as_pairs",
    "check_pairs",
    "cigar",
    "identity_gain",
    "keep_gaps",
    "mea_align",
    "mea_batch",
    "mea_from_posteriors",
    "pair_identity",
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
    if normalise == "none":
        return Posteriors(P[:m, :n].copy(), P[:m, n].copy(), P[m, :n].copy())
    return _row_posteriors(P)


def _row_posteriors(P: np.ndarray) -> Posteriors:
    """``plan_posteriors(P, normalise="row")`` for a plan known to be a finite, non-negative
    float64 ``[m+1, n+1]`` array (no checks)."""
    m, n = P.shape[0] - 1, P.shape[1] - 1
    R = P[:m, :n]
    qd = P[:m, n]
    td = P[m, :n]
    r = R.sum(axis=1) + qd  # [m]
    c = R.sum(axis=0) + td  # [n]
    inv_r = np.divide(1.0, r, out=np.zeros_like(r), where=r > 0)
    inv_c = np.divide(1.0, c, out=np.zeros_like(c), where=c > 0)
    match = R * np.sqrt(inv_r)[:, None]
    match *= np.sqrt(inv_c)[None, :]  # (R * a) * b as before, without a second [m, n] temporary
    # Guard the last ulp: sqrt rounding may push an isolated pair a hair above 1.
    np.minimum(match, 1.0, out=match)
    return Posteriors(match, qd * inv_r, td * inv_c)


# --------------------------------------------------------------------------- MEA


def _mea_table(W: np.ndarray) -> np.ndarray:
    """``S [m+1, n+1]``: best sum of ``W`` over monotone pair chains in each prefix.

    ``S[i, j] = max(S[i-1, j], S[i, j-1], S[i-1, j-1] + W[i-1, j-1])``, computed one row at
    a time: the diagonal/vertical candidates are a vectorised max and the horizontal moves
    (free) are a running maximum along the row. (The plain form of :func:`_mea_moves`.)
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
    """Pairs of one optimal chain in ``S`` (ties go to gaps, so no zero-gain match is taken).
    (The plain form of :func:`_trace_moves`.)"""
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


_DIAG, _UP, _LEFT = 0, 1, 2  # the traceback's move out of a cell
_SCRATCH = threading.local()  # per-thread work arrays of the batched DP, reused across calls
_SCRATCH_KEEP = 64 * 2**20  # bytes: larger work arrays are not kept
_GROUP_CELLS = 2**22  # cells of one stacked group (a longer pair is decoded alone)


def _scratch(name: str, shape: tuple, dtype) -> np.ndarray:
    """An uninitialised work array, from this thread's buffer ``name`` when one is big enough
    (re-touching fresh pages costs more than the dynamic programme's arithmetic)."""
    size = int(np.prod(shape))
    buf = getattr(_SCRATCH, name, None)
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = np.empty(size, dtype)
        if buf.nbytes <= _SCRATCH_KEEP:
            setattr(_SCRATCH, name, buf)
    return buf[:size].reshape(shape)


class _Moves(NamedTuple):
    """The traceback moves of a stack of pairs: pair ``b``'s move out of cell ``(i, j)``
    (``1 <= i <= m_b``, ``1 <= j <= n_b``) is ``buf[base(b) + i * si + j * sj]``."""

    buf: bytes
    si: int
    sj: int
    offset: int  # base(b) = offset + b * pair_step
    pair_step: int
    best: np.ndarray  # [B]: S[m_b, n_b]

    def base(self, b: int) -> int:
        return self.offset + b * self.pair_step


def _mea_moves(W: np.ndarray, shapes) -> _Moves:
    """The dynamic programme of :func:`_mea_table` for a zero-padded stack ``W [B, M, N]``,
    keeping only what the traceback reads: the move :func:`_traceback` makes out of each
    cell (``_UP`` where ``S[i, j] == S[i-1, j]``, else ``_LEFT`` where ``S[i, j] == S[i, j-1]``,
    else ``_DIAG``) and ``S[m_b, n_b]`` for the ``shapes`` ``(m_b, n_b)``.

    Every table entry is computed by the same floating-point operations as in
    :func:`_mea_table` (one addition; ``max`` is exact in any order), and no entry of a
    pair's own ``[m_b+1, n_b+1]`` corner reads a padded row or column, so both are bitwise
    those of the pair alone. A stack of several pairs runs by anti-diagonals (every cell of
    one is independent: a few element-wise operations per diagonal for the whole stack); one
    pair runs by rows (a running maximum along each row), which needs half the memory.
    """
    if W.shape[0] >= 4 and min(W.shape[1:]) > 0:
        return _mea_moves_diagonals(W, shapes)
    return _mea_moves_rows(W, shapes)


def _mea_moves_rows(W: np.ndarray, shapes) -> _Moves:
    B, M, N = W.shape
    prev = np.zeros((B, N + 1))
    row = np.zeros((B, N + 1))
    cand = np.empty((B, N))
    up = _scratch("up", (B, M, N), bool)
    left = _scratch("left", (B, M, N), bool)
    best = np.zeros(B)
    ends: dict[int, list[int]] = {}
    for b, (m, _) in enumerate(shapes):
        ends.setdefault(m, []).append(b)
    for i in range(1, M + 1):
        np.add(prev[:, :-1], W[:, i - 1], out=cand)
        np.maximum(prev[:, 1:], cand, out=row[:, 1:])  # [B, N]; row[:, 0] stays 0
        np.maximum.accumulate(row, axis=1, out=row)  # horizontal moves
        np.equal(row[:, 1:], prev[:, 1:], out=up[:, i - 1])
        np.equal(row[:, 1:], row[:, :-1], out=left[:, i - 1])
        for b in ends.get(i, ()):
            best[b] = row[b, shapes[b][1]]
        prev, row = row, prev
    return _Moves(_move_codes(up, left), N, 1, -N - 1, M * N, best)  # [B, M, N]: cell (i+1, j+1) at [b, i, j]


def _mea_moves_diagonals(W: np.ndarray, shapes) -> _Moves:
    B, M, N = W.shape
    T = M + N  # anti-diagonal t holds the cells i + j = t
    # gain of cell (i+1, j+1) at [i + j, i, b]: a diagonal's cells of every pair are contiguous
    Wd = _scratch("gain_skewed", (T - 1, M, B), np.float64)
    flat = Wd.reshape(-1)
    step = Wd.itemsize
    for b in range(B):
        np.lib.stride_tricks.as_strided(flat[b:], shape=(M, N), strides=((M + 1) * B * step, M * B * step))[...] = W[b]
    diags = np.zeros((3, M + 1, B))  # S on diagonals t, t - 1, t - 2 (rolling)
    up = _scratch("up", (T + 1, M + 1, B), bool)
    left = _scratch("left", (T + 1, M + 1, B), bool)
    tmp = np.empty((M, B))
    best = np.zeros(B)
    ends: dict[int, list[int]] = {}
    for b, (m, n) in enumerate(shapes):
        ends.setdefault(m + n, []).append(b)
    for t in range(2, T + 1):
        cur, d1, d2 = diags[t % 3], diags[(t - 1) % 3], diags[(t - 2) % 3]
        cur[0] = 0.0  # S[0, t]
        if t <= M:
            cur[t] = 0.0  # S[t, 0]
        lo, hi = max(1, t - N), min(M, t - 1)  # the cells with i, j >= 1
        if lo <= hi:
            k = hi - lo + 1
            out = cur[lo : hi + 1]
            np.maximum(d1[lo - 1 : hi], d1[lo : hi + 1], out=out)  # S[i-1, j], S[i, j-1]
            np.add(d2[lo - 1 : hi], Wd[t - 2, lo - 1 : hi], out=tmp[:k])  # S[i-1, j-1] + W[i-1, j-1]
            np.maximum(out, tmp[:k], out=out)
            np.equal(out, d1[lo - 1 : hi], out=up[t, lo : hi + 1])
            np.equal(out, d1[lo : hi + 1], out=left[t, lo : hi + 1])
        for b in ends.get(t, ()):
            best[b] = cur[shapes[b][0], b]
    # cell (i, j) of pair b at [i + j, i, b]
    return _Moves(_move_codes(up, left), (M + 2) * B, (M + 1) * B, 0, 1, best)


def _move_codes(up: np.ndarray, left: np.ndarray) -> bytes:
    moves = _scratch("moves", up.shape, np.uint8)
    np.greater(left, up, out=moves.view(bool))  # left and not up
    np.left_shift(moves, 1, out=moves)
    np.bitwise_or(moves, up.view(np.uint8), out=moves)
    return moves.tobytes()


def _trace_moves(buf: bytes, si: int, sj: int, base: int, m: int, n: int) -> np.ndarray:
    """:func:`_traceback` from moves (``buf[base + i * si + j * sj]``: the move out of cell
    ``(i, j)``, see :class:`_Moves`), a run of equal moves at a time: each run is one
    ``bytes.lstrip`` of a slice no longer than the row, column or diagonal it walks."""
    i, j = m, n
    runs = []  # diagonal runs (i0, j0, length): pairs (i0 + t, j0 + t), t < length

    def walk(at: int, step: int, count: int) -> bytes:  # buf[at], buf[at - step], ... (count cells)
        stop = at - count * step
        return buf[at : (stop if stop >= 0 else None) : -step]  # bounded: never a copy to the buffer's start

    while i > 0 and j > 0:
        at = base + i * si + j * sj
        move = buf[at]
        if move == _UP:  # cells (i, j), (i-1, j), ..., (1, j)
            col = walk(at, si, i)
            i -= len(col) - len(col.lstrip(b"\x01"))
        elif move == _LEFT:  # cells (i, j), (i, j-1), ..., (i, 1)
            line = walk(at, sj, j)
            j -= len(line) - len(line.lstrip(b"\x02"))
        else:  # cells (i, j), (i-1, j-1), ... while both stay >= 1
            diag = walk(at, si + sj, min(i, j))
            run = len(diag) - len(diag.lstrip(b"\x00"))
            i -= run
            j -= run
            runs.append((i, j, run))
    if not runs:
        return np.zeros((0, 2), dtype=np.int64)
    starts = np.array(runs[::-1], dtype=np.int64)  # [r, 3], in increasing order
    lengths = starts[:, 2]
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.stack([np.repeat(starts[:, 0], lengths) + offset, np.repeat(starts[:, 1], lengths) + offset], 1)


def _unaligned_gap_sum(qg: np.ndarray, tg: np.ndarray, pairs: np.ndarray) -> float:
    """Sum of the gap posteriors of the residues that ``pairs`` leaves unaligned, both sides."""
    q_un = np.ones(qg.shape[0], dtype=bool)
    t_un = np.ones(tg.shape[0], dtype=bool)
    q_un[pairs[:, 0]] = False
    t_un[pairs[:, 1]] = False
    return qg[q_un].sum() + tg[t_un].sum()


def _expected_accuracy(mp: np.ndarray, gaps: float, m: int, n: int) -> float:
    return float((2.0 * mp.sum() + gaps) / (m + n)) if m + n else float("nan")


def _finish(M: np.ndarray, qg: np.ndarray, tg: np.ndarray, gap_weight: float, pairs: np.ndarray,
            best: float) -> Alignment:
    """The :class:`Alignment` of ``pairs``, an optimal chain whose table corner is ``best``."""
    m, n = M.shape
    mp = M[pairs[:, 0], pairs[:, 1]] if pairs.size else np.zeros(0)
    score = float(best + gap_weight * (qg.sum() + tg.sum()))
    return Alignment(pairs, mp, qg, tg, _expected_accuracy(mp, _unaligned_gap_sum(qg, tg, pairs), m, n), score)


def alignment_of_pairs(pairs: Any, match_posterior: Any, query_gap: Any, target_gap: Any, *,
                       gap_weight: float = 0.0) -> Alignment:
    """The :class:`Alignment` of given ``pairs`` (``[k, 2]``, increasing) whose match
    posteriors are ``match_posterior [k]``: its score is the MEA objective of those pairs
    (``sum(match_posterior) + gap_weight *`` the gap posteriors of the residues left
    unaligned), its expected accuracy as :class:`Alignment` defines it. For alignments chosen
    other than by :func:`mea_batch`, e.g. an MEA path with its unsure columns removed."""
    qg = np.asarray(query_gap, dtype=np.float64)
    tg = np.asarray(target_gap, dtype=np.float64)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    mp = np.asarray(match_posterior, dtype=np.float64)
    gaps = _unaligned_gap_sum(qg, tg, pairs)
    return Alignment(pairs, mp, qg, tg, _expected_accuracy(mp, gaps, qg.shape[0], tg.shape[0]),
                     float(mp.sum() + gap_weight * gaps))


def _gain(M: np.ndarray, qg: np.ndarray, tg: np.ndarray, gap_weight: float) -> np.ndarray:
    if gap_weight == 0.0:  # M - 0 * (...) is M, bit for bit, for finite posteriors
        return M
    return M - gap_weight * (qg[:, None] + tg[None, :])  # [m, n]


def identity_gain(query: str, target: str, alphabet: str = "protein") -> np.ndarray:
    """``bool [m, n]``: the residue pairs that are the same letter of the alphabet's canonical
    residues (protein: the 20 amino acids; DNA: A, C, G, T, with U as T), case-insensitive. An
    unknown or ambiguous residue (X, N, B, ...) is identical to nothing. The evidence an
    identity tie-break adds to the MEA gain (:func:`mea_batch` ``bonus``)."""
    return _same_residues(query, target, alphabet, (slice(None), None), (None, slice(None)))


def pair_identity(query: str, target: str, pairs, alphabet: str = "protein") -> float:
    """The share of aligned ``pairs`` (``[k, 2]``) whose residues are identical (as
    :func:`identity_gain` counts them); ``nan`` when nothing is aligned."""
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    if not len(pairs):
        return float("nan")
    return float(_same_residues(query, target, alphabet, pairs[:, 0], pairs[:, 1]).mean())


def keep_gaps(plain: Any, moved: Any) -> np.ndarray:
    """The pairs of ``moved`` (``[k, 2]``, increasing: e.g. a decoding with an identity
    tie-break) wherever it only moves the gaps of ``plain`` (the same pair's plain decoding),
    and ``plain``'s pairs wherever ``moved`` adds gaps.

    Both alignments are cut at the pairs they share; between two consecutive shared pairs
    (and before the first, after the last) each takes its own path. ``moved``'s path is kept
    unless it has more *breaks* than ``plain``'s (steps from one aligned pair to the next that
    are not one diagonal step, shared pairs at both ends counted): so a gap may move to where
    the identities put it, but two mismatches are not traded for a gap pair around a chance
    identity. Each stretch lies between the same shared pairs, so the result is a monotone
    alignment: increasing pairs, ``[r, 2]``."""
    P = np.asarray(plain, np.int64).reshape(-1, 2)
    T = np.asarray(moved, np.int64).reshape(-1, 2)
    width = int(max(P[:, 1].max(initial=-1), T[:, 1].max(initial=-1))) + 1
    shared_p = np.isin(P[:, 0] * width + P[:, 1], T[:, 0] * width + T[:, 1])
    shared_t = np.isin(T[:, 0] * width + T[:, 1], P[:, 0] * width + P[:, 1])
    n_shared = int(shared_p.sum())

    def stretch_breaks(X, shared):
        """Each pair's stretch (the number of shared pairs up to it) and each stretch's breaks."""
        stretch = np.cumsum(shared)  # a shared pair opens the stretch after it
        steps = np.diff(X, axis=0)
        broken = ((steps[:, 0] != 1) | (steps[:, 1] != 1)).astype(np.float64)
        return stretch, np.bincount(stretch[:-1], weights=broken, minlength=n_shared + 1)

    stretch_p, breaks_p = stretch_breaks(P, shared_p)
    stretch_t, breaks_t = stretch_breaks(T, shared_t)
    take_moved = breaks_t <= breaks_p
    keep = np.concatenate([P[shared_p | ~take_moved[stretch_p]], T[~shared_t & take_moved[stretch_t]]])
    return keep[np.argsort(keep[:, 0], kind="stable")]


_CANONICAL = {"protein": "ACDEFGHIKLMNPQRSTVWY", "dna": "ACGT"}


@functools.cache
def _identity_table(alphabet: str, unknown: int) -> np.ndarray:
    """``int16 [256]``: each byte's index among the alphabet's canonical residues, else ``unknown``
    (built once per alphabet: the aligner reads it for every pair)."""
    if alphabet not in _CANONICAL:
        raise ValueError(f"{alphabet=} is not one of {tuple(_CANONICAL)}")
    table = np.full(256, unknown, np.int16)
    for k, ch in enumerate(_CANONICAL[alphabet]):
        table[ord(ch)] = table[ord(ch.lower())] = k
    if alphabet == "dna":
        table[ord("U")] = table[ord("u")] = _CANONICAL["dna"].index("T")
    table.flags.writeable = False
    return table


def _same_residues(query: str, target: str, alphabet: str, qi, tj) -> np.ndarray:
    """Whether ``query[qi]`` and ``target[tj]`` (indices or index tuples, broadcast together)
    are the same canonical residue: the comparison :func:`identity_gain`, :func:`pair_identity`
    and :func:`~sinkalign.align.band.identity_gain_band` make."""
    return _identity_codes(query, alphabet)[qi] == _identity_codes(target, alphabet, unknown=-2)[tj]


def _identity_codes(seq: str, alphabet: str, unknown: int = -1) -> np.ndarray:
    """``int16 [L]``: each residue's index among the alphabet's canonical residues, ``unknown``
    for any other (two different ``unknown`` values never compare equal)."""
    return _identity_table(alphabet, unknown)[np.frombuffer(seq.encode("latin-1", "replace"), np.uint8)]


def mea_batch(posteriors: list, *, gap_weight: float = 1.0, slack: float = 1.3,
              bonus: list | None = None) -> list[Alignment]:
    """:func:`mea_from_posteriors` of many pairs, faster: the dynamic programmes of pairs of
    similar shape run as one stack (see :func:`_mea_moves`), so each row costs a few array
    operations for the whole group instead of for each pair.

    Args:
        posteriors: :class:`Posteriors` (or ``(match, query_gap, target_gap)``) of finite
            float64 arrays, as :func:`plan_posteriors` returns them (not re-validated).
        gap_weight: as in :func:`mea_from_posteriors`.
        slack: a group is padded to at most ``slack`` times the cells of its pairs.
        bonus: per pair, ``None`` or a finite ``[m, n]`` array added to the gain the chain
            maximises (e.g. ``tau *`` :func:`identity_gain`: an identity tie-break); the
            alignment's posteriors, score and expected accuracy stay those of the posteriors
            (:func:`alignment_of_pairs` of the chosen pairs).

    Returns the alignments in input order, each identical (pairs, posteriors, score) to
    :func:`mea_from_posteriors` of the same pair where it has no bonus.
    """
    if not np.isfinite(gap_weight) or gap_weight < 0:
        raise ValueError(f"{gap_weight=} must be finite and >= 0")
    posts = [tuple(p) for p in posteriors]
    if bonus is not None:
        if len(bonus) != len(posts):
            raise ValueError(f"bonus has {len(bonus)} entries for {len(posts)} pairs")
        for k, (b, p) in enumerate(zip(bonus, posts)):
            if b is not None and (np.shape(b) != np.shape(p[0]) or not np.all(np.isfinite(b))):
                raise ValueError(f"bonus {k} must be finite with the match posteriors' shape {np.shape(p[0])}, "
                                 f"got shape {np.shape(b)}")
    extra = [None] * len(posts) if bonus is None else list(bonus)

    def gain(k):
        M, qg, tg = posts[k]
        g = _gain(M, qg, tg, gap_weight)
        return g if extra[k] is None else g + extra[k]

    out: list[Alignment | None] = [None] * len(posts)
    order = sorted(range(len(posts)), key=lambda k: posts[k][0].shape)
    start = 0
    while start < len(order):  # greedy groups of consecutive shapes within the slack
        stop, cells, big_m, big_n = start, 0, 0, 0
        while stop < len(order):
            m, n = posts[order[stop]][0].shape
            padded = max(big_m, m) * max(big_n, n) * (stop - start + 1)
            if stop > start and (padded > slack * (cells + m * n) or padded > _GROUP_CELLS):
                break
            cells, big_m, big_n = cells + m * n, max(big_m, m), max(big_n, n)
            stop += 1
        group = order[start:stop]
        if len(group) == 1:  # alone: no stack to copy into
            W = gain(group[0])[None]
            group_items = ()
        else:
            W = _scratch("gain", (len(group), big_m, big_n), np.float64)
            group_items = enumerate(group)
        for g, k in group_items:
            m, n = posts[k][0].shape
            W[g, :m, :n] = gain(k)
            W[g, m:] = 0.0  # padding: never read by the pair's own cells, but kept finite
            W[g, :m, n:] = 0.0
        moves = _mea_moves(W, [posts[k][0].shape for k in group])
        for g, k in enumerate(group):
            M, qg, tg = posts[k]
            pairs = _trace_moves(moves.buf, moves.si, moves.sj, moves.base(g), *M.shape)
            if extra[k] is None:
                out[k] = _finish(M, qg, tg, gap_weight, pairs, moves.best[g])
            else:  # the table's corner holds the bonus too: the objective of the pairs, summed
                mp = M[pairs[:, 0], pairs[:, 1]] if pairs.size else np.zeros(0)
                out[k] = alignment_of_pairs(pairs, mp, qg, tg, gap_weight=gap_weight)
        start = stop
    return out


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
    return mea_batch([(M, qg, tg)], gap_weight=gap_weight)[0]


def mea_align(plan: Any, *, gap_weight: float = 1.0, normalise: str = "row") -> Alignment:
    """MEA alignment of a dustbin transport plan ``P [m+1, n+1]``.

    Posteriors come from :func:`plan_posteriors` (``normalise``), the alignment from
    :func:`mea_from_posteriors` (``gap_weight``). See those for the definitions.
    """
    post = plan_posteriors(plan, normalise=normalise)
    return mea_from_posteriors(post.match, post.query_gap, post.target_gap, gap_weight=gap_weight)
