"""Needleman-Wunsch / Smith-Waterman baselines: parasail vs Biopython, gap convention, errors."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest

from sinkalign.align.baselines import (
    BACKENDS,
    METHODS,
    Scoring,
    align_pair,
    align_pairs,
    measure_throughput,
    score_pairs,
)
from sinkalign.align.decode import check_pairs
from sinkalign.errors import InputError

AMINO = "ARNDCQEGHILKMFPSTWYV"


def random_seq(rng, alphabet, lo=1, hi=90):
    return "".join(rng.choice(list(alphabet), int(rng.integers(lo, hi))))


def mutate(rng, seq, alphabet, rate=0.3):
    """A related sequence: substitutions, insertions and deletions."""
    out = []
    for letter in seq:
        u = rng.random()
        if u < rate / 3:
            continue
        if u < 2 * rate / 3:
            out.append(rng.choice(list(alphabet)))
        else:
            out.append(letter)
        if rng.random() < rate / 6:
            out.append(rng.choice(list(alphabet)))
    return "".join(out) or alphabet[0]


def check_both_backends(query, target, method, scoring):
    fast = align_pair(query, target, method, scoring=scoring)
    ref = align_pair(query, target, method, scoring=scoring, backend="biopython")
    assert fast.score == ref.score, (query, target, method)
    for res in (fast, ref):
        check_pairs(res.pairs, len(query), len(target))
        # The returned pairs really achieve the optimal score.
        assert score_pairs(query, target, res.pairs, method=method, scoring=scoring) == res.score
    return fast


# --------------------------------------------------------------------------- gap convention


def test_gap_convention_hand_computed_protein():
    # Smith-Waterman, BLOSUM62, open 11 / extend 1: AW-HE = A/A 4 + W/W 11 + H/H 8 + E/E 5
    # minus one 1-residue gap costing 11 (our convention) = 17. BLAST's existence 11 would
    # charge 12 for that gap (score 16).
    for backend in BACKENDS:
        res = align_pair("HEAGAWGHEE", "PAWHEAE", "sw", backend=backend)
        assert res.score == 17
    assert score_pairs("HEAGAWGHEE", "PAWHEAE", [[4, 1], [5, 2], [7, 3], [8, 4]], method="sw") == 17
    blast = Scoring.from_blast("protein", 11, 1)
    assert (blast.gap_open, blast.gap_extend) == (12, 1)
    assert score_pairs("HEAGAWGHEE", "PAWHEAE", [[4, 1], [5, 2], [7, 3], [8, 4]], method="sw", scoring=blast) == 16
    # Global: HEAGAWGHEE / ---PAWHEAE, one 3-residue end gap = 11 + 2 * 1 = 13.
    res = align_pair("HEAGAWGHEE", "PAWHEAE", "nw")
    np.testing.assert_array_equal(res.pairs, [[3, 0], [4, 1], [5, 2], [6, 3], [7, 4], [8, 5], [9, 6]])
    # G/P -2, A/A 4, W/W 11, G/H -2, H/E 0, E/A -1, E/E 5 = 15; minus 13 = 2.
    assert res.score == 15 - 13 == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_gap_convention_hand_computed_dna(backend):
    dna = Scoring.dna()  # +2 / -3, open 5, extend 2
    # g-residue gap against a run of A: (5 - g) matches * 2 - (5 + 2 (g - 1)).
    for g, expect in [(1, 3), (2, -1), (3, -5)]:
        res = align_pair("AAAAA", "A" * (5 - g), "nw", scoring=dna, backend=backend)
        assert res.score == expect
    blastn = Scoring.from_blast("dna", 5, 2)
    assert align_pair("AAAAA", "AAAA", "nw", scoring=blastn, backend=backend).score == 8 - 7


# --------------------------------------------------------------------------- parasail == Biopython


@pytest.mark.parametrize("method", METHODS)
def test_random_protein_scores_match_biopython(method):
    rng = np.random.default_rng(42)
    scoring = Scoring.protein()
    for _ in range(60):
        q = random_seq(rng, AMINO)
        t = mutate(rng, q, AMINO) if rng.random() < 0.5 else random_seq(rng, AMINO)
        check_both_backends(q, t, method, scoring)


@pytest.mark.parametrize("method", METHODS)
def test_random_dna_scores_match_biopython(method):
    rng = np.random.default_rng(43)
    scoring = Scoring.dna()
    for _ in range(60):
        q = random_seq(rng, "ACGT")
        t = mutate(rng, q, "ACGT") if rng.random() < 0.5 else random_seq(rng, "ACGTN")
        check_both_backends(q.lower() if rng.random() < 0.2 else q, t, method, scoring)


def test_other_gap_costs_match_biopython():
    rng = np.random.default_rng(44)
    for scoring in (Scoring.protein(10, 2), Scoring.protein(5, 5), Scoring.protein(0, 0), Scoring.dna(1, -1, 3, 1)):
        alphabet = AMINO if scoring.kind == "protein" else "ACGT"
        for method in METHODS:
            for _ in range(10):
                q = random_seq(rng, alphabet, 5, 60)
                check_both_backends(q, mutate(rng, q, alphabet), method, scoring)


@pytest.mark.shared_data
def test_real_protein_pairs_match_biopython(shared_data):
    with open(shared_data / "tmalign_pairs" / "valid.tsv", newline="") as handle:
        rows = list(itertools.islice(csv.reader(handle, delimiter="\t"), 25))
    for row in rows:
        q, t = row[5], row[6]
        for method in METHODS:
            check_both_backends(q, t, method, Scoring.protein())


@pytest.mark.shared_data
def test_real_dna_pairs_match_biopython(shared_data):
    from Bio import AlignIO

    msa = AlignIO.read(shared_data / "pfam_seed" / "MADE1_dfam_dna.sto", "stockholm")
    seqs = [str(r.seq).replace("-", "").replace(".", "").upper() for r in msa][:8]
    for q, t in itertools.combinations(seqs, 2):
        for method in METHODS:
            res = check_both_backends(q, t, method, Scoring.dna())
            if method == "sw":
                assert res.pairs.shape[0] > 20  # MADE1 copies are homologous


def test_non_vectorised_parasail_fallback_is_consistent():
    # The fallback used when a SIMD traceback misses its score: parasail's plain kernels,
    # whose CIGAR we decode with the same parser.
    import parasail

    from sinkalign.align.baselines import _pairs_from_cigar

    rng = np.random.default_rng(9)
    for _ in range(20):
        q = random_seq(rng, AMINO, 5, 60)
        t = mutate(rng, q, AMINO)
        for method, plain in (("nw", parasail.nw_trace), ("sw", parasail.sw_trace)):
            res = plain(q, t, 11, 1, parasail.blosum62)
            pairs = _pairs_from_cigar(res.cigar.decode, res.cigar.beg_query, res.cigar.beg_ref)
            assert res.score == align_pair(q, t, method).score
            assert score_pairs(q, t, pairs, method=method) == res.score


def test_saturating_16_bit_scores_fall_back_to_32_bit():
    # 3100 W/W matches score 34100 > 32767: the 16-bit kernel saturates.
    q = "W" * 3100
    for method in METHODS:
        res = align_pair(q, q, method)
        assert res.score == 11 * 3100
        np.testing.assert_array_equal(res.pairs, np.stack([np.arange(3100)] * 2, axis=1))


def test_no_positive_local_alignment_and_empty_sequences():
    for backend in BACKENDS:
        res = align_pair("W", "P", "sw", backend=backend)
        assert res.score == 0 and res.pairs.shape == (0, 2)
        # W/P substitution (-4) beats two 1-residue gaps (-22).
        assert align_pair("W", "P", "nw", backend=backend).score == -4
    res = align_pair("", "ACDE", "nw")
    assert res.score == -(11 + 3) and res.pairs.shape == (0, 2)
    assert align_pair("ACDE", "", "sw").score == 0


# --------------------------------------------------------------------------- batch, timing, errors


def test_align_pairs_in_order_and_throughput():
    rng = np.random.default_rng(5)
    seqs = [(random_seq(rng, AMINO, 20, 60), random_seq(rng, AMINO, 20, 60)) for _ in range(12)]
    out = align_pairs(seqs, "sw")
    assert [r.score for r in out] == [align_pair(q, t, "sw").score for q, t in seqs]
    tp = measure_throughput(seqs, "nw", repeats=2)
    assert tp.n_pairs == 12 and tp.cells == sum(len(q) * len(t) for q, t in seqs)
    assert tp.seconds > 0 and tp.pairs_per_second == pytest.approx(12 / tp.seconds)
    assert tp.gcups == pytest.approx(tp.cells / tp.seconds / 1e9)


def test_errors():
    with pytest.raises(ValueError, match=r"method='blast' is not one of \('nw', 'sw'\)"):
        align_pair("A", "A", "blast")
    with pytest.raises(ValueError, match=r"backend='ssw' is not one of \('parasail', 'biopython'\)"):
        align_pair("A", "A", backend="ssw")
    with pytest.raises(InputError, match=r"target has '1' at position 2, outside the protein alphabet"):
        align_pair("ACD", "AC1")
    with pytest.raises(InputError, match=r"query has 'E' at position 1, outside the dna alphabet 'ACGTN'"):
        align_pair("AEG", "ACG", scoring=Scoring.dna())
    with pytest.raises(ValueError, match="query must be a str"):
        align_pair(b"ACD", "ACD")
    with pytest.raises(ValueError, match=r"pair 1: target has '1' at position 0"):
        align_pairs([("AC", "AC"), ("AC", "1C")])
    with pytest.raises(ValueError, match=r"pair 0 must be a \(query, target\) tuple"):
        align_pairs(["ACD"])
    with pytest.raises(ValueError, match=r"kind='rna' is not one of \('protein', 'dna'\)"):
        Scoring("rna")
    with pytest.raises(ValueError, match="gap_open=-1 must be >= 0"):
        Scoring.protein(-1, 1)
    with pytest.raises(ValueError, match=r"gap_extend=1.5 must be an integer"):
        Scoring.protein(11, 1.5)
    with pytest.raises(ValueError, match="match=-2 and mismatch=-3 must satisfy match > 0 > mismatch"):
        Scoring.dna(-2, -3)
    with pytest.raises(ValueError, match="repeats=0 must be a positive integer"):
        measure_throughput([("A", "A")], repeats=0)
    with pytest.raises(ValueError, match="pairs is empty"):
        measure_throughput([])


def test_letters_without_a_row_are_read_as_another():
    """The baselines take what the FASTA reader and the aligner take: a protein's U
    (selenocysteine), O (pyrrolysine) and J score as X; a nucleotide's U as T and its IUPAC
    ambiguity codes as N (the scores of the letters they are read as, any case)."""
    for method in ("nw", "sw"):
        for odd, read in (("MKUVLO", "MKXVLX"), ("ACJDE", "ACXDE")):
            assert align_pair(odd, "MKCVLK", method).score == align_pair(read, "MKCVLK", method).score
        dna = Scoring.dna()
        assert align_pair("acgu", "ACGT", method, scoring=dna).score == align_pair("ACGT", "ACGT", method,
                                                                                   scoring=dna).score
        assert align_pair("ACRYKMSWBDHVG", "ACGTACGTACGTG", method, scoring=dna).score == align_pair(
            "ACNNNNNNNNNNG", "ACGTACGTACGTG", method, scoring=dna).score


def test_default_scoring_of_each_kind():
    from sinkalign.align.baselines import Scoring

    assert Scoring.default("protein") == Scoring.protein() == Scoring("protein", 11, 1)
    assert Scoring.default("dna") == Scoring.dna() == Scoring("dna", 5, 2, 2, -3)
    with pytest.raises(ValueError, match="kind='rna' is not one of"):
        Scoring.default("rna")
