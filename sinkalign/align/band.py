"""Banded plans: a pair's transport restricted to a corridor around guide alignments.

A dense plan holds every residue pair, ``O(m n)`` memory and time. Two long sequences (two
contigs, two long proteins) make that impossible or slow, while almost all of a homologous
pair's mass lies near its alignment. A *corridor* keeps, on each query row ``i``, the target
columns ``lo[i] <= j < hi[i]``: every cell within ``radius`` columns of a guide path on its
row, the guides being fast classical alignments of the same pair
(Needleman-Wunsch end to end, Smith-Waterman over its local span). ``lo`` and ``hi`` are
non-decreasing, so the corridor is one monotone strip; the dustbin row and column stay
whole, so every residue can still go unaligned. On the corridor the plan is the same
iteration as the dense one with the cells outside set to zero score mass (``-inf``), and
decoding is the dense maximum-expected-accuracy programme with the cells outside the
corridor unavailable (``tests/test_band.py``: a corridor covering every cell gives the
dense plan, posteriors and alignment).

A *lopsided* pair (a domain against a whole protein, a gene against a contig) is better
solved inside the rectangle around its Smith-Waterman hit (:func:`hit_box`): the rows and
columns outside it hold no cell, so their residues go to the dustbins, and the plan cannot
spread over the unrelated part of the longer sequence (:func:`local_corridor`).

:class:`BandMatrix` holds such a strip row by row (CSR with contiguous rows);
:func:`corridor` builds ``lo`` and ``hi`` from guide paths; :func:`band_mea` decodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sinkalign.alignment import Alignment

__all__ = ["BandMatrix", "BandPosteriors", "band_mea", "classical_guides", "corridor", "guide_corridor", "hit_box",
           "identity_gain_band", "local_corridor"]


@dataclass(frozen=True, eq=False)
class BandMatrix:
    """An ``[m, n]`` matrix that is zero outside a monotone strip: row ``i`` holds columns
    ``lo[i] <= j < hi[i]``, stored one row after another in ``data``."""

    lo: np.ndarray  # int64 [m], non-decreasing
    hi: np.ndarray  # int64 [m], non-decreasing, lo <= hi <= n
    data: np.ndarray  # float64 [sum(hi - lo)]
    n: int

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.lo, np.int64), np.asarray(self.hi, np.int64)
        if lo.ndim != 1 or lo.shape != hi.shape:
            raise ValueError(f"lo and hi must be [m], got {lo.shape} and {hi.shape}")
        if lo.size and (np.any(lo < 0) or np.any(hi < lo) or np.any(hi > self.n)
                        or np.any(np.diff(lo) < 0) or np.any(np.diff(hi) < 0)):
            raise ValueError("a band's rows must satisfy 0 <= lo <= hi <= n with lo and hi non-decreasing")
        if np.shape(self.data) != (int((hi - lo).sum()),):
            raise ValueError(f"data must hold the band's {int((hi - lo).sum())} cells, got {np.shape(self.data)}")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.lo), self.n

    @property
    def nnz(self) -> int:
        """Cells in the band."""
        return len(self.data)

    @cached_property
    def indptr(self) -> np.ndarray:
        """``int64 [m + 1]``: row ``i`` is ``data[indptr[i]:indptr[i + 1]]``."""
        return np.concatenate([[0], np.cumsum(self.hi - self.lo)])

    @cached_property
    def rows(self) -> np.ndarray:
        """``int64 [nnz]``: each cell's row."""
        return np.repeat(np.arange(len(self.lo)), self.hi - self.lo)

    @cached_property
    def cols(self) -> np.ndarray:
        """``int64 [nnz]``: each cell's column."""
        return np.arange(self.nnz) - np.repeat(self.indptr[:-1] - self.lo, self.hi - self.lo)

    def with_data(self, data: np.ndarray) -> BandMatrix:
        """The same band holding ``data``."""
        out = BandMatrix(self.lo, self.hi, data, self.n)
        for name in ("indptr", "rows", "cols"):  # share what is already computed
            if name in self.__dict__:
                out.__dict__[name] = self.__dict__[name]
        return out

    def contains(self, rows, cols) -> np.ndarray:
        """Whether each ``(rows[k], cols[k])`` (any in-range indices) lies in the band."""
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        return (cols >= self.lo[rows]) & (cols < self.hi[rows])

    def at(self, rows, cols) -> np.ndarray:
        """The entries at ``(rows, cols)`` (broadcast together; 0 outside the band)."""
        rows, cols = np.broadcast_arrays(np.asarray(rows, np.int64), np.asarray(cols, np.int64))
        inside = self.contains(rows, cols)
        where = np.where(inside, self.indptr[:-1][rows] + cols - self.lo[rows], 0)
        return np.where(inside, self.data[where] if self.nnz else 0.0, 0.0)

    def to_csr(self):
        """The same matrix as a ``scipy.sparse.csr_matrix``."""
        from scipy.sparse import csr_matrix

        return csr_matrix((self.data, self.cols, self.indptr), shape=self.shape)

    def to_dense(self) -> np.ndarray:
        out = np.zeros(self.shape)
        out[self.rows, self.cols] = self.data
        return out


