"""Multiple sequence alignment from pairwise match posteriors (ProbCons' recipe).

Every pair of sequences is aligned once and its match probabilities of at least
:data:`MIN_POSTERIOR` kept as a sparse matrix: for the OT aligner, the pair's MEA columns at
their calibrated confidences (a library of residue pairs with probabilities, as T-Coffee's
primary library); for a source of full posterior matrices (the pair-HMM), every entry. Then, as
ProbCons (Do et al. 2005) does with its pair-HMM posteriors:

1. **Guide tree**: the expected accuracy of each pair (the free-gap MEA score of its posteriors
   over the shorter length) is a similarity; the tree is average linkage (UPGMA) on one minus
   it (:func:`scipy.cluster.hierarchy.linkage`).
2. **Consistency** (``consistency`` rounds): ``P'_xy = (2 P_xy + sum_{z != x, y} P_xz P_zy) / N``,
   the evidence that ``x_i`` matches ``y_j`` through every third sequence ``z``.
3. **Progressive alignment** up the tree: two profiles are aligned by the free-gap MEA of the
   summed posteriors of their sequences' residues in each pair of columns (divided by the
   number of sequence pairs, so each entry is in ``[0, 1]``); the matched columns merge.
4. **Refinement** (``refine`` rounds, optional): the sequences are split in two at random, the
   two halves (their columns kept, all-gap columns dropped) aligned again the same way, and
   the result kept when the sum-of-pairs posterior score is not lower.
5. **Confidences**: each residue's, the mean probability (consistency-transformed) of its
   pairings with the other residues of its column, and each column's, the mean over its
   residue pairs (:func:`confidences`); calibrated by an :class:`MsaCalibration` (per number
   of consistency rounds and family size, fitted on reference families) when the aligner
   carries one. Stockholm ``PP`` lines, ``sinkalign msa --column-scores`` and ``--trim``.

The probabilities come from any source: the OT aligner (:func:`aligner_posteriors`, what
``sinkalign msa`` uses), or a function of two sequences (:func:`function_posteriors`: the
pair-HMM, a hard Needleman-Wunsch alignment, ...), so the same recipe compares them.

Cost: ``N (N - 1) / 2`` pairwise alignments, and per consistency round ``O(N^3)`` sparse
products (each about ``L`` times the number of kept entries per row): ``consistency=0`` for
many sequences.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from sinkalign.align.decode import mea_batch
from sinkalign.errors import InputError
from sinkalign.io.fasta import sequence_text

__all__ = [
    "CLUSTAL_STRONG",
    "CLUSTAL_WEAK",
    "MIN_POSTERIOR",
    "SIZE_CLASSES",
    "MsaCalibration",
    "MultipleAlignment",
    "add_to_alignment",
    "align_multiple",
    "nearest_rows",
    "aligner_posteriors",
    "calibration_samples",
    "clustal_consensus",
    "column_pairs",
    "confidences",
    "consistency_transform",
    "fit_msa_calibration",
    "function_posteriors",
    "guide_tree",
    "library_aligner",
    "unrelated_records",
    "is_unrelated",
    "search_evalue",
    "library_entry",
    "pp_code",
    "progressive",
    "refine",
    "same_column",
    "sum_of_pairs",
]

#: posterior entries below this are dropped (ProbCons' cutoff): the matrices stay sparse
MIN_POSTERIOR = 0.01

Posts = dict  # (x, y) with x < y -> csr_matrix [L_x, L_y]


#: Clustal's conservation groups (Clustal W / Omega): a column of residues all in one strong
#: group is marked ``:``, all in one weak group ``.``, all one residue ``*``
CLUSTAL_STRONG = ("STA", "NEQK", "NHQK", "NDEQ", "QHRK", "MILV", "MILF", "HY", "FYW")
CLUSTAL_WEAK = ("CSA", "ATV", "SAG", "STNK", "STPA", "SGND", "SNDEQK", "NDEQHK", "NEQHRK", "FVLIM", "HFY")


def clustal_consensus(rows: Sequence[str], alphabet: str | None = "protein") -> str:
    """Clustal's conservation line of gapped ``rows``: ``*`` where every row has the same
    residue, and for protein ``:`` / ``.`` where every residue is in one of
    :data:`CLUSTAL_STRONG` / :data:`CLUSTAL_WEAK`; a space elsewhere and in any column with a gap."""
    out = []
    for column in zip(*rows):
        letters = {c.upper() for c in column}
        if "-" in letters or "." in letters:
            out.append(" ")
        elif len(letters) == 1:
            out.append("*")
        elif alphabet == "dna":
            out.append(" ")
        elif any(letters <= set(g) for g in CLUSTAL_STRONG):
            out.append(":")
        elif any(letters <= set(g) for g in CLUSTAL_WEAK):
            out.append(".")
        else:
            out.append(" ")
    return "".join(out)


def pp_code(p: float) -> str:
    """A probability as one character of a Stockholm ``PP`` line (HMMER's code): ``*`` for
    >= 0.95, else the digit ``d`` of ``[d - 0.5, d + 0.5) / 10``; ``.`` for NaN (no value)."""
    if not np.isfinite(p):
        return "."
    return "*" if p + 0.05 >= 1.0 else str(min(9, max(0, int((p + 0.05) * 10))))


@dataclass(frozen=True)
class MultipleAlignment:
    """``ids`` and ``rows`` (gapped, ``-`` for a gap, all of one length) in input order, the
    guide tree as Newick (``tree``, branch lengths in units of one minus expected accuracy),
    and ``score``: the sum-of-pairs posterior score (the summed consistency-transformed
    posteriors of every aligned residue pair).

    ``confidence``: per row, each residue's confidence (:func:`confidences`: the mean
    probability of its pairings with the other residues of its column; NaN for a residue
    alone in its column); ``column_confidence``: per column, the mean over its residue pairs
    (NaN for a column of fewer than two residues). ``calibrated``: whether those
    probabilities are calibrated (an :class:`MsaCalibration` covering the consistency rounds
    used), else the consistency-transformed library's own, which rank pairs but understate
    how often they are right.

    ``source_columns``: for an alignment that records were added to
    (:func:`add_to_alignment`), the column of this one that each column of the alignment
    added to became (0-based, increasing; ``-1`` for a column since dropped), so that the
    annotations of those columns can follow them (:meth:`StockholmMarkup.spread
    <sinkalign.io.stockholm.StockholmMarkup.spread>`); ``None`` otherwise."""

    ids: tuple[str, ...]
    rows: tuple[str, ...]
    tree: str
    score: float
    confidence: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)
    column_confidence: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    calibrated: bool = False
    source_columns: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def n_columns(self) -> int:
        return len(self.rows[0]) if self.rows else 0

    def __repr__(self) -> str:  # not every row: a notebook shows this
        names = ", ".join(map(repr, self.ids[:4])) + (", ..." if len(self.ids) > 4 else "")
        return (f"MultipleAlignment({len(self.rows)} rows x {self.n_columns} columns, ids=[{names}], "
                f"score={self.score:.4g}, calibrated={self.calibrated})")

    @property
    def sequence_confidence(self) -> np.ndarray:
        """Per row, the mean probability of all its residue pairings (each residue's
        confidence weighted by how many residues share its column): the expected share of the
        row's aligned pairs that are right, as GUIDANCE scores sequences to find the ones that
        fit the family worst. NaN for a row with no residue in a shared column."""
        out = np.full(len(self.rows), np.nan)
        if not self.confidence:
            return out
        grid = np.array([np.frombuffer(r.encode("ascii"), np.uint8) != ord("-") for r in self.rows])
        occupancy = grid.sum(axis=0)
        for k, conf in enumerate(self.confidence):
            partners = occupancy[grid[k]] - 1  # the other residues in each of the row's columns
            keep = partners > 0
            if keep.any():
                out[k] = float(np.sum(conf[keep] * partners[keep]) / np.sum(partners[keep]))
        return out

    def trimmed(self, min_confidence: float) -> tuple[MultipleAlignment, np.ndarray]:
        """The alignment without its columns of confidence below ``min_confidence`` (and,
        for any ``min_confidence > 0``, without those of fewer than two residues, which have
        none), and the 0-based indices of the columns kept. As trimAl or GUIDANCE trim an
        alignment before a tree is built from it; the residues of a dropped column are gone
        from the rows (a row may become all gaps). ``score`` and ``tree`` are the untrimmed
        alignment's."""
        if not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence={min_confidence} must be in [0, 1]")
        if not self.confidence:
            raise ValueError("this alignment has no confidences to trim by")
        conf = self.column_confidence
        keep = np.flatnonzero(conf >= min_confidence) if min_confidence > 0 else np.arange(self.n_columns)
        return self.columns(keep), keep

    def columns(self, keep: np.ndarray) -> MultipleAlignment:
        """The alignment of the columns ``keep`` (0-based, increasing) alone: the residues of
        the others are gone from the rows, with their confidences; ``score`` and ``tree`` are
        this alignment's."""
        keep = np.asarray(keep, np.int64)
        rows = tuple("".join(row[c] for c in keep) for row in self.rows)
        confidence = []
        for row, values in zip(self.rows, self.confidence):
            residue = np.cumsum([c != "-" for c in row]) - 1  # each column's residue index in this row
            confidence.append(np.asarray([values[residue[c]] for c in keep if row[c] != "-"], np.float64))
        column = self.column_confidence[keep] if len(self.column_confidence) else self.column_confidence
        source = None
        if self.source_columns is not None:  # where each source column is now, -1 once dropped
            now = np.full(self.n_columns, -1, np.int64)
            now[keep] = np.arange(keep.size)
            source = np.where(self.source_columns >= 0, now[self.source_columns], -1)
        return MultipleAlignment(self.ids, rows, self.tree, self.score, tuple(confidence), column, self.calibrated,
                                 source)

    def pp_lines(self) -> tuple[tuple[str, ...], str]:
        """The confidences as Stockholm ``PP`` strings (:func:`pp_code`): one per row, ``.`` at
        gaps, and the columns' (``PP_cons``). Empty when there are no confidences."""
        if not self.confidence:
            return (), ""
        rows = []
        for row, conf in zip(self.rows, self.confidence):
            codes = iter(pp_code(p) for p in conf)
            rows.append("".join("." if c == "-" else next(codes) for c in row))
        return tuple(rows), "".join(pp_code(p) for p in self.column_confidence)

    def to_biopython(self, alphabet: str | None = None, descriptions: Mapping[str, str] | None = None):
        """A :class:`Bio.Align.MultipleSeqAlignment` of the rows (for ``Bio.AlignIO.write``):
        with each row's confidences as its ``posterior_probability`` letter annotation and the
        columns' as a column annotation (Stockholm ``#=GR id PP`` and ``#=GC PP_cons`` lines),
        and Clustal's conservation line (``clustal_consensus``). ``descriptions``: the rest of
        each input header by id, kept as FASTA writes it (``>id description``) and Stockholm
        (``#=GS id DE``), as MAFFT and Clustal Omega keep it; a record's ``description`` is its
        whole header, id first, as ``Bio.SeqIO`` reads one (so that Biopython's FASTA writer,
        which drops a description's first word when it equals the id, keeps ``>id id ...``)."""
        from Bio.Align import MultipleSeqAlignment
        from Bio.Seq import Seq
        from Bio.SeqRecord import SeqRecord

        annotations = {"molecule_type": "DNA" if alphabet == "dna" else "protein"} if alphabet else {}
        pp_rows, pp_cons = self.pp_lines()
        records = []
        for k, (i, row) in enumerate(zip(self.ids, self.rows)):
            letters = {"posterior_probability": pp_rows[k]} if pp_rows else {}
            rest = (descriptions or {}).get(i, "")
            description = f"{i} {rest}" if rest else ""
            records.append(SeqRecord(Seq(row), id=i, description=description, annotations=dict(annotations),
                                     letter_annotations=letters))
        columns = {"clustal_consensus": clustal_consensus(self.rows, alphabet)}
        if pp_cons:
            columns["posterior_probability"] = pp_cons
        return MultipleSeqAlignment(records, column_annotations=columns)


