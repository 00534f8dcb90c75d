"""The alignment data model, shared by the aligner (:mod:`sinkalign.align`) and the writers
(:mod:`sinkalign.io`): aligned residue pairs, :class:`Alignment` with its posteriors, CIGAR
strings, gapped strings, summary statistics and percent identity.

Conventions (used everywhere in sinkalign):

* An alignment of a query of length ``m`` and a target of length ``n`` is ``pairs``, an
  integer array ``[k, 2]`` of 0-based ``(i, j)`` aligned residue indices, strictly
  increasing in both columns. Every residue not in ``pairs`` is gapped.
* Spans are 0-based half-open ``[start, end)``.
* Between two aligned pairs (and at the ends), the query-only columns are laid out
  before the target-only columns. This fixes the column order used by
  :func:`alignment_columns`, :func:`to_gapped` and :func:`cigar`; it is a layout choice
  only (the pair set, not the order, defines the alignment).
* A nucleotide pair aligned on the minus strand (``AlignedPair.strand == "-"``) holds the
  reverse complement of the query as given, and its pairs index into that (as SAM stores a
  reverse-strand read); its spans (:meth:`AlignedPair.stats`, the TSV and JSON outputs) are
  on the query as given, as PAF and BLAST report them.
* Percent identity is ``100 * identical aligned pairs / aligned pairs`` (letters compared
  case-insensitively; gaps in neither numerator nor denominator), NaN when nothing is
  aligned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

import numpy as np

from sinkalign.errors import InputError
from sinkalign.utils import short_repr

__all__ = [
    "AlignedPair",
    "Alignment",
    "AlignmentStats",
    "alignment_columns",
    "alignment_stats",
    "as_pairs",
    "check_pairs",
    "cigar",
    "count_identical",
    "format_number",
    "format_text",
    "percent_identity",
    "posterior_digits",
    "reverse_complement",
    "stranded_stats",
    "to_biopython",
    "to_gapped",
]


# --------------------------------------------------------------------------- pairs


def check_pairs(pairs: Any, m: int | None = None, n: int | None = None, *, name: str = "pairs") -> np.ndarray:
    """Validate an alignment given as aligned residue pairs and return it as ``int64 [k, 2]``.

    ``pairs`` must be ``[k, 2]`` (``k`` may be 0) of integers, strictly increasing in
    both columns, with ``0 <= i < m`` and ``0 <= j < n`` when ``m`` / ``n`` are given.
    Raises ``ValueError`` naming the first offending row.
    """
    arr = np.asarray(pairs)
    if arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise InputError(f"{name} must have shape [k, 2], got {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise InputError(f"{name} must hold integer indices, got non-integer values")
    elif arr.dtype.kind not in "iu":
        raise InputError(f"{name} must hold integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.shape[0] == 0:
        return arr
    neg = np.flatnonzero((arr < 0).any(axis=1))
    if neg.size:
        raise InputError(f"{name}[{neg[0]}]={arr[neg[0]].tolist()} has a negative index")
    for col, bound, label in ((0, m, "m (query length)"), (1, n, "n (target length)")):
        if bound is not None:
            bad = np.flatnonzero(arr[:, col] >= bound)
            if bad.size:
                raise InputError(f"{name}[{bad[0]}]={arr[bad[0]].tolist()} is out of range for {label}={bound}")
    steps = np.diff(arr, axis=0)
    bad = np.flatnonzero((steps <= 0).any(axis=1))
    if bad.size:
        r = bad[0] + 1
        raise InputError(
            f"{name} must be strictly increasing in both columns: "
            f"{name}[{r - 1}]={arr[r - 1].tolist()} is followed by {name}[{r}]={arr[r].tolist()}"
        )
    return arr


def as_pairs(alignment: Any, m: int | None = None, n: int | None = None) -> np.ndarray:
    """Pairs ``int64 [k, 2]`` of an :class:`Alignment`, any object with ``.pairs``, or an array."""
    if isinstance(alignment, Alignment):
        if m is not None and m != alignment.m:
            raise InputError(f"{m=} does not match the alignment's query length {alignment.m}")
        if n is not None and n != alignment.n:
            raise InputError(f"{n=} does not match the alignment's target length {alignment.n}")
        return alignment.pairs
    pairs = getattr(alignment, "pairs", alignment)
    return check_pairs(pairs, m, n)


# --------------------------------------------------------------------------- results


STRAND_SIGNS = ("+", "-")


def reverse_complement(seq: str) -> str:
    """The reverse complement of a nucleotide sequence (Biopython's; IUPAC codes and case kept;
    an RNA sequence, with ``U`` and no ``T``, stays RNA)."""
    from Bio.Seq import reverse_complement as dna
    from Bio.Seq import reverse_complement_rna as rna

    upper = seq.upper()
    return (rna if "U" in upper and "T" not in upper else dna)(seq)


def same_fields(a: Any, b: Any) -> bool:
    """Whether two results of one dataclass type hold equal fields (:func:`_same` each)."""
    return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))


def _same(a: Any, b: Any) -> bool:
    """Equality of two fields of a result: arrays by shape and values (NaN equal to NaN),
    anything else by ``==`` (NaN equal to NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


@dataclass(frozen=True, eq=False)
class Alignment:
    """An MEA alignment with its posteriors.

    Attributes:
        pairs: ``int64 [k, 2]`` aligned ``(query i, target j)``, strictly increasing.
        match_posterior: ``float64 [k]`` posterior of each aligned pair (column confidence).
        query_gap_posterior: ``float64 [m]`` posterior that each query residue is unaligned.
        target_gap_posterior: ``float64 [n]`` posterior that each target residue is unaligned.
        expected_accuracy: expected fraction of the ``m + n`` residues whose alignment state
            (partner or gap) is correct, ``(2 * sum(match_posterior) + sum of the gap
            posteriors of the unaligned residues) / (m + n)``; in ``[0, 1]``.
        score: the maximised objective ``sum(match_posterior) + gap_weight * (sum of gap
            posteriors of unaligned residues)`` over the posteriors the decoding saw: for the
            aligner's results the raw plan's, before calibration replaced ``match_posterior``
            with calibrated confidences (so ``score`` is not the sum of the confidences shown).
    """

    pairs: np.ndarray
    match_posterior: np.ndarray
    query_gap_posterior: np.ndarray
    target_gap_posterior: np.ndarray
    expected_accuracy: float
    score: float

    def __post_init__(self) -> None:
        qg = np.asarray(self.query_gap_posterior, dtype=np.float64)
        tg = np.asarray(self.target_gap_posterior, dtype=np.float64)
        if qg.ndim != 1 or tg.ndim != 1:
            raise InputError(
                f"gap posteriors must be 1-D, got query {qg.shape} and target {tg.shape}"
            )
        pairs = check_pairs(self.pairs, qg.shape[0], tg.shape[0])
        mp = np.asarray(self.match_posterior, dtype=np.float64)
        if mp.shape != (pairs.shape[0],):
            raise InputError(f"match_posterior must have shape [{pairs.shape[0]}], got {mp.shape}")
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "match_posterior", mp)
        object.__setattr__(self, "query_gap_posterior", qg)
        object.__setattr__(self, "target_gap_posterior", tg)
        object.__setattr__(self, "expected_accuracy", float(self.expected_accuracy))
        object.__setattr__(self, "score", float(self.score))

    def __eq__(self, other: object) -> bool:
        """Equal pairs and posteriors (NaN equal to NaN), expected accuracy and score."""
        if not isinstance(other, Alignment):
            return NotImplemented
        return same_fields(self, other)

    __hash__ = None  # type: ignore[assignment]  # (mutable arrays inside)

    @property
    def m(self) -> int:
        """Query length."""
        return int(self.query_gap_posterior.shape[0])

    @property
    def n(self) -> int:
        """Target length."""
        return int(self.target_gap_posterior.shape[0])

    @property
    def mean_posterior(self) -> float:
        """Mean match posterior over aligned pairs (NaN when nothing is aligned)."""
        return float(self.match_posterior.mean()) if self.match_posterior.size else float("nan")

    def transposed(self) -> Alignment:
        """The same alignment with query and target exchanged (pairs ``(j, i)``, gap
        posteriors swapped; confidences, expected accuracy and score unchanged)."""
        return Alignment(self.pairs[:, ::-1].copy(), self.match_posterior, self.target_gap_posterior,
                         self.query_gap_posterior, self.expected_accuracy, self.score)

    def reversed(self) -> Alignment:
        """The same alignment read from the other end of both sequences: pair ``(i, j)``
        becomes ``(m - 1 - i, n - 1 - j)`` (the alignment of the two reverse complements),
        posteriors reversed with it."""
        m, n = self.m, self.n
        flipped = np.stack([m - 1 - self.pairs[::-1, 0], n - 1 - self.pairs[::-1, 1]], 1) if self.pairs.size \
            else self.pairs.copy()
        return Alignment(flipped, self.match_posterior[::-1].copy(), self.query_gap_posterior[::-1].copy(),
                         self.target_gap_posterior[::-1].copy(), self.expected_accuracy, self.score)

    def __repr__(self) -> str:
        return (
            f"Alignment(m={self.m}, n={self.n}, k={self.pairs.shape[0]}, "
            f"expected_accuracy={self.expected_accuracy:.4f}, score={self.score:.4f})"
        )


