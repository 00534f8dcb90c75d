"""Probabilistic Needleman-Wunsch (affine pair-HMM): log Z against enumeration of every
alignment, posteriors against finite differences and marginals, the large-lam limit against
parasail's Needleman-Wunsch, decoding, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sinkalign.align.baselines import Scoring, align_pair, score_pairs
from sinkalign.align.pairhmm import (
    log_partition,
    match_posteriors,
    pairhmm_align,
    pairhmm_posteriors,
)

AMINO = "ARNDCQEGHILKMFPSTWYV"


def gotoh_paths(m, n):
    """Every Gotoh path from (0, 0) to (m, n) as a string over M (match), X (query gap),
    Y (target gap): independent of the scan, by plain enumeration."""
    out = []

    def walk(i, j, path):
        if i == m and j == n:
            out.append(path)
            return
        if i < m and j < n:
            walk(i + 1, j + 1, path + "M")
        if i < m:
            walk(i + 1, j, path + "X")
        if j < n:
            walk(i, j + 1, path + "Y")

    walk(0, 0, "")
    return out


def path_log_weight(path, s, go, ge):
    i = j = 0
    total, prev = 0.0, "M"
    for op in path:
        if op == "M":
            total += s[i, j]
            i, j = i + 1, j + 1
        else:
            total -= ge if op == prev else go
            i, j = (i + 1, j) if op == "X" else (i, j + 1)
        prev = op
    return total


def brute(s, go, ge):
    """(log Z, match posteriors) by summing over every path."""
    m, n = s.shape
    paths = gotoh_paths(m, n)
    w = np.array([path_log_weight(p, s, go, ge) for p in paths])
    logz = np.logaddexp.reduce(w)
    post = np.zeros((m, n))
    for p, lw in zip(paths, w):
        i = j = 0
        for op in p:
            if op == "M":
                post[i, j] += math.exp(lw - logz)
                i, j = i + 1, j + 1
            elif op == "X":
                i += 1
            else:
                j += 1
    return logz, post


SHAPES = [(1, 1), (1, 4), (4, 1), (2, 3), (3, 3), (4, 5), (5, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_log_partition_and_posteriors_match_enumeration(shape):
    rng = np.random.default_rng(sum(shape))
    s = rng.normal(scale=1.5, size=shape)
    go, ge = 1.3, 0.4
    logz, post = brute(s, go, ge)
    assert log_partition(s, go, ge) == pytest.approx(logz, rel=0, abs=1e-12)
    np.testing.assert_allclose(match_posteriors(s, go, ge), post, rtol=0, atol=1e-12)


def test_posteriors_are_the_gradient_of_log_partition():
    rng = np.random.default_rng(3)
    s = rng.normal(size=(7, 9))
    go, ge = 2.0, 0.5
    post = match_posteriors(s, go, ge)
    h = 1e-6
    for i, j in [(0, 0), (3, 4), (6, 8), (2, 7)]:
        e = np.zeros_like(s)
        e[i, j] = h
        fd = (log_partition(s + e, go, ge) - log_partition(s - e, go, ge)) / (2 * h)
        assert post[i, j] == pytest.approx(fd, abs=1e-7)


def test_posteriors_are_probabilities_and_symmetric_under_swap():
    rng = np.random.default_rng(4)
    s = rng.normal(scale=2.0, size=(70, 130))  # beyond one padding bucket on one side
    post = match_posteriors(s, 3.0, 0.7)
    assert post.shape == (70, 130)
    assert post.min() >= -1e-12
    assert post.sum(1).max() <= 1 + 1e-9 and post.sum(0).max() <= 1 + 1e-9
    np.testing.assert_allclose(match_posteriors(s.T, 3.0, 0.7), post.T, rtol=0, atol=1e-12)
    assert log_partition(s.T, 3.0, 0.7) == pytest.approx(log_partition(s, 3.0, 0.7), abs=1e-9)


def test_empty_side_is_one_gap():
    assert log_partition(np.zeros((0, 4)), 2.0, 0.5) == pytest.approx(-(2.0 + 3 * 0.5))
    assert log_partition(np.zeros((0, 0)), 2.0, 0.5) == 0.0
    assert match_posteriors(np.zeros((3, 0)), 2.0, 0.5).shape == (3, 0)


def related(rng, length):
    a = "".join(rng.choice(list(AMINO), length))
    b = []
    for letter in a:
        u = rng.random()
        if u < 0.1:
            continue
        b.append(rng.choice(list(AMINO)) if u < 0.35 else letter)
        if rng.random() < 0.05:
            b.append(rng.choice(list(AMINO)))
    return a, "".join(b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_large_lam_limit_is_needleman_wunsch(seed):
    """log Z / lam -> the Needleman-Wunsch score (parasail) and the MEA pairs -> NW's pairs."""
    rng = np.random.default_rng(seed)
    q, t = related(rng, 40 + 17 * seed)
    scoring = Scoring.protein()
    nw = align_pair(q, t, "nw", scoring=scoring)
    lam = 40.0
    from sinkalign.align.pairhmm import _scores  # the substitution table the model uses

    logz = log_partition(lam * _scores(q, t, scoring), lam * 11, lam * 1)
    # Z >= exp(lam * best) and Z <= (#paths) exp(lam * best): the gap is log(#paths) / lam
    assert nw.score <= logz / lam <= nw.score + (len(q) + len(t)) * math.log(3) / lam
    aln = pairhmm_align(q, t, scoring=scoring, lam=lam)
    assert score_pairs(q, t, aln.pairs, method="nw", scoring=scoring) == nw.score


