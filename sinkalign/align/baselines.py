"""Classical baselines: Needleman-Wunsch (global) and Smith-Waterman (local) with affine gaps.

Gap convention (everywhere in sinkalign): a gap of length ``g`` costs
``gap_open + (g - 1) * gap_extend``, i.e. ``gap_open`` is the cost of the *first* gap
residue. This is the EMBOSS needle/water convention, parasail's (``open`` is charged on
the first gap residue: checked in the tests, e.g. SW of HEAGAWGHEE vs PAWHEAE under
BLOSUM62 11/1 scores ``AW-HE`` = 4 + 11 + 8 + 5 - 11 = 17), and Biopython's
``PairwiseAligner(open_gap_score=-gap_open, extend_gap_score=-gap_extend)``.

NCBI BLAST counts differently: "existence E, extension X" charges ``E + g * X`` for a gap of
length ``g``, so BLAST's ``-gapopen 11 -gapextend 1`` is ``gap_open=12, gap_extend=1`` here;
:meth:`Scoring.from_blast` converts. Our defaults take the numbers as stated in our
convention: protein BLOSUM62, open 11, extend 1 (a 1-residue gap costs 11); DNA match +2,
mismatch -3 (blastn's reward/penalty), open 5, extend 2 (a 1-residue gap costs 5, one less
than blastn's 5 + 2g; use ``Scoring.from_blast("dna", 5, 2)`` for blastn's exact costs).

End gaps are charged in global mode (standard Needleman-Wunsch; parasail ``nw`` and
Biopython ``mode="global"`` agree). Alignments are returned as aligned residue ``pairs``
``[k, 2]`` (0-based, strictly increasing), the representation used across sinkalign.

Letters without a row of their own in the scores are read as another: a protein's U
(selenocysteine), O (pyrrolysine) and J as X; a nucleotide's U as T and its IUPAC ambiguity
codes as N. Other letters are an :class:`~sinkalign.errors.InputError` naming the position.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from sinkalign.alignment import same_fields
from sinkalign.errors import InputError

__all__ = [
    "BACKENDS",
    "METHODS",
    "BaselineAlignment",
    "Scoring",
    "Throughput",
    "align_pair",
    "align_pairs",
    "measure_throughput",
    "local_score",
    "local_scores",
    "score_pairs",
]

logger = logging.getLogger(__name__)

METHODS = ("nw", "sw")
BACKENDS = ("parasail", "biopython")
KINDS = ("protein", "dna")

# Alphabet of parasail.blosum62 (and Biopython's BLOSUM62) in matrix order.
PROTEIN_ALPHABET = "ARNDCQEGHILKMFPSTWYVBZX*"
DNA_ALPHABET = "ACGTN"


@dataclass(frozen=True)
class Scoring:
    """Scoring scheme of the baselines (integer scores, our gap convention; see module doc).

    Attributes:
        kind: ``"protein"`` (BLOSUM62) or ``"dna"`` (``match`` / ``mismatch`` over ACGT; ``N``
            scores :attr:`unknown_score` against every letter, itself included, as BLAST scores
            an ambiguous base).
        gap_open: cost of the first residue of a gap, ``>= 0``.
        gap_extend: cost of each further gap residue, ``0 <= gap_extend``.
        match, mismatch: DNA scores (ignored for protein); ``match > 0 > mismatch``.
    """

    kind: str = "protein"
    gap_open: int = 11
    gap_extend: int = 1
    match: int = 2
    mismatch: int = -3

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"kind={self.kind!r} is not one of {KINDS}")
        for name in ("gap_open", "gap_extend", "match", "mismatch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise InputError(f"{name}={value!r} must be an integer")
        if self.gap_open < 0:
            raise InputError(f"gap_open={self.gap_open} must be >= 0")
        if self.gap_extend < 0:
            raise InputError(f"gap_extend={self.gap_extend} must be >= 0")
        if self.kind == "dna" and not self.match > 0 > self.mismatch:
            raise InputError(f"match={self.match} and mismatch={self.mismatch} must satisfy match > 0 > mismatch")

    @classmethod
    def protein(cls, gap_open: int = 11, gap_extend: int = 1) -> Scoring:
        """BLOSUM62 with affine gaps (defaults: open 11, extend 1 in our convention)."""
        return cls("protein", gap_open, gap_extend)

    @classmethod
    def dna(cls, match: int = 2, mismatch: int = -3, gap_open: int = 5, gap_extend: int = 2) -> Scoring:
        """Match/mismatch DNA scoring (defaults +2/-3, open 5, extend 2 in our convention)."""
        return cls("dna", gap_open, gap_extend, match, mismatch)

    @classmethod
    def default(cls, kind: str) -> Scoring:
        """The standard scoring of ``kind``: :meth:`protein` or :meth:`dna` with their defaults."""
        if kind not in KINDS:
            raise InputError(f"kind={kind!r} is not one of {KINDS}")
        return cls.protein() if kind == "protein" else cls.dna()

    @classmethod
    def from_blast(cls, kind: str, existence: int, extension: int, **kwargs: int) -> Scoring:
        """Scoring from BLAST's gap costs (gap of length g costs ``existence + g * extension``)."""
        return cls(kind, existence + extension, extension, **kwargs)

    @property
    def unknown_score(self) -> int:
        """The DNA score of ``N`` against any letter, ``N`` included: the mean score of an unknown
        base against a known one, ``(match + 3 mismatch) / 4``, rounded half away from zero
        (BLAST's ``BlastScoreBlkNuclMatrixCreate``; -2 for +2/-3). An ``N`` pair scored as a
        match made a run of ``N`` (an assembly gap, a masked repeat) look like a strong hit."""
        mean = (self.match + 3 * self.mismatch) / 4
        return int(math.copysign(math.floor(abs(mean) + 0.5), mean))

    @property
    def alphabet(self) -> str:
        return PROTEIN_ALPHABET if self.kind == "protein" else DNA_ALPHABET

    def gap_cost(self, length: int) -> int:
        """Cost of one gap of ``length`` residues (0 for length 0)."""
        return 0 if length <= 0 else self.gap_open + (length - 1) * self.gap_extend


