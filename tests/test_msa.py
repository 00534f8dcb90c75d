"""Multiple sequence alignment from pairwise posteriors (:mod:`sinkalign.align.msa`, ProbCons'
recipe): each step against a plain reference (dense numpy, loops over residues, brute-force
enumeration, a hand-written UPGMA), in float64, over awkward shapes (length-1 sequences, very
unequal lengths, one sequence, two sequences)."""

from __future__ import annotations

import io
import itertools
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from Bio import AlignIO, Phylo, SeqIO
from Bio.Seq import Seq
from Bio.SeqRecord import SeqRecord

import sinkalign
from sinkalign.align.aligner import Aligner
from sinkalign.align.decode import mea_from_posteriors
from sinkalign.align.msa import (
    MIN_POSTERIOR,
    MsaCalibration,
    MultipleAlignment,
    _column_scores,
    _mea,
    _merge,
    _newick,
    _Profile,
    align_multiple,
    aligner_posteriors,
    calibration_samples,
    clustal_consensus,
    confidences,
    consistency_transform,
    fit_msa_calibration,
    function_posteriors,
    guide_tree,
    library_aligner,
    pp_code,
    progressive,
    refine,
    sum_of_pairs,
)
from sinkalign.errors import InputError

EXAMPLES = Path(sinkalign.__file__).resolve().parent / "data" / "examples"
PROTEIN = "ACDEFGHIKLMNPQRSTVWY"
TOL = 1e-12

# sequence lengths of the random multiple-alignment cases: one and two sequences, length 1,
# very unequal lengths, many equal ones
SHAPES = [
    [1],
    [9],
    [1, 1],
    [1, 30],
    [30, 1],
    [6, 6],
    [1, 1, 1],
    [5, 1, 9],
    [2, 25, 3],
    [7, 3, 12, 1],
    [4, 4, 4, 4, 4],
    [2, 25, 3, 1, 6],
    [8, 1, 8, 1, 8, 1],
]


# ----------------------------------------------------------------------------- helpers

def random_posterior(rng: np.random.Generator, m: int, n: int, density: float = 0.5) -> np.ndarray:
    """``[m, n]`` in ``[0, 1]``, about ``density`` of it nonzero, many entries small (cubed
    uniforms), some of them below :data:`MIN_POSTERIOR`."""
    M = rng.random((m, n)) ** 3
    M[rng.random((m, n)) >= density] = 0.0
    return M


def cut(M: np.ndarray) -> np.ndarray:
    return np.where(M >= MIN_POSTERIOR, M, 0.0)


def random_seqs(rng: np.random.Generator, lengths) -> list[str]:
    return ["".join(rng.choice(list(PROTEIN), size=L)) for L in lengths]


def random_dense_posts(rng: np.random.Generator, lengths, density: float = 0.5) -> dict:
    n = len(lengths)
    return {(x, y): random_posterior(rng, lengths[x], lengths[y], density) for x in range(n) for y in range(x + 1, n)}


def sparse_posts(dense: dict) -> dict:
    """The posteriors as :func:`function_posteriors` keeps them: entries below the cutoff dropped."""
    return {k: sp.csr_matrix(cut(M)) for k, M in dense.items()}


def dense_of(posts: dict) -> dict:
    return {k: P.toarray() for k, P in posts.items()}


def get(dense: dict, x: int, y: int) -> np.ndarray:
    return dense[(x, y)] if x < y else dense[(y, x)].T


def hashed_posterior(q: str, t: str) -> np.ndarray:
    """A posterior matrix that is a deterministic function of the two sequences."""
    rng = np.random.default_rng(zlib.crc32(f"{q}|{t}".encode()))
    return random_posterior(rng, len(q), len(t))


def cols_of_rows(rows) -> dict[int, np.ndarray]:
    """The column of every residue of each gapped row."""
    return {x: np.flatnonzero(np.frombuffer(row.encode("ascii"), np.uint8) != ord("-")) for x, row in enumerate(rows)}


def induced_pairs(row_x: str, row_y: str) -> np.ndarray:
    """``[k, 2]``: the residue pairs that two gapped rows put in one column."""
    out, i, j = [], 0, 0
    for a, b in zip(row_x, row_y):
        if a != "-" and b != "-":
            out.append((i, j))
        i += a != "-"
        j += b != "-"
    return np.asarray(out, np.int64).reshape(-1, 2)


def all_matchings(m: int, n: int):
    """Every set of strictly increasing pairs ``(i, j)``, ``i < m``, ``j < n``."""
    for k in range(min(m, n) + 1):
        for rows in itertools.combinations(range(m), k):
            for cols in itertools.combinations(range(n), k):
                yield list(zip(rows, cols))


def random_profile(rng: np.random.Generator, members: list[int], width: int) -> _Profile:
    """A profile of ``members`` over ``width`` columns: each member's residues in strictly
    increasing columns, every member with a residue, no column empty."""
    while True:
        occupied = rng.random((len(members), width)) < 0.6
        if occupied.any(axis=0).all() and occupied.any(axis=1).all():
            break
    return _Profile(list(members), {x: np.flatnonzero(occupied[k]) for k, x in enumerate(members)}, width)


def random_profiles(rng: np.random.Generator):
    """Two profiles of disjoint (interleaved) members, widths 1..6, and dense posteriors of
    every pair of their sequences."""
    n_a, n_b = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    order = rng.permutation(n_a + n_b)
    members_a, members_b = sorted(order[:n_a].tolist()), sorted(order[n_a:].tolist())
    a = random_profile(rng, members_a, int(rng.integers(1, 7)))
    b = random_profile(rng, members_b, int(rng.integers(1, 7)))
    lengths = [0] * (n_a + n_b)
    for p in (a, b):
        for x, c in p.cols.items():
            lengths[x] = len(c)
    return a, b, random_dense_posts(rng, lengths, density=0.7)


def column_scores_reference(a: _Profile, b: _Profile, dense: dict) -> np.ndarray:
    S = np.zeros((a.width, b.width))
    for x in a.members:
        for y in b.members:
            P = get(dense, x, y)
            for i in range(P.shape[0]):
                for j in range(P.shape[1]):
                    S[a.cols[x][i], b.cols[y][j]] += P[i, j]
    return S / (len(a.members) * len(b.members))


def sum_of_pairs_reference(cols: dict, dense: dict) -> float:
    total = 0.0
    for (x, y), P in dense.items():
        for i in range(P.shape[0]):
            for j in range(P.shape[1]):
                if cols[x][i] == cols[y][j]:
                    total += P[i, j]
    return total


def check_alignment(cols: dict, lengths) -> int:
    """Every sequence's residues in strictly increasing columns, no column empty; the width."""
    assert sorted(cols) == list(range(len(lengths)))
    for x, L in enumerate(lengths):
        assert cols[x].shape == (L,)
        assert np.all(np.diff(cols[x]) > 0)
    used = np.unique(np.concatenate([cols[x] for x in range(len(lengths))]))
    width = int(used.size)
    np.testing.assert_array_equal(used, np.arange(width))
    return width


def check_msa(msa: MultipleAlignment, ids, seqs) -> None:
    assert isinstance(msa, MultipleAlignment)
    assert msa.ids == tuple(ids)
    assert len(msa.rows) == len(seqs)
    assert tuple(row.replace("-", "") for row in msa.rows) == tuple(seqs)
    width = len(msa.rows[0])
    assert all(len(row) == width for row in msa.rows)
    assert msa.n_columns == width
    for c in range(width):
        assert any(row[c] != "-" for row in msa.rows), f"column {c} is all gaps"
    tree = Phylo.read(io.StringIO(msa.tree), "newick")
    leaves = tree.get_terminals()
    assert len(leaves) == len(ids)
    assert sorted(leaf.name for leaf in leaves) == sorted(ids)
    for clade in tree.find_clades():
        assert clade.branch_length is None or clade.branch_length >= 0