# ----------------------------------------------------------------------------- posteriors

def _sparse(match) -> sp.csr_matrix:
    """``match`` (dense or sparse) as CSR, entries below :data:`MIN_POSTERIOR` dropped and a
    rounding error above 1 clipped."""
    M = sp.csr_matrix(match, dtype=np.float64, copy=True)
    M.data = np.where(M.data >= MIN_POSTERIOR, np.minimum(M.data, 1.0), 0.0)
    M.eliminate_zeros()
    return M


def library_entry(alignment, m: int, n: int) -> sp.csr_matrix:
    """``[m, n]``: an :class:`~sinkalign.alignment.Alignment`'s columns at their posteriors
    (calibrated confidences, from a calibrated aligner), those below :data:`MIN_POSTERIOR` dropped."""
    pairs = alignment.pairs
    return _sparse(sp.csr_matrix((alignment.match_posterior, (pairs[:, 0], pairs[:, 1])), shape=(m, n)))


def library_aligner(aligner):
    """``aligner`` as a multiple alignment reads it: every MEA column kept (its threshold set
    aside; a copy when it changes), its decoding as it is (the identity tie-break of close pairs
    included: it places a close pair's indels, which consistency then spreads). Raises
    :class:`~sinkalign.errors.InputError` when it has no calibration."""
    if not hasattr(aligner, "align_many"):
        raise InputError(f"the posteriors of a multiple alignment come from an Aligner (sinkalign.Aligner.load()), "
                         f"a function of two sequences or a dict of pairs' posteriors, not {type(aligner).__name__}")
    if getattr(aligner, "calibration", None) is None:
        raise InputError("a multiple alignment needs the aligner's calibrated column confidences: this model has "
                         "no calibration (fit one with `sinkalign calibrate`)")
    if aligner.min_confidence > 0:
        aligner = copy.copy(aligner)
        aligner.min_confidence = 0.0
    return aligner


def aligner_posteriors(aligner, seqs: Sequence[str], *, pairs: Iterable[tuple[int, int]] | None = None,
                       ids: Sequence[str] | None = None, progress: Callable[[int], Any] | None = None,
                       evalues: dict | None = None) -> Posts:
    """The calibrated column confidences of ``aligner`` (an
    :class:`~sinkalign.align.aligner.Aligner` with a calibration) for every pair ``x < y`` of
    ``seqs`` (or the ``pairs`` given): each pair's MEA columns, every one of them (the
    aligner's threshold is set aside, :func:`library_aligner`), at their confidences
    (:func:`library_entry`), as T-Coffee's primary library holds each pairwise alignment's
    residue pairs; nucleotide pairs on the plus strand. ``ids``: the sequences' names, which
    the aligner's errors about a pair use (default: their indices). ``progress(1)`` is called
    after each pair (e.g. a tqdm bar's ``update``); ``evalues``, a dict, gets each pair's
    E-value (``None`` for a model without a null) under ``(x, y)``. The plans' raw posteriors are not used: an entropic
    plan spreads its mass thinly (a right column may carry 0.01), so they are not
    probabilities; the calibrated confidences are."""
    aligner = library_aligner(aligner)
    todo = list(pairs) if pairs is not None else [(x, y) for x in range(len(seqs)) for y in range(x + 1, len(seqs))]
    names = [str(k) for k in range(len(seqs))] if ids is None else list(ids)
    items = [(names[x], seqs[x], names[y], seqs[y]) for x, y in todo]
    out = {}
    strand = {"strand": "plus"} if aligner.config.alphabet == "dna" else {}  # the sequences as given
    for (x, y), result in zip(todo, aligner.align_many(items, **strand)):
        out[(x, y)] = library_entry(result.alignment, len(seqs[x]), len(seqs[y]))
        if evalues is not None:
            evalues[(x, y)] = result.evalue
        if progress is not None:
            progress(1)
    return out