@dataclass(frozen=True, eq=False)
class BaselineAlignment:
    """Result of a baseline alignment.

    pairs: ``int64 [k, 2]`` aligned (query i, target j), 0-based, strictly increasing.
    score: optimal alignment score under ``scoring`` (integer valued).
    method: ``"nw"`` or ``"sw"``.
    """

    pairs: np.ndarray
    score: float
    method: str
    scoring: Scoring

    def __repr__(self) -> str:
        return f"BaselineAlignment(method={self.method!r}, k={self.pairs.shape[0]}, score={self.score:g})"

    def __eq__(self, other: object) -> bool:
        """Equal pairs, score, method and scoring (two runs of one pair are equal)."""
        if not isinstance(other, BaselineAlignment):
            return NotImplemented
        return same_fields(self, other)

    __hash__ = None  # type: ignore[assignment]  # (an array inside)


# --------------------------------------------------------------------------- helpers


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise InputError(f"{method=} is not one of {METHODS}")


#: letters with no row of their own in the scores, read as another: a protein's selenocysteine
#: U, pyrrolysine O and J (I or L) as the unknown X; a nucleotide's U as T and its ambiguity codes
#: as N (as the aligner's own baselines read them)
_PROTEIN_READ_AS = str.maketrans({"U": "X", "O": "X", "J": "X"})
_DNA_READ_AS = str.maketrans({"U": "T", **{c: "N" for c in "RYKMSWBDHV"}})


def _clean(seq: Any, name: str, scoring: Scoring) -> str:
    """Upper-cased sequence (letters without a row of their own read as :data:`_PROTEIN_READ_AS`
    and :data:`_DNA_READ_AS` say); InputError naming the first letter outside the alphabet."""
    if not isinstance(seq, str):
        raise InputError(f"{name} must be a str, got {type(seq).__name__}")
    up = seq.upper().translate(_PROTEIN_READ_AS if scoring.kind == "protein" else _DNA_READ_AS)
    alphabet = scoring.alphabet
    if set(up) - set(alphabet):
        pos = next(p for p, letter in enumerate(up) if letter not in alphabet)
        raise InputError(
            f"{name} has {seq[pos]!r} at position {pos}, outside the {scoring.kind} alphabet {alphabet!r}"
        )
    return up


@cache
def _parasail_matrix(scoring: Scoring):
    import parasail

    if scoring.kind == "protein":
        return parasail.blosum62
    matrix = parasail.matrix_create(DNA_ALPHABET, scoring.match, scoring.mismatch)
    n = DNA_ALPHABET.index("N")
    for other in range(len(DNA_ALPHABET)):
        matrix.set_value(n, other, scoring.unknown_score)
        matrix.set_value(other, n, scoring.unknown_score)
    return matrix