def test_pairhmm_align_is_an_mea_alignment_of_its_posteriors():
    rng = np.random.default_rng(7)
    q, t = related(rng, 60)
    post = pairhmm_posteriors(q, t)
    aln = pairhmm_align(q, t)
    p = aln.pairs
    assert np.all(np.diff(p[:, 0]) > 0) and np.all(np.diff(p[:, 1]) > 0)
    np.testing.assert_allclose(aln.match_posterior, post[p[:, 0], p[:, 1]])
    np.testing.assert_allclose(aln.query_gap_posterior, 1 - post.sum(1))
    assert aln.score == pytest.approx(post[p[:, 0], p[:, 1]].sum())
    # lower-case input is the same sequence
    np.testing.assert_array_equal(pairhmm_align(q.lower(), t).pairs, p)


def test_pairhmm_threshold_is_mac_by_enumeration():
    """With a threshold the pairs maximise sum(P - threshold) over monotone chains: checked
    against every monotone chain of a small problem; posteriors stay the plain ones."""
    import itertools

    rng = np.random.default_rng(3)
    q, t = related(rng, 7)
    post = pairhmm_posteriors(q, t)
    m, n = post.shape
    for tau in (0.2, 0.5, 0.9):
        aln = pairhmm_align(q, t, threshold=tau)
        best = 0.0  # the empty chain
        for k in range(1, min(m, n) + 1):
            for rows in itertools.combinations(range(m), k):
                for cols in itertools.combinations(range(n), k):
                    best = max(best, sum(post[i, j] - tau for i, j in zip(rows, cols)))
        got = sum(post[i, j] - tau for i, j in aln.pairs)
        assert got == pytest.approx(best, abs=1e-12)
        assert np.all(post[aln.pairs[:, 0], aln.pairs[:, 1]] > tau - 1e-12)
        np.testing.assert_allclose(aln.match_posterior, post[aln.pairs[:, 0], aln.pairs[:, 1]])
        assert aln.score == pytest.approx(aln.match_posterior.sum())
    assert len(pairhmm_align(q, t, threshold=0.9).pairs) <= len(pairhmm_align(q, t, threshold=0.2).pairs)
    with pytest.raises(ValueError, match=r"threshold=1.0 must be in \[0, 1\)"):
        pairhmm_align(q, t, threshold=1.0)


def test_dna_scoring():
    post = pairhmm_posteriors("ACGTACGT", "ACGACGT", scoring=Scoring.dna(), lam=1.0)
    assert post.shape == (8, 7)
    assert post[0, 0] > 0.9 and post[7, 6] > 0.9


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: pairhmm_posteriors("ACD#", "ACD"), "query has '#' at position 3"),
        (lambda: pairhmm_posteriors("ACD", "AC1"), "target has '1' at position 2"),
        (lambda: pairhmm_posteriors("ACD", "ACD", lam=0.0), "lam=0.0 must be finite and > 0"),
        (lambda: match_posteriors(np.zeros(3), 1.0, 1.0), r"scores must be \[m, n\]"),
        (lambda: match_posteriors(np.full((2, 2), np.nan), 1.0, 1.0), "4 non-finite"),
        (lambda: log_partition(np.zeros((2, 2)), -1.0, 1.0), "gap_open=-1.0 must be finite and >= 0"),
        (lambda: log_partition(np.zeros((2, 2)), 1.0, float("inf")), "gap_extend=inf"),
        (lambda: log_partition(np.zeros((4097, 1)), 1.0, 1.0), "longer than 4096 are not supported"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_enumeration_counts_gotoh_paths():
    """The brute force itself: paths are counted by the Delannoy numbers D(m, n)."""
    assert sorted(gotoh_paths(1, 1)) == ["M", "XY", "YX"]
    assert [len(gotoh_paths(k, k)) for k in (2, 3, 4)] == [13, 63, 321]
    assert len(gotoh_paths(2, 3)) == 25


def test_evaluate_runs_the_pairhmm_baseline_with_the_benchmarked_settings():
    from sinkalign.align.evaluate import PAIRHMM_DNA, PAIRHMM_PROTEIN, _pairhmm_pairs
    from sinkalign.io.alignments import ReferencePair

    assert PAIRHMM_PROTEIN == {"lam": 0.2, "gap_open": 24, "gap_extend": 2, "threshold": 0.4}
    # the DNA temperature is +2/-3's own log-odds scale: sum p_a p_b exp(lam s_ab) = 1 at uniform p
    lam = PAIRHMM_DNA["lam"]
    assert 0.25 * np.exp(2 * lam) + 0.75 * np.exp(-3 * lam) == pytest.approx(1.0, abs=1e-12)
    prot = ReferencePair("q", "t", "MKVLAAGHWERTYLLKPQ", "MKILSAGHWERTLLKPQ", np.zeros((0, 2), dtype=np.int64))
    want = pairhmm_align(prot.query_seq, prot.target_seq, scoring=Scoring.protein(24, 2), lam=0.2, threshold=0.4)
    np.testing.assert_array_equal(_pairhmm_pairs(prot), want.pairs)
    dna = ReferencePair("a", "b", "ACGTTGCAACGTAGGCTA", "ACGTGCAACGTTAGGCTA", np.zeros((0, 2), dtype=np.int64))
    want = pairhmm_align(dna.query_seq, dna.target_seq, scoring=Scoring.dna(gap_open=5, gap_extend=2), lam=lam,
                         threshold=0.4)
    np.testing.assert_array_equal(_pairhmm_pairs(dna), want.pairs)
    assert len(want.pairs) > 10
