"""Banded plans (sinkalign.align.band and NumpyEngine.solve_band) against dense ones.

A corridor covering every cell must give the dense plan, posteriors and alignment; a narrower
one must decode exactly as the dense decoder does with the cells outside it unavailable, and
hold every cell within its radius of the guides.
"""

from __future__ import annotations

import numpy as np
import pytest

from sinkalign.align import model as M
from sinkalign.align.aligner import LONG_BAND, Aligner
from sinkalign.align.band import (
    BandMatrix,
    BandPosteriors,
    band_mea,
    classical_guides,
    corridor,
    guide_corridor,
    hit_box,
    identity_gain_band,
    local_corridor,
)
from sinkalign.align.calibration import column_features, local_share
from sinkalign.align.decode import Posteriors, identity_gain, mea_batch
from sinkalign.align.engine import NumpyEngine
from sinkalign.errors import InputError
from tests.band_reference import band_mea_rows
from tests.test_aligner_engine import LEARNED, _learned_params, _mutate, _random_seq, _separable_params

AA = "ACDEFGHIKLMNPQRSTVWY"


def _random_band(rng, m, n, radius=2, fill=0.7):
    k = int(rng.integers(0, min(m, n) + 1))
    path = np.stack([np.sort(rng.choice(m, k, replace=False)), np.sort(rng.choice(n, k, replace=False))], 1)
    lo, hi = corridor([path], m, n, radius)
    size = int((hi - lo).sum())
    return BandMatrix(lo, hi, rng.random(size) * (rng.random(size) < fill), n)


# ---------------------------------------------------------------------------- BandMatrix


