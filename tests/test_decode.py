"""MEA decoding of transport plans, alignment layout, CIGAR and statistics."""

from __future__ import annotations

import itertools

import numpy as np
import pysam
import pytest

from sinkalign.align.decode import (
    Alignment,
    _gain,
    _mea_table,
    _traceback,
    alignment_columns,
    alignment_of_pairs,
    alignment_stats,
    check_pairs,
    cigar,
    identity_gain,
    keep_gaps,
    mea_align,
    mea_batch,
    mea_from_posteriors,
    pair_identity,
    plan_posteriors,
    to_gapped,
)


def all_monotone_alignments(m: int, n: int):
    """Every set of strictly increasing (i, j) pairs: C(m + n, m) of them."""
    for k in range(min(m, n) + 1):
        for rows in itertools.combinations(range(m), k):
            for cols in itertools.combinations(range(n), k):
                yield list(zip(rows, cols))


def objective(pairs, M, qg, tg, gap_weight):
    qi = {i for i, _ in pairs}
    tj = {j for _, j in pairs}
    total = sum(M[i, j] for i, j in pairs)
    q_gaps = sum(qg[i] for i in range(len(qg)) if i not in qi)
    t_gaps = sum(tg[j] for j in range(len(tg)) if j not in tj)
    total += gap_weight * (q_gaps + t_gaps)
    return total


def brute_force(M, qg, tg, gap_weight):
    m, n = M.shape
    return max(objective(p, M, qg, tg, gap_weight) for p in all_monotone_alignments(m, n))


def random_plan(rng, m, n, sharp=4.0):
    return rng.random((m + 1, n + 1)) ** sharp


# --------------------------------------------------------------------------- MEA optimality


def test_enumeration_counts_all_alignments():
    # The brute force must really be exhaustive: C(m + n, m) monotone alignments.
    for m, n in [(1, 1), (2, 3), (4, 4), (5, 5), (3, 5)]:
        assert sum(1 for _ in all_monotone_alignments(m, n)) == len(list(itertools.combinations(range(m + n), m)))


@pytest.mark.parametrize("gap_weight", [0.0, 0.5, 1.0, 2.0])
def test_mea_exact_optimum_matches_brute_force_dyadic(gap_weight):
    # Dyadic posteriors (k / 64) make every sum exact in float64, so the optimum must be
    # equal bit for bit, whatever the summation order.
    rng = np.random.default_rng(1234)
    for _ in range(60):
        m, n = rng.integers(1, 6, size=2)
        plan = rng.integers(0, 65, size=(m + 1, n + 1)) / 64.0
        aln = mea_align(plan, gap_weight=gap_weight, normalise="none")
        M, qg, tg = plan[:m, :n], plan[:m, n], plan[m, :n]
        best = brute_force(M, qg, tg, gap_weight)
        assert aln.score == best
        assert objective([tuple(p) for p in aln.pairs.tolist()], M, qg, tg, gap_weight) == best
        np.testing.assert_array_equal(aln.match_posterior, M[aln.pairs[:, 0], aln.pairs[:, 1]])


def test_mea_optimum_matches_brute_force_row_normalised():
    rng = np.random.default_rng(7)
    for _ in range(60):
        m, n = rng.integers(1, 6, size=2)
        plan = random_plan(rng, m, n)
        gw = float(rng.choice([0.0, 0.3, 1.0]))
        post = plan_posteriors(plan)
        aln = mea_align(plan, gap_weight=gw)
        best = brute_force(post.match, post.query_gap, post.target_gap, gw)
        assert aln.score == pytest.approx(best, rel=0, abs=1e-12)
        got = objective([tuple(p) for p in aln.pairs.tolist()], post.match, post.query_gap, post.target_gap, gw)
        assert got == pytest.approx(best, rel=0, abs=1e-12)