def function_posteriors(fn: Callable[[str, str], Any], seqs: Sequence[str], *,
                        pairs: Iterable[tuple[int, int]] | None = None,
                        progress: Callable[[int], Any] | None = None) -> Posts:
    """``fn(seqs[x], seqs[y])`` (a ``[L_x, L_y]`` match posterior matrix) for every pair
    ``x < y`` (or the ``pairs`` given), entries below :data:`MIN_POSTERIOR` dropped;
    ``progress`` as in :func:`aligner_posteriors`."""
    out = {}
    todo = list(pairs) if pairs is not None else [(x, y) for x in range(len(seqs)) for y in range(x + 1, len(seqs))]
    for x, y in todo:
        M = np.asarray(fn(seqs[x], seqs[y]), np.float64)
        out[(x, y)] = _checked(M, (len(seqs[x]), len(seqs[y])), x, y, f"sequences {x} and {y}")
        if progress is not None:
            progress(1)
    return out


def _checked(P, shape: tuple[int, int], x: int, y: int, what: str) -> sp.csr_matrix:
    """The posteriors ``P`` of the pair ``(x, y)`` (``what``, for the error) as the library keeps
    them (:func:`_sparse`), after their shape and values are checked."""
    if P.shape != shape:
        raise ValueError(f"posteriors of {what} have shape {P.shape}, expected {shape}")
    _check_values(x, y, P)
    return _sparse(P)


def _check_values(x: int, y: int, P) -> None:
    """Probabilities, up to a rounding error above 1 (which :func:`_sparse` clips)."""
    values = P.data if sp.issparse(P) else np.asarray(P, np.float64)
    if values.size and not (np.all(np.isfinite(values)) and values.min() >= 0.0 and values.max() <= 1.0 + 1e-9):
        raise ValueError(f"posteriors of sequences {x} and {y} must be probabilities in [0, 1]")


def _check_posts(posts: Posts, lengths: Sequence[int]) -> None:
    """Keys, values and shapes of ``posts``, and that every pair ``x < y`` is there."""
    n = len(lengths)
    for key, P in posts.items():
        if not (isinstance(key, tuple) and len(key) == 2 and 0 <= key[0] < key[1] < n):
            raise ValueError(f"posteriors are keyed by (x, y) with 0 <= x < y < {n}, got {key!r}")
        _check_values(*key, P)
    for x in range(n):
        for y in range(x + 1, n):
            P = posts.get((x, y))
            if P is None:
                raise ValueError(f"no posteriors for the pair of sequences {x} and {y}")
            if P.shape != (lengths[x], lengths[y]):
                raise ValueError(f"posteriors of sequences {x} and {y} have shape {P.shape}, expected "
                                 f"({lengths[x]}, {lengths[y]})")


def _get(posts: Posts, x: int, y: int) -> sp.csr_matrix:
    return posts[(x, y)] if x < y else posts[(y, x)].T.tocsr()


def consistency_transform(posts: Posts, lengths: Sequence[int], rounds: int = 1) -> Posts:
    """``rounds`` rounds of ProbCons' consistency transformation (module docstring, step 2) of
    the posteriors of every pair ``x < y`` (``posts[(x, y)]``, ``[L_x, L_y]``).

    With ``B`` the block matrix of every ``P_xy`` (zero diagonal blocks), block ``(x, y)`` of
    ``B @ B`` is ``sum_{z != x, y} P_xz P_zy``: one sparse product per block row (the rows of
    ``x`` against the columns of every ``y > x``), so memory holds one block row's product
    before its cutoff, not all of them."""
    n = len(lengths)
    _check_posts(posts, lengths)
    if n < 2:
        return dict(posts)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for _ in range(rounds):
        blocks = [[None] * n for _ in range(n)]
        for (x, y), P in posts.items():
            blocks[x][y], blocks[y][x] = P, P.T
        for x in range(n):  # bmat needs each block row and column's size
            blocks[x][x] = sp.csr_matrix((lengths[x], lengths[x]))
        B = sp.bmat(blocks, format="csr")
        right = B.tocsc()
        new = {}
        for x in range(n - 1):
            cols = right[:, offsets[x + 1]:]  # every y > x
            rows = B[offsets[x]:offsets[x + 1]]
            C = ((2.0 * rows[:, offsets[x + 1]:] + rows @ cols) / n).tocsr()
            C.data[C.data < MIN_POSTERIOR] = 0.0
            C.eliminate_zeros()
            C = C.tocsc()
            for y in range(x + 1, n):
                new[(x, y)] = C[:, offsets[y] - offsets[x + 1]:offsets[y + 1] - offsets[x + 1]].tocsr()
        posts = new
    return posts


# ----------------------------------------------------------------------------- guide tree

def _mea(S: np.ndarray) -> np.ndarray:
    """Free-gap MEA pairs of a score matrix with entries in ``[0, 1]``."""
    zeros = np.zeros(S.shape[0]), np.zeros(S.shape[1])
    return mea_batch([(S, *zeros)], gap_weight=0.0)[0].pairs


def _chain_score(P: sp.csr_matrix) -> float | None:
    """The summed entries of ``P`` when they form one monotone chain (each row and column at
    most once, both increasing: a pairwise alignment's columns, which is its own free-gap MEA),
    else ``None``."""
    coo = P.tocoo()
    order = np.argsort(coo.row, kind="stable")
    rows, cols = coo.row[order], coo.col[order]
    if np.all(np.diff(rows) > 0) and np.all(np.diff(cols) > 0):
        return float(coo.data.sum())
    return None


def _expected_accuracy(posts: Posts, lengths: Sequence[int]) -> np.ndarray:
    n = len(lengths)
    keys = [(x, y) for x in range(n) for y in range(x + 1, n)]
    score = {k: _chain_score(posts[k]) for k in keys}
    todo = [k for k in keys if score[k] is None]  # full posterior matrices: their MEA
    alns = mea_batch([(posts[k].toarray(), np.zeros(lengths[k[0]]), np.zeros(lengths[k[1]])) for k in todo],
                     gap_weight=0.0)
    score.update({k: aln.score for k, aln in zip(todo, alns)})
    ea = np.ones((n, n))
    for x, y in keys:
        ea[x, y] = ea[y, x] = min(1.0, score[(x, y)] / max(1, min(lengths[x], lengths[y])))
    return ea