def consistency_reference(dense: dict, lengths, rounds: int) -> tuple[dict, int]:
    """ProbCons' transformation on dense arrays; also how many entries the cutoff dropped."""
    n = len(lengths)
    P = dict(dense)
    dropped = 0
    for _ in range(rounds):
        full = {}
        for (x, y), M in P.items():
            full[(x, y)], full[(y, x)] = M, M.T
        new = {}
        for x in range(n):
            for y in range(x + 1, n):
                acc = 2.0 * full[(x, y)]
                for z in range(n):
                    if z != x and z != y:
                        acc = acc + full[(x, z)] @ full[(z, y)]
                acc = acc / n
                # no entry so near the cutoff that the order of summation could decide it
                assert not np.any(np.abs(acc - MIN_POSTERIOR) < 1e-9)
                dropped += int(np.count_nonzero((acc > 0) & (acc < MIN_POSTERIOR)))
                new[(x, y)] = np.where(acc >= MIN_POSTERIOR, acc, 0.0)
        P = new
    return P, dropped


# ----------------------------------------------------------------------------- consistency

CONSISTENCY_CASES = [[1, 1], [3, 7], [1, 1, 1], [1, 7, 2], [7, 7, 7], [1, 2, 3, 4], [7, 1, 1, 7], [5, 6, 7, 1, 2],
                     [1, 1, 1, 1, 1], [3, 3, 3, 3, 3], [2, 7, 4], [6, 5, 1, 3]]


@pytest.mark.parametrize("rounds", [0, 1, 2])
def test_consistency_transform_matches_dense_reference(rounds):
    rng = np.random.default_rng(11 + rounds)
    dropped = 0
    for lengths in CONSISTENCY_CASES:
        dense = dense_of(sparse_posts(random_dense_posts(rng, lengths)))
        want, d = consistency_reference(dense, lengths, rounds)
        dropped += d
        got = consistency_transform(sparse_posts(dense), lengths, rounds)
        assert set(got) == set(want)
        for k, W in want.items():
            G = got[k]
            assert sp.issparse(G) and G.shape == W.shape
            np.testing.assert_allclose(G.toarray(), W, rtol=0, atol=TOL, err_msg=f"{lengths} pair {k}")
            assert np.all(G.data >= MIN_POSTERIOR), "an entry below the cutoff is stored"
    if rounds:
        assert dropped > 0  # the cutoff was exercised


def test_consistency_transform_of_two_and_one_sequences():
    rng = np.random.default_rng(3)
    dense = dense_of(sparse_posts(random_dense_posts(rng, [4, 6])))
    got = consistency_transform(sparse_posts(dense), [4, 6], 2)
    np.testing.assert_allclose(got[(0, 1)].toarray(), dense[(0, 1)], rtol=0, atol=TOL)  # (2 P) / 2
    assert consistency_transform({}, [5], 2) == {}


def test_consistency_transform_keeps_identities():
    eye = {(x, y): sp.csr_matrix(np.eye(5)) for x in range(4) for y in range(x + 1, 4)}
    got = consistency_transform(eye, [5] * 4, 2)
    for k in eye:
        np.testing.assert_allclose(got[k].toarray(), np.eye(5), rtol=0, atol=TOL)


# ----------------------------------------------------------------------------- profiles

def test_column_scores_match_a_loop_over_residues():
    rng = np.random.default_rng(5)
    for _ in range(40):
        a, b, dense = random_profiles(rng)
        want = column_scores_reference(a, b, dense)
        assert np.all(want <= 1.0)
        got = _column_scores(a, b, {k: sp.csr_matrix(M) for k, M in dense.items()})
        assert got.shape == (a.width, b.width)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


def test_profile_alignment_is_optimal_over_all_matchings():
    rng = np.random.default_rng(7)
    for _ in range(40):
        a, b, dense = random_profiles(rng)
        S = _column_scores(a, b, {k: sp.csr_matrix(M) for k, M in dense.items()})
        pairs = _mea(S)
        assert pairs.ndim == 2 and pairs.shape[1] == 2
        if len(pairs):
            assert np.all(np.diff(pairs, axis=0) > 0)  # strictly increasing both ways
            assert pairs.min() >= 0 and pairs[:, 0].max() < a.width and pairs[:, 1].max() < b.width
        best = max(sum(S[i, j] for i, j in m) for m in all_matchings(a.width, b.width))
        assert abs(S[pairs[:, 0], pairs[:, 1]].sum() - best) <= TOL


def test_mea_of_a_zero_score_matrix_matches_nothing():
    assert _mea(np.zeros((3, 4))).shape == (0, 2)


def check_merged(a: _Profile, b: _Profile, pairs: np.ndarray, merged: _Profile) -> None:
    assert merged.members == a.members + b.members
    assert set(merged.cols) == set(a.members) | set(b.members)
    maps = []
    for p in (a, b):
        f = np.full(p.width, -1, np.int64)
        for x in p.members:
            new = merged.cols[x]
            assert new.shape == p.cols[x].shape
            assert np.all(np.diff(new) > 0), "residues out of order or in one column"
            for c, nc in zip(p.cols[x], new):
                assert f[c] in (-1, nc), "a profile column was split"
                f[c] = nc
        assert np.all(f >= 0) and np.all(np.diff(f) > 0)
        maps.append(f)
    fa, fb = maps
    for i, j in pairs:
        assert fa[i] == fb[j]
    matched_a, matched_b = set(pairs[:, 0].tolist()), set(pairs[:, 1].tolist())
    for i in set(range(a.width)) - matched_a:
        assert fa[i] not in fb
        for j in set(range(b.width)) - matched_b:
            if np.sum(pairs[:, 0] < i) == np.sum(pairs[:, 1] < j):  # between the same two matches
                assert fa[i] < fb[j], "b's unmatched column before a's"
    assert merged.width == a.width + b.width - len(pairs)
    used = np.unique(np.concatenate(list(merged.cols.values())))
    np.testing.assert_array_equal(used, np.arange(merged.width))  # no column empty or past the width


def test_merge_keeps_the_profiles_columns():
    rng = np.random.default_rng(9)
    for t in range(60):
        a, b, dense = random_profiles(rng)
        if t % 2:
            pairs = _mea(_column_scores(a, b, {k: sp.csr_matrix(M) for k, M in dense.items()}))
        else:  # any strictly increasing matching, none and complete ones included
            k = int(rng.integers(0, min(a.width, b.width) + 1))
            pairs = np.stack([np.sort(rng.choice(a.width, k, replace=False)),
                              np.sort(rng.choice(b.width, k, replace=False))], 1).astype(np.int64).reshape(-1, 2)
        check_merged(a, b, pairs, _merge(a, b, pairs))


def test_merge_of_single_residues():
    a = _Profile([0], {0: np.array([0])}, 1)
    b = _Profile([1], {1: np.array([0])}, 1)
    matched = _merge(a, b, np.array([[0, 0]]))
    assert matched.width == 1 and matched.cols[0].tolist() == [0] and matched.cols[1].tolist() == [0]
    apart = _merge(a, b, np.zeros((0, 2), np.int64))
    assert apart.width == 2 and apart.cols[0].tolist() == [0] and apart.cols[1].tolist() == [1]


# ----------------------------------------------------------------------------- guide tree

def upgma_reference(D: np.ndarray) -> list[tuple[frozenset, float]]:
    """Each merge of average linkage: (the leaves merged, their average distance)."""
    clusters = [frozenset([i]) for i in range(D.shape[0])]
    merges = []
    while len(clusters) > 1:
        best = None
        for p, q in itertools.combinations(range(len(clusters)), 2):
            d = np.mean([D[i, j] for i in clusters[p] for j in clusters[q]])
            if best is None or d < best[0]:
                best = (d, p, q)
        d, p, q = best
        merged = clusters[p] | clusters[q]
        clusters = [c for k, c in enumerate(clusters) if k not in (p, q)] + [merged]
        merges.append((merged, d))
    return merges