def test_expected_accuracy_definition():
    rng = np.random.default_rng(3)
    plan = random_plan(rng, 6, 4, sharp=2.0)
    aln = mea_align(plan, gap_weight=0.7)
    post = plan_posteriors(plan)
    q_un = np.setdiff1d(np.arange(6), aln.pairs[:, 0])
    t_un = np.setdiff1d(np.arange(4), aln.pairs[:, 1])
    expect = (2 * aln.match_posterior.sum() + post.query_gap[q_un].sum() + post.target_gap[t_un].sum()) / 10
    assert aln.expected_accuracy == pytest.approx(expect, abs=1e-14)
    assert 0.0 <= aln.expected_accuracy <= 1.0


def test_alignment_of_pairs_is_the_mea_alignment_of_its_pairs_and_of_any_subset():
    rng = np.random.default_rng(5)
    plan = random_plan(rng, 7, 5, sharp=2.0)
    post = plan_posteriors(plan)
    for gw in (0.0, 0.7):
        aln = mea_align(plan, gap_weight=gw)
        same = alignment_of_pairs(aln.pairs, aln.match_posterior, post.query_gap, post.target_gap, gap_weight=gw)
        np.testing.assert_array_equal(same.pairs, aln.pairs)
        assert same.score == pytest.approx(aln.score, abs=1e-14)
        assert same.expected_accuracy == pytest.approx(aln.expected_accuracy, abs=1e-14)
        sub = aln.pairs[::2]  # a subset: its objective and accuracy computed afresh
        part = alignment_of_pairs(sub, post.match[sub[:, 0], sub[:, 1]], post.query_gap, post.target_gap,
                                  gap_weight=gw)
        q_un = np.setdiff1d(np.arange(7), sub[:, 0])
        t_un = np.setdiff1d(np.arange(5), sub[:, 1])
        gaps = post.query_gap[q_un].sum() + post.target_gap[t_un].sum()
        assert part.score == pytest.approx(post.match[sub[:, 0], sub[:, 1]].sum() + gw * gaps, abs=1e-14)
        assert part.expected_accuracy == pytest.approx(
            (2 * post.match[sub[:, 0], sub[:, 1]].sum() + gaps) / 12, abs=1e-14)
    empty = alignment_of_pairs(np.zeros((0, 2), np.int64), np.zeros(0), post.query_gap, post.target_gap)
    assert empty.score == 0.0 and len(empty.pairs) == 0


# --------------------------------------------------------------------------- known cases


def test_diagonal_plan_gives_identity_alignment():
    m = 7
    plan = np.full((m + 1, m + 1), 1e-4)
    plan[np.arange(m), np.arange(m)] = 1.0
    aln = mea_align(plan)
    np.testing.assert_array_equal(aln.pairs, np.stack([np.arange(m)] * 2, axis=1))
    assert aln.match_posterior.min() > 0.99
    assert aln.expected_accuracy > 0.99


def test_shifted_diagonal_with_gaps_in_dustbin():
    # Query i sits opposite target i + 2; target residues 0, 1 are gaps, as are the last
    # two query residues (beyond the target's end).
    m, n = 6, 6
    plan = np.full((m + 1, n + 1), 1e-6)
    for i in range(m - 2):
        plan[i, i + 2] = 1.0
    plan[m, 0] = plan[m, 1] = 1.0
    plan[4, n] = plan[5, n] = 1.0
    aln = mea_align(plan)
    np.testing.assert_array_equal(aln.pairs, [[0, 2], [1, 3], [2, 4], [3, 5]])
    assert aln.query_gap_posterior[4] > 0.99 and aln.target_gap_posterior[0] > 0.99


def test_all_mass_in_dustbins_aligns_nothing():
    plan = np.zeros((5, 4))
    plan[:4, 3] = 1.0
    plan[4, :3] = 1.0
    plan[:4, :3] = 1e-3
    aln = mea_align(plan)
    assert aln.pairs.shape == (0, 2)
    assert aln.match_posterior.shape == (0,)
    assert np.isnan(aln.mean_posterior)
    # gap_weight 0 rewards any positive match, so the same plan now aligns min(m, n) pairs.
    assert mea_align(plan, gap_weight=0.0).pairs.shape == (3, 2)