@cache
def _substitution_array(scoring: Scoring):
    from Bio.Align import substitution_matrices

    if scoring.kind == "protein":
        return substitution_matrices.load("BLOSUM62")
    n = len(DNA_ALPHABET)
    data = np.full((n, n), float(scoring.mismatch))
    np.fill_diagonal(data, float(scoring.match))
    unknown = DNA_ALPHABET.index("N")
    data[unknown, :] = data[:, unknown] = float(scoring.unknown_score)
    return substitution_matrices.Array(alphabet=DNA_ALPHABET, dims=2, data=data)


@cache
def _score_lookup(scoring: Scoring) -> tuple[np.ndarray, np.ndarray]:
    """``(lut [256] letter byte -> row, table [A, A])`` of the substitution scores."""
    sub = _substitution_array(scoring)
    alphabet = sub.alphabet
    lut = np.full(256, -1, dtype=np.int64)
    for idx, letter in enumerate(alphabet):
        lut[ord(letter)] = idx
    return lut, np.asarray(sub, dtype=np.float64)


def _residue_indices(seq: str, scoring: Scoring) -> np.ndarray:
    """Rows of :func:`_score_lookup`'s table for the letters of ``seq`` (cleaned by :func:`_clean`)."""
    lut, _ = _score_lookup(scoring)
    return lut[np.frombuffer(seq.encode("ascii"), dtype=np.uint8)]


def score_pairs(query: str, target: str, pairs: Any, *, method: str = "nw", scoring: Scoring | None = None) -> float:
    """Score of the best alignment with exactly these aligned ``pairs`` ``[k, 2]``.

    Substitution scores of the pairs minus one affine gap per maximal run of unaligned
    residues of each sequence between consecutive pairs. ``method="nw"`` also charges the
    end gaps; ``"sw"`` scores only the local region from the first to the last pair (an
    empty local alignment scores 0).
    """
    from sinkalign.align.decode import check_pairs

    _check_method(method)
    scoring = scoring or Scoring()
    q = _clean(query, "query", scoring)
    t = _clean(target, "target", scoring)
    p = check_pairs(pairs, len(q), len(t))
    table = _score_lookup(scoring)[1]
    qi, ti = _residue_indices(q, scoring), _residue_indices(t, scoring)
    total = float(table[qi[p[:, 0]], ti[p[:, 1]]].sum())
    if p.shape[0] == 0:
        return 0.0 if method == "sw" else -float(scoring.gap_cost(len(q)) + scoring.gap_cost(len(t)))
    gaps = np.concatenate([np.diff(p[:, 0]) - 1, np.diff(p[:, 1]) - 1])  # internal gap runs
    gaps = gaps[gaps > 0]
    total -= float(gaps.size * scoring.gap_open + (gaps - 1).sum() * scoring.gap_extend)
    if method == "nw":
        total -= scoring.gap_cost(int(p[0, 0])) + scoring.gap_cost(int(p[0, 1]))
        total -= scoring.gap_cost(len(q) - 1 - int(p[-1, 0])) + scoring.gap_cost(len(t) - 1 - int(p[-1, 1]))
    return total


_CIGAR_TOKEN = re.compile(r"(\d+)([=XMIDSN])")


def _pairs_from_cigar(ops: bytes, beg_query: int, beg_ref: int) -> np.ndarray:
    """Pairs from a parasail CIGAR (query = s1 = read: ``I`` consumes query, ``D`` target)."""
    text = ops.decode("ascii")
    tokens = _CIGAR_TOKEN.findall(text)
    if "".join(a + b for a, b in tokens) != text or any(b in "SN" for _, b in tokens):
        raise RuntimeError(f"unexpected CIGAR {text!r} from parasail")
    if not tokens:
        return np.zeros((0, 2), dtype=np.int64)
    lens = np.array([int(a) for a, _ in tokens], dtype=np.int64)
    kinds = np.array([b for _, b in tokens])
    is_match = np.isin(kinds, ["=", "X", "M"])
    adv_q = np.where(is_match | (kinds == "I"), lens, 0)
    adv_t = np.where(is_match | (kinds == "D"), lens, 0)
    start_q = beg_query + np.cumsum(adv_q) - adv_q
    start_t = beg_ref + np.cumsum(adv_t) - adv_t
    run = lens[is_match]
    offsets = np.arange(run.sum()) - np.repeat(np.cumsum(run) - run, run)
    i = np.repeat(start_q[is_match], run) + offsets
    j = np.repeat(start_t[is_match], run) + offsets
    return np.stack([i, j], axis=1)