def test_guide_tree_is_upgma_on_one_minus_expected_accuracy():
    rng = np.random.default_rng(13)
    for lengths in [[1, 1], [1, 9], [3, 5, 2], [1, 6, 6, 2], [4, 1, 7, 3, 5], [5, 5, 5, 5, 5, 5]]:
        n = len(lengths)
        posts = sparse_posts(random_dense_posts(rng, lengths, density=0.6))
        D = np.zeros((n, n))
        for (x, y), P in posts.items():
            M = P.toarray()
            score = mea_from_posteriors(M, np.zeros(lengths[x]), np.zeros(lengths[y]), gap_weight=0.0).score
            D[x, y] = D[y, x] = 1.0 - min(1.0, score / min(lengths[x], lengths[y]))
        Z = guide_tree(posts, lengths)
        assert Z.shape == (n - 1, 4)
        leaves = {i: frozenset([i]) for i in range(n)}
        for k, ((want_leaves, want_d), row) in enumerate(zip(upgma_reference(D), Z)):
            got = leaves[int(row[0])] | leaves[int(row[1])]
            leaves[n + k] = got
            assert got == want_leaves
            assert abs(row[2] - want_d) <= TOL
            assert row[3] == len(want_leaves)


def test_newick_text():
    Z = np.array([[0.0, 1.0, 0.5, 2.0], [3.0, 2.0, 0.8, 3.0]])  # (a, b) at 0.5, then with c at 0.8
    assert _newick(Z, ["a", "b", "c"]) == "((a:0.25,b:0.25):0.15,c:0.4);"
    assert _newick(Z[:, [1, 0, 2, 3]], ["a", "b", "c"]) == "(c:0.4,(b:0.25,a:0.25):0.15);"
    assert _newick(Z, ["x y", "it's", "c"]) == "(('x y':0.25,'it''s':0.25):0.15,c:0.4);"
    tree = Phylo.read(io.StringIO(_newick(Z, ["x y", "it's", "c"])), "newick")
    assert sorted(leaf.name for leaf in tree.get_terminals()) == sorted(["x y", "it's", "c"])
    assert _newick(np.zeros((0, 4)), ["solo"]) == "solo;"


# ----------------------------------------------------------------------------- sum of pairs

def test_sum_of_pairs_matches_a_loop():
    rng = np.random.default_rng(17)
    for lengths in [[1, 1], [1, 12], [4, 4, 4], [3, 1, 8, 2], [5, 2, 6, 1, 4]]:
        posts = sparse_posts(random_dense_posts(rng, lengths, density=0.8))
        for _ in range(5):  # random alignments (all-gap columns allowed)
            width = max(lengths) + int(rng.integers(0, 4))
            cols = {x: np.sort(rng.choice(width, L, replace=False)) for x, L in enumerate(lengths)}
            want = sum_of_pairs_reference(cols, dense_of(posts))
            assert abs(sum_of_pairs(cols, posts) - want) <= TOL
        same = {x: np.arange(L) for x, L in enumerate(lengths)}  # left-justified
        assert abs(sum_of_pairs(same, posts) - sum_of_pairs_reference(same, dense_of(posts))) <= TOL


# ----------------------------------------------------------------------------- progressive

def test_progressive_keeps_the_first_merge_as_its_pairwise_mea():
    """Later merges never change two sequences' relative columns: the first pair merged up the
    tree is aligned in the end as the free-gap MEA of its (transformed) posteriors."""
    rng = np.random.default_rng(19)
    for lengths in [[3, 1, 5], [6, 6, 2, 4], [1, 8, 8, 1, 3]]:
        posts = consistency_transform(sparse_posts(random_dense_posts(rng, lengths)), lengths, 1)
        Z = guide_tree(posts, lengths)
        cols = progressive(posts, lengths, Z)
        check_alignment(cols, lengths)
        x, y = sorted((int(Z[0, 0]), int(Z[0, 1])))
        M = posts[(x, y)].toarray()
        want = mea_from_posteriors(M, np.zeros(lengths[x]), np.zeros(lengths[y]), gap_weight=0.0).pairs
        got = np.argwhere(cols[x][:, None] == cols[y][None, :])
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- refinement

def test_refine_never_lowers_the_score_and_is_deterministic():
    rng = np.random.default_rng(23)
    improved = 0
    for lengths in [[1, 1, 1], [5, 1, 9], [2, 12, 3, 1], [6, 6, 6, 6], [4, 7, 1, 3, 8, 2]]:
        posts = consistency_transform(sparse_posts(random_dense_posts(rng, lengths)), lengths, 1)
        starts = {
            "progressive": progressive(posts, lengths, guide_tree(posts, lengths)),
            "left-justified": {x: np.arange(L) for x, L in enumerate(lengths)},
        }
        for name, start in starts.items():
            before = {x: c.copy() for x, c in start.items()}
            base = sum_of_pairs(start, posts)
            for seed in (0, 1):
                last = base
                for rounds in (1, 2, 5, 10):
                    out = refine(start, posts, rounds, seed=seed)
                    check_alignment(out, lengths)
                    score = sum_of_pairs(out, posts)
                    assert score >= last, f"{lengths} {name} seed {seed}: {rounds} rounds lowered the score"
                    improved += rounds == 1 and score > last
                    last = score
                    again = refine(start, posts, rounds, seed=seed)
                    assert all(np.array_equal(out[x], again[x]) for x in out)
            assert all(np.array_equal(start[x], before[x]) for x in start), "refine changed its input"
    assert improved > 0  # one round did something


def test_refine_rejects_a_lower_score():
    """Posteriors above 1, so the column scores (capped at 1) no longer add up to the
    sum-of-pairs score: realigning sequence 0 against the profile of 1 and 2 prefers the
    diagonal (0.9 + 0.9 > min(1, 10)), which lowers the score from 22 to 5.6, and must be
    rejected."""
    P = np.array([[0.9, 10.0], [0.0, 0.9]])
    posts = {(0, 1): sp.csr_matrix(P), (0, 2): sp.csr_matrix(P), (1, 2): sp.csr_matrix(np.eye(2))}
    start = {0: np.array([1, 2]), 1: np.array([0, 1]), 2: np.array([0, 1])}  # -AB / CD- / EF-
    assert sum_of_pairs(start, posts) == 22.0
    a = _Profile([0], {0: np.array([0, 1])}, 2)
    b = _Profile([1, 2], {1: np.array([0, 1]), 2: np.array([0, 1])}, 2)
    realigned = _merge(a, b, _mea(_column_scores(a, b, posts)))
    assert abs(sum_of_pairs(realigned.cols, posts) - 5.6) <= TOL  # what a blind acceptance would keep
    for seed in range(5):
        for rounds in (1, 3, 8):
            assert sum_of_pairs(refine(start, posts, rounds, seed=seed), posts) >= 22.0, f"seed {seed}, {rounds} rounds"


def test_refine_without_rounds_or_with_two_sequences_returns_its_input():
    rng = np.random.default_rng(29)
    lengths = [4, 2, 6]
    posts = sparse_posts(random_dense_posts(rng, lengths))
    cols = {x: np.arange(L) for x, L in enumerate(lengths)}
    out = refine(cols, posts, 0, seed=3)
    assert set(out) == set(cols) and all(np.array_equal(out[x], cols[x]) for x in cols)
    two = {0: np.array([0, 2]), 1: np.array([1])}
    out = refine(two, sparse_posts({(0, 1): np.ones((2, 1))}), 5)
    assert all(np.array_equal(out[x], two[x]) for x in two)


# ----------------------------------------------------------------------------- the recipe