def test_crossing_mass_picks_heavier_monotone_chain():
    # Query 0 -> target 2 (heavy) conflicts with query 1 -> target 0 and 2 -> 1 (two light).
    plan = np.full((4, 4), 1e-6)
    plan[0, 2] = 1.0
    plan[1, 0] = plan[2, 1] = 0.4
    post = plan_posteriors(plan, normalise="none")
    aln = mea_from_posteriors(post.match, post.query_gap, post.target_gap, gap_weight=0.0)
    np.testing.assert_array_equal(aln.pairs, [[0, 2]])
    plan[1, 0] = plan[2, 1] = 0.6
    aln = mea_align(plan, gap_weight=0.0, normalise="none")
    np.testing.assert_array_equal(aln.pairs, [[1, 0], [2, 1]])


def test_row_posteriors_geometric_mean_and_symmetry():
    rng = np.random.default_rng(5)
    plan = random_plan(rng, 5, 8)
    post = plan_posteriors(plan)
    R = plan[:5, :8]
    r = R.sum(1) + plan[:5, 8]
    c = R.sum(0) + plan[5, :8]
    np.testing.assert_allclose(post.match, np.sqrt((R / r[:, None]) * (R / c[None, :])), rtol=1e-14)
    np.testing.assert_allclose(post.query_gap, plan[:5, 8] / r, rtol=1e-14)
    # Row posteriors plus the gap posterior form a distribution over partners.
    np.testing.assert_allclose((R / r[:, None]).sum(1) + post.query_gap, 1.0, rtol=1e-14)
    swapped = plan_posteriors(plan.T)
    np.testing.assert_allclose(swapped.match, post.match.T, rtol=1e-14)
    np.testing.assert_allclose(swapped.query_gap, post.target_gap, rtol=1e-14)
    # A global rescaling changes nothing.
    a, b = mea_align(plan), mea_align(plan * 37.5)
    np.testing.assert_array_equal(a.pairs, b.pairs)
    assert a.score == pytest.approx(b.score, rel=1e-12)
    assert np.all((post.match >= 0) & (post.match <= 1))


def test_zero_mass_residue_gets_zero_posteriors():
    plan = np.ones((4, 4))
    plan[1, :] = 0.0
    post = plan_posteriors(plan)
    assert np.all(post.match[1] == 0) and post.query_gap[1] == 0
    aln = mea_align(plan)
    assert 1 not in aln.pairs[:, 0]


def test_accepts_jax_and_torch_arrays():
    rng = np.random.default_rng(0)
    plan = random_plan(rng, 9, 6)
    ref = mea_align(plan)
    import jax.numpy as jnp

    np.testing.assert_array_equal(mea_align(jnp.asarray(plan)).pairs, ref.pairs)
    torch = pytest.importorskip("torch")
    t = torch.tensor(plan, requires_grad=True)
    np.testing.assert_array_equal(mea_align(t).pairs, ref.pairs)


def test_single_residue_sequences():
    aln = mea_align(np.array([[0.9, 0.1], [0.1, 0.0]]))
    np.testing.assert_array_equal(aln.pairs, [[0, 0]])
    aln = mea_align(np.array([[0.1, 0.9], [0.9, 0.0]]))
    assert aln.pairs.shape == (0, 2)


def _tie_heavy_posteriors(rng, trial):
    m, n = (int(x) for x in rng.integers(0, 30, size=2))
    m, n = (1 if trial % 7 == 0 else m), (1 if trial % 11 == 0 else n)
    M = rng.random((m, n))
    kind = trial % 4
    if kind == 1:
        M = np.round(M, 1) * (rng.random((m, n)) < 0.5)  # many exact ties
    elif kind == 2:
        M = np.zeros((m, n))  # nothing to gain anywhere
    elif kind == 3:
        M = (rng.random((m, n)) < 0.1).astype(float)
    return M, rng.random(m), rng.random(n)


