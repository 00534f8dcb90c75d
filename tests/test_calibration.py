"""Calibrated confidences: isotonic knots, the Calibration map, its fit, and `sinkalign calibrate`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.align.aligner import Aligner
from sinkalign.align.calibration import Calibration, fit_calibration, isotonic_knots, local_share
from sinkalign.align.decode import Alignment, mea_align, plan_posteriors
from sinkalign.cli.main import cli
from sinkalign.errors import InputError


def _pav(y, w):
    """Pool-adjacent-violators by hand: the isotonic least-squares fit of y with weights w."""
    blocks = []  # [value, weight, count]
    for v, wt in zip(y, w):
        blocks.append([v, wt, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return np.concatenate([[v] * c for v, _, c in blocks])


def test_isotonic_knots_reproduce_the_pav_fit():
    rng = np.random.default_rng(0)
    x = rng.random(300)
    y = (rng.random(300) < x**2).astype(float)
    xs, ys = isotonic_knots(x, y, max_knots=1000)
    order = np.argsort(x)
    fit = _pav(y[order], np.ones(300))
    # every point's fitted value is its block's value; knots sit inside their blocks
    assert np.all(np.diff(xs) > 0) and np.all(np.diff(ys) >= 0)
    blocks = np.unique(fit)
    assert np.allclose(sorted(ys), blocks)
    for value in blocks:
        members = x[order][fit == value]
        assert members.min() <= xs[list(np.isclose(ys, value)).index(True)] <= members.max()
    few_x, few_y = isotonic_knots(x, y, max_knots=4)
    assert len(few_x) == 4 and np.all(np.diff(few_x) > 0) and np.all(np.diff(few_y) >= 0)


def test_isotonic_knots_errors():
    with pytest.raises(ValueError, match="non-empty and of equal size"):
        isotonic_knots([], [])
    with pytest.raises(ValueError, match="finite"):
        isotonic_knots([0.1, np.nan], [0, 1])
    with pytest.raises(ValueError, match="max_knots=1 must be >= 2"):
        isotonic_knots([0.1, 0.2], [0, 1], max_knots=1)


def _toy_alignment():
    plan = np.zeros((4, 4))
    plan[0, 0], plan[1, 1], plan[2, 2] = 0.9, 0.5, 0.2
    plan[:3, 3] = [0.1, 0.5, 0.8]
    plan[3, :3] = [0.1, 0.5, 0.8]
    return mea_align(plan, gap_weight=0.0)


def test_calibration_maps_posteriors_and_recomputes_expected_accuracy():
    aln = _toy_alignment()
    cal = Calibration(match_x=[0.0, 1.0], match_y=[0.2, 0.6], gap_x=[0.5], gap_y=[0.9], match_feature="posterior")
    out = cal.apply(aln)
    np.testing.assert_array_equal(out.pairs, aln.pairs)
    np.testing.assert_allclose(out.match_posterior, 0.2 + 0.4 * aln.match_posterior)
    np.testing.assert_allclose(out.query_gap_posterior, 0.9)
    unaligned = 3 - len(aln.pairs)
    expect = (2 * out.match_posterior.sum() + 2 * 0.9 * unaligned) / 6
    assert out.expected_accuracy == pytest.approx(expect)
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


def test_local_share_by_hand_and_the_matrix_it_needs():
    M = np.array([[0.5, 0.1, 0.0, 0.0],
                  [0.1, 0.2, 0.1, 0.0],
                  [0.0, 0.0, 0.0, 0.4]])
    pairs = np.array([[0, 0], [1, 1], [2, 3]])
    got = local_share(M, pairs, radius=1)
    row = [0.6, 0.4, 0.4]  # window sums along rows (j - 1 .. j + 1, clipped)
    col = [0.6, 0.3, 0.4]  # and along columns
    np.testing.assert_allclose(got, [0.5 / np.sqrt(row[0] * col[0]), 0.2 / np.sqrt(row[1] * col[1]),
                                     0.4 / np.sqrt(row[2] * col[2])])
    assert local_share(np.zeros((2, 2)), np.array([[0, 0]])).tolist() == [0.0]
    cal = Calibration(match_x=[0.0, 1.0], match_y=[0.0, 1.0], gap_x=[0.5], gap_y=[0.9])
    with pytest.raises(ValueError, match="needs the match posterior matrix"):
        cal.apply(_toy_alignment())
    with pytest.raises(ValueError, match="match_feature='peak' is not one of"):
        Calibration(match_x=[0.0], match_y=[0.0], gap_x=[0.5], gap_y=[0.9], match_feature="peak")


def test_local_share_is_the_prefix_sum_formula():
    """Window sums of the 2r+1 neighbours against differences of full prefix sums."""
    rng = np.random.default_rng(4)
    for m, n, r in [(1, 1, 3), (5, 40, 3), (40, 5, 0), (60, 70, 5)]:
        M = rng.random((m, n)) ** 4
        pairs = np.stack([rng.integers(0, m, 30), rng.integers(0, n, 30)], 1)
        row_cs = np.pad(np.cumsum(M, axis=1), ((0, 0), (1, 0)))
        col_cs = np.pad(np.cumsum(M, axis=0), ((1, 0), (0, 0)))
        i, j = pairs.T
        R = row_cs[i, np.minimum(j + r + 1, n)] - row_cs[i, np.maximum(j - r, 0)]
        C = col_cs[np.minimum(i + r + 1, m), j] - col_cs[np.maximum(i - r, 0), j]
        np.testing.assert_allclose(local_share(M, pairs, r), np.minimum(M[i, j] / np.sqrt(R * C), 1.0), rtol=1e-12)
    with pytest.raises(ValueError, match=r"pairs must index the \[5, 40\] match matrix"):
        local_share(rng.random((5, 40)), np.array([[5, 0]]))


@pytest.mark.parametrize("kw, msg", [
    (dict(match_x=[0.1, 0.1], match_y=[0.1, 0.2]), "increasing x"),
    (dict(match_x=[0.1, 0.2], match_y=[0.3, 0.2]), "non-decreasing y"),
    (dict(match_x=[0.1], match_y=[1.5]), r"lie in \[0, 1\]"),
    (dict(match_x=[], match_y=[]), "non-empty and paired"),
])
def test_calibration_validation(kw, msg):
    base = dict(match_x=[0.1], match_y=[0.5], gap_x=[0.1], gap_y=[0.5])
    with pytest.raises(ValueError, match=msg):
        Calibration(**{**base, **kw})
    with pytest.raises(ValueError, match="unknown calibration keys"):
        Calibration.from_dict({**base, "slope": 1})


def test_fit_calibration_recovers_a_known_reliability():
    """Columns with raw posterior p are right with probability 0.3 (p < 0.5) or 0.9 (p >= 0.5)."""
    rng = np.random.default_rng(1)
    alns, refs = [], []
    for _ in range(400):
        p = rng.random(2)
        aln = Alignment(np.array([[0, 0], [1, 1]]), p, np.array([0.5, 0.5, 0.5]), np.array([0.5, 0.5, 0.5]),
                        0.0, 0.0)
        right = rng.random(2) < np.where(p < 0.5, 0.3, 0.9)
        refs.append(np.array([(i, i) for i in range(2) if right[i]], dtype=np.int64).reshape(-1, 2))
        alns.append(aln)
    cal = fit_calibration(alns, refs, max_knots=8, match_feature="posterior")
    assert cal.match(0.2) == pytest.approx(0.3, abs=0.08)
    assert cal.match(0.8) == pytest.approx(0.9, abs=0.08)
    with pytest.raises(ValueError, match="at least one alignment"):
        fit_calibration([], [], match_feature="posterior")
    with pytest.raises(ValueError, match="needs the match posterior matrices"):
        fit_calibration(alns, refs)


def test_calibrate_on_pairs_with_nothing_left_unaligned_is_a_one_line_error(tmp_path):
    """A family of identical sequences: the model aligns every residue, and there is nothing to fit
    the unaligned side on (it was a traceback from fit_calibration's ValueError)."""
    from tests.cli_errors import assert_one_line_error

    same = tmp_path / "ident.sto"
    same.write_text("# STOCKHOLM 1.0\n#=GF ID ident\n" + "".join(f"A{k} ACDEFGHIKLMNPQRSTVWY\n" for k in range(3))
                    + "//\n")
    r = CliRunner().invoke(cli, ["calibrate", "--model", "learned", "--reference", str(same), "-o",
                                 str(tmp_path / "out")])
    assert_one_line_error(r, "need aligned columns and unaligned residues to fit, got 60 and 0", "more varied")
    assert not (tmp_path / "out").exists()


def test_calibrate_cli_writes_a_model_that_aligns_with_calibrated_confidences(tmp_path):
    from tests.aligner_fixtures import make_families

    fams = make_families(tmp_path / "fams", n_families=2, n_seqs=4, length=40)
    out = tmp_path / "calibrated"
    args = ["calibrate", "--reference", str(fams[0]), "--reference", str(fams[1]), "--knots", "6", "-o", str(out)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    state = json.loads((out / "state.json").read_text())
    assert len(state["calibration"]["match_x"]) <= 6 and "12 pairs of fam0.sto, fam1.sto" in state["provenance"]
    # the shipped model's close maps were fitted with its old calibration: not carried over, and said so
    assert state["calibration"]["close"] is None
    assert "close maps of the model's old calibration" in " ".join(r.output.split())
    # 12 pairs are few: said (it wrote the model without a word, on one pair too)
    assert "warning: 12 pairs and" in r.output and "are few to calibrate on" in " ".join(r.output.split())
    res = Aligner.load(out, calibration=None).align("MKVLAAGHWERTYLLKPQ", "MKILSAGHWERTLLKPQ", keep_plan=True)
    raw = res.alignment
    cal = Aligner.load(out).align("MKVLAAGHWERTYLLKPQ", "MKILSAGHWERTLLKPQ").alignment
    np.testing.assert_array_equal(raw.pairs, cal.pairs)
    share = local_share(plan_posteriors(res.plan).match, raw.pairs)
    expect = np.interp(share, state["calibration"]["match_x"], state["calibration"]["match_y"])
    np.testing.assert_allclose(cal.match_posterior, expect)
    r = CliRunner().invoke(cli, ["calibrate", "--reference", str(fams[0]), "--max-length", "5", "-o",
                                 str(tmp_path / "x")])
    assert r.exit_code == 1 and "no reference pair of at most 5 residues" in r.output
    # nothing is lost: a directory holding other files is refused before any work, a model needs --overwrite
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    r = CliRunner().invoke(cli, ["calibrate", "--reference", str(fams[0]), "-o", str(busy)])
    assert r.exit_code == 1 and "holds other files (notes.txt)" in r.output
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    before = (out / "state.json").read_bytes()
    r = CliRunner().invoke(cli, ["calibrate", "--reference", str(fams[0]), "-o", str(out)])
    assert r.exit_code == 1 and "already holds a model; pass --overwrite" in r.output
    assert (out / "state.json").read_bytes() == before
    r = CliRunner().invoke(cli, ["calibrate", "--reference", str(fams[0]), "--knots", "6", "-o", str(out),
                                 "--overwrite"])
    assert r.exit_code == 0, r.output
    assert "6 pairs of fam0.sto (split" in json.loads((out / "state.json").read_text())["provenance"]


def test_shipped_models_report_calibrated_confidences():
    """The BLOSUM window's plan is diffuse (eps = 6: raw posteriors ~0.005); its stored
    calibration turns a confident homologous alignment into probabilities near 1. The
    default (learned) model's column calibration does the same, and leaves nothing of a
    self-alignment unaligned."""
    seq = "MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNALSALSDLHAHKL"
    aligner = Aligner.load("blosum")
    assert aligner.calibration is not None
    raw = Aligner.load("blosum", calibration=None).align(seq, seq).alignment
    cal = aligner.align(seq, seq).alignment
    assert raw.mean_posterior < 0.05
    assert cal.mean_posterior > 0.9 and cal.expected_accuracy > 0.9
    learned = Aligner.load()
    assert learned.calibration.match_feature == "columns" and learned.min_confidence == 0.35
    out = learned.align(seq, seq).alignment
    assert len(out.pairs) == len(seq) and out.mean_posterior > 0.9


# ----------------------------------------------------------------- column model, min_confidence


def _plan_alignment(m, n, seed=0):
    """A random dustbin plan and its free-gap MEA alignment (raw posteriors)."""
    rng = np.random.default_rng(seed)
    plan = rng.random((m + 1, n + 1)) ** 6
    for d in range(min(m, n)):
        plan[d, d] += 0.5
    post = plan_posteriors(plan)
    return post, mea_align(plan, gap_weight=0.0)


def test_column_features_by_hand():
    from sinkalign.align.baselines import Scoring, align_pair
    from sinkalign.align.calibration import COLUMN_FEATURES, column_features

    q, t = "MKVLAAGHWERTYLLKPQ", "MKILSAGHWERTLLKPUQ"  # U is outside BLOSUM62's alphabet: read as X
    post, aln = _plan_alignment(len(q), len(t))
    F = column_features(aln, post.match, q, t)
    k = len(aln.pairs)
    assert F.shape == (k, len(COLUMN_FEATURES)) and np.all(np.isfinite(F))
    col = dict(zip(COLUMN_FEATURES, F.T))
    i, j = aln.pairs.T
    np.testing.assert_allclose(col["local_share"], local_share(post.match, aln.pairs))
    np.testing.assert_allclose(col["log10_posterior"], np.log10(post.match[i, j] + 1e-6))
    np.testing.assert_allclose(col["query_gap"], post.query_gap[i])
    from Bio.Align import substitution_matrices

    blosum = substitution_matrices.load("BLOSUM62")
    t_x = t.replace("U", "X")
    np.testing.assert_allclose(col["substitution"], [blosum[q[a], t_x[b]] / 4 for a, b in aln.pairs])
    nw = {tuple(p) for p in align_pair(q, t_x, "nw", scoring=Scoring.protein()).pairs.tolist()}
    sw = align_pair(q, t_x, "sw", scoring=Scoring.protein()).pairs
    assert col["in_nw"].tolist() == [float((a, b) in nw) for a, b in aln.pairs.tolist()]
    assert col["in_sw"].tolist() == [float((a, b) in {tuple(p) for p in sw.tolist()}) for a, b in aln.pairs.tolist()]
    inside = [float(sw[:, 0].min() <= a <= sw[:, 0].max() and sw[:, 1].min() <= b <= sw[:, 1].max())
              for a, b in aln.pairs.tolist()]
    assert col["in_sw_span"].tolist() == inside
    # a diagonal run of length r contributes log r to each of its columns
    runs, start = [], 0
    for c in range(1, k + 1):
        if c == k or aln.pairs[c, 0] != aln.pairs[c - 1, 0] + 1 or aln.pairs[c, 1] != aln.pairs[c - 1, 1] + 1:
            runs += [c - start] * (c - start)
            start = c
    np.testing.assert_allclose(col["log_diagonal_run"], np.log(runs))
    same = np.mean([q[a] == t[b] for a, b in aln.pairs])
    np.testing.assert_allclose(col["alignment_identity"], same)
    np.testing.assert_allclose(col["log_end_distance"],
                               np.log1p([min(a, b, len(q) - 1 - a, len(t) - 1 - b) for a, b in aln.pairs]))
    np.testing.assert_allclose(col["aligned_fraction"], k / len(q))
    # path averages: the mean over the 9 columns around each (ends repeated)
    padded = np.r_[[col["local_share"][0]] * 4, col["local_share"], [col["local_share"][-1]] * 4]
    np.testing.assert_allclose(col["local_share_path4"], [padded[c:c + 9].mean() for c in range(k)])
    with pytest.raises(ValueError, match="do not match the alignment's lengths"):
        column_features(aln, post.match, q[:-1], t)
    # DNA: +2 / -3 scores (in units of the match score), R read as N, N -2 against anything
    dq, dt = "ACGTACGTAC", "ACGAACGTRC"
    post, aln = _plan_alignment(10, 10, seed=1)
    col = dict(zip(COLUMN_FEATURES, column_features(aln, post.match, dq, dt, kind="dna").T))
    expect = [(1.0 if dq[a] == dt[b] else -1.5) if dt[b] != "R" else -1.0 for a, b in aln.pairs]
    assert -1.0 in expect
    np.testing.assert_allclose(col["substitution"], expect)
    with pytest.raises(ValueError, match="kind='rna' is not"):
        column_features(aln, post.match, dq, dt, kind="rna")


def test_fit_logistic_is_the_maximum_likelihood_fit():
    """Against Newton's method (IRLS) on the raw features, written out here."""
    from sinkalign.align.calibration import fit_logistic, logistic

    rng = np.random.default_rng(2)
    X = rng.normal([1.0, -2.0, 0.0], [0.5, 2.0, 1.0], size=(5000, 3))
    truth = 1 / (1 + np.exp(-(0.3 + 2.0 * X[:, 0] - 0.5 * X[:, 1])))
    y = (rng.random(len(X)) < truth).astype(float)
    A = np.c_[np.ones(len(X)), X]
    beta = np.zeros(4)
    for _ in range(30):
        p = 1 / (1 + np.exp(-A @ beta))
        beta += np.linalg.solve(A.T @ (A * (p * (1 - p))[:, None]), A.T @ (y - p))
    model = fit_logistic(np.c_[X, np.full(len(X), 7.0)], y, l2=0.0)  # a constant column: scale 1, no weight
    assert model["scale"][3] == 1.0 and abs(model["weights"][3]) < 1e-6
    np.testing.assert_allclose(np.asarray(model["weights"][:3]) / np.asarray(model["scale"][:3]), beta[1:], rtol=1e-4)
    np.testing.assert_allclose(logistic(model, np.c_[X, np.full(len(X), 7.0)]), 1 / (1 + np.exp(-A @ beta)),
                               atol=1e-6)
    assert np.mean(np.abs(1 / (1 + np.exp(-A @ beta)) - truth)) < 0.02  # and the MLE is near the truth
    # the L2 penalty shrinks the (standardised) weights
    shrunk = fit_logistic(X, y, l2=0.1)
    assert np.linalg.norm(shrunk["weights"]) < np.linalg.norm(model["weights"][:3])
    with pytest.raises(ValueError, match="finite and y 0 or 1"):
        fit_logistic(X, y * 2)
    with pytest.raises(ValueError, match="with N = len"):
        fit_logistic(X, y[:5])


def test_min_confidence_leaves_low_columns_unaligned_and_rescores():
    plan = np.zeros((5, 5))
    plan[0, 0], plan[1, 1], plan[2, 2], plan[3, 3] = 0.9, 0.3, 0.6, 0.1
    plan[:4, 4] = [0.1, 0.7, 0.4, 0.9]
    plan[4, :4] = [0.1, 0.7, 0.4, 0.9]
    post = plan_posteriors(plan)
    for gw, threshold in ((0.0, 0.35), (0.5, 0.65)):  # MEA aligns 4 and 2 pairs; 2 and 1 are dropped
        aln = mea_align(plan, gap_weight=gw)
        cal = Calibration(match_x=[0.0, 1.0], match_y=[0.0, 1.0], gap_x=[0.0, 1.0], gap_y=[0.0, 1.0],
                          match_feature="posterior", min_confidence=threshold)
        out = cal.apply(aln, gap_weight=gw)
        keep = aln.match_posterior >= threshold
        assert len(aln.pairs) - keep.sum() == (2 if gw == 0 else 1)
        np.testing.assert_array_equal(out.pairs, aln.pairs[keep])
        assert np.all(out.match_posterior >= threshold)
        # the score is the MEA objective of the columns kept, computed afresh
        un_q = np.setdiff1d(np.arange(4), out.pairs[:, 0])
        un_t = np.setdiff1d(np.arange(4), out.pairs[:, 1])
        expect = post.match[out.pairs[:, 0], out.pairs[:, 1]].sum() + gw * (post.query_gap[un_q].sum()
                                                                            + post.target_gap[un_t].sum())
        assert out.score == pytest.approx(expect, rel=1e-12)
        assert out.expected_accuracy == pytest.approx(
            (2 * out.match_posterior.sum() + post.query_gap[un_q].sum() + post.target_gap[un_t].sum()) / 8)
        np.testing.assert_array_equal(cal.apply(aln, min_confidence=0.0).pairs, aln.pairs)
    for bad in (1.0, -0.1, float("nan"), "0.5", True):
        with pytest.raises(InputError, match=rf"min_confidence={re.escape(repr(bad))} must be a number in \[0, 1\)"):
            cal.apply(aln, min_confidence=bad)
        with pytest.raises(InputError, match="must be a number in"):
            Aligner.load("blosum", min_confidence=bad)
    with pytest.raises(ValueError, match=r"min_confidence=-0.1 must be a number in \[0, 1\)"):
        Calibration(match_x=[0.0], match_y=[0.0], gap_x=[0.5], gap_y=[0.5], min_confidence=-0.1)


def test_column_model_validation():
    from sinkalign.align.calibration import COLUMN_FEATURES

    base = dict(match_x=[0.1], match_y=[0.5], gap_x=[0.1], gap_y=[0.5])
    good = {"mean": [0.0] * len(COLUMN_FEATURES), "scale": [1.0] * len(COLUMN_FEATURES),
            "weights": [0.0] * len(COLUMN_FEATURES), "bias": 0.0}
    Calibration(**base, match_feature="columns", column_model=good)
    with pytest.raises(ValueError, match="goes with match_feature='columns'"):
        Calibration(**base, match_feature="columns")
    with pytest.raises(ValueError, match="goes with match_feature='columns'"):
        Calibration(**base, column_model=good)
    with pytest.raises(ValueError, match="weights must be 21 finite numbers"):
        Calibration(**base, match_feature="columns", column_model={**good, "weights": [0.0] * 3})
    with pytest.raises(ValueError, match="scale must be positive"):
        Calibration(**base, match_feature="columns", column_model={**good, "scale": [0.0] * len(COLUMN_FEATURES)})
    with pytest.raises(ValueError, match="needs the query and target sequences"):
        post, aln = _plan_alignment(6, 6)
        Calibration(**base, match_feature="columns", column_model=good).apply(aln, post.match)
    ranged = {**good, "low": [0.0] * len(COLUMN_FEATURES), "high": [1.0] * len(COLUMN_FEATURES)}
    Calibration(**base, match_feature="columns", column_model=ranged)
    with pytest.raises(ValueError, match="low and high .* go together"):
        Calibration(**base, match_feature="columns", column_model={**good, "low": ranged["low"]})
    with pytest.raises(ValueError, match="high must be 21 finite numbers"):
        Calibration(**base, match_feature="columns", column_model={**ranged, "high": [1.0, float("inf")] * 10 + [1.0]})
    with pytest.raises(ValueError, match="low must not exceed high"):
        Calibration(**base, match_feature="columns", column_model={**ranged, "low": [0.0] * 20 + [2.0]})


def test_a_column_model_does_not_extrapolate_past_its_fitted_range():
    """The fit stores each feature's range over its rows; the model reads features clipped to
    it: unchanged inside the range (so the ranges change no fitted probability), constant
    beyond it, where an unclipped logistic would keep moving the log-odds linearly."""
    from sinkalign.align.calibration import COLUMN_FEATURES, fit_from_samples, logistic

    rng = np.random.default_rng(7)
    F = len(COLUMN_FEATURES)
    X = rng.random((3000, F))
    y = (rng.random(3000) < 1 / (1 + np.exp(-(4 * X[:, 0] - 3 * X[:, 13] - 0.5)))).astype(float)
    for symmetric in (False, True):
        cal = fit_from_samples([(X, y, rng.random(40), (rng.random(40) < 0.5).astype(float))],
                               match_feature="columns", symmetric=symmetric)
        model = cal.column_model
        fitted = X.copy()
        if symmetric:  # the range is that of the features the model reads
            fitted[:, [2, 3]] = fitted[:, [2, 3]].mean(1, keepdims=True)
        np.testing.assert_array_equal(model["low"], fitted.min(0))
        np.testing.assert_array_equal(model["high"], fitted.max(0))
        unranged = {k: v for k, v in model.items() if k not in ("low", "high")}
        np.testing.assert_array_equal(logistic(model, X), logistic(unranged, X))  # inside: unchanged
        far = X[:5].copy()
        far[:, 13] = [2.0, 5.0, 50.0, 1e6, np.max(X[:, 13])]  # past the top of feature 13
        at_edge = X[:5].copy()
        at_edge[:, 13] = np.max(X[:, 13])
        np.testing.assert_array_equal(logistic(model, far), logistic(model, at_edge))
        assert np.all(logistic(unranged, far)[:4] < logistic(model, far)[:4])  # its weight is negative
        below = X[:3].copy()
        below[:, 0] = -10.0
        low_edge = X[:3].copy()
        low_edge[:, 0] = np.min(X[:, 0])
        np.testing.assert_array_equal(logistic(model, below), logistic(model, low_edge))
        assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


def test_a_symmetric_column_model_reads_the_two_gap_features_as_one():
    """Fitted for a symmetric aligner, the column model sees the query- and target-side gap
    posteriors only through their mean: a column's confidence does not change when the pair is
    turned round (the two features swap), while the one-way fit does depend on which is which."""
    from sinkalign.align.calibration import COLUMN_FEATURES, fit_from_samples, logistic

    rng = np.random.default_rng(4)
    qg, tg = COLUMN_FEATURES.index("query_gap"), COLUMN_FEATURES.index("target_gap")
    X = rng.random((4000, len(COLUMN_FEATURES)))
    y = (rng.random(4000) < 1 / (1 + np.exp(-(3 * X[:, 0] - 4 * X[:, qg] + 1 * X[:, tg] - 0.5)))).astype(float)
    samples = [(X, y, rng.random(50), (rng.random(50) < 0.5).astype(float))]
    swapped = X.copy()
    swapped[:, [qg, tg]] = X[:, [tg, qg]]
    one_way = fit_from_samples(samples, match_feature="columns")
    both = fit_from_samples(samples, match_feature="columns", symmetric=True)
    assert "symmetric" not in one_way.column_model and both.column_model["symmetric"] is True
    assert np.abs(one_way.confidence(X) - one_way.confidence(swapped)).max() > 0.05
    np.testing.assert_array_equal(both.confidence(X), both.confidence(swapped))
    # the same as a one-way fit on the averaged features, and it round-trips through JSON
    mean = X.copy()
    mean[:, [qg, tg]] = (0.5 * (X[:, qg] + X[:, tg]))[:, None]
    np.testing.assert_allclose(logistic(both.column_model, X),
                               logistic(fit_from_samples([(mean, *samples[0][1:])],
                                                         match_feature="columns").column_model, mean), atol=1e-9)
    assert Calibration.from_dict(json.loads(json.dumps(both.to_dict()))) == both
    with pytest.raises(ValueError, match="symmetric='yes' must be true or false"):
        Calibration.from_dict({**both.to_dict(), "column_model": {**both.column_model, "symmetric": "yes"}})
    with pytest.raises(ValueError, match="must be a mapping with keys"):
        Calibration.from_dict({**both.to_dict(), "column_model": {**both.column_model, "other": 1}})


def test_calibration_samples_count_core_columns_only():
    from types import SimpleNamespace

    from sinkalign.align.calibration import calibration_samples

    post, aln = _plan_alignment(8, 8, seed=3)
    ref_pairs = np.array([[d, d] for d in range(8)])
    core = np.array([True] * 4 + [False] * 4)
    ref = SimpleNamespace(pairs=ref_pairs, query_core=core, target_core=core)
    mx, my, gx, gy = calibration_samples(aln, ref, post.match)
    counted = core[aln.pairs[:, 0]] | core[aln.pairs[:, 1]]
    assert 0 < counted.sum() < len(aln.pairs)
    np.testing.assert_allclose(mx, local_share(post.match, aln.pairs)[counted])
    assert my.tolist() == [float(a == b) for a, b in aln.pairs[counted].tolist()]
    all_mx, *_ = calibration_samples(aln, ref_pairs, post.match)
    assert len(all_mx) == len(aln.pairs)


def test_calibrate_columns_and_align_with_min_confidence(tmp_path):
    from sinkalign.errors import InputError
    from tests.aligner_fixtures import make_families

    fams = make_families(tmp_path / "fams", n_families=2, n_seqs=4, length=40)
    out = tmp_path / "cols"
    r = CliRunner().invoke(cli, ["calibrate", "--reference", str(fams[0]), "--reference", str(fams[1]),
                                 "--match-feature", "columns", "--min-confidence", "0.6", "-o", str(out)])
    assert r.exit_code == 0, r.output
    cal = json.loads((out / "state.json").read_text())["calibration"]
    assert cal["match_feature"] == "columns" and cal["min_confidence"] == 0.6
    assert len(cal["column_model"]["weights"]) == 21
    # the shipped model's own calibration sentence is replaced, not stacked
    provenance = json.loads((out / "state.json").read_text())["provenance"]
    assert "Calibrated confidences fitted with" in Aligner.load().provenance
    assert provenance.count("Calibrated confidences fitted with") == 1
    assert "(columns, columns below 0.6 left unaligned) on 12 pairs of fam0.sto, fam1.sto" in provenance
    q, t = "MKVLAAGHWERTYLLKPQDDE", "MKILSAGHWERTLLKPQGGGGSTV"
    full = Aligner.load(out, min_confidence=0.0).align(q, t).alignment
    trimmed = Aligner.load(out).align(q, t).alignment
    assert Aligner.load(out).min_confidence == 0.6
    kept = {tuple(p) for p in full.pairs[full.match_posterior >= 0.6].tolist()}
    assert {tuple(p) for p in trimmed.pairs.tolist()} == kept
    assert np.all(trimmed.match_posterior >= 0.6)
    with pytest.raises(InputError, match="min_confidence needs calibrated confidences"):
        Aligner.load(out, calibration=None, min_confidence=0.3)
    # the CLI option reaches the aligner
    fa, fb = tmp_path / "a.fa", tmp_path / "b.fa"
    fa.write_text(f">a\n{q}\n")
    fb.write_text(f">b\n{t}\n")
    rows = {}
    for mc in ("0", "0.6"):
        res = CliRunner().invoke(cli, ["align", str(fa), str(fb), "--model", str(out), "--min-confidence", mc,
                                       "--format", "tsv", "--no-progress"])
        assert res.exit_code == 0, res.output
        rows[mc] = res.output
    assert rows["0"] != rows["0.6"]


def test_the_default_threshold_keeps_exactly_the_confident_columns_of_every_column_output():
    """``benchmarks/aligner_threshold.py`` reads each threshold off one every-column run: the
    shipped model at its own threshold writes exactly the columns of ``min_confidence=0``
    whose confidence reaches it (with the same confidences and E-value)."""
    rng = np.random.default_rng(0)
    hba = "MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNALSALSDLHAHKL"
    myg = "MGLSDGEWQLVLNVWGKVEADIPGHGQEVLIRLFKGHPETLEKFDKFKHLKSEDEMKASEDLKKHGATVLTALGGILKKKGHHEAEIKPLAQSHATKH"
    jobs = [("a", hba, "b", myg), ("a", hba, "s", "".join(rng.permutation(list(myg))))]
    every = Aligner.load(min_confidence=0.0)
    default = Aligner.load()
    dropped = 0
    for full, cut in zip(every.align_many(jobs), default.align_many(jobs)):
        keep = full.alignment.match_posterior >= default.min_confidence
        dropped += int((~keep).sum())
        np.testing.assert_array_equal(cut.alignment.pairs, full.alignment.pairs[keep])
        np.testing.assert_array_equal(cut.alignment.match_posterior, full.alignment.match_posterior[keep])
        assert cut.evalue == full.evalue
    assert dropped > 0  # the shuffled pair's weak columns go


def test_the_learned_model_keeps_the_right_columns_of_a_lopsided_pair():
    """A 40-residue piece of alpha globin against beta globin inside 2,000 random residues
    (lengths 54 to 1 apart; the training pairs were at most 9 to 1): the shipped model finds the
    columns it finds without the flanks, and its confidences, read at the edge of the length
    ratios it was fitted on, keep them above its threshold (unclipped, a linear extrapolation of
    the log-odds put a quarter of them below it)."""
    from Bio import SeqIO

    import sinkalign

    examples = Path(sinkalign.__file__).parent / "data" / "examples"
    hba = str(next(SeqIO.parse(examples / "globins_query.fasta", "fasta")).seq)
    hbb = str(SeqIO.read(examples / "globins_target.fasta", "fasta").seq)
    rng = np.random.default_rng(0)
    flank = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 2000))
    aligner = Aligner.load("learned", strand="plus")
    assert aligner.min_confidence == 0.35
    query = hba[60:100]
    plain = aligner.align(query, hbb).alignment
    flanked = aligner.align(query, flank[:1000] + hbb + flank[1000:]).alignment
    assert len(plain.pairs) == 40 and plain.match_posterior.min() > 0.35
    shifted = {(i, j - 1000) for i, j in flanked.pairs.tolist()}
    assert shifted <= {tuple(p) for p in plain.pairs.tolist()}
    assert len(shifted) >= 38, len(shifted)