@pytest.mark.parametrize("lengths", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_align_multiple_invariants(lengths):
    rng = np.random.default_rng(sum(lengths) * 31 + len(lengths))
    seqs = random_seqs(rng, lengths)
    ids = [f"seq{k}" for k in range(len(seqs))][::-1]  # not sorted: the input order is kept
    dense = {(x, y): hashed_posterior(seqs[x], seqs[y]) for x in range(len(seqs)) for y in range(x + 1, len(seqs))}
    for consistency, rounds in [(0, 0), (1, 3), (2, 0), (2, 4)]:
        by_dict = align_multiple(ids, seqs, dense, consistency=consistency, refine_rounds=rounds, seed=1)
        by_fn = align_multiple(ids, seqs, hashed_posterior, consistency=consistency, refine_rounds=rounds, seed=1)
        check_msa(by_dict, ids, seqs)
        assert by_fn == by_dict
        cols = cols_of_rows(by_dict.rows)
        posts = consistency_transform(sparse_posts(dense), lengths, consistency)
        assert abs(by_dict.score - sum_of_pairs_reference(cols, dense_of(posts))) <= TOL
        for fmt, alphabet in itertools.product(("clustal", "stockholm"), (None, "protein")):
            buf = io.StringIO()
            AlignIO.write(by_dict.to_biopython(alphabet), buf, fmt)
            back = AlignIO.read(io.StringIO(buf.getvalue()), fmt)
            assert [r.id for r in back] == ids and [str(r.seq) for r in back] == list(by_dict.rows)


def test_align_multiple_dict_takes_dense_or_sparse_and_cuts():
    rng = np.random.default_rng(37)
    lengths = [5, 1, 8]
    seqs = random_seqs(rng, lengths)
    dense = random_dense_posts(rng, lengths)
    got = align_multiple("abc", seqs, {k: sp.csr_matrix(M) for k, M in dense.items()})
    assert got == align_multiple("abc", seqs, dense)
    assert got == align_multiple("abc", seqs, {k: cut(M) for k, M in dense.items()})


@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (9, 1), (6, 6), (3, 20), (20, 3), (12, 10)])
def test_two_sequences_align_as_their_pairwise_mea(shape):
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    seqs = random_seqs(rng, shape)
    for _ in range(4):
        M = random_posterior(rng, *shape, density=0.6)
        msa = align_multiple(["q", "t"], seqs, {(0, 1): M}, consistency=0)
        check_msa(msa, ["q", "t"], seqs)
        want = mea_from_posteriors(cut(M), np.zeros(shape[0]), np.zeros(shape[1]), gap_weight=0.0).pairs
        np.testing.assert_array_equal(induced_pairs(*msa.rows), want)
        assert abs(msa.score - cut(M)[want[:, 0], want[:, 1]].sum()) <= TOL


def test_two_sequences_below_the_cutoff_stay_apart():
    msa = align_multiple(["q", "t"], ["A", "C"], {(0, 1): np.array([[0.009]])}, consistency=0)
    assert msa.rows == ("A-", "-C") and msa.score == 0.0
    msa = align_multiple(["q", "t"], ["A", "C"], {(0, 1): np.array([[0.01]])}, consistency=0)
    assert msa.rows == ("A", "C") and msa.score == 0.01


@pytest.mark.parametrize("length", [1, 2, 7, 20])
@pytest.mark.parametrize("copies", [3, 4])
def test_identical_sequences_share_every_column(length, copies):
    seq = random_seqs(np.random.default_rng(length), [length])[0]
    ids, seqs = [f"c{k}" for k in range(copies)], [seq] * copies
    eye = {(x, y): np.eye(length) for x in range(copies) for y in range(x + 1, copies)}
    for consistency, rounds in [(0, 0), (1, 0), (2, 3)]:
        for posteriors in (eye, lambda q, t: np.eye(len(q), len(t))):
            msa = align_multiple(ids, seqs, posteriors, consistency=consistency, refine_rounds=rounds)
            check_msa(msa, ids, seqs)
            assert msa.rows == tuple(seqs) and msa.n_columns == length
            assert abs(msa.score - length * copies * (copies - 1) / 2) <= TOL


@pytest.mark.parametrize("length", [1, 13])
def test_single_sequence(length):
    seq = random_seqs(np.random.default_rng(41), [length])[0]

    def never(q, t):
        raise AssertionError("no pair to align")

    for posteriors in ({}, never):
        msa = align_multiple(["only one"], [seq], posteriors, consistency=2, refine_rounds=3)
        assert msa.ids == ("only one",) and msa.rows == (seq,) and msa.n_columns == length and msa.score == 0.0
        tree = Phylo.read(io.StringIO(msa.tree), "newick")
        assert [leaf.name for leaf in tree.get_terminals()] == ["only one"]


def test_function_posteriors_cuts_and_covers_every_pair():
    seqs = ["ACD", "E", "FGHIK", "LM"]
    posts = function_posteriors(hashed_posterior, seqs)
    assert set(posts) == {(x, y) for x in range(4) for y in range(x + 1, 4)}
    for (x, y), P in posts.items():
        np.testing.assert_array_equal(P.toarray(), cut(hashed_posterior(seqs[x], seqs[y])))


# ----------------------------------------------------------------------------- the shipped aligner

@pytest.fixture(scope="module")
def shipped() -> Aligner:
    return Aligner.load("learned")


@pytest.fixture(scope="module")
def globins() -> list[tuple[str, str]]:
    recs = [r for name in ("globins_query.fasta", "globins_target.fasta") for r in SeqIO.parse(EXAMPLES / name, "fasta")]
    return [(r.id, str(r.seq)) for r in recs]


def test_sequences_as_bytes_biopython_seqs_and_with_a_stop_align_as_their_text(shipped, globins):
    """As Aligner.align takes them: bytes, Bio.Seq, and a protein's one trailing '*' (it was
    refused as "has '*' at position ..." here while the aligner dropped it)."""
    (_, a), (_, b), (_, c) = globins[:3]
    want = align_multiple(["a", "b", "c"], [a, b, c], shipped)
    got = align_multiple(["a", "b", "c"], [a + "*", b.encode(), Seq(c)], shipped)
    assert got.rows == want.rows
    with pytest.raises(ValueError, match=r"sequence 'a' has '\*'"):  # only a protein model drops it
        align_multiple(["a", "b"], ["AC*", "GTT"], OK)


def test_aligner_posteriors_are_the_every_column_alignment(shipped, globins):
    (qid, q), (tid, t) = globins[:2]
    threshold = shipped.min_confidence
    assert shipped.calibration is not None and threshold > 0  # the path that must not touch the aligner
    want = Aligner.load("learned", min_confidence=0.0).align(q, t).alignment
    posts = aligner_posteriors(shipped, [q, t])
    assert shipped.min_confidence == threshold
    assert set(posts) == {(0, 1)}
    P = posts[(0, 1)]
    assert sp.issparse(P) and P.shape == (len(q), len(t)) and P.nnz == len(want.pairs)
    expected = np.zeros((len(q), len(t)))
    expected[want.pairs[:, 0], want.pairs[:, 1]] = want.match_posterior
    np.testing.assert_array_equal(P.toarray(), expected)

    msa = align_multiple([qid, tid], [q, t], shipped, consistency=0)
    assert shipped.min_confidence == threshold
    check_msa(msa, [qid, tid], [q, t])
    np.testing.assert_array_equal(induced_pairs(*msa.rows), want.pairs)


def test_align_multiple_with_the_aligner_equals_its_posteriors(shipped, globins):
    ids, seqs = [i for i, _ in globins], [s for _, s in globins]
    msa = align_multiple(ids, seqs, shipped, consistency=2)
    check_msa(msa, ids, seqs)
    assert msa == align_multiple(ids, seqs, aligner_posteriors(shipped, seqs), consistency=2,
                                 calibration=shipped.msa_calibration)
    single = align_multiple(ids[:1], seqs[:1], shipped)
    assert single.rows == (seqs[0],)
    some = aligner_posteriors(shipped, seqs, pairs=[(0, 2)])
    assert set(some) == {(0, 2)} and some[(0, 2)].shape == (len(seqs[0]), len(seqs[2]))