def test_band_matrix_reads_its_cells_and_zero_outside():
    B = BandMatrix(np.array([0, 1, 1, 3]), np.array([2, 3, 3, 5]), np.arange(1.0, 9.0), 5)
    dense = np.array([[1, 2, 0, 0, 0], [0, 3, 4, 0, 0], [0, 5, 6, 0, 0], [0, 0, 0, 7, 8]], float)
    np.testing.assert_array_equal(B.to_dense(), dense)
    np.testing.assert_array_equal(B.to_csr().toarray(), dense)
    i, j = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(B.at(i, j), dense)
    np.testing.assert_array_equal(B.contains(i, j), dense > 0)
    assert B.shape == (4, 5) and B.nnz == 8
    np.testing.assert_array_equal(B.rows, [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(B.cols, [0, 1, 1, 2, 1, 2, 3, 4])
    np.testing.assert_array_equal(B.with_data(2 * B.data).to_dense(), 2 * dense)


@pytest.mark.parametrize("lo, hi, size, match", [
    ([1, 0], [2, 2], 3, "non-decreasing"),
    ([0, 1], [2, 1], 2, "lo <= hi"),
    ([0, 0], [2, 6], 8, "<= n"),
    ([0, 0], [1, 2], 4, "hold the band's 3 cells"),
])
def test_band_matrix_refuses_a_strip_that_is_not_one(lo, hi, size, match):
    with pytest.raises(ValueError, match=match):
        BandMatrix(np.array(lo), np.array(hi), np.zeros(size), 5)


# ---------------------------------------------------------------------------- corridor


@pytest.mark.parametrize("seed", range(6))
def test_corridor_holds_every_cell_near_its_guides_on_its_row_and_is_monotone(seed):
    rng = np.random.default_rng(seed)
    m, n = (int(x) for x in rng.integers(1, 60, 2))
    radius = int(rng.integers(0, 6))
    paths = []
    for _ in range(2):
        k = int(rng.integers(0, min(m, n) + 1))
        paths.append(np.stack([np.sort(rng.choice(m, k, replace=False)), np.sort(rng.choice(n, k, replace=False))], 1))
    lo, hi = corridor([paths[0]], m, n, radius, local=[paths[1]])
    assert np.all(np.diff(lo) >= 0) and np.all(np.diff(hi) >= 0) and np.all(lo <= hi)
    assert lo.min() >= 0 and hi.max() <= n
    inside = np.zeros((m, n), bool)
    for i in range(m):
        inside[i, lo[i] : hi[i]] = True
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    # the global guide runs corner to corner: its two ends count as path points too
    points = np.concatenate([paths[0], paths[1], [[0, 0], [m - 1, n - 1]]])
    for pi, pj in points:
        near = (i == pi) & (np.abs(j - pj) <= radius)
        assert inside[near].all(), (pi, pj)
    # a row strictly between two consecutive points of the global guide (inside a gap of the
    # path) holds every column between them
    for (i0, j0), (i1, j1) in zip(paths[0][:-1], paths[0][1:]):
        for row in range(i0 + 1, i1):
            assert lo[row] <= j0 and hi[row] > j1


def test_corridor_of_a_straight_path_is_a_diagonal_band():
    m = 30
    path = np.stack([np.arange(m), np.arange(m)], 1)
    lo, hi = corridor([path], m, m, 3)
    np.testing.assert_array_equal(lo, np.clip(np.arange(m) - 3, 0, m))
    np.testing.assert_array_equal(hi, np.clip(np.arange(m) + 4, 0, m))
    lo, hi = corridor([path], m, m, m)  # wider than the matrix: every cell
    assert (lo == 0).all() and (hi == m).all()


def test_corridor_errors():
    with pytest.raises(ValueError, match="radius=-1"):
        corridor([np.zeros((0, 2))], 3, 3, -1)
    with pytest.raises(ValueError, match="at least one guide"):
        corridor([], 3, 3, 1, local=[np.zeros((0, 2), np.int64)])


def test_guide_corridor_follows_an_offset_homolog():
    rng = np.random.default_rng(0)
    core = _random_seq(rng, 200)
    query = _random_seq(rng, 150) + core
    target = core + _random_seq(rng, 90)
    lo, hi = guide_corridor(query, target, 8)
    for k in range(0, 200, 17):  # the homologous diagonal i = j + 150 lies inside
        assert lo[150 + k] <= k < hi[150 + k]
    assert int((hi - lo).sum()) < 0.35 * len(query) * len(target)


def _cells(lo, hi, n):
    m = len(lo)
    inside = np.zeros((m, n), bool)
    for i in range(m):
        inside[i, lo[i]:hi[i]] = True
    return inside


@pytest.mark.parametrize("span, margin", [((3, 10, 8, 30), 2), ((0, 0, 19, 39), 5), ((5, 35, 5, 35), 0),
                                          ((12, 2, 17, 6), 4)])
def test_hit_box_is_the_rectangle_around_the_local_span(span, margin):
    i0, j0, i1, j1 = span
    m, n = 20, 40
    local = np.array([[i0, j0], [(i0 + i1) // 2, (j0 + j1) // 2], [i1, j1]])
    lo, hi = hit_box(local, m, n, margin)
    BandMatrix(lo, hi, np.zeros(int((hi - lo).sum())), n)  # a valid strip: monotone, in range
    want = np.zeros((m, n), bool)
    want[max(0, i0 - margin):i1 + 1 + margin, max(0, j0 - margin):j1 + 1 + margin] = True
    np.testing.assert_array_equal(_cells(lo, hi, n), want)


def test_hit_box_and_local_corridor_errors_and_empty_hits():
    assert hit_box(np.zeros((0, 2), np.int64), 5, 9, 1) is None
    assert local_corridor({"sw": np.zeros((0, 2), np.int64), "nw": np.zeros((0, 2))}, 5, 9, 1, 3) is None
    with pytest.raises(ValueError, match="margin=-1"):
        hit_box(np.array([[0, 0]]), 5, 9, -1)


def test_local_corridor_with_a_radius_is_the_box_and_the_local_guides_corridor():
    rng = np.random.default_rng(8)
    core = _random_seq(rng, 60)
    query, target = _mutate(rng, core), _random_seq(rng, 200) + core + _random_seq(rng, 150)
    guides = classical_guides(query, target)
    m, n = len(query), len(target)
    box = _cells(*local_corridor(guides, m, n, 6), n)
    ring = _cells(*corridor([], m, n, 4, local=[guides["sw"]]), n)
    lo, hi = local_corridor(guides, m, n, 6, 4)
    BandMatrix(lo, hi, np.zeros(int((hi - lo).sum())), n)
    np.testing.assert_array_equal(_cells(lo, hi, n), box & ring)
    assert box[:, 200:200 + 50].any(axis=1).mean() > 0.9  # the box is where the homolog is
    assert not box[:, :150].any() and not box[:, 270:].any()


# ---------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("gap_weight", [0.0, 0.4])
def test_band_mea_is_the_dense_decoder_with_the_outside_unavailable(gap_weight):
    rng = np.random.default_rng(5)
    for trial in range(150):
        m, n = (int(x) for x in rng.integers(1, 25, 2))
        B = _random_band(rng, m, n, radius=int(rng.integers(0, 4)))
        qg, tg = rng.random(m), rng.random(n)
        dense = mea_batch([Posteriors(B.to_dense(), qg, tg)], gap_weight=gap_weight)[0]
        got = band_mea(BandPosteriors(B, qg, tg), gap_weight=gap_weight)
        np.testing.assert_array_equal(got.pairs, dense.pairs, err_msg=str(trial))
        np.testing.assert_array_equal(got.match_posterior, dense.match_posterior)
        assert got.score == pytest.approx(dense.score, rel=1e-13, abs=1e-13)
        assert got.expected_accuracy == pytest.approx(dense.expected_accuracy, rel=1e-13)


def test_band_mea_bonus_is_the_dense_decoders_and_the_identity_gain_on_the_band():
    """With a bonus on the band's cells (an identity tie-break), the banded decoder is the dense
    one with the same bonus (0 outside), and identity_gain_band is identity_gain on the cells."""
    rng = np.random.default_rng(6)
    for trial in range(100):
        m, n = (int(x) for x in rng.integers(1, 25, 2))
        B = _random_band(rng, m, n, radius=int(rng.integers(0, 4)))
        query, target = _random_seq(rng, m, "ACGT"), _random_seq(rng, n, "ACGT")
        qg, tg = rng.random(m), rng.random(n)
        ident = identity_gain_band(query, target, B, "dna")
        np.testing.assert_array_equal(ident, identity_gain(query, target, "dna")[B.rows, B.cols])
        bonus = 0.3 * ident
        dense_bonus = B.with_data(bonus).to_dense()
        dense = mea_batch([Posteriors(B.to_dense(), qg, tg)], gap_weight=0.2, bonus=[dense_bonus])[0]
        got = band_mea(BandPosteriors(B, qg, tg), gap_weight=0.2, bonus=bonus)
        np.testing.assert_array_equal(got.pairs, dense.pairs, err_msg=str(trial))
        np.testing.assert_array_equal(got.match_posterior, dense.match_posterior)
        assert got.score == pytest.approx(dense.score, rel=1e-13, abs=1e-13)
    with pytest.raises(ValueError, match=r"bonus must be finite with one entry per band cell \(4\)"):
        band_mea(BandPosteriors(BandMatrix(np.array([0, 1]), np.array([2, 3]), np.ones(4), 3), np.zeros(2),
                                np.zeros(3)), bonus=np.zeros(3))


def test_band_mea_handles_empty_rows_and_ties():
    # rows 1 and 2 have no cells; equal posteriors everywhere (ties go to gaps, as densely)
    B = BandMatrix(np.array([0, 2, 2, 2]), np.array([2, 2, 2, 4]), np.full(4, 0.5), 4)
    qg, tg = np.zeros(4), np.zeros(4)
    dense = mea_batch([Posteriors(B.to_dense(), qg, tg)], gap_weight=0.0)[0]
    got = band_mea(BandPosteriors(B, qg, tg))
    np.testing.assert_array_equal(got.pairs, dense.pairs)
    np.testing.assert_array_equal(got.pairs, [[0, 0], [3, 2]])  # the traceback leaves each tie by a gap
    assert band_mea(BandPosteriors(B.with_data(np.zeros(4)), qg, tg)).pairs.shape == (0, 2)
    with pytest.raises(ValueError, match="gap_weight"):
        band_mea(BandPosteriors(B, qg, tg), gap_weight=-1)


def _awkward_strip(rng, m, n):
    """``(lo, hi)`` of one of several kinds of strip: a corridor of up to three guides (a local
    one too), any monotone strip (empty rows, rows that skip past the row above's band), a
    hit box (empty rows above and below), every cell, or radius 0 around one path."""
    kind = rng.integers(5)
    if kind == 0:
        paths = [np.stack([np.sort(rng.choice(m, k, replace=False)), np.sort(rng.choice(n, k, replace=False))], 1)
                 for k in rng.integers(0, min(m, n) + 1, int(rng.integers(1, 4)))]
        return corridor(paths[:1], m, n, int(rng.integers(0, 4)), local=paths[1:])
    if kind == 1:
        lo, hi = np.sort(rng.integers(0, n + 1, m)), np.sort(rng.integers(0, n + 1, m))
        return lo, np.maximum(lo, hi)
    if kind == 2:
        i0, j0 = int(rng.integers(m)), int(rng.integers(n))
        span = np.array([[i0, j0], [int(rng.integers(i0, m)), int(rng.integers(j0, n))]])
        return hit_box(span, m, n, int(rng.integers(0, 3)))
    if kind == 3:
        return np.zeros(m, np.int64), np.full(m, n, np.int64)
    k = min(m, n)
    return corridor([np.stack([np.sort(rng.choice(m, k, replace=False)), np.sort(rng.choice(n, k, replace=False))], 1)],
                    m, n, 0)


def _posterior_values(rng, size, kind):
    if kind == "random":
        return rng.random(size)
    if kind == "sparse":
        return rng.random(size) * (rng.random(size) < 0.3)
    if kind == "equal":  # every path of a length ties
        return np.full(size, 0.25)
    return rng.integers(0, 4, size) / 8.0  # "levels": a few values, many ties, zeros among them


@pytest.mark.parametrize("gap_weight", [0.0, 0.4])
@pytest.mark.parametrize("values", ["random", "sparse", "equal", "levels"])
def test_band_mea_is_its_row_by_row_reference_bit_for_bit_on_awkward_strips(values, gap_weight):
    rng = np.random.default_rng([7, ["random", "sparse", "equal", "levels"].index(values), int(10 * gap_weight)])
    seen = {"m = 1": 0, "n = 1": 0, "empty row": 0, "row past the band above": 0, "every cell": 0,
            "both edges": 0, "aligned": 0}
    for trial in range(160):
        m, n = (int(rng.choice([1, 2, 3, int(rng.integers(4, 30))])) for _ in range(2))
        lo, hi = _awkward_strip(rng, m, n)
        B = BandMatrix(lo, hi, _posterior_values(rng, int((hi - lo).sum()), values), n)
        post = BandPosteriors(B, _posterior_values(rng, m, values), _posterior_values(rng, n, values))
        got = band_mea(post, gap_weight=gap_weight)
        want = band_mea_rows(post, gap_weight=gap_weight)
        np.testing.assert_array_equal(got.pairs, want.pairs, err_msg=f"{trial=}")
        np.testing.assert_array_equal(got.match_posterior, want.match_posterior)
        assert got.score == want.score and got.expected_accuracy == want.expected_accuracy, trial
        # and the dense decoder with the cells outside at zero (never better than a gap there)
        dense = mea_batch([Posteriors(B.to_dense(), post.query_gap, post.target_gap)], gap_weight=gap_weight)[0]
        np.testing.assert_array_equal(got.pairs, dense.pairs, err_msg=f"{trial=}")
        seen["m = 1"] += m == 1
        seen["n = 1"] += n == 1
        seen["empty row"] += bool((lo == hi).any())
        seen["row past the band above"] += bool((lo[1:] > hi[:-1]).any())
        seen["every cell"] += B.nnz == m * n
        seen["both edges"] += lo[0] == 0 and hi[-1] == n and B.nnz < m * n
        seen["aligned"] += len(got.pairs) > 0
    assert min(seen.values()) >= 5, seen  # the awkward cases were all there


def test_band_mea_keeps_the_ties_to_gaps_on_a_long_banded_pair():
    # a long strip of equal posteriors (every path of a length ties) and one quantised to 3 levels
    rng = np.random.default_rng(11)
    m, n = 400, 430
    path = np.stack([np.sort(rng.choice(m, 300, replace=False)), np.sort(rng.choice(n, 300, replace=False))], 1)
    lo, hi = corridor([path], m, n, 6)
    for data in (np.full(int((hi - lo).sum()), 0.5), rng.integers(0, 3, int((hi - lo).sum())) / 2.0):
        for gap_weight in (0.0, 1.0):
            post = BandPosteriors(BandMatrix(lo, hi, data, n), rng.integers(0, 3, m) / 4.0, rng.integers(0, 3, n) / 4.0)
            got, want = band_mea(post, gap_weight=gap_weight), band_mea_rows(post, gap_weight=gap_weight)
            np.testing.assert_array_equal(got.pairs, want.pairs)
            assert got.score == want.score and len(got.pairs) > 50


def test_column_features_read_a_band_as_its_dense_matrix():
    rng = np.random.default_rng(2)
    query = _random_seq(rng, 40)
    target = _mutate(rng, query)
    lo, hi = guide_corridor(query, target, 3)
    B = BandMatrix(lo, hi, rng.random(int((hi - lo).sum())), len(target))
    aln = band_mea(BandPosteriors(B, rng.random(len(query)), rng.random(len(target))))
    assert len(aln.pairs) > 10 and (B.to_dense() == 0).any()
    np.testing.assert_array_equal(local_share(B, aln.pairs), local_share(B.to_dense(), aln.pairs))
    want = column_features(aln, B.to_dense(), query, target)
    np.testing.assert_array_equal(column_features(aln, B, query, target), want)
    # the baselines given (as the aligner passes a banded pair's guides) or computed: the same features
    guides = classical_guides(query, target)
    np.testing.assert_array_equal(column_features(aln, B, query, target, baselines=guides), want)
    moved = {"nw": np.zeros((0, 2), np.int64), "sw": guides["sw"]}  # and they are read: another NW, other features
    assert not np.array_equal(column_features(aln, B, query, target, baselines=moved), want)


# ---------------------------------------------------------------------------- the engine


def _engines():
    out = []
    for model in ("triangular", "learned+symmetric", "banded-model"):
        extra = LEARNED if model.startswith("learned") else {}
        settings = dict(window=4, eps=0.5, band=12) if model == "banded-model" else dict(window=6, eps=2.0)
        config = M.AlignerConfig.create(embedder={"name": "none"}, feature_dim=0, dustbin="banded",
                                        symmetric=model.endswith("symmetric"), **settings, **extra)
        rng = np.random.default_rng(len(model))
        params = _learned_params(config, rng) if extra else _separable_params(config, rng, dustbins=True)
        out.append(pytest.param(NumpyEngine.from_model(params, config), id=model))
    return out


@pytest.mark.parametrize("engine", _engines())
@pytest.mark.parametrize("m, n", [(1, 1), (1, 40), (40, 1), (97, 130), (150, 71)])
def test_a_corridor_of_every_cell_gives_the_dense_plan_and_posteriors(engine, m, n):
    rng = np.random.default_rng(m * 1000 + n)
    query = _random_seq(rng, m)
    target = (_mutate(rng, query) + _random_seq(rng, n))[:n]
    sq, st = engine.sides_many([query, target])
    dense = engine.solve_sides(sq, st)
    band = engine.solve_band(sq, st, np.zeros(m, np.int64), np.full(m, n))
    P = dense.plan()
    real, query_dustbin, target_dustbin = band.plan()
    np.testing.assert_allclose(real.to_dense(), P[:m, :n], rtol=1e-11, atol=1e-14 * P.max())
    np.testing.assert_allclose(query_dustbin, P[:m, n], rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(target_dustbin, P[m, :n], rtol=1e-10, atol=(m + 1) * 1e-15)
    want, got = dense.posteriors(), band.posteriors()
    np.testing.assert_allclose(got.match.to_dense(), want.match, rtol=1e-11, atol=1e-15)
    for name in ("query_gap", "target_gap"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-10, atol=(max(m, n) + 1) * 1e-15)


@pytest.mark.parametrize("engine", _engines())
def test_a_narrow_corridor_is_the_dense_solve_with_the_outside_at_minus_infinity(engine):
    """The reference: the dense scores with the cells outside the corridor set to -inf (the
    dense engine's own masked solve), solved densely."""
    rng = np.random.default_rng(4)
    query = _random_seq(rng, 120)
    target = _mutate(rng, query[10:110])
    m, n = len(query), len(target)
    lo, hi = guide_corridor(query, target, 5)
    sq, st = engine.sides_many([query, target])
    S = engine.scores(sq, st)
    outside = np.ones((m, n), bool)
    for i in range(m):
        outside[i, lo[i] : hi[i]] = False
    S[:m, :n][outside] = -np.inf
    P = engine.solve_scores(S).plan()
    real, query_dustbin, _ = engine.solve_band(sq, st, lo, hi).plan()
    np.testing.assert_allclose(real.to_dense(), P[:m, :n], rtol=1e-11, atol=1e-14 * P.max())
    np.testing.assert_allclose(query_dustbin, P[:m, n], rtol=1e-11, atol=1e-14)


def test_spread_out_scores_take_the_log_domain_on_a_corridor_too(monkeypatch):
    import sinkalign.align.engine as E

    config = M.AlignerConfig.create(embedder={"name": "none"}, feature_dim=0, dustbin="banded", window=4, eps=0.01,
                                    **LEARNED)
    rng = np.random.default_rng(8)
    engine = NumpyEngine.from_model(_learned_params(config, rng), config)
    calls = []
    real_solve = E._band_log_domain_solve
    monkeypatch.setattr(E, "_band_log_domain_solve", lambda *a: calls.append(1) or real_solve(*a))
    query = _random_seq(rng, 60)
    target = _mutate(rng, query)
    m, n = len(query), len(target)
    sq, st = engine.sides_many([query, target])
    for lo, hi in [(np.zeros(m, np.int64), np.full(m, n)), guide_corridor(query, target, 3)]:
        S = engine.scores(sq, st)
        for i in range(m):
            S[i, : lo[i]] = S[i, hi[i] : n] = -np.inf
        P = engine.solve_scores(S).plan()
        got = engine.solve_band(sq, st, lo, hi)
        real, query_dustbin, target_dustbin = got.plan()
        np.testing.assert_allclose(real.to_dense(), P[:m, :n], rtol=1e-9, atol=1e-12 * P.max())
        np.testing.assert_allclose(query_dustbin, P[:m, n], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(target_dustbin, P[m, :n], rtol=1e-9, atol=1e-12)
    assert len(calls) == 2


def test_solve_band_checks_its_corridor():
    engine = Aligner.load("blosum")._numpy
    sides = engine.sides_many(["MKV", "MKVL"])
    with pytest.raises(ValueError, match=r"lo and hi must be \[3\]"):
        engine.solve_band(*sides, np.zeros(2, np.int64), np.full(2, 4))


# ---------------------------------------------------------------------------- the aligner


@pytest.mark.parametrize("name", ["learned", "blosum", "dna"])
def test_an_aligner_band_wider_than_the_pair_gives_the_dense_results(name):
    rng = np.random.default_rng(1)
    letters = "ACGT" if name == "dna" else AA
    anc = _random_seq(rng, 260, letters)
    items = [("a", anc[:200], "b", _mutate(rng, anc[30:260], alphabet=letters)),
             ("c", anc[:9], "d", anc[100:250]), ("e", "W" if name != "dna" else "A", "f", anc[:40])]
    dense = list(Aligner.load(name, band="dense").align_many(items))
    banded = list(Aligner.load(name, band=300).align_many(items))
    for d, b in zip(dense, banded):
        np.testing.assert_array_equal(b.alignment.pairs, d.alignment.pairs)
        np.testing.assert_allclose(b.alignment.match_posterior, d.alignment.match_posterior, rtol=1e-9)
        assert b.score == pytest.approx(d.score, rel=1e-9)
        if d.evalue is not None:
            assert b.evalue == pytest.approx(d.evalue, rel=1e-6)
        assert b.strand == d.strand


def test_a_long_pair_is_aligned_on_a_corridor_by_default(monkeypatch):
    import sinkalign.align.aligner as A

    rng = np.random.default_rng(3)
    anc = _random_seq(rng, 900)
    items = [("s", anc[:50], "t", anc[:60]), ("long", anc, "long2", _mutate(rng, anc, rate=0.2)),
             ("s2", anc[100:140], "t2", anc[90:150])]
    dense = list(Aligner.load("learned", workers=1).align_many(items))
    # the long pair is past it, the short ones are not
    monkeypatch.setattr(A, "AUTO_BAND_CELLS", 300_000)
    calls = []
    aligner = Aligner.load("learned", workers=1)
    real_task = aligner._band_task
    monkeypatch.setattr(aligner, "_band_task",
                        lambda item, keep: calls.append({item[0], item[2]}) or real_task(item, keep))
    got = list(aligner.align_many(items))
    assert calls == [{"long", "long2"}]  # (the symmetric model may take a pair the other way round)
    assert [r.query_id for r in got] == ["s", "long", "s2"]
    for d, g in zip(dense, got):  # a well-aligned pair keeps its alignment on the default corridor
        shared = {tuple(p) for p in d.alignment.pairs} & {tuple(p) for p in g.alignment.pairs}
        assert len(shared) >= 0.97 * len(d.alignment.pairs), d.query_id
    np.testing.assert_array_equal(got[0].alignment.pairs, dense[0].alignment.pairs)
    assert LONG_BAND >= 32
    # band="dense" keeps every pair dense: the dense results exactly
    calls.clear()
    forced = Aligner.load("learned", workers=1, band="dense")
    monkeypatch.setattr(forced, "_band_task", lambda item, keep: calls.append(item) or None)
    for d, g in zip(dense, forced.align_many(items)):
        np.testing.assert_array_equal(g.alignment.pairs, d.alignment.pairs)
    assert calls == []
    # and a pair past the dense limit is then an error, naming it
    monkeypatch.setattr(A, "MAX_CELLS", 300_000)
    with pytest.raises(InputError, match=r"pair long / long2: 900 x \d+ residues make .* more than the 300,000 the "
                                         r"aligner takes \(its plan is dense: O\(m n\) memory; without band='dense'"):
        list(forced.align_many(items))


def test_a_banded_plan_is_kept_dense_with_zeros_outside_its_corridor(monkeypatch):
    import sinkalign.align.aligner as A

    rng = np.random.default_rng(6)
    anc = _random_seq(rng, 150)
    query, target = _mutate(rng, anc[10:]), anc  # the shorter first: the symmetric model keeps the order
    aligner = Aligner.load("learned", band=4)
    got = aligner.align(query, target, keep_plan=True)
    engine = aligner._numpy
    sq, st = engine.sides_many([query, target])
    lo, hi = guide_corridor(query, target, 4)
    real, query_dustbin, target_dustbin = engine.solve_band(sq, st, lo, hi).plan()
    m, n = len(query), len(target)
    assert got.plan.shape == (m + 1, n + 1)
    # (to rounding: the aligner runs BLAS on one thread)
    np.testing.assert_allclose(got.plan[:m, :n], real.to_dense(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(got.plan[:m, n], query_dustbin, rtol=1e-12)
    np.testing.assert_allclose(got.plan[m, :n], target_dustbin, rtol=1e-10, atol=1e-15)
    assert (got.plan[:m, :n] == 0).sum() > 0.5 * m * n  # outside the corridor
    monkeypatch.setattr(A, "MAX_CELLS", 1000)  # too large to keep densely: named
    with pytest.raises(InputError, match=r"pair q / t: its plan \(a corridor of \d+ x 150 residues\) is too large to keep"):
        aligner.align(query, target, query_id="q", target_id="t", keep_plan=True)


def test_band_errors_name_the_pair_and_the_reason(monkeypatch):
    import sinkalign.align.aligner as A

    with pytest.raises(InputError, match="band=-1 must be a whole number of residues >= 0, 'dense' or None"):
        Aligner.load("blosum", band=-1)
    with pytest.raises(InputError, match="band=True must be a whole number"):
        Aligner.load("blosum", band=True)
    with pytest.raises(InputError, match="band='wide' must be a whole number"):
        Aligner.load("blosum", band="wide")
    with pytest.raises(InputError, match=r"band=8: banded plans need a model the numpy engine runs, and this one "
                                         r"cannot \(backend='pallas'\)"):
        Aligner.load("blosum", backend="pallas", band=8)
    assert Aligner.load("blosum", engine="jax", band="dense").band == "dense"
    assert Aligner.load("blosum", engine="jax", band=8).band == 8  # its pairs on the host, as the numpy engine's
    aligner = Aligner.load("blosum", band=8)
    monkeypatch.setattr(A, "MAX_CELLS", 30)
    with pytest.raises(InputError, match=r"pair q / t: its corridor of \+-8 residues holds \d+ residue pairs, more "
                                         r"than the 30"):
        aligner.align("MKVLAGHWERTY", "MKVLAGHWERTY", query_id="q", target_id="t")
    # found after a symmetric model turned the pair round (the shorter first): named as given
    with pytest.raises(InputError, match=r"pair long / short: its corridor of \+-8 residues holds \d+"):
        aligner.align("MKVLAGHWERTYAAGH", "MKVLAGHWERTY", query_id="long", target_id="short")
    monkeypatch.setattr(A, "MAX_PAIR_CELLS", 50)
    with pytest.raises(InputError, match=r"pair q / t: 5 x 12 residues make 60 residue pairs, more than the 50 "
                                         r"the aligner takes \(the classical alignments that guide"):
        aligner.align("MKVLA", "MKVLAGHWERTY", query_id="q", target_id="t")


@pytest.mark.parametrize("name, kind", [("dna", "dna"), ("learned", "protein"), ("blosum", "protein")])
def test_the_guides_score_as_the_models_alphabet(name, kind, monkeypatch):
    """A nucleotide model's corridor follows +-2/-3 alignments, a protein model's BLOSUM62 ones
    (whatever its calibration's own kind: the shipped DNA calibration reads no baselines)."""
    import sinkalign.align.aligner as A

    seen = []
    real = A.classical_guides
    monkeypatch.setattr(A, "classical_guides", lambda q, t, kind: seen.append(kind) or real(q, t, kind=kind))
    letters = "ACGT" if kind == "dna" else AA
    anc = _random_seq(np.random.default_rng(2), 120, letters)
    Aligner.load(name, band=8, strand="plus" if kind == "dna" else None).align(anc, anc[5:])
    assert seen == [kind]


def _buried(rng, length=120, left=900, right=700, rate=0.25):
    """A protein against a mutated copy of it buried in random residues, and the copy's offset."""
    core = _random_seq(rng, length)
    copy = "".join(rng.choice(list(AA)) if rng.random() < rate else c for c in core)  # no indels: truth i -> i + left
    return core, _random_seq(rng, left) + copy + _random_seq(rng, right), left


def test_a_lopsided_pair_is_solved_in_the_box_around_its_local_hit_by_default(monkeypatch):
    import math

    import sinkalign.align.aligner as A

    rng = np.random.default_rng(11)
    query, target, left = _buried(rng)
    m, n = len(query), len(target)
    assert A.lopsided(m, n) and not A.lopsided(100, 199) and A.lopsided(100, 200) and A.lopsided(200, 100)
    aligner = Aligner.load("learned", workers=1)
    seen = []
    real_solve = NumpyEngine.solve_band
    monkeypatch.setattr(NumpyEngine, "solve_band",
                        lambda self, a, b, lo, hi: seen.append((lo, hi)) or real_solve(self, a, b, lo, hi))
    got = aligner.align(query, target, keep_plan=True)
    guides = classical_guides(query, target)
    lo, hi = local_corridor(guides, m, n, math.ceil(A.BOX_MARGIN * m))
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0][0], lo)
    np.testing.assert_array_equal(seen[0][1], hi)
    assert not got.plan[:m, :n][~_cells(lo, hi, n)].any()  # nothing outside the box
    truth = {(i, i + left) for i in range(m)}
    found = {tuple(p) for p in got.alignment.pairs}
    assert len(found & truth) >= 0.9 * m and len(found - truth) <= 0.05 * m
    # band="dense" solves the whole pair, as before: its plan spreads over the random residues
    dense = Aligner.load("learned", workers=1, band="dense").align(query, target, keep_plan=True)
    assert dense.plan[:m, :n][~_cells(lo, hi, n)].sum() > 1e3 * got.plan[:m, :n][~_cells(lo, hi, n)].sum()
    # the pair given the other way round: the same alignment turned round (the symmetric model)
    turned = aligner.align(target, query)
    np.testing.assert_array_equal(turned.alignment.pairs, got.alignment.pairs[:, ::-1])
    assert turned.evalue == got.evalue


def test_a_long_box_gets_a_corridor_inside_it_and_a_hitless_pair_its_size_default(monkeypatch):
    import math

    import sinkalign.align.aligner as A

    rng = np.random.default_rng(12)
    query, target, _ = _buried(rng, length=80, left=200, right=150)
    m, n = len(query), len(target)
    monkeypatch.setattr(A, "AUTO_BAND_CELLS", 3000)  # the box (about 96 x 96) is "long"
    aligner = Aligner.load("learned", workers=1)
    seen = []
    real_solve = NumpyEngine.solve_band
    monkeypatch.setattr(NumpyEngine, "solve_band",
                        lambda self, a, b, lo, hi: seen.append((lo, hi)) or real_solve(self, a, b, lo, hi))
    aligner.align(query, target)
    want = local_corridor(classical_guides(query, target), m, n, math.ceil(A.BOX_MARGIN * m), A.LONG_BAND)
    np.testing.assert_array_equal(seen[-1][0], want[0])
    np.testing.assert_array_equal(seen[-1][1], want[1])
    # no local hit (W against prolines scores below zero everywhere): a small pair is solved whole,
    # a long one on the guides' corridor
    monkeypatch.setattr(A, "AUTO_BAND_CELLS", 1024 * 1024)
    for name in ("learned", "blosum"):
        dense = Aligner.load(name, band="dense").align("W", "P" * 40)
        got = Aligner.load(name).align("W", "P" * 40)
        np.testing.assert_array_equal(got.alignment.pairs, dense.alignment.pairs)
        np.testing.assert_allclose(got.alignment.match_posterior, dense.alignment.match_posterior, rtol=1e-9)
    seen.clear()
    monkeypatch.setattr(A, "AUTO_BAND_CELLS", 30)
    aligner.align("W", "P" * 40)
    want = guide_corridor("W", "P" * 40, A.LONG_BAND)
    np.testing.assert_array_equal(seen[-1][0], want[0])
    np.testing.assert_array_equal(seen[-1][1], want[1])


def test_a_box_too_large_is_named(monkeypatch):
    import sinkalign.align.aligner as A

    rng = np.random.default_rng(13)
    query, target, _ = _buried(rng, length=40, left=60, right=60)
    monkeypatch.setattr(A, "MAX_CELLS", 500)
    with pytest.raises(InputError, match=r"pair q / t: its box around its Smith-Waterman hit \(\+-4 residues\) holds "
                                         r"[\d,]+ residue pairs, more than the 500"):
        Aligner.load("blosum").align(query, target, query_id="q", target_id="t")