@dataclass(frozen=True, eq=False)
class BandPosteriors:
    """:class:`~sinkalign.align.decode.Posteriors` of a banded plan: ``match`` a
    :class:`BandMatrix` (0 outside the corridor)."""

    match: BandMatrix
    query_gap: np.ndarray
    target_gap: np.ndarray

    def __iter__(self):
        return iter((self.match, self.query_gap, self.target_gap))


def _path_extent(pairs: np.ndarray, m: int, n: int, *, ends: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The columns a guide path crosses on each row: ``(left, right, valid)``, ``[m]`` each.

    Row ``i`` between aligned pairs ``(i0, j0)`` and ``(i1, j1)`` (``i0 <= i <= i1``) is
    crossed somewhere in ``[j0, j1]``: the path's gaps may lie anywhere between them, so the
    extent takes both ends. With ``ends`` (a global path) the path runs from the corner
    ``(-1, -1)`` to ``(m, n)``; otherwise (a local one) only the rows of its span are valid.
    """
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    if ends:
        pairs = np.concatenate([[[-1, -1]], pairs, [[m, n]]])
    left, right = np.zeros(m, np.int64), np.zeros(m, np.int64)
    valid = np.zeros(m, bool)
    if len(pairs) == 0:
        return left, right, valid
    rows = np.arange(m)
    # the last aligned pair at or above each row and the first at or below it
    before = np.searchsorted(pairs[:, 0], rows, side="right") - 1
    after = np.searchsorted(pairs[:, 0], rows, side="left")
    valid = (before >= 0) & (after < len(pairs))
    left[valid] = pairs[before[valid], 1]
    right[valid] = pairs[after[valid], 1]
    return np.clip(left, 0, n - 1), np.clip(right, 0, n - 1), valid


def corridor(guides, m: int, n: int, radius: int, *, local: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``, ``int64 [m]`` each: the monotone strip holding every cell within
    ``radius`` columns of a guide path on its row (a straight path gets the band
    ``|j - path(i)| <= radius``; a row inside a gap of the path, every column the gap spans too).

    Args:
        guides: aligned pairs ``[k, 2]`` of global guide paths (taken from corner to corner).
        local: aligned pairs of local guide paths (their span only).
        radius: ``>= 0``.
    """
    if radius < 0:
        raise ValueError(f"{radius=} must be >= 0")
    if m < 1 or n < 1:
        raise ValueError(f"a corridor needs m, n >= 1, got {m}, {n}")
    lo = np.full(m, n, np.int64)
    hi = np.full(m, -1, np.int64)
    for paths, ends in ((guides, True), (local, False)):
        for path in paths:
            left, right, valid = _path_extent(path, m, n, ends=ends)
            lo[valid] = np.minimum(lo[valid], left[valid])
            hi[valid] = np.maximum(hi[valid], right[valid])
    uncovered = hi < 0
    if uncovered.all():
        raise ValueError("a corridor needs at least one guide covering a row (give a global guide)")
    # rows no guide crosses (before or after every local guide): the nearest covered row's extent
    if uncovered.any():
        idx = np.where(~uncovered, np.arange(m), -1)
        idx = np.maximum.accumulate(idx)
        first = int(np.argmax(~uncovered))
        idx[idx < 0] = first
        lo, hi = lo[idx], hi[idx]
    lo = lo - radius
    hi = hi + radius + 1
    # monotone hull: the strip of one guide is monotone already; the union of several may not be
    lo = np.minimum.accumulate(lo[::-1])[::-1]
    hi = np.maximum.accumulate(hi)
    return np.clip(lo, 0, n), np.clip(hi, 0, n)


def identity_gain_band(query: str, target: str, band: BandMatrix, alphabet: str = "protein") -> np.ndarray:
    """:func:`~sinkalign.align.decode.identity_gain` on ``band``'s cells: ``bool [nnz]`` in its
    data order (row by row, each row's columns ``lo .. hi - 1``)."""
    from sinkalign.align.decode import _same_residues

    return _same_residues(query, target, alphabet, band.rows, band.cols)


def band_mea(post: BandPosteriors, *, gap_weight: float = 0.0, bonus: np.ndarray | None = None) -> Alignment:
    """:func:`~sinkalign.align.decode.mea_from_posteriors` with the cells outside the band
    unavailable: the heaviest monotone chain of ``W = match - gap_weight (query_gap +
    target_gap)`` over the band's cells.

    Row by row, keeping of each row of the table ``S`` only its band, the value just left of
    it and its maximum (to the left of the band a row equals the row above, to its right the
    maximum of everything above): each kept entry is the dense programme's, bit for bit, and
    the traceback makes the same moves (ties to gaps), so a band covering every cell gives
    exactly :func:`~sinkalign.align.decode.mea_batch`'s alignment. ``O(nnz)`` time, one float
    of ``S`` per cell. ``bonus`` (``[nnz]``, the band's cell order, finite): added to the gain,
    as :func:`~sinkalign.align.decode.mea_batch`'s (:func:`identity_gain_band`); the score is
    then the objective of the chosen pairs without it.
    """
    from sinkalign.align.decode import alignment_of_pairs

    if not np.isfinite(gap_weight) or gap_weight < 0:
        raise ValueError(f"{gap_weight=} must be finite and >= 0")
    M, qg, tg = post.match, np.asarray(post.query_gap, np.float64), np.asarray(post.target_gap, np.float64)
    m, n = M.shape
    w = np.asarray(M.data, np.float64)
    if gap_weight:  # the same operations, cell by cell, as row by row
        widths = M.hi - M.lo
        cols = np.arange(M.nnz) - np.repeat(M.indptr[:-1] - M.lo, widths)  # M.cols, not kept on M
        w = w - gap_weight * (np.repeat(qg, widths) + tg[cols])
    if bonus is not None:
        bonus = np.asarray(bonus, np.float64)
        if bonus.shape != (M.nnz,) or not np.all(np.isfinite(bonus)):
            raise ValueError(f"bonus must be finite with one entry per band cell ({M.nnz}), got shape {bonus.shape}")
        w = w + bonus
    lo, hi, ptr = M.lo.tolist(), M.hi.tolist(), M.indptr.tolist()
    S, row_max = _band_table(w, lo, hi, ptr, n)
    at = (M.indptr[:-1] + np.arange(1, m + 1) - M.lo).tolist()  # cell (i, j) is S[at[i] + j]
    best = row_max[m - 1] if m else 0.0
    pairs = _band_traceback(S, row_max, lo, hi, at, n)
    mp = M.at(pairs[:, 0], pairs[:, 1]) if len(pairs) else np.zeros(0)
    aln = alignment_of_pairs(pairs, mp, qg, tg, gap_weight=gap_weight)
    if bonus is not None:  # the table holds the bonus too: the objective of the pairs, summed
        return aln
    # the objective as the programme found it (the same number alignment_of_pairs sums, up to rounding)
    return Alignment(aln.pairs, aln.match_posterior, qg, tg, aln.expected_accuracy,
                     best + gap_weight * (qg.sum() + tg.sum()))


def _band_table(w: np.ndarray, lo: list, hi: list, ptr: list, n: int) -> tuple[np.ndarray, list]:
    """The programme of :func:`band_mea` on the gains ``w [nnz]`` of a band's cells (row
    ``i`` at ``ptr[i]:ptr[i + 1]``): ``(S, row_max)``. ``S [nnz + m]`` holds at ``ptr[i] + i``,
    for each row ``i`` that has cells, the value left of its band, ``S[i, lo_i - 1]``, then
    its band, ``S[i, lo_i .. hi_i - 1]`` (an empty row's one entry is left unset, never read);
    ``row_max[i]`` is ``S[i, j]`` for ``j >= hi_i``.

    One row of the table is kept whole, ``row[j + 1] = S[i, j]`` (``row[0]``: the zero
    column): left of a band it holds the row above already (a row equals it there), and right
    of it the maximum of the rows above, written as the next bands reach those columns (``hi``
    is non-decreasing: ``n`` entries written in all). So a row is a few array operations on
    slices of it, each entry the same addition and maxima (exact in any order) as densely.
    """
    m = len(lo)
    S = np.empty(len(w) + m)
    row = np.zeros(n + 1)
    read = memoryview(row)  # its entries as Python floats
    add, maximum, running_max = np.add, np.maximum, np.maximum.accumulate
    row_max = [0.0] * m
    filled, best = 0, 0.0  # row[1 : filled + 1] is S[i - 1, :filled]; right of it, S[i - 1, j] = best
    for i in range(m):
        a, b = lo[i], hi[i]
        if b > filled:
            if b == filled + 1:
                read[b] = best
            else:
                row[filled + 1 : b + 1] = best
            filled = b
        if b > a:
            p, q = ptr[i], ptr[i + 1]
            band = row[a : b + 1]  # [b - a + 1]: S[i - 1, a - 1 .. b - 1], S[i, a - 1] the same
            up = band[1:]
            maximum(add(band[:-1], w[p:q]), up, out=up)  # the diagonal or up
            out = S[p + i : q + i + 1]
            running_max(band, out=out)  # or left, from S[i, a - 1] on
            band[:] = out
            best = max(best, read[b])
        row_max[i] = best
    return S, row_max


def _band_traceback(S: np.ndarray, row_max: list, lo: list, hi: list, at: list, n: int) -> np.ndarray:
    """The aligned pairs ``int64 [k, 2]`` of :func:`_band_table`'s table, traced from ``(m - 1,
    n - 1)``: out of a band cell up where ``S[i, j] == S[i - 1, j]``, else left where ``S[i, j] ==
    S[i, j - 1]``, else diagonally (ties to gaps, as the dense traceback); out of the band a cell
    left of it moves up, right of it up when the row's maximum equals the row above's, else left
    (as the dense table's ties). A move is decided when the path reaches its cell."""
    read = memoryview(S)  # its entries as Python floats
    pairs = []
    i, j = len(lo) - 1, n - 1
    while i >= 0 and j >= 0:
        if j < lo[i]:
            i -= 1
        elif j >= hi[i]:
            if row_max[i] == (row_max[i - 1] if i else 0.0):
                i -= 1
            else:
                j = hi[i] - 1
        else:
            k = at[i] + j
            s = read[k]
            if i == 0:
                above = 0.0
            elif j < hi[i - 1]:  # and j >= lo[i] >= lo[i - 1]: in the band of the row above
                above = read[at[i - 1] + j]
            else:
                above = row_max[i - 1]
            if s == above:
                i -= 1
            elif s == read[k - 1]:  # S[i, lo_i - 1] when j = lo_i
                j -= 1
            else:
                pairs.append((i, j))
                i -= 1
                j -= 1
    return np.asarray(pairs[::-1], np.int64).reshape(-1, 2)


def classical_guides(query: str, target: str, *, kind: str = "protein") -> dict[str, np.ndarray]:
    """The Needleman-Wunsch (``"nw"``) and Smith-Waterman (``"sw"``) aligned pairs of a pair
    (parasail; BLOSUM62 11/1 for protein, +2/-3 5/2 for DNA): the alignments the calibrated
    confidences compare with (:func:`sinkalign.align.calibration.column_features`, which takes
    them as ``baselines``) and the guides of :func:`guide_corridor`."""
    from sinkalign.align.baselines import Scoring, align_pair
    from sinkalign.align.calibration import _baseline_letters

    if kind not in ("protein", "dna"):
        raise ValueError(f"{kind=} is not 'protein' or 'dna'")
    scoring = Scoring.default(kind)
    q, t = _baseline_letters(query, kind), _baseline_letters(target, kind)
    return {method: align_pair(q, t, method, scoring=scoring).pairs for method in ("nw", "sw")}


def guide_corridor(query: str, target: str, radius: int, *, kind: str = "protein",
                   guides: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`corridor` of ``radius`` around the pair's :func:`classical_guides` (given, or
    computed): the Needleman-Wunsch path end to end and the Smith-Waterman path over its span."""
    guides = classical_guides(query, target, kind=kind) if guides is None else guides
    return corridor([guides["nw"]], len(query), len(target), radius, local=[guides["sw"]])


def hit_box(local, m: int, n: int, margin: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(lo, hi)``: the rectangle of rows ``[i0 - margin, i1 + margin]`` and columns ``[j0 -
    margin, j1 + margin]`` around a local alignment's span ``(i0, j0) .. (i1, j1)`` (clipped to
    the matrix), as a strip whose rows outside it are empty; ``None`` for an empty alignment."""
    if margin < 0:
        raise ValueError(f"{margin=} must be >= 0")
    local = np.asarray(local, np.int64).reshape(-1, 2)
    if len(local) == 0:
        return None
    (i0, j0), (i1, j1) = local[0], local[-1]
    r0, r1 = max(0, int(i0) - margin), min(m, int(i1) + 1 + margin)
    c0, c1 = max(0, int(j0) - margin), min(n, int(j1) + 1 + margin)
    lo, hi = np.full(m, c0, np.int64), np.full(m, c1, np.int64)
    hi[:r0] = c0  # rows above the box: empty, at its left edge (the strip stays monotone)
    lo[r1:] = c1  # and below it: empty, at its right edge
    return lo, hi


def local_corridor(guides: dict, m: int, n: int, margin: int,
                   radius: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The corridor of a lopsided pair: the :func:`hit_box` of its Smith-Waterman guide
    (``guides["sw"]``, as :func:`classical_guides` gives) with ``margin``, whole, or with
    ``radius`` only its cells within ``radius`` of the Smith-Waterman path (:func:`corridor` of
    that guide alone). ``None`` when the pair has no local hit."""
    box = hit_box(guides["sw"], m, n, margin)
    if box is None or radius is None:
        return box
    lo, hi = corridor([], m, n, radius, local=[guides["sw"]])
    lo = np.maximum(lo, box[0])
    return lo, np.maximum(np.minimum(hi, box[1]), lo)
