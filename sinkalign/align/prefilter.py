"""A search prefilter: which targets of a query are worth the OT aligner.

Aligning a query against a large target set costs the aligner's per-pair time for every
target. ``sinkalign align Q.fasta T.fasta --prefilter N`` first scores the query against every
target with the Smith-Waterman score the E-values start from (striped SIMD, parasail; about
0.02 ms a pair of a few hundred residues against several ms for the learned model) and aligns
only the ``N`` targets that rank best, as BLAST's and MMseqs2's prefilters do before their
costlier stages. Targets are ranked by ``lambda S - ln n``: the SW score in nats
(:func:`sinkalign.align.significance.local_nats`, the composition-adjusted Karlin-Altschul
lambda; computed with the query's SIMD profile built once and every target's lambda solved
together) less the log of the target's length, which orders one query's targets as the
Karlin-Altschul E-values ``K m n exp(-lambda S)`` of the SW score alone would. Nucleotide
queries are scored on the strands the aligner will search (the better of the two for ``both``).
``benchmarks/search_prefilter.py`` measures what it keeps and what it costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sinkalign.align.baselines import Scoring, local_scores
from sinkalign.align.calibration import _baseline_letters
from sinkalign.align.significance import composition_lambdas
from sinkalign.alignment import reverse_complement
from sinkalign.errors import InputError

__all__ = ["best_targets", "prefilter_scores"]

STRANDS = ("plus", "minus", "both")


def prefilter_scores(query: str, targets: Sequence[str], *, kind: str = "protein", strand: str = "plus") -> np.ndarray:
    """``float64 [len(targets)]``: each target's ``lambda S - ln n`` against ``query`` (larger
    ranks better). ``strand`` (``kind="dna"`` only): score the query as given (``plus``), its
    reverse complement (``minus``) or the better of the two (``both``)."""
    if strand not in STRANDS:
        raise InputError(f"strand={strand!r} is not one of {STRANDS}")
    if strand != "plus" and kind != "dna":
        raise InputError(f"strand={strand!r}: strands are for nucleotide sequences")
    queries = {"plus": [query], "minus": [reverse_complement(query)],
               "both": [query, reverse_complement(query)]}[strand]
    cleaned = [_baseline_letters(t, kind) for t in targets]
    nats = [local_scores(q, cleaned, scoring=Scoring.default(kind)) * composition_lambdas(q, cleaned, kind=kind)
            for q in (_baseline_letters(q, kind) for q in queries)]
    return np.max(nats, axis=0) - np.log(np.maximum([len(t) for t in targets], 1))


def best_targets(query: str, targets: Sequence[str], keep: int, *, kind: str = "protein",
                 strand: str = "plus") -> np.ndarray:
    """Indices of the ``keep`` targets of :func:`prefilter_scores` that rank best, in input
    order (ties go to the earlier target); every index when ``keep >= len(targets)``."""
    if keep < 1:
        raise InputError(f"keep={keep} must be >= 1")
    if keep >= len(targets):
        return np.arange(len(targets))
    scores = prefilter_scores(query, targets, kind=kind, strand=strand)
    order = np.lexsort((np.arange(len(targets)), -scores))  # best first, the earlier target on a tie
    return np.sort(order[:keep])