def guide_tree(posts: Posts, lengths: Sequence[int]) -> np.ndarray:
    """The UPGMA linkage (:func:`scipy.cluster.hierarchy.linkage`, ``[N - 1, 4]``) on one minus
    each pair's expected accuracy."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    _check_posts(posts, lengths)
    dist = 1.0 - _expected_accuracy(posts, lengths)
    np.fill_diagonal(dist, 0.0)
    return linkage(squareform(dist, checks=False), method="average")


def _newick(Z: np.ndarray, ids: Sequence[str]) -> str:
    n = len(ids)
    if n == 1:
        return f"{_newick_name(ids[0])};"
    heights = np.zeros(2 * n - 1)
    text = {i: _newick_name(name) for i, name in enumerate(ids)}
    for k, (a, b, d, _) in enumerate(Z):
        a, b, node = int(a), int(b), n + k
        heights[node] = d / 2.0
        text[node] = f"({text[a]}:{heights[node] - heights[a]:.4g},{text[b]}:{heights[node] - heights[b]:.4g})"
    return text[2 * n - 2] + ";"


def _newick_name(name: str) -> str:
    return "'" + name.replace("'", "''") + "'" if any(c in name for c in " ():;,[]'") else name


# ----------------------------------------------------------------------------- profiles

@dataclass
class _Profile:
    members: list[int]  # sequence indices
    cols: dict[int, np.ndarray]  # sequence -> column of each residue
    width: int


def _column_sums(a: _Profile, b: _Profile, posts: Posts) -> np.ndarray:
    """``[a.width, b.width]``: the summed posteriors of the residue pairs in each pair of columns."""
    keys, weights = [], []
    for x in a.members:
        for y in b.members:
            P = _get(posts, x, y).tocoo()
            keys.append(a.cols[x][P.row] * b.width + b.cols[y][P.col])
            weights.append(P.data)
    flat = np.bincount(np.concatenate(keys), weights=np.concatenate(weights), minlength=a.width * b.width)
    return flat.reshape(a.width, b.width)


def _column_scores(a: _Profile, b: _Profile, posts: Posts, sums: np.ndarray | None = None) -> np.ndarray:
    """:func:`_column_sums` over the number of sequence pairs (entries in ``[0, 1]``)."""
    sums = _column_sums(a, b, posts) if sums is None else sums
    return np.minimum(sums / (len(a.members) * len(b.members)), 1.0)


def _column_max(a: _Profile, b: _Profile, posts: Posts) -> np.ndarray:
    """``[a.width, b.width]``: the largest posterior of the residue pairs in each pair of columns."""
    flat = np.zeros(a.width * b.width)
    for x in a.members:
        for y in b.members:
            P = _get(posts, x, y).tocoo()
            np.maximum.at(flat, a.cols[x][P.row] * b.width + b.cols[y][P.col], P.data)
    return np.minimum(flat.reshape(a.width, b.width), 1.0)


def _merge(a: _Profile, b: _Profile, pairs: np.ndarray) -> _Profile:
    """Profiles ``a`` and ``b`` merged on their matched columns ``pairs [k, 2]`` (both
    increasing); between two matches, ``a``'s unmatched columns come before ``b``'s."""
    new_a, new_b = np.empty(a.width, np.int64), np.empty(b.width, np.int64)
    col, ia, ib = 0, 0, 0
    for i, j in list(map(tuple, pairs)) + [(a.width, b.width)]:
        span_a, span_b = i - ia, j - ib
        new_a[ia:i] = np.arange(col, col + span_a)
        col += span_a
        new_b[ib:j] = np.arange(col, col + span_b)
        col += span_b
        if i < a.width:
            new_a[i] = new_b[j] = col
            col += 1
        ia, ib = i + 1, j + 1
    cols = {x: new_a[c] for x, c in a.cols.items()}
    cols.update({y: new_b[c] for y, c in b.cols.items()})
    return _Profile(a.members + b.members, cols, col)


def _align_profiles(a: _Profile, b: _Profile, posts: Posts) -> _Profile:
    return _merge(a, b, _mea(_column_scores(a, b, posts)))


def progressive(posts: Posts, lengths: Sequence[int], Z: np.ndarray) -> dict[int, np.ndarray]:
    """The column of every residue (``{x: [L_x]}``) of the alignment built up the linkage
    ``Z`` (:func:`guide_tree`) from the posteriors ``posts``."""
    n = len(lengths)
    nodes = {x: _Profile([x], {x: np.arange(lengths[x])}, lengths[x]) for x in range(n)}
    for k, (a, b, _, _) in enumerate(Z):
        nodes[n + k] = _align_profiles(nodes.pop(int(a)), nodes.pop(int(b)), posts)
    (root,) = nodes.values()
    return root.cols


def _subprofile(cols: dict[int, np.ndarray], members: list[int]) -> tuple[_Profile, np.ndarray]:
    """The rows ``members`` of the alignment ``cols`` with their all-gap columns dropped, and
    the alignment's column of each of its columns."""
    used = np.unique(np.concatenate([cols[x] for x in members]))
    remap = np.full(int(used.max()) + 1 if used.size else 0, -1, np.int64)
    remap[used] = np.arange(used.size)
    return _Profile(list(members), {x: remap[cols[x]] for x in members}, int(used.size)), used


def sum_of_pairs(cols: dict[int, np.ndarray], posts: Posts) -> float:
    """The summed posteriors of every residue pair that the alignment ``cols`` puts in one column."""
    total = 0.0
    for (x, y), P in posts.items():
        P = P.tocoo()
        same = cols[x][P.row] == cols[y][P.col]
        total += float(P.data[same].sum())
    return total