def test_flanked_copies_grow_a_share_of_the_pairs_from_other_families(tmp_path):
    from sinkalign.align.evaluate import load_reference_set
    from sinkalign.align.train import flanked_copies
    from tests.aligner_fixtures import make_families

    fams = make_families(tmp_path / "fams", n_families=3, n_seqs=4, length=40)
    pairs = [p for f in fams for p in load_reference_set(f)]
    before = [(p.query_seq, p.target_seq) for p in pairs]
    assert flanked_copies(pairs, 0.0, 400, 8.0) == []
    copies = flanked_copies(pairs, 1.0, 400, 8.0, seed=3)
    assert len(copies) == len(pairs)
    assert [(p.query_seq, p.target_seq) for p in pairs] == before  # the pairs themselves are left alone
    grown = 0
    for p, c in zip(pairs, copies):
        short = min(len(p.query_seq), len(p.target_seq))
        long_side = max(len(c.query_seq), len(c.target_seq))
        assert long_side <= max(400, len(p.query_seq), len(p.target_seq)) and long_side <= 8 * short + 1
        if long_side > max(len(p.query_seq), len(p.target_seq)):
            grown += 1
            # the homologous pair sits inside the flanks, its reference shifted with it
            side = 0 if len(c.query_seq) > len(p.query_seq) else 1
            seq, new = (p.query_seq, p.target_seq)[side], (c.query_seq, c.target_seq)[side]
            shift = int(c.pairs[0, side] - p.pairs[0, side])
            assert new[shift:shift + len(seq)] == seq
            np.testing.assert_array_equal(c.pairs[:, side] - shift, p.pairs[:, side])
            # the added residues are windows of other families' sequences
            other = "".join(q.query_seq + "|" + q.target_seq + "|" for q in pairs if q.family != p.family)
            for flank in (new[:shift], new[shift + len(seq):]):
                # covered by a few long stretches of them (greedy longest matches), not by chance k-mers
                segments, i = 0, 0
                while i < len(flank):
                    n = 1
                    while i + n < len(flank) and flank[i:i + n + 1] in other:
                        n += 1
                    assert flank[i:i + n] in other
                    segments, i = segments + 1, i + n
                assert segments <= len(flank) / 30 + 3
    assert grown > len(pairs) // 2
    half = flanked_copies(pairs, 0.5, 400, 8.0, seed=3)
    assert 0 < len(half) < len(pairs)
    assert [(c.query_seq, c.target_seq) for c in half] == [(c.query_seq, c.target_seq)
                                                           for c in flanked_copies(pairs, 0.5, 400, 8.0, seed=3)]
    with pytest.raises(InputError, match="share"):
        flanked_copies(pairs, 1.5, 400, 8.0)
    with pytest.raises(InputError, match="ratio"):
        flanked_copies(pairs, 0.5, 400, 1.0)


