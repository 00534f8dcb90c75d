"""A multiple alignment scored against a reference alignment of the same sequences.

What BAliBASE's ``bali_score``, QSCORE and FastSP report, on the reference's trusted residues:

* **SP** (sum-of-pairs, recall): the share of the reference's aligned residue pairs that the
  test alignment also aligns, pooled over every pair of rows;
* **precision** (FastSP's "modeler" score): the share of the test's aligned residue pairs
  that the reference has; **F1** of the two;
* **TC** (total column): the share of the reference's columns with at least two trusted
  residues whose trusted residues all share one column of the test alignment.

The pairs of rows are :func:`~sinkalign.io.alignments.msa_to_pairs` of the reference, so a
structure-based reference counts only its trusted (upper-case) core, as
:func:`~sinkalign.align.metrics.core_pair_scores` counts it, and a Stockholm or A2M
reference's lower-case insertions are aligned to nothing. In the test alignment upper-case
residues are aligned by their columns and lower-case ones (insertions, in Stockholm and A2M
files) to nothing. Scores are also given per identity bin of the reference pairs
(:data:`~sinkalign.align.metrics.IDENTITY_BINS`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field

import numpy as np

from sinkalign.align.metrics import (
    IDENTITY_BINS,
    PairScores,
    assign_identity_bins,
    core_pair_scores,
    identity_bin_labels,
    micro_average,
)
from sinkalign.align.msa import same_column
from sinkalign.errors import InputError
from sinkalign.io.alignments import MSA, ReferencePair, msa_to_pairs, percent_identity

log = logging.getLogger(__name__)

__all__ = ["MsaScores", "aligned_pairs", "pooled", "residue_columns", "score_alignment", "total_column"]


@dataclass(frozen=True)
class MsaScores:
    """Scores of a test alignment against a reference (module docstring).

    ``pairs``: per pair of reference rows ``(query id, target id, percent identity of the
    reference pair, PairScores)``; ``overall`` and ``by_identity`` (bin label -> scores, the
    bins holding pairs) are :func:`~sinkalign.align.metrics.micro_average` dicts with
    ``pairs`` added; ``tc``: ``(columns reproduced, reference columns)``; ``extra``: test rows
    that the reference does not have (ignored)."""

    pairs: list
    overall: dict
    by_identity: dict
    tc: tuple[int, int]
    extra: tuple[str, ...] = field(default=())

    @property
    def total_column(self) -> float | None:
        return self.tc[0] / self.tc[1] if self.tc[1] else None

    def to_dict(self) -> dict:
        """Plain JSON values: a ratio of 0 / 0 (precision where the test aligns nothing) is ``None``."""
        return _no_nan({"overall": self.overall, "by_identity": self.by_identity, "tc": self.total_column,
                        "tc_columns": list(self.tc), "extra_rows": list(self.extra),
                        "pairs": [{"query": q, "target": t, "identity": ident, **s.to_dict()}
                                  for q, t, ident, s in self.pairs]})


def _no_nan(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def residue_columns(row: str) -> np.ndarray:
    """Each residue's column in a gapped row: upper-case residues at their columns, lower-case
    ones (insertions) at ``-1``, in no column."""
    g = np.frombuffer(row.encode("ascii"), np.uint8)
    letters = np.flatnonzero(((g >= ord("A")) & (g <= ord("Z"))) | ((g >= ord("a")) & (g <= ord("z"))))
    return np.where(g[letters] <= ord("Z"), letters, -1)


def aligned_pairs(row_a: str, row_b: str) -> np.ndarray:
    """``[k, 2]``: the residue pairs that two gapped rows put in one column, upper-case residues
    only (a lower-case residue counts in its sequence but is aligned to nothing)."""
    return _pairs(residue_columns(row_a), residue_columns(row_b))


def _pairs(cols_a: np.ndarray, cols_b: np.ndarray) -> np.ndarray:
    """:func:`~sinkalign.align.msa.same_column` of two rows' :func:`residue_columns` as ``[k, 2]``."""
    return np.stack(same_column(cols_a, cols_b), axis=1).reshape(-1, 2)


def total_column(test: MSA, reference: MSA) -> tuple[int, int]:
    """``(reproduced, columns)``: the reference's columns with at least two trusted
    (upper-case) residues, and how many of them have all those residues in one column of
    ``test`` (as upper-case residues)."""
    return _total_column({name: residue_columns(row) for name, row in zip(test.ids, test.rows)}, reference)


def _total_column(columns: dict[str, np.ndarray], reference: MSA) -> tuple[int, int]:
    ok = total = 0
    placed_ref = [residue_columns(row) for row in reference.rows]
    members: dict[int, list[tuple[str, int]]] = {}  # reference column -> its trusted (row, residue)
    for name, cols in zip(reference.ids, placed_ref):
        for k in np.flatnonzero(cols >= 0):
            members.setdefault(int(cols[k]), []).append((name, int(k)))
    for c in sorted(members):
        if len(members[c]) < 2:
            continue
        total += 1
        placed = {int(columns[name][k]) for name, k in members[c]}
        ok += len(placed) == 1 and -1 not in placed
    return ok, total