def same_column(cols_x: np.ndarray, cols_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(i, j)``: the residues of two rows in one column, from each residue's column
    (``cols_x[i] == cols_y[j]``; a residue at column ``-1`` is in none, e.g. an insertion)."""
    width = 1 + max(int(cols_x.max(initial=-1)), int(cols_y.max(initial=-1)))
    residue_y = np.full(width, -1, np.int64)
    placed = np.flatnonzero(cols_y >= 0)
    residue_y[cols_y[placed]] = placed
    i = np.flatnonzero(cols_x >= 0)
    j = residue_y[cols_x[i]]
    keep = j >= 0
    return i[keep], j[keep]


def column_pairs(cols: dict[int, np.ndarray], posts: Posts):
    """For every pair ``x < y`` of ``posts``: ``(x, y, i, j, p)``, the residue pairs ``(i, j)``
    that the alignment ``cols`` puts in one column (:func:`same_column`) and their
    probabilities ``p`` under ``posts`` (0 where a pair has no entry)."""
    for (x, y), P in posts.items():
        i, j = same_column(cols[x], cols[y])
        p = np.asarray(P[i, j]).ravel() if i.size else np.zeros(0)
        yield x, y, i, j, p


def confidences(cols: dict[int, np.ndarray], posts: Posts, lengths: Sequence[int],
                calibrate: Callable[[np.ndarray], np.ndarray] | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """Each residue's and each column's confidence in the alignment ``cols`` under ``posts``.

    A residue's: the mean probability (``posts``, mapped by ``calibrate`` when given) of its
    pairings, with every residue of another row in its column; a column's: the mean over
    every residue pair in it. NaN for a residue alone in its column and for a column with
    fewer than two residues.
    """
    n = len(lengths)
    total = [np.zeros(length) for length in lengths]
    count = [np.zeros(length) for length in lengths]
    for x, y, i, j, p in column_pairs(cols, posts):
        if calibrate is not None:
            p = calibrate(p)
        np.add.at(total[x], i, p)
        np.add.at(count[x], i, 1.0)
        np.add.at(total[y], j, p)
        np.add.at(count[y], j, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        residue = [total[x] / count[x] for x in range(n)]
    width = 1 + max((int(c.max()) for c in cols.values() if c.size), default=-1)
    col_total = np.zeros(width)
    col_count = np.zeros(width)
    for x in range(n):
        np.add.at(col_total, cols[x], total[x])
        np.add.at(col_count, cols[x], count[x])
    with np.errstate(invalid="ignore", divide="ignore"):
        column = col_total / col_count
    return residue, column


#: the smallest family size of each class that an :class:`MsaCalibration` maps apart: the
#: consistency transformation divides by the number of sequences, so the same probability
#: means more in a small family than in a large one
SIZE_CLASSES = (3, 6, 11)


@dataclass(frozen=True)
class MsaCalibration:
    """Calibrated confidences of a multiple alignment's residue pairs.

    A residue pair that the alignment puts in one column has a probability under the
    consistency-transformed library (:func:`consistency_transform`); it ranks pairs well, but
    is not the frequency with which such pairs are right (the transformation divides by the
    number of sequences, and a pair the pairwise alignment left out has none). ``knots`` maps
    it to that frequency, for each number of consistency rounds and each class of family size
    (:data:`SIZE_CLASSES`): ``{rounds: ((min_sequences, xs, ys), ...)}``, isotonic fits
    (:func:`~sinkalign.align.calibration.isotonic_knots`, piecewise linear through the knots,
    constant beyond the end ones) on reference families (:func:`fit_msa_calibration`). A
    family takes the class of the largest ``min_sequences`` it reaches (the smallest class
    when it reaches none). Two sequences need no map: their library is one pairwise
    alignment's calibrated confidences. Stored with the model (``state.json``, key
    ``msa_calibration``), and used with the model's own pairwise calibration only (the library
    is made of those confidences).

    ``added``: for records added to an existing alignment (:func:`add_to_alignment`), the map of
    a new residue's confidence (the mean library probability of its pairings with the residues
    of its column) to the share of those pairings that are right, per number of consistency
    rounds: ``{rounds: (xs, ys)}``, fitted by leaving rows of reference families out and adding
    them back (``benchmarks/msa_add.py --fit-added``).
    """

    knots: dict  # consistency rounds -> ((min_sequences, xs, ys), ...) by increasing min_sequences
    fitted_on: str = ""
    added: dict = field(default_factory=dict)  # consistency rounds -> (xs, ys), for add_to_alignment

    def __post_init__(self) -> None:
        for rounds in [*self.knots, *self.added]:
            if not (isinstance(rounds, int) and rounds >= 0):
                raise ValueError(f"consistency rounds must be integers >= 0, got {rounds!r}")
        for rounds, classes in self.knots.items():
            if not classes:
                raise ValueError(f"no knots for {rounds} rounds")
            sizes = [c[0] for c in classes]
            if not all(isinstance(s, int) and s >= 3 for s in sizes) or sizes != sorted(set(sizes)):
                raise ValueError(f"{rounds} rounds: family-size classes must be increasing integers >= 3, "
                                 f"got {sizes}")
            for size, xs, ys in classes:
                xs, ys = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
                _check_knots(xs, ys, f"knots of {rounds} rounds, {size}+ sequences")
        for rounds, (xs, ys) in self.added.items():
            _check_knots(np.asarray(xs, np.float64), np.asarray(ys, np.float64), f"added knots of {rounds} rounds")

    def covers(self, consistency: int) -> bool:
        return consistency in self.knots

    def mapper(self, consistency: int, sequences: int) -> Callable[[np.ndarray], np.ndarray]:
        """The map of ``consistency`` rounds for a family of ``sequences`` (identity for two)."""
        if sequences <= 2:
            return lambda p: np.asarray(p, np.float64)
        classes = self.knots[consistency]
        _, xs, ys = next((c for c in reversed(classes) if c[0] <= sequences), classes[0])
        return _piecewise(xs, ys)

    def added_mapper(self, consistency: int) -> Callable[[np.ndarray], np.ndarray] | None:
        """The map of an added residue's confidence at ``consistency`` rounds, ``None`` when
        there is none."""
        return _piecewise(*self.added[consistency]) if consistency in self.added else None

    def to_dict(self) -> dict:
        out = {"knots": {str(k): [{"min_sequences": int(s), "x": list(map(float, xs)), "y": list(map(float, ys))}
                                  for s, xs, ys in classes]
                         for k, classes in sorted(self.knots.items())},
               "fitted_on": self.fitted_on}
        if self.added:
            out["added"] = {str(k): {"x": list(map(float, xs)), "y": list(map(float, ys))}
                            for k, (xs, ys) in sorted(self.added.items())}
        return out

    @classmethod
    def from_dict(cls, data: dict) -> MsaCalibration:
        if not isinstance(data, dict) or not isinstance(data.get("knots"), dict):
            raise ValueError("an MSA calibration is a mapping with 'knots'")
        for key in [*data["knots"], *(data.get("added") or {})]:
            if not (isinstance(key, str) and key.isdigit()):
                raise ValueError(f"consistency rounds {key!r} is not a non-negative integer")
        knots = {}
        for key, value in data["knots"].items():
            if not (isinstance(value, list) and all(isinstance(c, dict) and {"min_sequences", "x", "y"} <= set(c)
                                                    for c in value)):
                raise ValueError(f"knots of {key} rounds: a list of {{min_sequences, x, y}}")
            knots[int(key)] = tuple((c["min_sequences"], tuple(c["x"]), tuple(c["y"])) for c in value)
        added = {}
        for key, value in (data.get("added") or {}).items():
            if not (isinstance(value, dict) and {"x", "y"} <= set(value)):
                raise ValueError(f"added knots of {key} rounds: a mapping of x and y")
            added[int(key)] = (tuple(value["x"]), tuple(value["y"]))
        return cls(knots, str(data.get("fitted_on", "")), added)


def _piecewise(xs, ys) -> Callable[[np.ndarray], np.ndarray]:
    """The piecewise linear map through the knots ``(xs, ys)``, constant beyond the end ones."""
    xs, ys = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
    return lambda p: np.interp(p, xs, ys)


def _check_knots(xs: np.ndarray, ys: np.ndarray, where: str) -> None:
    """Knots of a piecewise linear map of probabilities: ``ValueError`` naming ``where`` unless
    ``xs`` and ``ys`` are of one length, ``xs`` finite and increasing, ``ys`` non-decreasing in
    ``[0, 1]``."""
    if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 1:
        raise ValueError(f"{where}: xs and ys must be non-empty and of one length")
    if not (np.all(np.isfinite(xs)) and np.all(np.diff(xs) > 0)):
        raise ValueError(f"{where}: xs must be finite and increasing")
    if not (np.all(np.diff(ys) >= 0) and ys.min() >= 0.0 and ys.max() <= 1.0):
        raise ValueError(f"{where}: ys must be non-decreasing probabilities")


def calibration_samples(cols: dict[int, np.ndarray], posts: Posts, ids: Sequence[str],
                        references: Iterable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p, right, column)``: the probability under ``posts`` of every residue pair that the
    alignment ``cols`` puts in one column, whether the reference has it, and that column, for
    the pairs the references score (:class:`~sinkalign.io.alignments.ReferencePair` of rows ``ids``, e.g.
    :func:`~sinkalign.io.alignments.msa_to_pairs` of a reference family): as
    :func:`~sinkalign.align.metrics.core_pair_scores` counts precision, a pair with a trusted
    (core) residue on either side."""
    index = {name: k for k, name in enumerate(ids)}
    probs, rights, columns = [], [], []
    placed = {(x, y): (i, j, p) for x, y, i, j, p in column_pairs(cols, posts)}
    for ref in references:
        x, y = index[ref.query_id], index[ref.target_id]
        i, j, p = placed[(min(x, y), max(x, y))]
        qi, tj = (i, j) if x < y else (j, i)
        if ref.query_core is not None:
            keep = ref.query_core[qi] | ref.target_core[tj]
            qi, tj, p = qi[keep], tj[keep], p[keep]
        width = len(ref.target_seq) + 1
        truth = np.asarray(ref.pairs, np.int64)
        rights.append(np.isin(qi * width + tj, truth[:, 0] * width + truth[:, 1]))
        probs.append(p)
        columns.append(cols[x][qi])
    if not probs:
        return np.zeros(0), np.zeros(0, bool), np.zeros(0, np.int64)
    return np.concatenate(probs), np.concatenate(rights), np.concatenate(columns)