# --------------------------------------------------------------------------- layout


def _check_len(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(f"{name}={value!r} must be a non-negative integer")
    return int(value)


def alignment_columns(alignment: Any, m: int, n: int) -> list[tuple[int | None, int | None]]:
    """Columns ``(i or None, j or None)`` of the global layout of an alignment.

    Every residue of both sequences appears once; between aligned pairs (and at both
    ends) query-only columns come before target-only ones.
    """
    m = _check_len("m", m)
    n = _check_len("n", n)
    pairs = as_pairs(alignment, m, n)
    cols: list[tuple[int | None, int | None]] = []
    pi = pj = 0
    for i, j in pairs.tolist():
        cols.extend((q, None) for q in range(pi, i))
        cols.extend((None, t) for t in range(pj, j))
        cols.append((i, j))
        pi, pj = i + 1, j + 1
    cols.extend((q, None) for q in range(pi, m))
    cols.extend((None, t) for t in range(pj, n))
    return cols


def to_gapped(query: str, target: str, alignment: Any, *, gap: str = "-") -> tuple[str, str]:
    """Gapped strings ``(query_row, target_row)`` of the global layout (equal lengths)."""
    if len(gap) != 1:
        raise InputError(f"{gap=} must be a single character")
    cols = alignment_columns(alignment, len(query), len(target))
    q = "".join(gap if i is None else query[i] for i, _ in cols)
    t = "".join(gap if j is None else target[j] for _, j in cols)
    return q, t


def _coordinates(cols: list[tuple[int | None, int | None]]) -> np.ndarray:
    """Biopython ``coordinates [2, steps + 1]`` of a column list (a point where the column kind changes)."""
    qpos = tpos = 0
    points = [(0, 0)]
    prev = None
    for i, j in cols:
        kind = (i is not None, j is not None)
        if prev is not None and kind != prev:
            points.append((qpos, tpos))
        qpos += i is not None
        tpos += j is not None
        prev = kind
    if cols:
        points.append((qpos, tpos))
    return np.array(points, dtype=np.int64).T


def _pp_char(p: float) -> str:
    """HMMER posterior digit: 0 < 0.05, k in [k/10 - 0.05, k/10 + 0.05), * >= 0.95."""
    if p >= 0.95:
        return "*"
    return str(min(9, max(0, int(math.floor(p * 10 + 0.5)))))


def posterior_digits(alignment: Alignment) -> str:
    """HMMER-style posterior digits, one per column of the global layout (``0`` < 5%, ``k`` in
    [10k-5, 10k+5)%, ``*`` >= 95%): the match posterior of an aligned column, the residue's
    gap posterior of a gap column (the ``#=GC PP_cons`` line of the Stockholm output)."""
    mp = iter(alignment.match_posterior.tolist())
    chars = []
    for i, j in alignment_columns(alignment.pairs, alignment.m, alignment.n):
        if i is not None and j is not None:
            chars.append(_pp_char(next(mp)))
        elif j is None:
            chars.append(_pp_char(float(alignment.query_gap_posterior[i])))
        else:
            chars.append(_pp_char(float(alignment.target_gap_posterior[j])))
    return "".join(chars)


def format_number(x: float | None, spec: str = ".6g") -> str:
    """A number as the writers print it: ``NA`` when missing or not finite, integers without a
    decimal point, anything else with ``spec``."""
    if x is None or not math.isfinite(x):
        return "NA"
    if float(x).is_integer() and abs(x) < 2**53:
        return str(int(x))
    return format(x, spec)


def evalue_rank(evalue: float | None, log_evalue: float | None = None) -> float:
    """The key that orders E-values, smaller first: ``log_evalue`` where known (finite where
    the E-value underflows to 0), else ``log(evalue)``; ``inf`` without an E-value."""
    if log_evalue is not None and not math.isnan(log_evalue):
        return float(log_evalue)
    if evalue is None or math.isnan(evalue):
        return math.inf
    return math.log(evalue) if evalue > 0 else -math.inf


#: How much of the lesser of two hits' confidence on the query they must share to compete for
#: that part of the query (minimap2's ``--mask-level`` default, on confidence mass): hits that
#: share less are parts of one chimeric or split query (two domains of one protein, a read
#: across a junction), which SAM writes as supplementary lines, not as rivals.
MASK_LEVEL = 0.5

#: A column placing the query more likely right than wrong: the X-drop of :func:`confident_core`
#: scores each column by its log-odds against this confidence.
PLACING_CONFIDENCE = 0.5
#: How far (in log-odds) the X-drop of :func:`confident_core` lets the running score fall below
#: its best before it stops: about five columns at 0.1, or ten at 0.27, in a row.
CORE_DROP = 10.0
_CORE_SEED = 5  # columns of the window the core grows from


def confident_core(confidence, threshold: float = PLACING_CONFIDENCE, drop: float = CORE_DROP) -> tuple[int, int] | None:
    """The first and last column (inclusive) of an alignment's confident core, by X-drop on the
    columns' log-odds ``s = logit(c) - logit(threshold)``: from the best column of the window of
    5 columns (all of them when fewer) of the largest sum, extended each way while the running
    sum stays within ``drop`` of its best, and kept up to that best (gaps between columns count
    nothing; a lone sure column among unlikely ones seeds nothing unless its window wins; an
    unknown, NaN, confidence counts as none). A local alignment may reach past its homologous
    segment with a trail of unlikely columns (the DNA model: 10-12 columns at 0.1-0.4 over up to
    300 bp of a chimeric read's other half), which the core leaves out (BENCHMARKS.md measures
    it as an end trim). ``None`` for no column."""
    c = np.asarray(confidence, dtype=np.float64).reshape(-1)
    c = np.clip(np.where(np.isnan(c), 0.0, c), 1e-12, 1.0 - 1e-12)
    n = c.size
    if n == 0:
        return None
    t = min(max(float(threshold), 1e-12), 1.0 - 1e-12)
    s = np.log(c) - np.log1p(-c) - (math.log(t) - math.log1p(-t))
    width = min(_CORE_SEED, n)
    sums = np.lib.stride_tricks.sliding_window_view(s, width).sum(1)  # (each window summed on its own)
    start = int(np.argmax(sums))  # the first window of the largest sum

    def reach(steps: np.ndarray) -> int:
        """How many of ``steps`` (outwards from the seed) the core takes."""
        if steps.size == 0:
            return 0
        run = np.cumsum(steps)
        best = np.maximum.accumulate(np.maximum(run, 0.0))
        fallen = np.flatnonzero(run < best - drop)
        stop = int(fallen[0]) if fallen.size else run.size
        top = int(np.argmax(run[:stop])) if stop else -1
        return top + 1 if stop and run[top] > 0 else 0

    seed = start + int(np.argmax(s[start : start + width]))
    return seed - reach(s[:seed][::-1]), seed + reach(s[seed + 1 :])


class Footprint(NamedTuple):
    """Where a hit places its query: the query positions it aligns (0-based, on the query as
    given) and the confidence of each (1 where unknown); :func:`query_footprint`."""

    positions: np.ndarray
    mass: np.ndarray

    @property
    def total(self) -> float:
        return float(self.mass.sum())


def query_footprint(pairs: np.ndarray, query_length: int, strand: str = "+",
                    confidence: np.ndarray | None = None) -> Footprint:
    """A hit's :class:`Footprint`: the query residues of its ``pairs`` (as aligned: on the minus
    strand they read the reverse complement, turned back onto the query as given) with their
    confidences (``confidence``, each pair's posterior; 1 each without it). A trail of unlikely
    columns past a homologous segment weighs little in it."""
    pairs = np.asarray(pairs).reshape(-1, 2)
    rows = pairs[:, 0].astype(np.int64)
    if strand == "-":
        rows = query_length - 1 - rows
    if confidence is None:
        mass = np.ones(rows.size)
    else:
        mass = np.nan_to_num(np.asarray(confidence, dtype=np.float64).reshape(-1), nan=0.0)
        if mass.shape != rows.shape:
            raise ValueError(f"confidence must hold one value per pair ({rows.size}), got {mass.size}")
    return Footprint(rows, np.clip(mass, 0.0, 1.0))


#: query residues per stretch that :func:`shared_confidence` compares two footprints on
FOOTPRINT_BIN = 16


def _binned(foot: Footprint) -> tuple[np.ndarray, np.ndarray]:
    """The footprint's confidence summed per stretch of :data:`FOOTPRINT_BIN` query residues:
    ``(stretch indices, sums)``, the indices sorted."""
    stretches, inverse = np.unique(foot.positions // FOOTPRINT_BIN, return_inverse=True)
    return stretches, np.bincount(inverse.reshape(-1), weights=foot.mass, minlength=stretches.size)


def shared_confidence(a: Footprint, b: Footprint) -> float:
    """The share of the lesser of two footprints' confidence that they hold on the same stretches
    of the query: ``sum over stretches of min(a, b) / min(total a, total b)``, the confidence
    summed per stretch of :data:`FOOTPRINT_BIN` residues (two weak alignments of one homolog
    pair different residues of a stretch, yet place it alike); 0 for an empty footprint. Two
    copies of a repeat share about all of it; the two halves of a chimeric read, each with a
    trail of unlikely columns over the other, about none."""
    smaller = min(a.total, b.total)
    if smaller <= 0:
        return 0.0
    (sa, ma), (sb, mb) = _binned(a), _binned(b)
    common, ia, ib = np.intersect1d(sa, sb, assume_unique=True, return_indices=True)
    return float(np.minimum(ma[ia], mb[ib]).sum() / smaller) if common.size else 0.0


def query_parts(ranks, footprints, mask_level: float = MASK_LEVEL) -> list[int]:
    """For each of one query's aligned hits (``ranks``: their :func:`evalue_rank`, smaller
    better; ``footprints``: their :func:`query_footprint`), the hit whose part of the query it
    is, as minimap2 finds primary chains (``mm_set_parent``, on confidence mass): taken best
    first (ties in input order), a hit starts a part unless it shares more than ``mask_level``
    (:func:`shared_confidence`) with the best hit of a part already taken, whose rival it is then
    (SAM's secondary; the first such part). The part of the best hit is the query's primary
    line, the others its supplementary lines."""
    order = sorted(range(len(ranks)), key=lambda k: (ranks[k], k))
    heads: list[int] = []
    ranges: list[tuple[int, int]] = []
    part = [0] * len(ranks)
    for k in order:
        mine = footprints[k]
        lo, hi = (int(mine.positions.min()), int(mine.positions.max())) if mine.positions.size else (0, -1)
        hit = next((h for h, (a, b) in zip(heads, ranges) if a <= hi and lo <= b
                    and shared_confidence(mine, footprints[h]) > mask_level), k)
        if hit == k:
            heads.append(k)
            ranges.append((lo, hi))
        part[k] = hit
    return part


def other_loci(log_evalues, *, of=None, parts=None, target_lengths=None) -> list[float] | None:
    """For each hit ``k`` of one query in ``of`` (indices into ``log_evalues``, natural logs of
    the E-values of all its hits; default all of them), the chance that the query belongs to
    another of its hits instead: the hits weighed by ``1 / E`` (by Karlin-Altschul,
    ``e^{lambda S}`` per search space), ``1 - w_k / sum_j w_j``. A hit with a paralog as good
    gets about 0.5, a unique one 0. With ``parts`` (each hit's part of the query,
    :func:`query_parts`), ``j`` runs over the hits of ``k``'s part (its best hit and its
    rivals): the other part of a chimeric read or a second domain does not make a hit less
    certain. With ``target_lengths``, each hit's E-value is taken per residue of its target
    (``E / n``: Karlin-Altschul's ``e^{-lambda S}`` in one search space, as a database search's
    E-values have it), so that a repeat's copies in contigs of other lengths weigh alike (a
    pair's E-value grows with its target's length: a random hit is likelier in a longer one,
    which says nothing of where the query belongs). ``None`` when an E-value is unknown (not
    finite) or there is no hit."""
    logs = np.asarray(log_evalues, dtype=np.float64).reshape(-1)
    if not logs.size or not np.all(np.isfinite(logs)):
        return None
    if target_lengths is not None:
        lengths = np.asarray(target_lengths, dtype=np.float64).reshape(-1)
        if lengths.shape != logs.shape or not np.all(lengths >= 1):
            raise ValueError(f"target_lengths must be {logs.size} lengths >= 1, got {target_lengths!r}")
        logs = logs - np.log(lengths)
    rows = np.arange(logs.size)
    if of is not None:
        rows = np.asarray(of).reshape(-1)
        if rows.size and (rows.dtype.kind not in "iu" or rows.min() < 0 or rows.max() >= logs.size):
            raise ValueError(f"of must hold indices of hits in [0, {logs.size}), got {of!r}")
        rows = rows.astype(np.int64)
    group = np.zeros(logs.size, dtype=np.int64)
    if parts is not None:
        group = np.asarray(parts).reshape(-1)
        if group.shape != logs.shape or group.dtype.kind not in "iu":
            raise ValueError(f"parts must hold one part index per hit ({logs.size}), got {parts!r}")
        group = np.unique(group, return_inverse=True)[1].reshape(-1)
    best = np.full(group.max() + 1, np.inf)
    np.minimum.at(best, group, logs)  # each part's best hit weighs 1: no underflow across parts
    with np.errstate(over="ignore"):  # a hit beyond the double range of its part's best weighs 0
        weights = np.exp(best[group] - logs)
    total = np.bincount(group, weights=weights)
    return [float((total[group[k]] - weights[k]) / total[group[k]]) for k in rows]


def place_hits(ranks, footprints, target_lengths, *, of=None) -> tuple[list[int], list[float] | None]:
    """One query's hits placed on it: their parts (:func:`query_parts`) and, for the hits of
    ``of`` (default all), the chance that the query belongs to another hit of the same part
    (:func:`other_loci`, per residue of their targets; ``None`` without E-values). What the
    SAM and PAF writers weigh, and ``sinkalign align --max-hits`` before it drops hits."""
    parts = query_parts(ranks, footprints)
    return parts, other_loci(ranks, of=of, parts=parts, target_lengths=target_lengths)


def format_evalue(evalue: float, log_evalue: float | None = None, spec: str = ".3g") -> str:
    """An E-value as the writers print it (``format(evalue, spec)``, ``spec`` one of the
    ``e`` or ``g`` kinds); one that underflows to 0 with a finite ``log_evalue`` is written
    from its log (``1.23e-512``: BLAST writes 0.0), so the figure keeps its meaning."""
    if evalue != 0.0 or log_evalue is None or not math.isfinite(log_evalue):
        return format(evalue, spec)
    digits = int(spec.strip(".eg") or 6)
    lg = log_evalue / math.log(10.0)
    exponent = math.floor(lg)
    mantissa = 10.0 ** (lg - exponent)
    kind = "e" if spec.endswith("e") else "g"
    places = f".{digits if kind == 'e' else max(digits - 1, 0)}f"  # %g counts significant digits
    text = format(mantissa, places)
    if float(text) >= 10.0:  # 9.996 -> 10.00: one more power of ten
        exponent += 1
        text = format(mantissa / 10.0, places)
    if kind == "g" and "." in text:  # %g drops trailing zeros
        text = text.rstrip("0").rstrip(".")
    return f"{text}e{exponent:+03d}"


TEXT_WIDTH = 60  # alignment columns per block of the text layout
TEXT_CONTEXT = 10  # unaligned columns shown beyond the first and the last aligned pair
_TEXT_NAME = 20  # id letters shown in its blocks (the '#' line has them whole)


def format_text(query_id: str, query: str, target_id: str, target: str, alignment: Any, *,
                score: float | None = None, evalue: float | None = None, width: int = TEXT_WIDTH,
                strand: str = "+", log_evalue: float | None = None, alphabet: str | None = None) -> str:
    """One pair laid out to read by eye (``sinkalign align --format text``): a ``#`` line of
    figures (score, aligned length, identity, mean confidence, E-value when known), then blocks
    of ``width`` columns: the query row, a match line (``|`` identical, ``.`` substituted), the
    target row, each row with the 1-based numbers of its first and last residue, and, for an
    :class:`Alignment`, HMMER-style posterior digits (``PP``, :func:`posterior_digits`). Only
    the aligned region is laid out, with :data:`TEXT_CONTEXT` columns of the unaligned ends each
    side (a gene in a contig shows the gene, as BLAST shows its hit); a second ``#`` line says
    which columns when ends are cut.

    ``alignment``: an :class:`Alignment` or aligned pairs (:func:`as_pairs`); ``score``
    defaults to ``alignment.score`` where there is one. ``strand="-"``: ``query`` is the
    reverse complement of the query as given; the ``#`` line says ``strand=-`` and the query
    rows are numbered on the query as given (descending, as BLAST numbers a minus strand).
    """
    if strand not in STRAND_SIGNS:
        raise ValueError(f"strand={strand!r} is not one of {STRAND_SIGNS}")
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"{width=} must be a positive integer")
    posterior = alignment if isinstance(alignment, Alignment) else None
    pairs = as_pairs(alignment, len(query), len(target))
    if score is None:
        score = getattr(alignment, "score", None)
    st = alignment_stats(query, target, pairs, alphabet=alphabet)  # (alphabet known: N-N is no identity)
    facts = [
        f"score={format_number(score, '.4g')}",
        f"aligned={st.aligned_length}",
        f"identity={st.n_identical}/{st.aligned_length}" + (f" ({st.identity:.1f}%)" if st.aligned_length else ""),
        f"mean_confidence={format_number(posterior.mean_posterior if posterior is not None else None, '.3f')}",
    ]
    if evalue is not None:
        facts.append(f"evalue={format_evalue(evalue, log_evalue)}")
    if strand == "-":
        facts.append("strand=-")
    out = [f"# {query_id} ({len(query)}) vs {target_id} ({len(target)}): {' '.join(facts)}\n\n"]
    qrow, trow = to_gapped(query, target, pairs)
    letters = None if alphabet is None else _IDENTITY_LETTERS[alphabet]  # '|': an identity
    match = "".join(" " if "-" in (a, b) else "|" if a.upper() == b.upper() and (letters is None or a.upper() in letters)
                    else "." for a, b in zip(qrow, trow))
    pp = None if posterior is None else posterior_digits(posterior)
    names = (query_id[:_TEXT_NAME], target_id[:_TEXT_NAME])
    name_w, num_w = max(2, *map(len, names)), len(str(max(len(query), len(target))))
    lo, hi = 0, len(qrow)  # the columns shown: the aligned region and TEXT_CONTEXT columns each side
    if len(pairs):
        first, end = len(match) - len(match.lstrip(" ")), len(match.rstrip(" "))  # match is " " off the aligned
        lo, hi = max(0, first - TEXT_CONTEXT), min(len(qrow), end + TEXT_CONTEXT)
    if (lo, hi) != (0, len(qrow)):
        out.append(f"# columns {lo + 1}-{hi} of {len(qrow)}: the unaligned ends beyond {TEXT_CONTEXT} columns "
                   "are not shown\n\n")
    done = [len(qrow[:lo]) - qrow[:lo].count("-"), len(trow[:lo]) - trow[:lo].count("-")]  # residues before
    for c0 in range(lo, hi, width):
        cols = slice(c0, min(c0 + width, hi))
        rows = []
        for k, row in enumerate((qrow, trow)):
            piece = row[cols]
            residues = len(piece) - piece.count("-")
            first = done[k] + 1 if residues else done[k]  # 1-based; a block of gaps repeats the last
            done[k] += residues
            last = done[k]
            if k == 0 and strand == "-":  # residue r of the reverse complement is m + 1 - r as given
                first, last = len(query) + 1 - first, len(query) + 1 - last
            rows.append(f"{names[k]:<{name_w}} {first:>{num_w}} {piece} {last}")
        block = [rows[0], " " * (name_w + num_w + 2) + match[cols], rows[1]]
        if pp is not None:
            block.append(f"{'PP':<{name_w}} {'':>{num_w}} {pp[cols]}")
        out.append("\n".join(block) + "\n\n")
    return "".join(out)


def to_biopython(query_id: str, query: str, target_id: str, target: str, alignment: Any, *,
                 score: float | None = None, strand: str = "+"):
    """The pair as a Biopython ``Bio.Align.Alignment`` in Biopython's order: the target first
    (``aln.target``, the reference of Biopython's SAM and PSL writers), then the query
    (``aln.query``), two ``SeqRecord`` named by their ids, with the coordinates of the global
    layout. Biopython then prints it (``print(aln)``: rows with a ``|``/``.``/``-`` match line),
    counts it (``aln.counts()``), gives its ``substitutions`` and writes it (``Bio.Align.write(aln,
    path, "clustal")``, ``"sam"``, ``"psl"``, ...). On the minus strand (``strand="-"``, where
    ``query`` is the reverse complement of the query as given, as aligned) the query row holds
    the query as given with descending coordinates, as Biopython marks a reverse-strand
    alignment (its SAM writer sets flag 16, its PSL strand ``-``; ``aln[1]`` is the row as
    aligned). ``aln.score`` is ``score`` (or ``alignment.score``) when known; with posteriors (an
    :class:`Alignment`), ``aln.column_annotations["consensus posterior probability"]`` holds
    :func:`posterior_digits` (written by Biopython's Stockholm writer as ``#=GC PP_cons``),
    otherwise ``column_annotations`` is empty. ``aln.annotations`` is empty: Biopython's SAM
    writer writes each of them as a tag (the E-value is the pair's ``evalue``). Biopython's SAM
    is the global layout (POS 1, deletions before the first pair, MAPQ 255):
    :func:`sinkalign.write_alignments` writes the local alignment with soft clips, MAPQ and tags.

    Changed 2026-11-29: the query row came first, the minus strand as the reverse complement
    with ascending coordinates, and ``evalue=`` / ``log_evalue=`` went to a ``comment``
    annotation (keywords no longer taken)."""
    from Bio import Align
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    if strand not in STRAND_SIGNS:
        raise ValueError(f"strand={strand!r} is not one of {STRAND_SIGNS}")
    layout = biopython_layout(query_id, query, target_id, target, alignment, score=score)
    coords = layout.coordinates[::-1].copy()  # target row first
    if strand == "-":  # the query as given, read backwards
        query = reverse_complement(query)
        coords[1] = len(query) - coords[1]
    aln = Align.Alignment([SeqRecord(Seq(target), id=target_id, description=""),
                           SeqRecord(Seq(query), id=query_id, description="")], coords)
    if hasattr(layout, "score"):
        aln.score = layout.score
    aln.column_annotations = layout.column_annotations
    return aln


def biopython_layout(query_id: str, query: str, target_id: str, target: str, alignment: Any, *,
                      score: float | None = None):
    """The pair's global layout as a Biopython ``Alignment``, query row first, both as aligned,
    with the score and posterior digits of :func:`to_biopython`: the blocks of the writers'
    Stockholm (a pair's query first) and MAF outputs."""
    from Bio import Align
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    _check_seqs(query, target)
    cols = alignment_columns(alignment, len(query), len(target))
    aln = Align.Alignment([SeqRecord(Seq(query), id=query_id, description=""),
                           SeqRecord(Seq(target), id=target_id, description="")], _coordinates(cols))
    score = getattr(alignment, "score", None) if score is None else score
    if score is not None and math.isfinite(score):
        aln.score = float(score)
    aln.column_annotations = ({"consensus posterior probability": posterior_digits(alignment)}
                              if isinstance(alignment, Alignment) else {})
    return aln


def _run_length(ops: list[str]) -> str:
    out: list[str] = []
    prev, count = "", 0
    for op in ops:
        if op == prev:
            count += 1
        else:
            if count:
                out.append(f"{count}{prev}")
            prev, count = op, 1
    if count:
        out.append(f"{count}{prev}")
    return "".join(out)


def cigar(alignment: Any, m: int, n: int, *, local: bool = False) -> str:
    """CIGAR of an alignment with the query as the read and the target as the reference.

    ``M`` aligned pair (match or mismatch), ``I`` query residue absent from the target,
    ``D`` target residue absent from the query. ``local=False``: the global layout (every
    residue of both sequences, end gaps as ``I``/``D``). ``local=True`` (SAM style): query
    residues before the first / after the last aligned pair become soft clips ``S`` and
    unaligned target ends are left out (the record's position gives the target start);
    an alignment without pairs is ``f"{m}S"``. An empty layout gives ``""``.
    """
    cols = alignment_columns(alignment, m, n)
    ops = ["M" if i is not None and j is not None else ("I" if j is None else "D") for i, j in cols]
    if not local:
        return _run_length(ops)
    pairs = as_pairs(alignment, m, n)
    if pairs.shape[0] == 0:
        return f"{m}S" if m else ""
    first = ops.index("M")
    last = len(ops) - 1 - ops[::-1].index("M")
    lead = int(pairs[0, 0])
    trail = m - 1 - int(pairs[-1, 0])
    core = _run_length(ops[first : last + 1])
    return (f"{lead}S" if lead else "") + core + (f"{trail}S" if trail else "")


@dataclass(frozen=True)
class AlignmentStats:
    """Summary of one alignment (0-based half-open spans of the aligned region).

    identity: percent (0-100) of aligned pairs whose residues are identical (case-
        insensitive); NaN when nothing is aligned.
    aligned_length: number of aligned residue pairs ``k``.
    n_identical: number of identical aligned pairs.
    query_start, query_end, target_start, target_end: span from the first to the last
        aligned pair (all 0 when nothing is aligned).
    mean_posterior: mean match posterior of the aligned pairs; NaN when unknown or empty.
    """

    identity: float
    aligned_length: int
    n_identical: int
    query_start: int
    query_end: int
    target_start: int
    target_end: int
    mean_posterior: float


def alignment_stats(query: str, target: str, alignment: Any, *, alphabet: str | None = None) -> AlignmentStats:
    """:class:`AlignmentStats` of ``alignment`` (an :class:`Alignment`, object with ``.pairs``, or pairs).

    ``alphabet`` (``"dna"``, ``"protein"``): an ambiguity code (N, ...; a protein's X, B, Z, J)
    against itself is not an identity; ``None``: every pair of equal letters is."""
    _check_seqs(query, target)
    pairs = as_pairs(alignment, len(query), len(target))
    k = int(pairs.shape[0])
    if k == 0:
        return AlignmentStats(float("nan"), 0, 0, 0, 0, 0, 0, float("nan"))
    same = count_identical(query, target, pairs, alphabet)
    mean_post = alignment.mean_posterior if isinstance(alignment, Alignment) else float("nan")
    return AlignmentStats(
        identity=100.0 * same / k,
        aligned_length=k,
        n_identical=same,
        query_start=int(pairs[0, 0]),
        query_end=int(pairs[-1, 0]) + 1,
        target_start=int(pairs[0, 1]),
        target_end=int(pairs[-1, 1]) + 1,
        mean_posterior=mean_post,
    )


def stranded_stats(query: str, target: str, alignment: Any, strand: str = "+", *,
                   alphabet: str | None = None) -> AlignmentStats:
    """:func:`alignment_stats`; for ``strand="-"`` (``query`` is the reverse complement of the
    query as given) the query span is turned back onto the query as given."""
    if strand not in STRAND_SIGNS:
        raise InputError(f"strand={strand!r} is not one of {STRAND_SIGNS}")
    st = alignment_stats(query, target, alignment, alphabet=alphabet)
    if strand == "+" or st.aligned_length == 0:
        return st
    m = len(query)
    return replace(st, query_start=m - st.query_end, query_end=m - st.query_start)


#: letters that are an identity when equal, by alphabet: a nucleotide ambiguity code (N, R, ...)
#: or a protein's unknown X or ambiguity code (B: D or N, Z: E or Q, J: I or L) against itself
#: is not (the SAM spec's NM, samtools calmd, minimap2): two such letters may be two residues
_IDENTITY_LETTERS = {"dna": "ACGTU", "protein": "ACDEFGHIKLMNOPQRSTUVWY"}


def count_identical(query: str, target: str, pairs: np.ndarray, alphabet: str | None = None) -> int:
    """Aligned pairs of equal letters (case aside); with ``alphabet`` (``"dna"`` or
    ``"protein"``), only letters of :data:`_IDENTITY_LETTERS`: N against N is not identical."""
    qa = np.frombuffer(query.upper().encode("ascii"), dtype=np.uint8)[pairs[:, 0]]
    ta = np.frombuffer(target.upper().encode("ascii"), dtype=np.uint8)[pairs[:, 1]]
    same = qa == ta
    if alphabet is not None:
        same &= np.isin(qa, np.frombuffer(_IDENTITY_LETTERS[alphabet].encode("ascii"), np.uint8))
    return int(np.count_nonzero(same))


def _check_seqs(query: str, target: str) -> None:
    for name, seq in (("query", query), ("target", target)):
        if not isinstance(seq, str) or not seq.isascii():
            raise InputError(f"{name} must be an ASCII string")


def percent_identity(query: str, target: str, alignment: Any, *, alphabet: str | None = None) -> float:
    """``100 * identical aligned pairs / aligned pairs`` of ``alignment`` (an :class:`Alignment`,
    an object with ``.pairs`` or a pair array); NaN when nothing is aligned.

    Only aligned residue pairs count (gaps are in neither the numerator nor the
    denominator); letters are compared case-insensitively. ``alphabet`` (``"dna"``,
    ``"protein"``): an ambiguity code (N, R, ...; a protein's X, B, Z, J) against itself is not
    identical, as in the SAM spec's NM; ``None``: every pair of equal letters is.
    """
    _check_seqs(query, target)
    pairs = as_pairs(alignment, len(query), len(target))
    if pairs.shape[0] == 0:
        return math.nan
    return 100.0 * count_identical(query, target, pairs, alphabet) / pairs.shape[0]


class AlignedPair(NamedTuple):
    """One aligned pair: what :meth:`sinkalign.Aligner.align` returns and what
    :func:`sinkalign.write_alignments` writes, unchanged.

    Attributes:
        query_id, query, target_id, target: the two records (ids and sequences).
        alignment: an :class:`Alignment` (with posteriors), an object with ``.pairs`` (e.g. a
            baseline's result) or a pair array ``[k, 2]`` of 0-based aligned residue indices.
        score: the pair's score; ``None`` (kept as given) makes ``str()``, :meth:`to_biopython`
            and the writers take ``alignment.score`` where there is one. For the OT aligner it
            is the sum of the raw match posteriors over aligned pairs.
        plan: the transport plan ``[m + 1, n + 1]`` (last row and column: the dustbins) when
            it was asked for (``keep_plan=True``), else ``None``.
        evalue: how many shuffled pairs of these lengths would be expected to align at least
            as well (:mod:`sinkalign.align.significance`), when the model carries a fitted
            null; else ``None``.
        strand: ``"+"``, or ``"-"`` when the query was aligned as its reverse complement (a
            nucleotide model's ``strand="minus"`` or ``"both"``): then ``query`` holds that
            reverse complement, ``alignment``, ``plan``, :attr:`cigar` and :meth:`gapped`
            read it as aligned (as SAM's SEQ and CIGAR of a reverse-strand read), and
            :attr:`stats` gives the query span on the query as given (as PAF and BLAST).
        log_evalue: the natural log of ``evalue`` when the aligner computed it: finite where
            ``evalue`` underflows to 0 (long close homologs), so such hits still rank
            (:attr:`evalue_rank`) and print (``evalue=1.2e-512``); ``None`` when not known.
        other_loci: the chance that the query belongs to another of its hits instead, where
            hits it competes with are not written beside it (``sinkalign align --max-hits``
            sets it); ``None``: the writers weigh the hits they are given (SAM and PAF MAPQ).
        alphabet: ``"dna"`` or ``"protein"`` (the model's): a DNA ambiguity code (N, R, ...)
            or a protein's X, B, Z or J against itself is then no identity (:attr:`identity`, the writers'
            NM and identity); ``None``: the writers tell it from the letters, :attr:`identity`
            counts equal letters.

    A plain 6-tuple ``(query_id, query, target_id, target, alignment, score)`` is accepted
    wherever an ``AlignedPair`` is. Pairs compare by value, field by field (arrays by their
    values), and, holding arrays, are not hashable (changed 2026-11-29: a pair holding an
    :class:`Alignment` hashed by its identity before): key a dict by ``(query_id, target_id)``.
    """

    query_id: str
    query: str
    target_id: str
    target: str
    alignment: Any
    score: float | None = None
    plan: np.ndarray | None = None
    evalue: float | None = None
    strand: str = "+"
    log_evalue: float | None = None
    other_loci: float | None = None
    alphabet: str | None = None

    @property
    def evalue_rank(self) -> float:
        """What orders pairs by E-value, smaller first: the natural log of the E-value (from
        :attr:`log_evalue` where known, so E-values that underflow to 0 keep their order);
        ``inf`` without an E-value."""
        return evalue_rank(self.evalue, self.log_evalue)

    def evalue_times(self, factor: float) -> AlignedPair:
        """The pair with its E-value multiplied by ``factor`` (> 0: two strands searched, a
        database of N comparisons), its log moved to match."""
        if self.evalue is None:
            return self
        log = None if self.log_evalue is None else self.log_evalue + math.log(factor)
        return self._replace(evalue=self.evalue * factor, log_evalue=log)

    @property
    def pairs(self) -> np.ndarray:
        """Aligned residue pairs ``int64 [k, 2]`` (0-based)."""
        return as_pairs(self.alignment, len(self.query), len(self.target))

    def __repr__(self) -> str:  # sequences and the plan shortened, to fit a notebook
        plan = None if self.plan is None else f"<plan {' x '.join(map(str, np.shape(self.plan)))}>"
        fields = [f"query_id={self.query_id!r}", f"query={short_repr(self.query)}", f"target_id={self.target_id!r}",
                  f"target={short_repr(self.target)}", f"alignment={self.alignment!r}", f"score={self.score!r}",
                  f"plan={plan}", f"evalue={self.evalue!r}", f"strand={self.strand!r}",
                  f"log_evalue={self.log_evalue!r}", f"other_loci={self.other_loci!r}", f"alphabet={self.alphabet!r}"]
        return f"AlignedPair({', '.join(fields)})"

    def __eq__(self, other: object) -> bool:
        """Field by field, arrays (an alignment given as pairs, a plan) by their values: two
        results of the same pair are equal (a plain tuple of the same fields too)."""
        if not isinstance(other, tuple) or len(other) != len(self):
            return NotImplemented
        return all(_same(a, b) for a, b in zip(self, other))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # (arrays inside)

    def transposed(self) -> AlignedPair:
        """The pair with query and target exchanged: ids, sequences, the alignment
        (:meth:`Alignment.transposed`, or the pairs turned round) and the plan transposed;
        score, E-value and strand unchanged. On the minus strand the new query is the
        reverse complement of the target, aligned to the query as given (the same
        alignment read from the other end: :meth:`Alignment.reversed`)."""
        aln = self.alignment
        if self.strand == "-":
            m, n = len(self.query), len(self.target)
            if isinstance(aln, Alignment):
                turned = aln.reversed().transposed()
            else:
                p = self.pairs[::-1]
                turned = np.stack([n - 1 - p[:, 1], m - 1 - p[:, 0]], 1)
            plan = None
            if self.plan is not None:
                P = np.asarray(self.plan)  # [m + 1, n + 1]: rows the aligned query, last row/column the dustbins
                plan = np.empty((n + 1, m + 1), dtype=P.dtype)
                plan[:n, :m] = P[:m, :n][::-1, ::-1].T
                plan[:n, m] = P[m, :n][::-1]
                plan[n, :m] = P[:m, n][::-1]
                plan[n, m] = P[m, n]
            return AlignedPair(self.target_id, reverse_complement(self.target), self.query_id,
                               reverse_complement(self.query), turned, self.score, plan, self.evalue, "-",
                               self.log_evalue, alphabet=self.alphabet)
        turned = aln.transposed() if isinstance(aln, Alignment) else self.pairs[:, ::-1].copy()
        plan = None if self.plan is None else np.ascontiguousarray(np.asarray(self.plan).T)
        return AlignedPair(self.target_id, self.target, self.query_id, self.query, turned, self.score, plan,
                           self.evalue, self.strand, self.log_evalue, alphabet=self.alphabet)

    @property
    def stats(self) -> AlignmentStats:
        """Identity, aligned length and the 0-based half-open spans (:func:`alignment_stats`;
        on the minus strand the query span is on the query as given)."""
        return stranded_stats(self.query, self.target, self.alignment, self.strand, alphabet=self.alphabet)

    @property
    def identity(self) -> float:
        """Percent identity over aligned pairs (NaN when nothing is aligned; N against N is not
        identical where :attr:`alphabet` is known)."""
        return percent_identity(self.query, self.target, self.alignment, alphabet=self.alphabet)

    @property
    def cigar(self) -> str:
        """The local CIGAR of the TSV and SAM outputs (soft clips for unaligned query ends); a
        pair with nothing aligned is all soft clip (``"{m}S"``), which those outputs write as
        ``*``, SAM's "unavailable"."""
        return cigar(self.alignment, len(self.query), len(self.target), local=True)

    def gapped(self, gap: str = "-") -> tuple[str, str]:
        """The two sequences with gaps inserted (the global layout of the FASTA output)."""
        return to_gapped(self.query, self.target, self.alignment, gap=gap)

    def __str__(self) -> str:
        """The pair laid out to read by eye, as ``sinkalign align --format text`` writes it
        (:func:`format_text`): ``print(aligner.align(a, b))``."""
        return format_text(self.query_id, self.query, self.target_id, self.target, self.alignment,
                           score=self.score, evalue=self.evalue, strand=self.strand, log_evalue=self.log_evalue,
                           alphabet=self.alphabet)

    def to_biopython(self):
        """This pair as a Biopython ``Bio.Align.Alignment`` (:func:`to_biopython`), target row
        first as Biopython orders a pair: ``print()`` it, count it, or write it in Biopython's
        formats (on the minus strand the query row reads the query as given backwards)."""
        return to_biopython(self.query_id, self.query, self.target_id, self.target, self.alignment,
                            score=self.score, strand=self.strand)