@pytest.mark.parametrize("gap_weight", [0.0, 0.3, 1.0])
def test_mea_batch_is_the_plain_dynamic_programme_bit_for_bit(gap_weight):
    """mea_batch (stacked DPs keeping only the moves, run-at-a-time traceback) against the
    plain row-by-row table and one-step traceback, on tie-heavy inputs of mixed shapes
    (including empty and length-1 sides) decoded together in one call."""
    rng = np.random.default_rng(int(gap_weight * 10))
    posts = [_tie_heavy_posteriors(rng, t) for t in range(120)]
    got = mea_batch(posts, gap_weight=gap_weight, slack=3.0)
    for (M, qg, tg), aln in zip(posts, got):
        S = _mea_table(_gain(M, qg, tg, gap_weight))
        np.testing.assert_array_equal(aln.pairs, _traceback(S))
        assert aln.score == float(S[-1, -1] + gap_weight * (qg.sum() + tg.sum()))
        single = mea_from_posteriors(M, qg, tg, gap_weight=gap_weight)
        np.testing.assert_array_equal(single.pairs, aln.pairs)
        np.testing.assert_array_equal(single.match_posterior, aln.match_posterior)
        assert single.expected_accuracy == aln.expected_accuracy
    with pytest.raises(ValueError, match="gap_weight=-1.0 must be finite and >= 0"):
        mea_batch(posts, gap_weight=-1.0)


def test_both_dynamic_programmes_give_the_plain_tables_moves_on_a_padded_stack():
    """By rows and by anti-diagonals, on a stack whose padding holds large values (which must
    never reach a pair's own cells)."""
    from sinkalign.align.decode import _mea_moves_diagonals, _mea_moves_rows, _trace_moves

    rng = np.random.default_rng(8)
    shapes = [(1, 1), (1, 9), (9, 1), (17, 23), (23, 17), (30, 30)]
    W = np.full((len(shapes), 30, 30), 5.0)
    for b, (m, n) in enumerate(shapes):
        W[b, :m, :n] = np.round(rng.random((m, n)), 1) * (rng.random((m, n)) < 0.6)
    for run in (_mea_moves_rows, _mea_moves_diagonals):
        moves = run(W, shapes)
        for b, (m, n) in enumerate(shapes):
            S = _mea_table(W[b, :m, :n])
            assert moves.best[b] == S[m, n]
            got = _trace_moves(moves.buf, moves.si, moves.sj, moves.base(b), m, n)
            np.testing.assert_array_equal(got, _traceback(S), err_msg=f"{run.__name__} {m} x {n}")


def test_identity_gain_counts_only_canonical_residues():
    got = identity_gain("ACxXBa", "aXCBA", "protein")
    assert got.shape == (6, 5) and got.dtype == bool
    assert got.nonzero()[0].tolist() == [0, 0, 1, 5, 5] and got.nonzero()[1].tolist() == [0, 4, 2, 0, 4]
    dna = identity_gain("ACGUN", "TNacg", "dna")  # U is T; N matches nothing, not even N
    assert dna.nonzero()[0].tolist() == [0, 1, 2, 3] and dna.nonzero()[1].tolist() == [2, 3, 4, 0]
    with pytest.raises(ValueError, match="alphabet='rna' is not one of"):
        identity_gain("A", "A", "rna")
    assert pair_identity("ACDX", "ACEX", [[0, 0], [1, 1], [2, 2], [3, 3]]) == 0.5  # X is identical to nothing
    assert pair_identity("ACGT", "ACGU", [[3, 3]], "dna") == 1.0
    assert np.isnan(pair_identity("A", "A", np.zeros((0, 2))))