def fit_msa_calibration(samples: dict, *, fitted_on: str = "", max_knots: int = 16,
                        size_classes: Sequence[int] = SIZE_CLASSES, min_samples: int = 1000) -> MsaCalibration:
    """An :class:`MsaCalibration` from ``{consistency rounds: (p, right, sequences)}``: the
    concatenated first two of :func:`calibration_samples` over reference families aligned
    with that many rounds, and each sample's family size. One isotonic fit of ``right`` on
    ``p`` per class of ``size_classes`` holding at least ``min_samples`` samples of families
    of three or more sequences (a class with fewer joins the class below it, the first
    class the one above it)."""
    from sinkalign.align.calibration import isotonic_knots

    knots = {}
    for rounds, (p, right, sequences) in samples.items():
        p, right, sequences = (np.asarray(a) for a in (p, right, sequences))
        edges = sorted(size_classes)
        while True:  # merge classes that are too small
            cls = np.searchsorted(edges, sequences, side="right") - 1
            counts = np.bincount(cls[cls >= 0], minlength=len(edges))
            small = np.flatnonzero(counts < min_samples)
            if not small.size or len(edges) == 1:
                break
            k = int(small[0])
            edges.pop(k if k > 0 else 1)  # into the class below; the first takes the one above
        cls = np.searchsorted(edges, sequences, side="right") - 1
        if not np.any(cls >= 0):
            raise ValueError(f"{rounds} rounds: no sample from a family of {edges[0]} or more sequences")
        fits = []
        for k, size in enumerate(edges):
            keep = cls == k
            if keep.any():
                xs, ys = isotonic_knots(p[keep], right[keep].astype(np.float64), max_knots=max_knots)
                fits.append((int(size), tuple(xs), tuple(ys)))
        knots[int(rounds)] = tuple(fits)
    return MsaCalibration(knots, fitted_on)


def refine(cols: dict[int, np.ndarray], posts: Posts, rounds: int, *, seed: int = 0) -> dict[int, np.ndarray]:
    """``rounds`` of ProbCons' iterative refinement (module docstring, step 4)."""
    n = len(cols)
    if n < 3 or rounds <= 0:
        return cols
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        side = rng.random(n) < 0.5
        if side.all() or not side.any():
            side[rng.integers(n)] = not side[0]
        (a, used_a), (b, used_b) = (_subprofile(cols, [x for x in range(n) if side[x] == half])
                                    for half in (True, False))
        sums = _column_sums(a, b, posts)
        pairs = _mea(_column_scores(a, b, posts, sums))
        # only the residue pairs across the split change: their sum before (the columns the two
        # halves shared) against after (the matched columns)
        _, before_a, before_b = np.intersect1d(used_a, used_b, assume_unique=True, return_indices=True)
        if sums[pairs[:, 0], pairs[:, 1]].sum() >= sums[before_a, before_b].sum():
            cols = _merge(a, b, pairs).cols
    return cols


# ----------------------------------------------------------------------------- the recipe

def _rows(seqs: Sequence[str], cols: dict[int, np.ndarray], width: int | None = None) -> tuple[str, ...]:
    if width is None:
        width = 1 + max((int(c.max()) for c in cols.values() if c.size), default=-1)
    rows = []
    for x, seq in enumerate(seqs):
        row = np.full(width, ord("-"), np.uint8)
        row[cols[x]] = np.frombuffer(seq.encode("ascii"), np.uint8)
        rows.append(row.tobytes().decode("ascii"))
    return tuple(rows)


#: a record whose E-value as a search of the other records (its smallest E-value against them
#: times their number) is at least this has no likely homolog among them
UNRELATED_EVALUE = 0.3
#: the two rules of :func:`unrelated_records`
UNRELATED_RULES = ("search", "per comparison")


def search_evalue(smallest: float, searched: int) -> float:
    """The E-value of a search of ``searched`` sequences for a record whose smallest
    per-comparison E-value among them is ``smallest`` (as ``sinkalign align --db-size``
    scales one): what :func:`unrelated_records` compares with its threshold."""
    return smallest * searched


def is_unrelated(smallest: float, searched: int, threshold: float = UNRELATED_EVALUE) -> bool:
    """Whether a record whose smallest E-value against ``searched`` sequences is ``smallest``
    has no likely homolog among them (:func:`search_evalue` at least ``threshold``)."""
    return search_evalue(smallest, searched) >= threshold


def unrelated_records(n: int, evalues: Mapping[tuple[int, int], float | None], threshold: float = UNRELATED_EVALUE,
                      *, rule: str = "search") -> list[tuple[int, float, int]]:
    """The records of a family of ``n`` (``n >= 3``) with no likely homolog among the others:
    ``(record, E-value, the record of its smallest E-value)`` for each whose E-value is at least
    ``threshold``. ``rule="search"``: the E-value of a search of the ``n - 1`` others for the
    record, its smallest per-comparison E-value (``evalues[(x, y)]``, ``x < y``) times ``n - 1``,
    so that a chance hit among many records counts as one among few (per comparison, an
    unrelated record among 39 others had a hit below 0.1 98% of the time); ``"per comparison"``:
    the smallest E-value itself (the rule until 2026-11-29). The multiple alignment places such a
    record's residues all the same, with confidences that assume it belongs to the family;
    ``[]`` without E-values."""
    if rule not in UNRELATED_RULES:
        raise InputError(f"rule={rule!r} is not one of {UNRELATED_RULES}")
    if n < 3 or not evalues or any(e is None for e in evalues.values()):
        return []
    best = [(math.inf, -1)] * n
    for (x, y), e in evalues.items():
        best[x] = min(best[x], (e, y))
        best[y] = min(best[y], (e, x))
    searched = n - 1 if rule == "search" else 1
    return [(k, search_evalue(e, searched), other) for k, (e, other) in enumerate(best)
            if other >= 0 and is_unrelated(e, searched, threshold)]


def _as_sequence(name, seq, protein: bool) -> str:
    """``seq`` (a str, bytes or Biopython Seq) as text, a protein's one trailing stop ``*``
    dropped as the aligner and the FASTA reader drop it; anything else refused, naming ``name``."""
    seq = sequence_text(seq)
    if not isinstance(seq, str):
        record = hasattr(seq, "seq") and hasattr(seq, "id")
        raise InputError(f"sequence {name!r} is of type {type(seq).__name__}, not a sequence (give a str, bytes or "
                         f"Bio.Seq{'; for a record, its .seq' if record else ''})")
    return seq[:-1] if protein and seq.endswith("*") else seq


def align_multiple(ids: Sequence[str], seqs: Sequence[str], posteriors: Any, *, consistency: int = 2,
                   refine_rounds: int = 20, seed: int = 0, progress: Callable[[int], Any] | None = None,
                   calibration: MsaCalibration | None = None, evalues: dict | None = None) -> MultipleAlignment:
    """Align ``seqs`` (named ``ids``) all together (module docstring).

    Args:
        posteriors: an :class:`~sinkalign.align.aligner.Aligner` with a calibration (its MEA
            columns at their calibrated confidences, :func:`aligner_posteriors`), a function of
            two sequences returning their ``[L_x, L_y]`` match posteriors, or the posteriors
            already computed (``{(x, y): [L_x, L_y]}`` for every ``x < y``, dense or sparse).
        consistency: rounds of the consistency transformation (0: none; ProbCons uses 2).
        refine_rounds: rounds of iterative refinement (0: none; 20 chosen on validation families).
        seed: of the refinement's random splits.
        progress: called with 1 after each pairwise alignment (e.g. a tqdm bar's ``update``).
        calibration: maps the residue pairs' probabilities to calibrated confidences
            (:class:`MsaCalibration`); default: the aligner's own (``Aligner.msa_calibration``)
            when ``posteriors`` is an aligner. Without one covering ``consistency`` rounds the
            confidences are the library's own (``calibrated=False``).
        evalues: a dict to fill with each pair's E-value (``{(x, y): E}``, ``x < y``) when
            ``posteriors`` is an aligner (:func:`unrelated_records` reads them).
    """
    if isinstance(seqs, str):
        raise InputError("seqs is a list of sequences (one per id), not one string")
    ids, seqs = list(ids), list(seqs)
    protein = getattr(getattr(posteriors, "config", None), "alphabet", None) == "protein"
    seqs = [_as_sequence(name, seq, protein) for name, seq in zip(ids, seqs)] + seqs[len(ids):]
    if len(ids) != len(seqs):
        raise InputError(f"{len(ids)} ids but {len(seqs)} sequences")
    if not seqs:
        raise InputError("no sequences to align")
    if len(set(ids)) != len(ids):
        dup = next(i for k, i in enumerate(ids) if i in ids[:k])
        raise InputError(f"sequence ids must be unique: {dup!r} is repeated")
    for name, seq in zip(ids, seqs):
        if not seq:
            raise InputError(f"sequence {name!r} is empty")
        _check_text(seq, r"[^A-Za-z]", f"sequence {name!r}", "position", "a sequence to align is letters, ungapped")
    seqs = [s.upper() for s in seqs]  # case means nothing here; in the rows written it would mean insertions
    if consistency < 0 or refine_rounds < 0:
        raise InputError(f"{consistency=} and {refine_rounds=} must be >= 0")
    lengths = [len(s) for s in seqs]
    if calibration is None and hasattr(posteriors, "align_many"):
        calibration = getattr(posteriors, "msa_calibration", None)
    if isinstance(posteriors, dict):
        _check_posts(posteriors, lengths)  # before the cutoff, which would hide a NaN
        posts = {k: _sparse(v) for k, v in posteriors.items()}
    elif callable(posteriors) and not hasattr(posteriors, "align_many"):
        posts = function_posteriors(posteriors, seqs, progress=progress)
    else:
        posts = aligner_posteriors(posteriors, seqs, ids=ids, progress=progress, evalues=evalues)
    if len(seqs) == 1:
        return MultipleAlignment(tuple(ids), tuple(seqs), _newick(np.zeros((0, 4)), ids), 0.0,
                                 (np.full(lengths[0], np.nan),), np.full(lengths[0], np.nan))
    Z = guide_tree(posts, lengths)
    posts = consistency_transform(posts, lengths, consistency)
    cols = refine(progressive(posts, lengths, Z), posts, refine_rounds, seed=seed)
    calibrated = calibration is not None and (calibration.covers(consistency) or len(seqs) == 2)
    mapper = calibration.mapper(consistency, len(seqs)) if calibrated else None
    residue, column = confidences(cols, posts, lengths, mapper)
    return MultipleAlignment(tuple(ids), _rows(seqs, cols), _newick(Z, ids), sum_of_pairs(cols, posts),
                             tuple(residue), column, calibrated)