def test_calibrate_flank_fits_lopsided_copies_too(tmp_path):
    from sinkalign.align.calibration import COLUMN_FEATURES
    from tests.aligner_fixtures import make_families

    fams = make_families(tmp_path / "fams", n_families=3, n_seqs=4, length=40)
    ratio = COLUMN_FEATURES.index("abs_log_length_ratio")
    highs = {}
    for name, extra in (("plain", []), ("flank", ["--flank", "1", "--flank-ratio", "6", "--flank-max-length", "300"])):
        out = tmp_path / name
        args = ["calibrate", *[a for f in fams for a in ("--reference", str(f))], "--match-feature", "columns",
                *extra, "-o", str(out)]
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
        state = json.loads((out / "state.json").read_text())
        highs[name] = state["calibration"]["column_model"]["high"][ratio]
        if name == "flank":
            assert "18 pairs of fam0.sto, fam1.sto, fam2.sto" in state["provenance"]
            assert "and flanked copies of 18 of them (ratio <= 6, <= 300 residues, seed 0)" in state["provenance"]
    # the plain fit saw pairs of nearly equal length; the flanked copies reach about 6:1
    assert highs["plain"] < 0.3 < np.log(4.0) < highs["flank"] <= np.log(6.0) + 0.05


def test_shipped_calibration_was_fitted_on_lopsided_pairs_too():
    """The learned model's column model was fitted with `sinkalign calibrate --flank` (BENCHMARKS.md,
    'Calibrating on flanked pairs'): its length-ratio feature reaches past 16:1, and myoglobin
    against beta globin inside 8,000 random residues (about 55:1) keeps 144 of the 146 columns it
    aligns without the flanks, solved in the box around its Smith-Waterman hit as the aligner
    does by default since session 17 (129 solved whole on the session-16 corridor; 118 with the
    calibration fitted on pairs as they are). Past the end of beta globin the path runs on into
    the flank for myoglobin's C-terminal tail; the session-21 calibration (fitted on validation
    pairs, threshold 0.35) keeps the first three of those columns (confidences 0.35-0.44; the
    session-15 one, threshold 0.4, gave them 0.25-0.35 and kept none): they are the only wrong
    ones, and stay below 0.45 (BENCHMARKS.md, 'The pairwise confidences refitted on held-out pairs')."""
    from Bio import SeqIO

    import sinkalign
    from sinkalign.align.calibration import COLUMN_FEATURES

    aligner = Aligner.load("learned", strand="plus")
    high = aligner.calibration.column_model["high"][COLUMN_FEATURES.index("abs_log_length_ratio")]
    assert high > np.log(16.0)
    examples = Path(sinkalign.__file__).parent / "data" / "examples"
    myg = str(list(SeqIO.parse(examples / "globins_query.fasta", "fasta"))[1].seq)
    hbb = str(SeqIO.read(examples / "globins_target.fasta", "fasta").seq)
    flank = "".join(np.random.default_rng(0).choice(list("ACDEFGHIKLMNPQRSTVWY"), 8000))
    every = {tuple(p) for p in Aligner.load("learned", min_confidence=0.0).align(myg, hbb).alignment.pairs.tolist()}
    buried = aligner.align(myg, flank[:4000] + hbb + flank[4000:]).alignment
    kept = {(i, j - 4000) for i, j in buried.pairs.tolist()}
    confidence = {(i, j - 4000): c for (i, j), c in zip(buried.pairs.tolist(), buried.match_posterior.tolist())}
    assert len(every) == 146
    assert len(kept & every) >= 140, len(kept & every)
    wrong = kept - every
    assert all(j >= len(hbb) for _, j in wrong) and len(wrong) <= 3, sorted(wrong)
    assert all(confidence[p] < 0.45 for p in wrong)