def test_nucleotide_pairs_are_taken_on_the_plus_strand():
    """A sequence and its reverse complement: the pair's better strand is the minus one, whose
    residue pairs index the reverse complement; the multiple alignment takes the sequences as
    given, so their plus-strand alignment."""
    dna = Aligner.load("dna")
    s = "".join(np.random.default_rng(43).choice(list("ACGT"), 60))
    rc = s.translate(str.maketrans("ACGT", "TGCA"))[::-1]
    assert dna.align(s, rc).strand == "-"  # what the aligner's own default would take
    plus = dna.align(s, rc, strand="plus")
    assert plus.strand == "+"
    want = plus.alignment
    expected = np.zeros((len(s), len(rc)))
    expected[want.pairs[:, 0], want.pairs[:, 1]] = want.match_posterior
    np.testing.assert_array_equal(aligner_posteriors(dna, [s, rc])[(0, 1)].toarray(), expected)
    msa = align_multiple(["s", "rc"], [s, rc], dna, consistency=0)
    check_msa(msa, ["s", "rc"], [s, rc])
    np.testing.assert_array_equal(induced_pairs(*msa.rows), want.pairs[want.match_posterior > 0])


# ----------------------------------------------------------------------------- errors

class NoCalibration:
    calibration = None
    min_confidence = 0.0

    def align_many(self, items):
        raise AssertionError("must not align")


OK = {(0, 1): np.ones((2, 3))}

ERRORS = [
    ("duplicate ids", (["a", "a"], ["AC", "GTT"], OK), {}, "sequence ids must be unique"),
    ("empty sequence", (["a", "b"], ["AC", ""], OK), {}, "sequence 'b' is empty"),
    ("ids and sequences", (["a", "b"], ["AC", "GTT", "A"], OK), {}, "2 ids but 3 sequences"),
    ("nothing", ([], [], {}), {}, "no sequences to align"),
    ("a record", (["a", "b"], ["AC", SeqRecord(Seq("GTT"), id="b")], OK), {},
     r"sequence 'b' is of type SeqRecord, not a sequence \(give a str, bytes or Bio.Seq; for a record, its .seq\)"),
    ("a number", (["a", "b"], ["AC", 5], OK), {}, r"sequence 'b' is of type int, not a sequence"),
    ("missing pair", (["a", "b", "c"], ["AC", "GTT", "A"], {(0, 1): np.ones((2, 3)), (1, 2): np.ones((3, 1))}), {},
     "no posteriors for the pair of sequences 0 and 2"),
    ("shape in dict", (["a", "b"], ["AC", "GTT"], {(0, 1): np.ones((3, 2))}), {},
     r"posteriors of sequences 0 and 1 have shape \(3, 2\), expected \(2, 3\)"),
    ("shape from function", (["a", "b"], ["AC", "GTT"], lambda q, t: np.ones((2, 2))), {},
     r"posteriors of sequences 0 and 1 have shape \(2, 2\), expected \(2, 3\)"),
    ("negative consistency", (["a", "b"], ["AC", "GTT"], OK), {"consistency": -1}, "consistency=-1"),
    ("negative refinement", (["a", "b"], ["AC", "GTT"], OK), {"refine_rounds": -2}, "refine_rounds=-2"),
    ("aligner without calibration", (["a", "b"], ["AC", "GTT"], NoCalibration()), {}, "no calibration"),
    ("key the wrong way round", (["a", "b"], ["AC", "GTT"], {(1, 0): np.ones((3, 2))}), {},
     r"keyed by \(x, y\) with 0 <= x < y < 2, got \(1, 0\)"),
    ("key past the sequences", (["a", "b"], ["AC", "GTT"], {(0, 1): np.ones((2, 3)), (1, 2): np.ones((3, 1))}), {},
     r"got \(1, 2\)"),
    ("NaN in dict", (["a", "b"], ["AC", "GTT"], {(0, 1): np.full((2, 3), np.nan)}), {},
     r"sequences 0 and 1 must be probabilities in \[0, 1\]"),
    ("above one in dict", (["a", "b"], ["AC", "GTT"], {(0, 1): np.full((2, 3), 1.5)}), {}, "probabilities"),
    ("negative from function", (["a", "b"], ["AC", "GTT"], lambda q, t: -np.ones((len(q), len(t)))), {},
     "probabilities"),
]