# ----------------------------------------------------------------------------- adding to an alignment

def _letter_columns(row: str) -> np.ndarray:
    """The column of each letter of a gapped row (any other character is a gap), either case."""
    g = np.frombuffer(row.encode("ascii"), np.uint8) | 0x20  # lower-cased
    return np.flatnonzero((g >= ord("a")) & (g <= ord("z")))


def _check_text(text: str, bad: str, what: str, unit: str, rule: str) -> None:
    """:class:`~sinkalign.errors.InputError` (a ``ValueError``) naming ``what`` and the 1-based
    ``unit`` of the first character of ``text`` that matches the pattern ``bad`` (``rule`` says
    what is allowed), or its first character that is not ASCII."""
    if not text.isascii():
        raise InputError(f"{what} has a character that is not ASCII")
    found = re.search(bad, text)
    if found:
        raise InputError(f"{what} has {found.group()!r} at {unit} {found.start() + 1}: {rule}")


def _pair_source(posteriors: Any, seqs: list[str], names: list[str], pairs: list[tuple[int, int]],
                 progress: Callable[[int], Any] | None, evalues: dict | None = None) -> Posts:
    """The posteriors of ``pairs`` from an aligner (:func:`aligner_posteriors`, which fills
    ``evalues``), a function of two sequences (:func:`function_posteriors`) or a mapping of
    pairs of names to their ``[L_a, L_b]`` posteriors (either order of a pair; what a cluster
    computed)."""
    if hasattr(posteriors, "align_many"):
        return aligner_posteriors(posteriors, seqs, pairs=pairs, ids=names, progress=progress, evalues=evalues)
    if isinstance(posteriors, Mapping):
        out = {}
        for x, y in pairs:
            if (names[x], names[y]) in posteriors:
                P = posteriors[(names[x], names[y])]
            elif (names[y], names[x]) in posteriors:
                P = posteriors[(names[y], names[x])].T
            else:
                raise ValueError(f"no posteriors for the pair {names[x]!r}, {names[y]!r}")
            out[(x, y)] = _checked(P, (len(seqs[x]), len(seqs[y])), x, y, f"{names[x]!r} and {names[y]!r}")
        return out
    if callable(posteriors):
        return function_posteriors(posteriors, seqs, pairs=pairs, progress=progress)
    raise TypeError(f"posteriors must be an Aligner, a mapping of pairs of names or a function of two sequences, "
                    f"got {type(posteriors).__name__}")


def nearest_rows(rows: Sequence[str], seqs: Sequence[str], nearest: int | None, *,
                 kind: str = "protein") -> list[list[int]]:
    """For each sequence of ``seqs``, the indices (increasing) of its ``nearest`` most similar
    of the ungapped ``rows`` by the Smith-Waterman score of ``sinkalign align --prefilter``
    (:func:`~sinkalign.align.prefilter.best_targets`); every row for ``None`` or at least as
    many as there are rows."""
    if nearest is None or nearest >= len(rows):
        return [list(range(len(rows))) for _ in seqs]
    from sinkalign.align.prefilter import best_targets

    return [[int(x) for x in best_targets(seq, list(rows), nearest, kind=kind)] for seq in seqs]