def test_calibrate_keep_column_model_refits_only_the_maps(tmp_path):
    """`--keep-column-model`: the model's own logistic column model is kept to the last digit and
    only the isotonic maps of its probabilities are refitted (a recalibration on other pairs); the
    library call it makes is `fit_from_samples(column_model=...)`."""
    from sinkalign.align.calibration import calibration_samples, fit_from_samples
    from sinkalign.align.decode import plan_posteriors
    from sinkalign.align.evaluate import load_reference_set
    from tests.aligner_fixtures import make_families

    fams = make_families(tmp_path / "fams", n_families=4, n_seqs=4, length=40)
    first = tmp_path / "first"
    r = CliRunner().invoke(cli, ["calibrate", "--reference", str(fams[0]), "--reference", str(fams[1]),
                                 "--match-feature", "columns", "--knots", "6", "-o", str(first)])
    assert r.exit_code == 0, r.output
    second = tmp_path / "second"
    r = CliRunner().invoke(cli, ["calibrate", "--model", str(first), "--reference", str(fams[2]), "--reference",
                                 str(fams[3]), "--keep-column-model", "--knots", "6", "--min-confidence", "0.3",
                                 "-o", str(second)])
    assert r.exit_code == 0, r.output
    old = json.loads((first / "state.json").read_text())["calibration"]
    new = json.loads((second / "state.json").read_text())
    assert new["calibration"]["column_model"] == old["column_model"]
    assert new["calibration"]["match_x"] != old["match_x"]
    assert new["calibration"]["min_confidence"] == 0.3
    assert ("(columns: the column model fitted on 12 pairs of fam0.sto, fam1.sto (split train, <= 1024 residues) "
            "kept, its maps refitted, columns below 0.3 left unaligned) on 12 pairs of fam2.sto, fam3.sto"
            in new["provenance"])
    # the same maps as the isotonic fit of the kept model's probabilities on those pairs
    raw = Aligner.load(first, calibration=None, strand="plus")
    pairs = [p for f in fams[2:] for p in load_reference_set(f, split="train")]
    samples = []
    for res, p in zip(raw.align_many(((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs),
                                     keep_plan=True), pairs):
        samples.append(calibration_samples(res.alignment, p, plan_posteriors(res.plan).match,
                                           match_feature="columns", query=p.query_seq, target=p.target_seq))
    cal = fit_from_samples(samples, match_feature="columns", max_knots=6, column_model=old["column_model"])
    assert cal.match_x == new["calibration"]["match_x"] and cal.match_y == new["calibration"]["match_y"]
    assert cal.gap_x == new["calibration"]["gap_x"]
    # a refit without the kept model fits another logistic model on the same pairs
    assert fit_from_samples(samples, match_feature="columns").column_model["weights"] != old["column_model"]["weights"]
    with pytest.raises(ValueError, match="column_model goes with match_feature='columns'"):
        fit_from_samples(samples, match_feature="posterior", column_model=old["column_model"])
    # a model without a column model has nothing to keep
    plain = tmp_path / "plain"
    r = CliRunner().invoke(cli, ["calibrate", "--reference", str(fams[0]), "--knots", "4", "-o", str(plain)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["calibrate", "--model", str(plain), "--reference", str(fams[1]),
                                 "--keep-column-model", "-o", str(tmp_path / "none")])
    assert r.exit_code != 0 and "--keep-column-model" in r.output and "no column model to keep" in r.output
    assert not (tmp_path / "none").exists()


def test_box_features_read_a_boxed_pair_as_the_pair_of_its_box(monkeypatch):
    """`aligner.BOX_FEATURES` (tried in session 22, off by default): a pair solved in its box gets
    the column confidences of the box's subsequences as an ordinary pair of them, from the same
    plan; pairs not in a box, and every pair with the switch off, keep their whole-pair ones."""
    from Bio import SeqIO

    import sinkalign
    import sinkalign.align.aligner as A

    examples = Path(sinkalign.__file__).parent / "data" / "examples"
    myg = str(list(SeqIO.parse(examples / "globins_query.fasta", "fasta"))[1].seq)
    hbb = str(SeqIO.read(examples / "globins_target.fasta", "fasta").seq)
    flank = "".join(np.random.default_rng(1).choice(list("ACDEFGHIKLMNPQRSTVWY"), 2000))
    target = flank[:1000] + hbb + flank[1000:]
    raw = Aligner.load("learned", calibration=None, strand="plus")
    aligner = Aligner.load("learned", strand="plus", min_confidence=0.0)
    assert not A.BOX_FEATURES
    off = aligner.align(myg, target).alignment
    lo, hi, what = raw._corridor(myg, target, A.classical_guides(myg, target))
    assert what.startswith("box")
    r0, r1, c0, c1 = box = A._box_of(lo, hi)
    assert (r0, r1) == (0, len(myg)) and c0 < 1000 < 1000 + len(hbb) < c1 < len(target)
    post = raw._numpy.solve_band(*raw._numpy.sides_many([myg, target]), lo, hi).posteriors()
    mea = A.band_mea(post)
    whole = aligner.calibration.column_confidences(mea, post.match, query=myg, target=target)
    np.testing.assert_allclose(off.match_posterior, whole)
    on_box = aligner.calibration.column_confidences(A._sub_alignment(mea, box), A._sub_band(post.match, box),
                                                    query=myg[r0:r1], target=target[c0:c1])
    monkeypatch.setattr(A, "BOX_FEATURES", True)
    on = aligner.align(myg, target).alignment
    np.testing.assert_array_equal(on.pairs, off.pairs)
    np.testing.assert_allclose(on.match_posterior, on_box)
    assert not np.allclose(on_box, whole)  # the features differ: the box is about 1.3:1, the pair 15:1
    np.testing.assert_array_equal(A._sub_band(post.match, box).to_dense(), post.match.to_dense()[r0:r1, c0:c1])
    plain = aligner.align(myg, hbb).alignment  # not lopsided: no box, the same either way
    monkeypatch.setattr(A, "BOX_FEATURES", False)
    np.testing.assert_array_equal(aligner.align(myg, hbb).alignment.match_posterior, plain.match_posterior)


@pytest.mark.parametrize("command", ["calibrate", "fit-evalues", "evaluate"])
def test_references_of_the_other_alphabet_are_refused(tmp_path, command):
    """A protein reference fitted or scored with the DNA model (or DNA with a protein model)
    gave a calibration, a null or an F1 of nothing, silently: now an error naming the pair."""
    from tests.aligner_fixtures import make_families

    protein = make_families(tmp_path / "fams", n_families=1, n_seqs=5, length=40)[0]  # 10 pairs: fit-evalues' least
    rng = np.random.default_rng(0)
    base = "".join(rng.choice(list("ACGT"), 60))
    rows = [base, base[:20] + "--" + base[22:]] + ["".join(c if rng.random() > 0.1 else "A" for c in base)] * 3
    dna = tmp_path / "dna.sto"
    dna.write_text("# STOCKHOLM 1.0\n" + "".join(f"d{k} {r}\n" for k, r in enumerate(rows)) + "//\n")
    for ref, model, words in ((protein, "dna", ["is protein", "the model dna is for dna", "a protein model"]),
                              (dna, "blosum", ["is dna", "the model blosum is for protein", "--model dna"])):
        out = tmp_path / f"out-{model}"
        args = {"calibrate": ["-o", str(out)], "fit-evalues": ["-o", str(out)], "evaluate": ["--methods", "sinkalign"]}
        r = CliRunner().invoke(cli, [command, "--reference", str(ref), "--model", model, *args[command]])
        assert r.exit_code == 1, r.output
        assert "reference pair (" in r.output and all(w in r.output for w in words), r.output
        assert not out.exists() or not any(out.iterdir())
    if command == "fit-evalues":  # the alphabet is named before the pairs are counted (6 pairs: too few)
        few = make_families(tmp_path / "few", n_families=1, n_seqs=4, length=40)[0]
        r = CliRunner().invoke(cli, [command, "--reference", str(few), "--model", "dna", "-o", str(tmp_path / "f")])
        assert r.exit_code == 1 and "is protein" in r.output and "at least 10" not in r.output, r.output


def test_the_simulated_dna_reference_holds_the_true_alignment(tmp_path):
    """``benchmarks/dna_flanks.py --write-reference`` (what the shipped DNA confidences were
    fitted on): each simulated pair, read back as a reference, aligns exactly its true pairs,
    and its flanks are trusted gaps (in no pair)."""
    import sys

    bench = str(Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, bench)
    try:
        import dna_flanks
    finally:
        sys.path.remove(bench)
    from sinkalign.io.alignments import msa_to_pairs, read_stockholm

    rng = np.random.default_rng(3)
    genomes = [["".join(rng.choice(list("ACGT"), 3000)) for _ in range(2)] for _ in range(3)]
    for k, flank in enumerate((0.0, 0.5, 1.0)):
        jobs, truth, cores = dna_flanks.cases(genomes, flank, 1, (150, 150), 0.2, 0.05, rng)
        _, query, _, target = jobs[0]
        path = tmp_path / f"pair{k}.sto"
        path.write_text(dna_flanks.stockholm_pair(f"q{k}", query, f"t{k}", target, truth[0]))
        ((pair,),) = [msa_to_pairs(msa) for msa in read_stockholm(path)]
        assert (pair.query_seq, pair.target_seq) == (query.upper(), target.upper())
        np.testing.assert_array_equal(pair.pairs, truth[0])
        (q0, q1), (t0, t1) = cores[0]
        assert ((pair.pairs[:, 0] >= q0) & (pair.pairs[:, 0] < q1)).all()
        assert ((pair.pairs[:, 1] >= t0) & (pair.pairs[:, 1] < t1)).all()
        assert flank == 0 or q0 + (len(query) - q1) + t0 + (len(target) - t1) > 0


def _close_pair():
    """A protein and its copy without residue 8: a close pair whose first columns sit between
    the sequence's start and the gap."""
    rng = np.random.default_rng(1)
    query = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 200))
    return query, query[:8] + query[9:]