def _parasail_align(q: str, t: str, method: str, scoring: Scoring) -> tuple[np.ndarray, float]:
    import parasail

    matrix = _parasail_matrix(scoring)
    o, e = int(scoring.gap_open), int(scoring.gap_extend)
    fast = parasail.nw_trace_scan_16 if method == "nw" else parasail.sw_trace_scan_16
    res = fast(q, t, o, e, matrix)
    if res.saturated:
        logger.debug("parasail 16-bit saturated (m=%d, n=%d); rerunning with 32-bit lanes", len(q), len(t))
        fast = parasail.nw_trace_scan_32 if method == "nw" else parasail.sw_trace_scan_32
        res = fast(q, t, o, e, matrix)
    score = float(res.score)
    if method == "sw" and score <= 0:
        return np.zeros((0, 2), dtype=np.int64), 0.0
    pairs = _pairs_from_cigar(res.cigar.decode, int(res.cigar.beg_query), int(res.cigar.beg_ref))
    # parasail's vectorised tracebacks have had bugs (parasail-python #22, #59): check that
    # the pairs really achieve the reported score, else use the plain reference kernel.
    if score_pairs(q, t, pairs, method=method, scoring=scoring) != score:
        logger.warning(
            "parasail %s traceback does not reach its score %g; using the non-vectorised kernel", method, score
        )
        plain = parasail.nw_trace if method == "nw" else parasail.sw_trace
        res = plain(q, t, o, e, matrix)
        pairs = _pairs_from_cigar(res.cigar.decode, int(res.cigar.beg_query), int(res.cigar.beg_ref))
        if float(res.score) != score or score_pairs(q, t, pairs, method=method, scoring=scoring) != score:
            raise RuntimeError(f"parasail {method} traceback is inconsistent with its score {score}")
    return pairs, score


def _biopython_align(q: str, t: str, method: str, scoring: Scoring) -> tuple[np.ndarray, float]:
    from Bio.Align import PairwiseAligner

    aligner = PairwiseAligner(
        mode="global" if method == "nw" else "local",
        substitution_matrix=_substitution_array(scoring),
        open_gap_score=-float(scoring.gap_open),
        extend_gap_score=-float(scoring.gap_extend),
    )
    alns = aligner.align(q, t)
    score = float(alns.score)
    if method == "sw" and score <= 0:
        return np.zeros((0, 2), dtype=np.int64), 0.0
    aln = alns[0]
    blocks = []
    for (ts, te), (qs, qe) in zip(*aln.aligned):  # aligned[0]: target (= our query), [1]: query
        blocks.append(np.stack([np.arange(ts, te), np.arange(qs, qe)], axis=1))
    pairs = np.concatenate(blocks).astype(np.int64) if blocks else np.zeros((0, 2), dtype=np.int64)
    return pairs, score


def align_pair(
    query: str,
    target: str,
    method: str = "nw",
    *,
    scoring: Scoring | None = None,
    backend: str = "parasail",
) -> BaselineAlignment:
    """Optimal global (``"nw"``) or local (``"sw"``) alignment of ``query`` to ``target``.

    Sequences are upper-cased and must be in ``scoring.alphabet`` (ValueError naming the
    position otherwise). ``backend="parasail"`` (SIMD scan kernels, 16-bit with a 32-bit
    rerun on saturation, traceback checked against the score) or ``"biopython"``
    (``PairwiseAligner``). Both give the same optimal score; tied alignments may differ.
    An empty sequence aligns to nothing (global score: minus the other's gap cost).
    """
    _check_method(method)
    if backend not in BACKENDS:
        raise InputError(f"{backend=} is not one of {BACKENDS}")
    scoring = scoring or Scoring()
    if not isinstance(scoring, Scoring):
        raise InputError(f"scoring must be a Scoring, got {type(scoring).__name__}")
    q = _clean(query, "query", scoring)
    t = _clean(target, "target", scoring)
    if not q or not t:
        empty = np.zeros((0, 2), dtype=np.int64)
        score = 0.0 if method == "sw" else -float(scoring.gap_cost(len(q)) + scoring.gap_cost(len(t)))
        return BaselineAlignment(empty, score, method, scoring)
    fn = _parasail_align if backend == "parasail" else _biopython_align
    pairs, score = fn(q, t, method, scoring)
    return BaselineAlignment(pairs, score, method, scoring)