def test_mea_batch_bonus_breaks_a_tie_and_keeps_the_posteriors_objective():
    """Two chains of equal posterior sum (one target residue, either query residue); a bonus
    on one chain's cell picks it; without a bonus (None, or no list) the result is the plain
    one bit for bit; the score and posteriors are those of the posteriors alone."""
    M = np.array([[0.5], [0.5]])
    qg, tg = np.array([0.1, 0.2]), np.array([0.05])
    rng = np.random.default_rng(3)
    other = (rng.random((7, 6)) * (rng.random((7, 6)) < 0.5), rng.random(7) * 0.1, rng.random(6) * 0.1)
    plain = mea_batch([(M, qg, tg), other], gap_weight=0.0)
    for bonus in ([None, None], None):
        same = mea_batch([(M, qg, tg), other], gap_weight=0.0, bonus=bonus)
        for a, b in zip(same, plain):
            np.testing.assert_array_equal(a.pairs, b.pairs)
            assert a.score == b.score and a.expected_accuracy == b.expected_accuracy
    for row in (0, 1):
        bonus = np.zeros_like(M)
        bonus[row, 0] = 1e-3
        got = mea_batch([(M, qg, tg), other], gap_weight=0.0, bonus=[bonus, None])
        assert got[0].pairs.tolist() == [[row, 0]]
        ref = alignment_of_pairs(got[0].pairs, [0.5], qg, tg, gap_weight=0.0)
        assert got[0].score == ref.score == 0.5 and got[0].expected_accuracy == ref.expected_accuracy
        np.testing.assert_array_equal(got[0].match_posterior, [0.5])
        np.testing.assert_array_equal(got[1].pairs, plain[1].pairs)  # the other pair keeps its decoding
    with pytest.raises(ValueError, match="bonus has 1 entries for 2 pairs"):
        mea_batch([(M, qg, tg), other], bonus=[None])
    with pytest.raises(ValueError, match=r"bonus 0 must be finite with the match posteriors' shape \(2, 1\)"):
        mea_batch([(M, qg, tg), other], bonus=[np.zeros((1, 2)), None])
    with pytest.raises(ValueError, match="bonus 1 must be finite"):
        mea_batch([(M, qg, tg), other], bonus=[None, np.full((7, 6), np.nan)])


def test_mea_traceback_follows_long_runs_of_each_move():
    """A long gap in each sequence and long diagonal runs: the run-at-a-time traceback."""
    m, n = 60, 75
    M = np.zeros((m, n))
    truth = [(i, i) for i in range(20)] + [(i, i + 15) for i in range(20, 40)] + [(i + 20, i + 35) for i in range(20, 40)]
    for i, j in truth:
        M[i, j] = 0.9
    aln = mea_from_posteriors(M, np.zeros(m), np.zeros(n), gap_weight=0.0)
    assert aln.pairs.tolist() == [list(p) for p in truth]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "plan, match",
    [
        (np.ones(5), r"plan must have shape \[m\+1, n\+1\]"),
        (np.ones((1, 4)), r"m, n >= 1, got \(1, 4\)"),
        (np.array([[1.0, -0.5], [0.1, 0.1]]), r"non-negative, got plan\[0, 1\]=-0.5"),
        (np.array([[1.0, np.nan], [0.1, 0.1]]), r"finite, got plan\[0, 1\]=nan"),
    ],
)
def test_bad_plans_raise(plan, match):
    with pytest.raises(ValueError, match=match):
        mea_align(plan)


def test_bad_options_raise():
    plan = np.ones((3, 3))
    with pytest.raises(ValueError, match=r"normalise='col' is not one of \('row', 'none'\)"):
        mea_align(plan, normalise="col")
    with pytest.raises(ValueError, match=r"gap_weight=-1.0 must be finite and >= 0"):
        mea_align(plan, gap_weight=-1.0)
    with pytest.raises(ValueError, match=r"query_gap must have shape \[2\]"):
        mea_from_posteriors(np.ones((2, 2)), np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="match must be finite"):
        mea_from_posteriors(np.full((2, 2), np.inf), np.ones(2), np.ones(2))


@pytest.mark.parametrize(
    "pairs, match",
    [
        (np.zeros((3, 3), int), r"pairs must have shape \[k, 2\], got \(3, 3\)"),
        ([[0, 0], [1.5, 2]], "integer indices"),
        ([["a", "b"]], "integer indices, got dtype"),
        ([[0, 0], [-1, 2]], r"pairs\[1\]=\[-1, 2\] has a negative index"),
        ([[0, 0], [4, 1]], r"pairs\[1\]=\[4, 1\] is out of range for m \(query length\)=4"),
        ([[0, 0], [1, 5]], r"out of range for n \(target length\)=5"),
        (
            [[0, 1], [1, 1]],
            r"strictly increasing in both columns: pairs\[0\]=\[0, 1\] is followed by pairs\[1\]=\[1, 1\]",
        ),
        ([[2, 0], [1, 1]], "strictly increasing"),
    ],
)
def test_check_pairs_errors(pairs, match):
    with pytest.raises(ValueError, match=match):
        check_pairs(pairs, 4, 5)