def test_close_maps_are_checked_and_travel_with_the_calibration():
    cal = Aligner.load().calibration
    assert cal.close is not None and cal.close["identity_min"] == 0.8
    close = cal.for_close()
    assert close.close is None and close.column_model == cal.column_model and close.match_y != cal.match_y
    assert close.min_confidence == cal.min_confidence and close.fitted_on == cal.close["fitted_on"]
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    base = {k: v for k, v in cal.to_dict().items() if k != "close"}
    bad_cases = [
        ({"match_x": [0.1], "match_y": [0.5]}, "must be a mapping with keys"),
        ({**cal.close, "identity_min": 0}, r"identity_min=0 must be a share in \(0, 1\]"),
        ({**cal.close, "match_y": [0.9, 0.1] + cal.close["match_y"][2:]}, "non-decreasing"),
    ]
    for close_maps, msg in bad_cases:
        with pytest.raises(ValueError, match=msg):
            Calibration.from_dict({**base, "close": close_maps})
    no_model = {**base, "match_feature": "local_share", "column_model": None, "close": cal.close}
    with pytest.raises(ValueError, match="close maps go with a column model"):
        Calibration.from_dict(no_model)
    with pytest.raises(ValueError, match="no close maps"):
        Calibration.from_dict(base).for_close()