@pytest.mark.parametrize(("args", "kwargs", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_align_multiple_errors(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        align_multiple(*args, **kwargs)


def test_step_errors(shipped):
    with pytest.raises(ValueError, match="no posteriors for the pair of sequences 0 and 1"):
        consistency_transform({}, [2, 3], 1)
    with pytest.raises(ValueError, match="no posteriors for the pair of sequences 0 and 1"):
        guide_tree({}, [2, 3])
    with pytest.raises(ValueError, match=r"posteriors of sequences 1 and 2 have shape \(1, 3\), expected \(3, 1\)"):
        consistency_transform({(0, 1): sp.csr_matrix((2, 3)), (0, 2): sp.csr_matrix((2, 1)),
                               (1, 2): sp.csr_matrix((1, 3))}, [2, 3, 1], 1)
    with pytest.raises(ValueError, match="no calibration"):
        aligner_posteriors(NoCalibration(), ["AC", "GTT"])
    uncalibrated = Aligner(shipped.params, shipped.config)  # a real aligner without a calibration
    assert uncalibrated.calibration is None
    with pytest.raises(ValueError, match="no calibration"):
        align_multiple(["a", "b"], ["ACDE", "GHIK"], uncalibrated)


def test_chain_score_takes_a_pairwise_alignment_as_its_own_mea():
    from sinkalign.align.msa import _chain_score, _expected_accuracy

    chain = sp.csr_matrix((np.array([0.5, 0.9, 0.2]), (np.array([0, 2, 3]), np.array([1, 2, 4]))), shape=(4, 5))
    assert _chain_score(chain) == pytest.approx(1.6, abs=1e-15)
    assert _chain_score(sp.csr_matrix((4, 5))) == 0.0
    crossing = sp.csr_matrix((np.array([0.5, 0.9]), (np.array([0, 1]), np.array([3, 2]))), shape=(4, 5))
    same_row = sp.csr_matrix((np.array([0.5, 0.9]), (np.array([1, 1]), np.array([2, 3]))), shape=(4, 5))
    same_col = sp.csr_matrix((np.array([0.5, 0.9]), (np.array([1, 2]), np.array([3, 3]))), shape=(4, 5))
    for P in (crossing, same_row, same_col):
        assert _chain_score(P) is None
    # the shortcut and the MEA agree, chain or not
    lengths = [4, 5, 3]
    posts = {(0, 1): chain, (0, 2): sp.csr_matrix(np.array([[0, 0.5, 0], [0.9, 0, 0], [0, 0, 0.3], [0, 0, 0]])),
             (1, 2): sp.csr_matrix((5, 3))}
    ea = _expected_accuracy(posts, lengths)
    want_02 = mea_from_posteriors(posts[(0, 2)].toarray(), np.zeros(4), np.zeros(3), gap_weight=0.0).score / 3
    assert ea[0, 1] == pytest.approx(1.6 / 4, abs=1e-15) and ea[0, 2] == pytest.approx(want_02, abs=1e-15)
    assert ea[1, 2] == 0.0 and np.allclose(np.diag(ea), 1.0)


# ----------------------------------------------------------------------------- confidences

def confidences_reference(rows, dense: dict) -> tuple[list[list[float]], list[float]]:
    """Column by column over the gapped rows: each residue's mean posterior with every other
    residue of its column, and each column's mean over its residue pairs (NaN where none)."""
    index = [np.cumsum([c != "-" for c in row]) - 1 for row in rows]
    residue = [[] for _ in rows]
    column = []
    for c in range(len(rows[0])):
        present = [x for x, row in enumerate(rows) if row[c] != "-"]
        values = []
        for x in present:
            mine = [get(dense, x, y)[index[x][c], index[y][c]] for y in present if y != x]
            residue[x].append(float(np.mean(mine)) if mine else float("nan"))
            values += mine
        column.append(float(np.mean(values)) if values else float("nan"))
    return residue, column


@pytest.mark.parametrize("lengths", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_confidences_match_a_loop_over_columns(lengths):
    rng = np.random.default_rng(sum(lengths) * 7 + len(lengths))
    seqs = random_seqs(rng, lengths)
    dense = random_dense_posts(rng, lengths, density=0.7)
    for consistency, rounds in [(0, 0), (2, 3)]:
        msa = align_multiple([f"s{k}" for k in range(len(seqs))], seqs, dense, consistency=consistency,
                             refine_rounds=rounds)
        posts = consistency_transform(sparse_posts(dense), lengths, consistency)
        residue, column = confidences(cols_of_rows(msa.rows), posts, lengths)
        want_residue, want_column = confidences_reference(msa.rows, dense_of(posts))
        np.testing.assert_allclose(column, want_column, rtol=0, atol=TOL)
        assert len(residue) == len(lengths)
        for got, want, length in zip(residue, want_residue, lengths):
            assert got.shape == (length,)
            np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


def test_confidences_of_hand_made_columns():
    # rows "AC-", "A-D", "-CD": every column holds two residues
    dense = {(0, 1): np.array([[0.9, 0.3], [0.0, 0.0]]), (0, 2): np.array([[0.0, 0.0], [0.5, 0.0]]),
             (1, 2): np.array([[0.0, 0.0], [0.0, 0.25]])}
    cols = cols_of_rows(["AC-", "A-D", "-CD"])
    residue, column = confidences(cols, {k: sp.csr_matrix(v) for k, v in dense.items()}, [2, 2, 2])
    np.testing.assert_array_equal(column, [0.9, 0.5, 0.25])
    np.testing.assert_array_equal(residue[0], [0.9, 0.5])
    np.testing.assert_array_equal(residue[1], [0.9, 0.25])
    np.testing.assert_array_equal(residue[2], [0.5, 0.25])
    # a residue alone in its column, and a pair absent from the posteriors (probability 0)
    residue, column = confidences(cols_of_rows(["AC", "-C"]), {(0, 1): sp.csr_matrix((2, 1))}, [2, 1])
    assert np.isnan(residue[0][0]) and residue[0][1] == 0.0 and residue[1][0] == 0.0
    assert np.isnan(column[0]) and column[1] == 0.0


@pytest.mark.parametrize(("p", "code"), [(0.0, "0"), (0.0499, "0"), (0.05, "1"), (0.5, "5"), (0.849, "8"),
                                          (0.85, "9"), (0.9499, "9"), (0.95, "*"), (1.0, "*"),
                                          (float("nan"), ".")])
def test_pp_code_is_hmmers(p, code):
    assert pp_code(p) == code


def test_pp_lines_and_stockholm_annotations():
    seqs = ["ACDE", "ACE", "CDE"]
    dense = {(0, 1): np.zeros((4, 3)), (0, 2): np.zeros((4, 3)), (1, 2): np.zeros((3, 3))}
    dense[(0, 1)][[0, 1, 3], [0, 1, 2]] = [0.97, 0.88, 0.42]
    dense[(0, 2)][[1, 2, 3], [0, 1, 2]] = [0.6, 0.3, 0.5]
    dense[(1, 2)][[1, 2], [0, 2]] = [0.7, 0.2]
    msa = align_multiple(["a", "b", "c"], seqs, dense, consistency=0, refine_rounds=0)
    rows, cons = msa.pp_lines()
    assert len(rows) == 3 and all(len(r) == msa.n_columns for r in rows)
    for row, pp in zip(msa.rows, rows):
        assert all(p == "." for c, p in zip(row, pp) if c == "-")  # gaps are '.'
    want_residue, want_column = confidences_reference(msa.rows, dense)
    assert cons == "".join(pp_code(p) for p in want_column)
    for row, pp, want in zip(msa.rows, rows, want_residue):
        assert [p for c, p in zip(row, pp) if c != "-"] == [pp_code(v) for v in want]
    buf = io.StringIO()
    AlignIO.write(msa.to_biopython("protein"), buf, "stockholm")
    text = buf.getvalue()
    assert "#=GR a PP " + rows[0] in text and "#=GC PP_cons " + cons in text
    back = AlignIO.read(io.StringIO(text), "stockholm")
    assert [r.letter_annotations["posterior_probability"] for r in back] == list(rows)
    assert back.column_annotations["posterior_probability"] == cons


def clustal_reference(column: str, alphabet: str) -> str:
    strong = ["STA", "NEQK", "NHQK", "NDEQ", "QHRK", "MILV", "MILF", "HY", "FYW"]
    weak = ["CSA", "ATV", "SAG", "STNK", "STPA", "SGND", "SNDEQK", "NDEQHK", "NEQHRK", "FVLIM", "HFY"]
    if "-" in column:
        return " "
    if len(set(column.upper())) == 1:
        return "*"
    if alphabet == "dna":
        return " "
    for mark, groups in ((":", strong), (".", weak)):
        if any(all(c in g for c in column.upper()) for g in groups):
            return mark
    return " "


@pytest.mark.parametrize("alphabet", ["protein", "dna"])
def test_clustal_consensus_matches_its_definition(alphabet):
    rng = np.random.default_rng(5)
    letters = list(PROTEIN + "-") if alphabet == "protein" else list("ACGT-")
    for n in (1, 2, 3, 5):
        for _ in range(40):
            rows = ["".join(rng.choice(letters[:rng.integers(2, len(letters) + 1)], size=12)) for _ in range(n)]
            want = "".join(clustal_reference("".join(col), alphabet) for col in zip(*rows))
            assert clustal_consensus(rows, alphabet) == want
    # M/L/I strong (MILV), S alone, G/A weak (SAG), A/V weak (ATV), W/A none, a gap, a/A one residue
    assert clustal_consensus(["MSGAWCa", "LSAVA-A", "ISGAWCA"]) == ":*..  *"
    assert clustal_consensus(["ACGT", "ACGA"], "dna") == "*** "


def test_clustal_output_has_the_conservation_line():
    msa = align_multiple(["a", "b"], ["MKV", "MRV"], {(0, 1): np.eye(3)}, consistency=0)
    buf = io.StringIO()
    AlignIO.write(msa.to_biopython("protein"), buf, "clustal")
    lines = buf.getvalue().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("b "))
    start = lines[k].index("MRV")
    assert lines[k + 1][start:start + 3] == "*:*"


# ----------------------------------------------------------------------------- calibrated confidences

def random_calibration(rng, rounds=(0, 2), sizes=(3, 4)) -> MsaCalibration:
    knots = {}
    for r in rounds:
        classes = []
        for size in sizes:
            xs = np.sort(rng.choice(np.linspace(0.0, 1.0, 101), size=5, replace=False))
            classes.append((size, tuple(xs), tuple(np.sort(rng.random(5)))))
        knots[r] = tuple(classes)
    return MsaCalibration(knots, "random knots")


def test_msa_calibration_maps_round_trips_and_checks():
    cal = MsaCalibration({2: ((3, (0.1, 0.5, 0.9), (0.2, 0.6, 0.95)), (6, (0.5,), (0.7,)))}, "somewhere")
    p = np.array([0.0, 0.1, 0.3, 0.9, 1.0])
    for n in (3, 4, 5):
        np.testing.assert_allclose(cal.mapper(2, n)(p), [0.2, 0.2, 0.4, 0.95, 0.95])
    for n in (6, 40):
        np.testing.assert_allclose(cal.mapper(2, n)(p), [0.7] * 5)
    np.testing.assert_array_equal(cal.mapper(2, 2)(p), p)  # two sequences: their own confidences
    assert cal.covers(2) and not cal.covers(0)
    back = MsaCalibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back == cal and back.fitted_on == "somewhere"
    for bad in ({2: ((3, (0.5, 0.1), (0.1, 0.2)),)}, {2: ((3, (0.1, 0.5), (0.3, 0.2)),)}, {2: ((3, (0.1,), (1.5,)),)},
                {2: ((3, (0.1, 0.5), (0.3,)),)}, {-1: ((3, (0.1,), (0.3,)),)}, {2: ((3, (), ()),)}, {2: ()},
                {2: ((2, (0.1,), (0.3,)),)}, {2: ((6, (0.1,), (0.3,)), (3, (0.1,), (0.3,)))}):
        with pytest.raises(ValueError):
            MsaCalibration(bad)
    for bad in ({}, {"knots": {"two": []}}, {"knots": {"2": [{"x": [0.1], "y": [0.2]}]}},
                {"knots": {"2": {"min_sequences": 3, "x": [0.1], "y": [0.2]}}}):
        with pytest.raises(ValueError):
            MsaCalibration.from_dict(bad)


def test_align_multiple_applies_a_calibration_covering_its_rounds():
    rng = np.random.default_rng(11)
    lengths = [6, 3, 9, 5]
    seqs = random_seqs(rng, lengths)
    dense = random_dense_posts(rng, lengths, density=0.7)
    cal = random_calibration(rng)
    for consistency in (0, 1, 2):
        msa = align_multiple("abcd", seqs, dense, consistency=consistency, refine_rounds=2, calibration=cal)
        plain = align_multiple("abcd", seqs, dense, consistency=consistency, refine_rounds=2)
        assert msa.rows == plain.rows and msa.score == plain.score
        posts = consistency_transform(sparse_posts(dense), lengths, consistency)
        mapper = cal.mapper(consistency, 4) if cal.covers(consistency) else None
        if mapper is not None:  # four sequences take the class of 4+, not of 3+
            x4, y4 = cal.knots[consistency][1][1:]
            np.testing.assert_array_equal(mapper(np.linspace(0, 1, 7)), np.interp(np.linspace(0, 1, 7), x4, y4))
        residue, column = confidences(cols_of_rows(msa.rows), posts, lengths, mapper)
        assert msa.calibrated == cal.covers(consistency) and not plain.calibrated
        np.testing.assert_array_equal(msa.column_confidence, column)
        for got, want in zip(msa.confidence, residue):
            np.testing.assert_array_equal(got, want)
        # calibrated residue confidences: the mean of the mapped probabilities, by a loop over columns
        mapped = {k: (np.vectorize(mapper)(M) if mapper else M) for k, M in dense_of(posts).items()}
        want_residue, want_column = confidences_reference(msa.rows, mapped)
        np.testing.assert_allclose(msa.column_confidence, want_column, rtol=0, atol=TOL)
        for got, want in zip(msa.confidence, want_residue):
            np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


def test_calibration_samples_count_core_pairs_as_precision_does():
    from sinkalign.align.metrics import core_pair_scores
    from sinkalign.io.alignments import ReferencePair

    rng = np.random.default_rng(19)
    lengths = [7, 5, 8]
    seqs = random_seqs(rng, lengths)
    dense = random_dense_posts(rng, lengths, density=0.6)
    msa = align_multiple("xyz", seqs, dense, consistency=1, refine_rounds=0)
    posts = consistency_transform(sparse_posts(dense), lengths, 1)
    cols = cols_of_rows(msa.rows)
    refs = []
    for a, b in [(0, 1), (2, 0), (1, 2)]:  # one pair given target-first
        truth = np.array(sorted({(i, j) for i, j in zip(rng.integers(0, lengths[a], 4), rng.integers(0, lengths[b], 4))}))
        keep = (np.diff(truth[:, 0], prepend=-1) > 0) & (np.diff(truth[:, 1], prepend=-1) > 0)
        qcore, tcore = rng.random(lengths[a]) < 0.6, rng.random(lengths[b]) < 0.6
        truth = truth[keep & qcore[truth[:, 0]] & tcore[truth[:, 1]]]
        refs.append(ReferencePair("xyz"[a], "xyz"[b], seqs[a], seqs[b], truth.reshape(-1, 2),
                                  query_core=qcore, target_core=tcore))
    p, right, column = calibration_samples(cols, posts, "xyz", refs)
    want_p, want_right, want_column = [], [], []
    D = dense_of(posts)
    for ref in refs:
        a, b = "xyz".index(ref.query_id), "xyz".index(ref.target_id)
        pred = induced_pairs(msa.rows[a], msa.rows[b])
        pred = pred[ref.query_core[pred[:, 0]] | ref.target_core[pred[:, 1]]]
        truth = set(map(tuple, ref.pairs.tolist()))
        want_p += [get(D, a, b)[i, j] for i, j in pred]
        want_right += [(i, j) in truth for i, j in pred]
        want_column += [cols[a][i] for i, _ in pred]
        # as precision counts: the same pairs, the same hits
        scores = core_pair_scores(pred, ref)
        assert scores.n_pred == len(pred) and scores.tp == sum((i, j) in truth for i, j in pred)
    np.testing.assert_allclose(p, want_p, rtol=0, atol=TOL)
    np.testing.assert_array_equal(right, want_right)
    np.testing.assert_array_equal(column, want_column)


def test_fit_msa_calibration_recovers_a_known_reliability():
    rng = np.random.default_rng(23)
    p = rng.random(300_000)
    sequences = rng.choice([3, 4, 7, 12, 30], size=p.size)
    right = rng.random(p.size) < np.where(sequences >= 6, np.sqrt(p), p ** 2)  # reliabilities differ by size
    cal = fit_msa_calibration({2: (p, right, sequences)}, fitted_on="draws", max_knots=16, size_classes=(3, 6))
    assert cal.covers(2) and not cal.covers(0) and [c[0] for c in cal.knots[2]] == [3, 6]
    assert all(len(c[1]) <= 16 for c in cal.knots[2])
    grid = np.linspace(0.05, 0.95, 19)
    np.testing.assert_allclose(cal.mapper(2, 4)(grid), grid ** 2, atol=0.03)
    np.testing.assert_allclose(cal.mapper(2, 12)(grid), np.sqrt(grid), atol=0.03)
    # a class with too few samples joins the one below; the first, the one above
    few = fit_msa_calibration({1: (p, right, sequences)}, size_classes=(3, 6, 20), min_samples=70_000)
    assert [c[0] for c in few.knots[1]] == [3, 6]  # 30-sequence draws (~60,000) merged into 6+
    few = fit_msa_calibration({1: (p, right, sequences)}, size_classes=(3, 5, 6), min_samples=70_000)
    assert [c[0] for c in few.knots[1]] == [3, 6]  # 3-4 (~120,000) kept, the empty 5 class merged into 3
    first = fit_msa_calibration({1: (p, right, sequences)}, size_classes=(3, 4, 6), min_samples=70_000)
    assert [c[0] for c in first.knots[1]] == [3, 6]  # 3 alone (~60,000) takes 4 with it
    with pytest.raises(ValueError, match="no sample"):
        fit_msa_calibration({1: (p[:5], right[:5], np.full(5, 2))})


def test_a_model_carries_its_msa_calibration(shipped, globins, tmp_path):
    from sinkalign.align.checkpoints import export_model
    from sinkalign.errors import CheckpointError

    cal = MsaCalibration({2: ((3, (0.1, 0.6), (0.3, 0.9)),)}, "hand-made")
    blosum = Aligner.load("blosum")
    out = tmp_path / "model"
    export_model(out, blosum.params, blosum.config, provenance="test", calibration=blosum.calibration.to_dict(),
                 msa_calibration=cal.to_dict())
    loaded = Aligner.load(out)
    assert loaded.msa_calibration == cal
    ids, seqs = [i for i, _ in globins], [s for _, s in globins]
    msa = align_multiple(ids, seqs, loaded)
    assert msa.calibrated
    plain = align_multiple(ids, seqs, aligner_posteriors(loaded, seqs))
    assert not plain.calibrated and plain.rows == msa.rows
    assert not align_multiple(ids, seqs, loaded, consistency=1).calibrated  # no map for 1 round
    two = align_multiple(ids[:2], seqs[:2], loaded, consistency=1)  # two: the pair's own calibrated confidences
    assert two.calibrated
    library = aligner_posteriors(loaded, seqs[:2])[(0, 1)].toarray()
    pairs = induced_pairs(*two.rows)
    np.testing.assert_array_equal(two.column_confidence[~np.isnan(two.column_confidence)],
                                  library[pairs[:, 0], pairs[:, 1]])
    # fitted on the model's own confidences: not with another calibration
    assert Aligner.load(out, calibration=blosum.calibration).msa_calibration is None
    with pytest.raises(ValueError, match="goes with the calibration"):
        export_model(tmp_path / "bad", blosum.params, blosum.config, provenance="t", msa_calibration=cal.to_dict())
    state = json.loads((out / "state.json").read_text())
    state["msa_calibration"]["knots"]["2"][0]["y"] = [0.9, 0.3]
    (out / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="bad msa_calibration"):
        Aligner.load(out)


@pytest.mark.parametrize("name", ["learned", "blosum"])
def test_the_shipped_protein_models_carry_msa_calibrations(name, globins):
    aligner = Aligner.load(name)
    cal = aligner.msa_calibration
    assert cal is not None and all(cal.covers(r) for r in range(4))
    if name == "learned":  # fitted on held-out families: the weights were trained on the training ones
        assert "68 valid families" in cal.fitted_on and [c[0] for c in cal.knots[2]] == [3]
    else:
        assert "369 train families" in cal.fitted_on and [c[0] for c in cal.knots[2]] == [3, 6, 11]
    ids, seqs = [i for i, _ in globins], [s for _, s in globins]
    msa = align_multiple(ids, seqs, aligner)
    assert msa.calibrated and not align_multiple(ids, seqs, aligner, consistency=4).calibrated
    assert Aligner.load("dna").msa_calibration is None


@pytest.mark.parametrize("lengths", [[5, 1, 9], [4, 4, 4, 4, 4], [2, 25, 3, 1, 6]], ids=str)
def test_trimmed_keeps_the_columns_at_or_above_the_threshold(lengths):
    rng = np.random.default_rng(len(lengths) * 13 + sum(lengths))
    seqs = random_seqs(rng, lengths)
    msa = align_multiple([f"s{k}" for k in range(len(seqs))], seqs, random_dense_posts(rng, lengths, 0.7),
                         consistency=1, refine_rounds=2)
    for threshold in (0.0, 0.05, 0.2, 0.5, 1.0):
        got, kept = msa.trimmed(threshold)
        want = [c for c in range(msa.n_columns)
                if threshold == 0.0 or (not np.isnan(msa.column_confidence[c]) and msa.column_confidence[c] >= threshold)]
        assert list(kept) == want
        assert got.rows == tuple("".join(row[c] for c in want) for row in msa.rows)
        np.testing.assert_array_equal(got.column_confidence, msa.column_confidence[want])
        for row_before, conf_before, row, conf in zip(msa.rows, msa.confidence, got.rows, got.confidence):
            by_column = {}
            k = 0
            for c, ch in enumerate(row_before):
                if ch != "-":
                    by_column[c] = conf_before[k]
                    k += 1
            np.testing.assert_array_equal(conf, [by_column[c] for c in want if row_before[c] != "-"])
            assert len(conf) == sum(ch != "-" for ch in row)
        assert got.ids == msa.ids and got.calibrated == msa.calibrated
        if threshold == 0.0:
            assert got.rows == msa.rows
    with pytest.raises(ValueError, match="must be in"):
        msa.trimmed(1.5)
    bare = MultipleAlignment(("a",), ("AC",), "a;", 0.0)
    with pytest.raises(ValueError, match="no confidences"):
        bare.trimmed(0.5)


def test_sequence_confidence_is_the_mean_over_every_pairing():
    rng = np.random.default_rng(29)
    lengths = [6, 2, 9, 5]
    seqs = random_seqs(rng, lengths)
    dense = random_dense_posts(rng, lengths, density=0.7)
    msa = align_multiple("abcd", seqs, dense, consistency=1, refine_rounds=2)
    posts = dense_of(consistency_transform(sparse_posts(dense), lengths, 1))
    for x in range(len(seqs)):  # brute force: every pair of residues of row x and another row in one column
        values = []
        for y in range(len(seqs)):
            if y != x:
                values += [get(posts, x, y)[i, j] for i, j in induced_pairs(msa.rows[x], msa.rows[y])]
        if values:
            assert abs(msa.sequence_confidence[x] - np.mean(values)) <= TOL
        else:
            assert np.isnan(msa.sequence_confidence[x])
    assert np.isnan(MultipleAlignment(("a",), ("AC",), "a;", 0.0).sequence_confidence).all()
    lone = align_multiple("ab", ["A", "C"], {(0, 1): np.array([[0.0]])}, consistency=0)
    assert lone.rows == ("A-", "-C") and np.isnan(lone.sequence_confidence).all()


def test_library_aligner_sets_the_threshold_aside_and_keeps_the_decoding():
    """A multiple alignment reads every MEA column, whatever the aligner's threshold, decoded as
    the aligner decodes them (its identity tie-break of close pairs included); the aligner given
    is not changed."""
    tied = Aligner.load(identity_weight=0.05, identity_min=0.7)
    lib = library_aligner(tied)
    assert lib is not tied and lib.min_confidence == 0.0
    assert (lib.identity_weight, lib.identity_min) == (0.05, 0.7)
    assert tied.min_confidence == 0.35 and tied.identity_weight == 0.05
    plain = Aligner.load(min_confidence=0.0, identity_weight=0.0)
    assert library_aligner(plain) is plain


def test_unrelated_records_are_those_with_no_small_evalue():
    from sinkalign.align.msa import unrelated_records

    evalues = {(0, 1): 1e-20, (0, 2): 0.5, (1, 2): 0.2, (0, 3): 1e-3, (1, 3): 0.4, (2, 3): 0.09}
    assert unrelated_records(4, evalues) == []  # 2's best is 0.09, 0.27 as a search of 3: < 0.3, a likely homolog
    assert unrelated_records(4, evalues, threshold=0.05) == [(2, pytest.approx(0.27), 3)]
    assert unrelated_records(4, {**evalues, (2, 3): 0.3}) == [(2, pytest.approx(0.6), 1)]
    assert unrelated_records(4, evalues, 0.05, rule="per comparison") == [(2, 0.09, 3)]  # the rule until 2026-11-29
    assert unrelated_records(4, evalues, 0.1, rule="per comparison") == []
    assert unrelated_records(2, {(0, 1): 5.0}) == []  # two records: nothing to compare against
    assert unrelated_records(4, {**evalues, (1, 2): None}) == []  # a model without a null
    with pytest.raises(InputError, match="rule='bonferroni'"):
        unrelated_records(4, evalues, rule="bonferroni")


def test_an_unrelated_record_is_flagged_whatever_the_family_size():
    """A chance hit at E = 0.05 is what an unrelated record has among a few others (it was kept:
    no warning among 3 records nor among 10); as a search of the others it is 0.1 among 3
    (a likely homolog) and 0.45 among 10 (none): the more records, the more chance hits."""
    from sinkalign.align.msa import unrelated_records

    def family(n):
        evalues = {(x, y): 1e-30 for x in range(1, n) for y in range(x + 1, n)}  # 1 .. n-1: a family
        evalues.update({(0, y): 0.05 if y == 1 else 5.0 for y in range(1, n)})  # 0: one chance hit at 0.05
        return evalues

    assert unrelated_records(3, family(3)) == []
    assert unrelated_records(10, family(10)) == [(0, pytest.approx(0.45), 1)]
    assert unrelated_records(10, family(10), 0.1, rule="per comparison") == []  # the old rule: kept at any size