def test_alignment_result_validation():
    with pytest.raises(ValueError, match=r"match_posterior must have shape \[1\]"):
        Alignment(np.array([[0, 0]]), np.ones(2), np.zeros(2), np.zeros(2), 0.0, 0.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        Alignment(np.array([[0, 0], [0, 1]]), np.ones(2), np.zeros(2), np.zeros(2), 0.0, 0.0)
    aln = Alignment(np.array([[0, 1]]), [0.5], np.zeros(2), np.zeros(3), 0.1, 0.2)
    with pytest.raises(ValueError, match="m=3 does not match the alignment's query length 2"):
        alignment_columns(aln, 3, 3)


# --------------------------------------------------------------------------- layout


def test_columns_gapped_cigar_known_example():
    pairs = np.array([[1, 0], [2, 2]])
    assert alignment_columns(pairs, 4, 3) == [(0, None), (1, 0), (None, 1), (2, 2), (3, None)]
    assert to_gapped("ABCD", "XYZ", pairs) == ("AB-CD", "-XYZ-")
    assert cigar(pairs, 4, 3) == "1I1M1D1M1I"
    assert cigar(pairs, 4, 3, local=True) == "1S1M1D1M1S"
    # Query-only columns come before target-only ones between pairs.
    q, t = to_gapped("ABC", "XYZW", np.array([[0, 0], [2, 3]]))
    assert (q, t) == ("AB--C", "X-YZW")


def test_empty_alignment_layout():
    empty = np.zeros((0, 2), int)
    assert to_gapped("AB", "XYZ", empty) == ("AB---", "--XYZ")
    assert cigar(empty, 2, 3) == "2I3D"
    assert cigar(empty, 2, 3, local=True) == "2S"


def test_local_cigar_agrees_with_pysam_aligned_pairs():
    # pysam (htslib) walks the CIGAR independently: its aligned pairs must be ours.
    rng = np.random.default_rng(11)
    header = pysam.AlignmentHeader.from_dict({"SQ": [{"SN": "t", "LN": 200}]})
    for _ in range(50):
        m, n = rng.integers(1, 40, size=2)
        k = int(rng.integers(1, min(m, n) + 1))
        pairs = np.stack([np.sort(rng.choice(m, k, replace=False)), np.sort(rng.choice(n, k, replace=False))], axis=1)
        seg = pysam.AlignedSegment(header)
        seg.query_name = "q"
        seg.query_sequence = "A" * m
        seg.reference_id = 0
        seg.reference_start = int(pairs[0, 1])
        seg.cigarstring = cigar(pairs, m, n, local=True)
        assert seg.infer_query_length() == m
        assert seg.get_aligned_pairs(matches_only=True) == [tuple(p) for p in pairs.tolist()]
        assert seg.reference_end == pairs[-1, 1] + 1
        # Global CIGAR consumes every residue of both sequences.
        ops = pysam.AlignedSegment(header)
        ops.cigarstring = cigar(pairs, m, n)
        lengths = {op: 0 for op in range(10)}
        for op, length in ops.cigartuples:
            lengths[op] += length
        assert lengths[0] + lengths[1] == m and lengths[0] + lengths[2] == n
        q, t = to_gapped("Q" * m, "T" * n, pairs)
        assert len(q) == len(t) and q.replace("-", "") == "Q" * m and t.replace("-", "") == "T" * n


def test_alignment_stats():
    pairs = np.array([[1, 0], [2, 1], [4, 3]])
    st = alignment_stats("MKVLA", "kvxa", pairs)
    assert st.aligned_length == 3 and st.n_identical == 3
    assert st.identity == pytest.approx(100.0)
    assert (st.query_start, st.query_end, st.target_start, st.target_end) == (1, 5, 0, 4)
    assert np.isnan(st.mean_posterior)
    st = alignment_stats("MKVLA", "KVXW", pairs)
    assert st.n_identical == 2 and st.identity == pytest.approx(200 / 3)
    aln = Alignment(pairs, [0.5, 0.7, 0.9], np.zeros(5), np.zeros(4), 0.5, 1.0)
    assert alignment_stats("MKVLA", "KVXW", aln).mean_posterior == pytest.approx(0.7)
    empty = alignment_stats("MK", "KV", np.zeros((0, 2), int))
    assert empty.aligned_length == 0 and np.isnan(empty.identity)
    with pytest.raises(ValueError, match="query must be an ASCII string"):
        alignment_stats("MKß", "KV", pairs[:1])


def _steps_broken(path: list) -> int:
    return sum((b[0] - a[0], b[1] - a[1]) != (1, 1) for a, b in zip(path, path[1:]))


def _keep_gaps_by_hand(plain, moved) -> list:
    """keep_gaps, one stretch at a time (the definition, written as a loop)."""
    P, T = [tuple(x) for x in np.asarray(plain).tolist()], [tuple(x) for x in np.asarray(moved).tolist()]
    shared = set(P) & set(T)
    out, i, j, before = [], 0, 0, []
    while i < len(P) or j < len(T):
        sp, st = [], []
        while i < len(P) and P[i] not in shared:
            sp.append(P[i])
            i += 1
        while j < len(T) and T[j] not in shared:
            st.append(T[j])
            j += 1
        after = [P[i]] if i < len(P) else []
        out += st if _steps_broken(before + st + after) <= _steps_broken(before + sp + after) else sp
        if after:
            out += after
            before = after
            i, j = i + 1, j + 1
    return out


def test_keep_gaps_moves_gaps_and_adds_none():
    diag = [(i, i) for i in range(8)]
    # a gap moved (one break each way): the moved decoding's
    plain = [(0, 0), (1, 1), (3, 2), (4, 3), (5, 4)]
    moved = [(0, 0), (1, 1), (2, 2), (4, 3), (5, 4)]
    assert keep_gaps(plain, moved).tolist() == [list(p) for p in moved]
    # two mismatches traded for a gap pair (two breaks where the plain has none): the plain's
    gapped = [(0, 0), (1, 1), (2, 3), (4, 4), (5, 5), (6, 6), (7, 7)]
    assert keep_gaps(diag, gapped).tolist() == [list(p) for p in diag]
    # both at once, in different stretches: each decided on its own
    plain2 = diag[:4] + [(5, 4), (6, 5), (7, 6), (8, 7), (9, 8)]
    moved2 = [(0, 0), (1, 2), (3, 3)] + [(4, 4), (6, 5), (7, 6), (8, 7), (9, 8)]
    got = keep_gaps(plain2, moved2).tolist()
    assert got == [[0, 0], [1, 1], [2, 2], [3, 3], [4, 4], [6, 5], [7, 6], [8, 7], [9, 8]]
    assert keep_gaps(np.zeros((0, 2)), np.zeros((0, 2))).shape == (0, 2)
    assert keep_gaps(np.zeros((0, 2)), diag).tolist() == [list(p) for p in diag]
    # random paths: the definition, a monotone result, each stretch no more broken than the plain's
    rng = np.random.default_rng(7)

    def path(m, n, p_diag):
        i = j = 0
        out = []
        while i < m and j < n:
            r = rng.random()
            if r < p_diag:
                out.append((i, j))
            i, j = i + (r < (1 + p_diag) / 2), j + (r < p_diag or r >= (1 + p_diag) / 2)
        return np.array(out, np.int64).reshape(-1, 2)

    for trial in range(400):
        m, n = rng.integers(0, 40, 2)
        plain = path(m, n, 0.9)
        moved = plain.copy() if trial % 3 == 0 else path(m, n, 0.85)
        if trial % 3 == 0 and len(moved) > 2:  # a local change of a shared path
            moved = np.delete(moved, rng.integers(1, len(moved) - 1), axis=0)
        got = keep_gaps(plain, moved)
        assert got.tolist() == [list(x) for x in _keep_gaps_by_hand(plain, moved)], (plain.tolist(), moved.tolist())
        assert np.all(np.diff(got, axis=0) > 0)
        assert _steps_broken([tuple(x) for x in got.tolist()]) <= _steps_broken([tuple(x) for x in plain.tolist()])