def test_a_close_pair_keeps_its_right_columns_at_the_threshold():
    """The shipped protein model reads the confidences of a pair its tie-break decodes (plain
    decoding >= 80% identical) with the calibration's close maps: the columns between the
    start and a deletion at residue 8, right, are no longer dropped at the threshold (they
    were, with confidences 0.34-0.65). The same on every path; without the tie-break, or with
    it for every pair, the main maps; a remote pair's confidences do not change."""
    import dataclasses

    query, target = _close_pair()
    truth = [[i, i if i < 8 else i - 1] for i in range(200) if i != 8]
    for kwargs in ({}, {"band": 32}, {"engine": "jax"}):
        got = Aligner.load(**kwargs).align(query, target)
        assert got.pairs.tolist() == truth, kwargs
        assert got.alignment.match_posterior.min() > 0.85, kwargs
    main_only = Aligner.load()
    main_only.calibration = dataclasses.replace(main_only.calibration, close=None)
    dropped = main_only.align(query, target)
    assert len(dropped.pairs) < len(truth) and dropped.alignment.match_posterior.min() >= 0.35
    for kwargs in ({"identity_weight": 0}, {"identity_min": 0}):  # not the pairs the close maps were fitted on
        aligner = Aligner.load(min_confidence=0.0, **kwargs)
        full = Aligner.load(min_confidence=0.0)
        assert aligner._close_maps(1.0) is False and full._close_maps(1.0) is True and not full._close_maps(0.79)
    rng = np.random.default_rng(4)
    remote = "".join(c if rng.random() < 0.4 else str(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"))) for c in query)
    a, b = Aligner.load().align(query, remote), main_only.align(query, remote)
    np.testing.assert_array_equal(a.alignment.match_posterior, b.alignment.match_posterior)
    assert a.evalue == b.evalue


def test_the_shipped_models_are_never_written_over(tmp_path):
    """`calibrate -o <the package's aligner_blosum> --overwrite` replaced a shipped model;
    every command that writes a model or a run now refuses the package's data directory
    (also through a link), --overwrite or not, before any work."""
    from sinkalign.align.checkpoints import check_model_output, check_run_dir
    from sinkalign.errors import CheckpointError, OutputExistsError
    from sinkalign.lm.train import check_out_dir
    from sinkalign.utils import SHIPPED_DATA
    from tests.aligner_fixtures import make_families

    shipped = SHIPPED_DATA / "aligner_blosum"
    before = {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()}
    fams = make_families(tmp_path / "fams", n_families=1, n_seqs=3, length=30)
    link = tmp_path / "link"
    link.symlink_to(shipped, target_is_directory=True)
    for out in (shipped, link):
        for command in ("calibrate", "fit-evalues"):
            r = CliRunner().invoke(cli, [command, "--reference", str(fams[0]), "--model", "blosum", "-o", str(out),
                                         "--overwrite"])
            assert r.exit_code == 1, r.output
            assert "is inside the models shipped with sinkalign" in " ".join(r.output.split())
    assert {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()} == before
    with pytest.raises(OutputExistsError, match="inside the models shipped"):
        check_model_output(SHIPPED_DATA / "new_model")
    with pytest.raises(OutputExistsError, match="inside the models shipped"):
        check_run_dir(SHIPPED_DATA / "aligner_learned", resume=False, overwrite=True)
    with pytest.raises(CheckpointError, match="inside the models shipped"):
        check_out_dir(SHIPPED_DATA / "lm_default", resume=True)
    check_model_output(tmp_path / "elsewhere")  # a new directory elsewhere is fine


def test_a_folder_named_like_a_shipped_model_does_not_hide_it(tmp_path, monkeypatch, caplog):
    """A user's folder ``dna`` of DNA files in the working directory made ``Aligner.load("dna")``
    (and ``--model dna``) an error; the shipped model is taken, with a warning. A folder of that
    name that holds a model still wins."""
    import logging

    from sinkalign.align.aligner import Aligner, resolve_model
    from sinkalign.errors import InputError
    from sinkalign.utils import SHIPPED_DATA

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dna").mkdir()  # a user's folder of DNA files
    (tmp_path / "dna" / "reads.fa").write_text(">r\nACGT\n")
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.aligner"):
        assert resolve_model("dna") == SHIPPED_DATA / "aligner_dna"
    assert f"dna is not an aligner model: model 'dna' is the shipped model {SHIPPED_DATA / 'aligner_dna'}" in caplog.text
    assert Aligner.load("dna").config.alphabet == "dna"
    assert resolve_model("DNA") == resolve_model("Dna") == SHIPPED_DATA / "aligner_dna"  # names in any case
    assert resolve_model("Blosum") == SHIPPED_DATA / "aligner_blosum"
    import shutil

    shutil.copytree(SHIPPED_DATA / "aligner_blosum", tmp_path / "learned")  # a model of its own under that name
    assert resolve_model("learned") == Path("learned")
    for bad in (5, None, Aligner.load("blosum")):
        with pytest.raises(InputError, match=r"model must be a shipped model's name or a model's path, got"):
            resolve_model(bad)
    with pytest.raises(InputError, match=r"got Aligner .*an Aligner aligns by itself"):
        resolve_model(Aligner.load("blosum"))
    assert resolve_model(str(SHIPPED_DATA / "aligner_dna")) == SHIPPED_DATA / "aligner_dna"
    assert resolve_model("blosum") == SHIPPED_DATA / "aligner_blosum"  # no such folder here: the name
