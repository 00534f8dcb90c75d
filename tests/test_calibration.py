"""Calibrated confidences: isotonic knots, the Calibration map, its fit, and `sinkalign calibrate`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.align.aligner import Aligner
from sinkalign.align.calibration import Calibration, fit_calibration, isotonic_knots, local_share
from sinkalign.align.decode import Alignment, mea_align, plan_posteriors
from sinkalign.cli.main import cli


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


def test_calibrate_cli_writes_a_model_that_aligns_with_calibrated_confidences(tmp_path):
    from tests.aligner_fixtures import make_families

    fams = make_families(tmp_path / "fams", n_families=2, n_seqs=4, length=40)
    out = tmp_path / "calibrated"
    args = ["calibrate", "--reference", str(fams[0]), "--reference", str(fams[1]), "--knots", "6", "-o", str(out)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    state = json.loads((out / "state.json").read_text())
    assert len(state["calibration"]["match_x"]) <= 6 and "12 pairs of fam0.sto, fam1.sto" in state["provenance"]
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


def test_shipped_model_reports_calibrated_confidences():
    """The shipped model's plan is diffuse (eps = 6: raw posteriors ~0.005); its stored
    calibration turns a confident homologous alignment into probabilities near 1."""
    aligner = Aligner.load()
    assert aligner.calibration is not None
    seq = "MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNALSALSDLHAHKL"
    raw = Aligner.load(calibration=None).align(seq, seq).alignment
    cal = aligner.align(seq, seq).alignment
    assert raw.mean_posterior < 0.05
    assert cal.mean_posterior > 0.9 and cal.expected_accuracy > 0.9