def _name(msa) -> str:
    """How messages name an alignment: the file it was read from, else ``the test alignment``
    (one built in memory has no file)."""
    return getattr(msa, "source", None) or "the test alignment"


def _check_same_sequences(test, reference: MSA) -> tuple[str, ...]:
    names = set(test.ids)
    missing = [i for i in reference.ids if i not in names]
    if missing:
        raise InputError(f"{_name(test)}: no row {missing[0]!r} of the reference {reference.source}"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                         + "; the two alignments must hold the same sequences under the same names (or score "
                           "against the reference rows that the test holds: score-msa --subset, subset=True in "
                           "Python)")
    by_name = dict(zip(test.ids, test.rows))
    for name, row in zip(reference.ids, reference.rows):
        want = "".join(c for c in row if c.isalpha()).upper()
        got = "".join(c for c in by_name[name] if c.isalpha()).upper()
        if got != want:
            k = next((k for k, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            what = (f"residue {k} (0-based) is {got[k]!r} in the test and {want[k]!r} in the reference"
                    if k < min(len(got), len(want)) else f"it has {len(got)} residues in the test and {len(want)} "
                    "in the reference")
            raise InputError(f"{_name(test)}: row {name!r} is not the reference's sequence ({reference.source}): "
                             f"{what}")
    ref_names = set(reference.ids)
    return tuple(i for i in test.ids if i not in ref_names)


def score_alignment(test, reference: MSA, *, subset: bool = False) -> MsaScores:
    """Score ``test`` against ``reference`` (module docstring). Every reference row must be in
    ``test`` under its name with the same residues (case and gaps aside); test rows the
    reference lacks are ignored (listed in ``extra``).

    Args:
        test: the alignment to score: an :class:`~sinkalign.io.alignments.MSA` (as
            :func:`~sinkalign.io.alignments.read_alignment` reads it) or any alignment with
            ``ids`` and gapped ``rows``, such as the
            :class:`~sinkalign.align.msa.MultipleAlignment` that ``align_multiple`` returns.
        reference: the reference alignment, read from a file.
        subset: score against the reference's rows that ``test`` holds (at least two), for a
            test that aligned some of the family's sequences (the reference's own columns
            among those rows; TC over the columns where at least two of them have trusted
            residues). Without it a reference row that ``test`` lacks is an error.

    Raises :class:`~sinkalign.errors.InputError` naming the row and the residue that differ.
    """
    if subset:
        held = set(test.ids)
        keep = [k for k, name in enumerate(reference.ids) if name in held]
        if len(keep) < 2:
            raise InputError(f"{_name(test)} holds {len(keep)} of the rows of the reference {reference.source}: "
                             "scoring a subset needs two of them, under the reference's names")
        reference = dataclasses.replace(reference, ids=[reference.ids[k] for k in keep],
                                        rows=[reference.rows[k] for k in keep])
    extra = _check_same_sequences(test, reference)
    columns = {name: residue_columns(row) for name, row in zip(test.ids, test.rows)}  # each row parsed once
    scored = [columns[name] for name in reference.ids]
    if len(scored) > 1 and all(c.size for c in scored) and not any((c >= 0).any() for c in scored):
        log.warning("%s: every residue of its rows is lower case, and in %s (the Pfam/HMMER convention) lower case "
                    "marks insert residues, aligned to nothing: it aligns no pair and scores 0; upper-case the rows "
                    "if their case means nothing", _name(test),
                    "A2M" if getattr(test, "format", None) == "a2m" else "Stockholm")
    refs: list[ReferencePair] = msa_to_pairs(reference) if len(reference) > 1 else []
    pairs = []
    for ref in refs:
        pred = _pairs(columns[ref.query_id], columns[ref.target_id])
        scores: PairScores = core_pair_scores(pred, ref, zero_division=math.nan)  # 0 / 0: not 0
        pairs.append((ref.query_id, ref.target_id, percent_identity(ref), scores))
    return _summarised(pairs, _total_column(columns, reference), extra)


def _summarised(pairs: list, tc: tuple[int, int], extra: tuple[str, ...]) -> MsaScores:
    overall = {**micro_average([p[3] for p in pairs], zero_division=math.nan), "pairs": len(pairs)}
    ident = np.array([p[2] for p in pairs], np.float64)
    known = np.flatnonzero(np.isfinite(ident))
    by_identity = {}
    if known.size:
        bins = assign_identity_bins(ident[known])
        for b, label in enumerate(identity_bin_labels(IDENTITY_BINS)):
            members = known[bins == b]
            if members.size:
                by_identity[label] = {**micro_average([pairs[k][3] for k in members], zero_division=math.nan),
                                      "pairs": int(members.size)}
    return MsaScores(pairs, overall, by_identity, tc, extra)


def pooled(scores: list[MsaScores]) -> MsaScores:
    """Several families' scores as one set: every pair of rows pooled (micro averages, as
    ``sinkalign evaluate`` pools a reference set), TC over every reference column."""
    pairs = [p for s in scores for p in s.pairs]
    tc = (sum(s.tc[0] for s in scores), sum(s.tc[1] for s in scores))
    return _summarised(pairs, tc, tuple(e for s in scores for e in s.extra))