def add_to_alignment(ref_ids: Sequence[str], ref_rows: Sequence[str], ids: Sequence[str], seqs: Sequence[str],
                     posteriors: Any, *, consistency: int | None = None, keep_length: bool = False,
                     independent: bool = False,
                     calibration: MsaCalibration | None = None, combine: str = "mean", nearest: int | None = None,
                     progress: Callable[[int], Any] | None = None, evalues: dict | None = None) -> MultipleAlignment:
    """Add ``seqs`` (named ``ids``) to an existing alignment (gapped ``ref_rows`` named
    ``ref_ids``) without changing it, as MAFFT's ``--add`` and Clustal Omega's profile mode do.

    The existing alignment is taken as right: its rows form a library of their own, each pair's
    residues in one column at probability 1. Every new sequence is aligned pairwise against
    every non-empty row and every other new sequence (``posteriors``: an
    :class:`~sinkalign.align.aligner.Aligner`, its calibrated column confidences as in
    :func:`align_multiple`, a function of two sequences giving their match posteriors, or
    those posteriors already computed, ``{(name_a, name_b): [L_a, L_b]}`` for every such pair,
    in either order);
    ``consistency`` (default 2, or 0 with ``independent``) rounds of the consistency
    transformation run over the whole library (so a
    new sequence's evidence reaches every row through the others); then each new sequence in
    turn, in the order given, is aligned to the profile of the alignment so far (the existing
    rows and the sequences added before it) by the free-gap MEA of the column scores, as in
    progressive alignment. The existing rows' columns never move apart or together: a new
    residue matched to no column opens a column of its own, a gap in every other row; with
    ``keep_length`` such residues are dropped instead (the output has exactly the existing
    columns; MAFFT's ``--keeplength``).

    ``independent``: each new sequence is aligned to the existing rows only (``N K`` pairwise
    alignments), never to the other new sequences, and placed on the profile of the existing
    rows alone, so that its columns do not depend on what else is added (MAFFT's
    ``--addfragments``; with ``keep_length``, queries for phylogenetic placement on a reference
    alignment). A new residue that no column takes gets a column of its own, never shared with
    another sequence's. No consistency rounds (``consistency`` 0, its default here): with one new
    sequence this is the default recipe at ``consistency=0``, alignment for alignment.

    ``nearest`` (with ``independent``): each new sequence is aligned to, and placed on the
    profile of, only its ``nearest`` most similar rows, ranked by the Smith-Waterman score of
    ``sinkalign align --prefilter`` (:func:`~sinkalign.align.prefilter.prefilter_scores`; DNA
    scoring for a DNA aligner, else protein): ``N * nearest`` pairwise alignments, for
    alignments of hundreds or thousands of rows.

    ``combine``: how a new residue's score for a column combines its pairings with the
    column's residues: ``"mean"`` over the rows (the profile step of :func:`align_multiple`),
    or ``"max"``, the most confident pairing (measured in ``benchmarks/msa_add.py``, not the
    default: BENCHMARKS.md).

    Cost: ``N K + N (N - 1) / 2`` pairwise alignments for ``N`` new sequences and ``K`` rows
    (a fresh multiple alignment of all of them: ``(N + K)(N + K - 1) / 2``), and the
    consistency rounds' ``O((N + K)^3)`` sparse products (``consistency=0`` for large
    alignments).

    ``evalues``: a dict that gets each pairwise alignment's E-value by the pair's names
    (``{(row or record, record): E}``) when ``posteriors`` is an aligner (``None`` without a
    null): what tells a record with no likely homolog among the rows.

    Returns:
        A :class:`MultipleAlignment`: the existing rows as given (letter case kept, any gap
        character written ``-``, new columns as gaps), then the new ones. ``tree`` is empty
        (there is no guide tree); ``source_columns``: the column each existing column became.
        The score is the summed probability of the new residues'
        pairings with the other residues of their columns. The confidences are of what was
        added: a new residue's, the mean probability of those pairings, mapped by
        ``calibration``'s map for added records at ``consistency`` rounds
        (:attr:`MsaCalibration.added`; default: the aligner's own) to the share of them that
        are right (``calibrated``), else the library's own; a column's, the mean over its new
        residues (NaN where it has none); an existing row's residues get NaN (they were given,
        not placed).
    """
    if isinstance(ref_rows, str) or isinstance(seqs, str):
        raise InputError("ref_rows and seqs are lists (one row or sequence per id), not one string")
    ids, seqs = list(ids), list(seqs)
    protein = getattr(getattr(posteriors, "config", None), "alphabet", None) == "protein"
    ref_ids = list(ref_ids)
    ref_rows = [_as_sequence(name, row, False) for name, row in zip(ref_ids, ref_rows)] + list(ref_rows)[len(ref_ids):]
    seqs = [_as_sequence(name, seq, protein) for name, seq in zip(ids, seqs)] + seqs[len(ids):]  # as align_multiple
    if len(ref_ids) != len(ref_rows) or not ref_rows:
        raise InputError(f"the alignment needs rows, one per id: {len(ref_ids)} ids, {len(ref_rows)} rows")
    if len(ids) != len(seqs):
        raise InputError(f"{len(ids)} ids but {len(seqs)} sequences")
    if not seqs:
        raise InputError("no sequences to add")
    if len(set(ref_ids + ids)) != len(ref_ids) + len(ids):
        dup = next(i for k, i in enumerate(ref_ids + ids) if i in (ref_ids + ids)[:k])
        raise InputError(f"sequence ids must be unique across the alignment and the new sequences: {dup!r} is repeated")
    width = len(ref_rows[0])
    for name, row in zip(ref_ids, ref_rows):
        if len(row) != width:
            raise InputError(f"alignment row {name!r} has {len(row)} columns, expected {width}")
        _check_text(row, r"[^A-Za-z.\-]", f"alignment row {name!r}", "column",
                    "a row holds letters and the gaps '-' and '.'")
    for name, seq in zip(ids, seqs):
        if not seq:
            raise InputError(f"sequence {name!r} is empty")
        _check_text(seq, r"[^A-Za-z]", f"sequence {name!r}", "position", "a sequence to add is letters, ungapped")
    seqs = [s.upper() for s in seqs]  # written lower case, a new row's residues would read as insertions
    if consistency is None:  # independent placement has none
        consistency = 0 if independent else 2
    if consistency < 0:
        raise InputError(f"{consistency=} must be >= 0")
    if independent and consistency:
        raise InputError(f"independent placement takes no consistency rounds, got {consistency=}")
    if combine not in ("mean", "max"):
        raise InputError(f"combine={combine!r} is not 'mean' or 'max'")
    if nearest is not None and (not independent or nearest < 1):
        raise InputError(f"nearest={nearest} needs independent placement and must be >= 1")

    letters = [_letter_columns(row) for row in ref_rows]
    active = [r for r in range(len(ref_rows)) if letters[r].size]  # rows with a residue: the library's
    K = len(active)
    if not K:
        raise ValueError("the alignment has no residues to add to")
    names = [ref_ids[r] for r in active] + ids
    library = ["".join(ref_rows[r][c] for c in letters[r]).upper() for r in active] + seqs
    lengths = [len(s) for s in library]
    config = getattr(posteriors, "config", None)
    kind = "dna" if getattr(config, "alphabet", "protein") == "dna" else "protein"
    rows_of = dict(zip(range(K, len(library)), nearest_rows(library[:K], seqs, nearest, kind=kind)))
    todo = [(x, y) for y in range(K, len(library)) for x in (rows_of[y] if independent else range(y))]
    found: dict | None = {} if evalues is not None else None
    posts = _pair_source(posteriors, library, names, todo, progress, found)
    if found:  # by name: the caller knows no library index
        evalues.update({(names[x], names[y]): e for (x, y), e in found.items()})
    if consistency:  # the rows' own pairs count only through the consistency transformation
        for x in range(K):
            for y in range(x + 1, K):
                i, j = same_column(letters[active[x]], letters[active[y]])
                posts[(x, y)] = sp.csr_matrix((np.ones(i.size), (i, j)), shape=(lengths[x], lengths[y]))
        posts = {key: P for key, P in consistency_transform(posts, lengths, consistency).items() if key[1] >= K}

    # the existing columns, tracked through the merges by a member of no column sums (key -1)
    profile = _Profile(list(range(K)), {x: letters[active[x]] for x in range(K)} | {-1: np.arange(width)}, width)
    for y in range(K, len(library)):
        new = _Profile([y], {y: np.arange(lengths[y])}, lengths[y])
        scored = _Profile(rows_of[y], profile.cols, profile.width) if independent else profile
        scores = _column_max(scored, new, posts) if combine == "max" else _column_scores(scored, new, posts)
        profile = _merge(profile, new, _mea(scores))
    cols, place = profile.cols, profile.cols[-1]
    rows = []
    for r, row in enumerate(ref_rows):
        out = np.full(profile.width, ord("-"), np.uint8)
        out[place[letters[r]]] = np.frombuffer(row.encode("ascii"), np.uint8)[letters[r]]
        rows.append(out.tobytes().decode("ascii"))
    rows.extend(_rows(seqs, {k: cols[K + k] for k in range(len(seqs))}, profile.width))
    residue, _ = confidences({x: cols[x] for x in range(len(library))}, posts, lengths)
    if calibration is None and hasattr(posteriors, "align_many"):
        calibration = getattr(posteriors, "msa_calibration", None)
    # the maps were fitted on the mean's placements: combine="max" keeps the library's own numbers
    mapper = calibration.added_mapper(consistency) if calibration is not None and combine == "mean" else None
    added = [residue[y] if mapper is None else mapper(residue[y]) for y in range(K, len(library))]
    total, count = np.zeros(profile.width), np.zeros(profile.width)
    for y, conf in zip(range(K, len(library)), added):
        ok = np.isfinite(conf)
        np.add.at(total, cols[y][ok], conf[ok])
        np.add.at(count, cols[y][ok], 1.0)
    with np.errstate(invalid="ignore"):
        column = total / count  # NaN where no new residue has a confidence
    confidence = tuple(np.full(len(letters[r]), np.nan) for r in range(len(ref_rows))) + tuple(added)
    result = MultipleAlignment(tuple(ref_ids + ids), tuple(rows), "",
                               sum_of_pairs({x: cols[x] for x in range(len(library))}, posts), confidence, column,
                               mapper is not None, place.astype(np.int64))
    return result.columns(place) if keep_length else result