def local_score(query: str, target: str, *, scoring: Scoring | None = None) -> float:
    """The optimal Smith-Waterman score of ``query`` against ``target`` (no traceback: the
    parasail striped kernel, 16-bit with a 32-bit rerun on saturation); 0 when nothing aligns.
    Sequences are cleaned as in :func:`align_pair`."""
    import parasail

    scoring = scoring or Scoring()
    q = _clean(query, "query", scoring)
    t = _clean(target, "target", scoring)
    if not q or not t:
        return 0.0
    matrix = _parasail_matrix(scoring)
    o, e = int(scoring.gap_open), int(scoring.gap_extend)
    res = parasail.sw_striped_16(q, t, o, e, matrix)
    if res.saturated:
        res = parasail.sw_striped_32(q, t, o, e, matrix)
    return max(float(res.score), 0.0)


def local_scores(query: str, targets: Sequence[str], *, scoring: Scoring | None = None) -> np.ndarray:
    """:func:`local_score` of ``query`` against each of ``targets`` (``float64``), the same
    numbers, with the query's striped profile built once (parasail ``sw_striped_profile``: about
    half the time of a pair on its own at a few hundred residues)."""
    import parasail

    scoring = scoring or Scoring()
    q = _clean(query, "query", scoring)
    out = np.zeros(len(targets))
    if not q:
        return out
    matrix = _parasail_matrix(scoring)
    o, e = int(scoring.gap_open), int(scoring.gap_extend)
    profile16, profile32 = parasail.profile_create_16(q, matrix), None
    for k, target in enumerate(targets):
        t = _clean(target, f"target {k}", scoring)
        if not t:
            continue
        res = parasail.sw_striped_profile_16(profile16, t, o, e)
        if res.saturated:
            profile32 = profile32 or parasail.profile_create_32(q, matrix)
            res = parasail.sw_striped_profile_32(profile32, t, o, e)
        out[k] = max(float(res.score), 0.0)
    return out


def align_pairs(
    pairs: Iterable[tuple[str, str]],
    method: str = "nw",
    *,
    scoring: Scoring | None = None,
    backend: str = "parasail",
    progress: bool = False,
) -> list[BaselineAlignment]:
    """Align each ``(query, target)`` sequence pair in ``pairs``; results in input order.

    Errors name the index of the offending pair. ``progress=True`` shows a tqdm bar.
    """
    _check_method(method)
    items: Iterable[tuple[str, str]] = pairs
    if progress:
        from tqdm.auto import tqdm

        items = tqdm(items, desc=f"{method} ({backend})", unit="pair")
    out: list[BaselineAlignment] = []
    for idx, item in enumerate(items):
        try:
            query, target = item
        except (TypeError, ValueError):
            raise InputError(f"pair {idx} must be a (query, target) tuple of strings") from None
        try:
            out.append(align_pair(query, target, method, scoring=scoring, backend=backend))
        except ValueError as err:
            raise InputError(f"pair {idx}: {err}") from None
    return out


@dataclass(frozen=True)
class Throughput:
    """Timing of a batch: ``cells`` is sum of ``m * n``; ``gcups`` giga cell updates / s."""

    n_pairs: int
    cells: int
    seconds: float
    pairs_per_second: float
    gcups: float


def measure_throughput(
    pairs: Sequence[tuple[str, str]],
    method: str = "nw",
    *,
    scoring: Scoring | None = None,
    backend: str = "parasail",
    repeats: int = 3,
) -> Throughput:
    """Best-of-``repeats`` wall time of :func:`align_pairs` on ``pairs`` (after one warm-up)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"{repeats=} must be a positive integer")
    pairs = list(pairs)
    if not pairs:
        raise InputError("pairs is empty: nothing to time")
    align_pairs(pairs[:1], method, scoring=scoring, backend=backend)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        align_pairs(pairs, method, scoring=scoring, backend=backend)
        best = min(best, time.perf_counter() - t0)
    cells = sum(len(q) * len(t) for q, t in pairs)
    return Throughput(len(pairs), cells, best, len(pairs) / best, cells / best / 1e9)
