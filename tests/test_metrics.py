"""Pair precision / recall / F1, identity binning, per-bin tables with confidence intervals."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math

import numpy as np
import pytest
from rich.console import Console

from sinkalign.align.baselines import align_pair
from sinkalign.align.decode import Alignment
from sinkalign.align.metrics import (
    IDENTITY_BINS,
    PairScores,
    assign_identity_bins,
    binned_table,
    identity_bin_labels,
    macro_average,
    micro_average,
    micro_difference,
    pair_scores,
    percent_identity,
    render_table,
)


def test_pair_scores_known_example():
    pred = np.array([[0, 0], [1, 1], [2, 3]])
    ref = np.array([[0, 0], [1, 2], [2, 3], [3, 4]])
    s = pair_scores(pred, ref)
    assert (s.tp, s.n_pred, s.n_ref) == (2, 3, 4)
    assert s.precision == pytest.approx(2 / 3)
    assert s.recall == pytest.approx(1 / 2)
    assert s.f1 == pytest.approx(2 * (2 / 3) * (1 / 2) / (2 / 3 + 1 / 2))
    # An Alignment (or anything with .pairs) is accepted.
    aln = Alignment(pred, [1.0, 1.0, 1.0], np.zeros(3), np.zeros(4), 1.0, 3.0)
    assert pair_scores(aln, ref) == s


def test_pair_scores_match_python_sets_on_random_pairs():
    rng = np.random.default_rng(0)
    for _ in range(50):
        pred = {tuple(x) for x in rng.integers(0, 12, size=(rng.integers(0, 30), 2)).tolist()}
        ref = {tuple(x) for x in rng.integers(0, 12, size=(rng.integers(1, 30), 2)).tolist()}
        s = pair_scores(np.array(sorted(pred)).reshape(-1, 2), np.array(sorted(ref)).reshape(-1, 2))
        tp = len(pred & ref)
        assert s.tp == tp
        assert s.precision == (tp / len(pred) if pred else 0.0)
        assert s.recall == pytest.approx(tp / len(ref))
        assert s.f1 == pytest.approx(2 * tp / (len(pred) + len(ref)))


def test_zero_division():
    empty = np.zeros((0, 2), int)
    s = pair_scores(empty, [[0, 0]])
    assert (s.precision, s.recall, s.f1) == (0.0, 0.0, 0.0)
    s = pair_scores(empty, empty, zero_division=float("nan"))
    assert all(math.isnan(v) for v in (s.precision, s.recall, s.f1))
    s = pair_scores([[0, 0]], empty, zero_division=1.0)
    assert (s.precision, s.recall) == (0.0, 1.0)


def test_micro_and_macro_average():
    a = pair_scores([[0, 0], [1, 1]], [[0, 0], [1, 1]])  # 2/2, 2/2
    b = pair_scores([[0, 0], [1, 2], [2, 3], [3, 4]], [[0, 0], [1, 1]])  # 1/4, 1/2
    micro = micro_average([a, b])
    assert (micro["tp"], micro["n_pred"], micro["n_ref"]) == (3, 6, 4)
    assert micro["precision"] == pytest.approx(3 / 6)
    assert micro["recall"] == pytest.approx(3 / 4)
    assert micro["f1"] == pytest.approx(6 / 10)
    macro = macro_average([a, b])
    assert macro["precision"] == pytest.approx((1 + 0.25) / 2)
    assert macro["recall"] == pytest.approx((1 + 0.5) / 2)
    assert macro["f1"] == pytest.approx((1 + 2 / 6) / 2)
    assert math.isnan(macro_average([])["f1"])


def test_percent_identity():
    assert percent_identity("MKVLA", "kvxa", [[1, 0], [2, 1], [4, 3]]) == pytest.approx(100.0)
    assert percent_identity("MKVLA", "KWXA", [[1, 0], [2, 1], [4, 3]]) == pytest.approx(200 / 3)
    # one convention everywhere: NaN when nothing is aligned (sinkalign.alignment)
    assert math.isnan(percent_identity("MK", "MK", np.zeros((0, 2), int)))
    with pytest.raises(ValueError, match="out of range for m"):
        percent_identity("MK", "MK", [[2, 0]])


def test_identity_bins():
    assert IDENTITY_BINS == (0, 20, 30, 40, 60, 100)
    assert identity_bin_labels() == ["[0,20)", "[20,30)", "[30,40)", "[40,60)", "[60,100]"]
    ids = [0.0, 19.99, 20.0, 29.5, 30.0, 45.0, 60.0, 99.0, 100.0]
    np.testing.assert_array_equal(assign_identity_bins(ids), [0, 0, 1, 1, 2, 3, 4, 4, 4])
    assert identity_bin_labels([0, 50.5, 100]) == ["[0,50.5)", "[50.5,100]"]
    with pytest.raises(ValueError, match=r"identities\[1\]=100.5 is outside the bin range \[0, 100\]"):
        assign_identity_bins([10.0, 100.5])
    with pytest.raises(ValueError, match=r"identities\[0\]=nan"):
        assign_identity_bins([float("nan")])
    with pytest.raises(ValueError, match="strictly increasing"):
        identity_bin_labels([0, 30, 20])


def _scores_from_f1(values):
    """PairScores whose precision = recall = f1 = value (value * 100 of 100 pairs correct)."""
    out = []
    for v in values:
        tp = int(round(v * 100))
        out.append(PairScores(tp, 100, 100, tp / 100, tp / 100, tp / 100))
    return out


def test_binned_table_values_and_json():
    rng = np.random.default_rng(1)
    ids = np.concatenate([rng.uniform(0, 20, 30), rng.uniform(20, 30, 1), rng.uniform(60, 100, 10)])
    values = np.concatenate([rng.uniform(0, 0.3, 30), [0.5], rng.uniform(0.8, 1.0, 10)]).round(2)
    scores = _scores_from_f1(values)
    rows = binned_table(scores, ids, ci="normal")
    json.dumps(rows, allow_nan=False)  # plain, valid JSON
    assert [r["bin"] for r in rows] == identity_bin_labels() + ["all"]
    assert [r["n"] for r in rows] == [30, 1, 0, 0, 10, 41]
    first = rows[0]
    x = values[:30]
    assert first["f1"] == pytest.approx(x.mean())
    half = 1.959963984540054 * x.std(ddof=1) / math.sqrt(30)
    assert first["f1_ci"] == pytest.approx([x.mean() - half, x.mean() + half])
    assert first["micro_f1"] == pytest.approx(x.sum() * 100 / 3000)
    assert rows[1]["f1"] == pytest.approx(0.5) and rows[1]["f1_ci"] is None  # n < 2: no CI
    assert rows[2]["f1"] is None and rows[2]["micro_precision"] is None  # empty bin
    assert rows[-1]["lo"] is None and rows[-1]["f1"] == pytest.approx(values.mean())


def test_bootstrap_ci_close_to_normal_for_large_n_and_reproducible():
    rng = np.random.default_rng(2)
    values = rng.uniform(0, 1, 500).round(2)
    scores = _scores_from_f1(values)
    ids = np.full(500, 35.0)
    boot = binned_table(scores, ids, ci="bootstrap", n_boot=4000, seed=3)
    norm = binned_table(scores, ids, ci="normal")
    lo_b, hi_b = boot[2]["f1_ci"]
    lo_n, hi_n = norm[2]["f1_ci"]
    assert lo_b < values.mean() < hi_b
    assert abs(lo_b - lo_n) < 0.006 and abs(hi_b - hi_n) < 0.006
    assert binned_table(scores, ids, seed=3, n_boot=4000) == boot
    assert binned_table(scores, ids, seed=4, n_boot=4000) != boot
    # Narrower confidence, narrower interval.
    lo90, hi90 = binned_table(scores, ids, ci="normal", confidence=0.90)[2]["f1_ci"]
    assert hi90 - lo90 < hi_n - lo_n


def test_render_table_text():
    scores = _scores_from_f1([0.1, 0.2, 0.9])
    rows = binned_table(scores, [10.0, 15.0, 70.0], ci="normal")
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(render_table(rows, title="demo"))
    text = console.file.getvalue()
    assert "demo" in text and "[0,20)" in text and "[60,100]" in text and "all" in text
    assert "0.150 [" in text  # mean of 0.1, 0.2 with its interval
    assert "0.900" in text
    flat = " ".join(text.split())
    assert "mean over pairs" in flat and "pooled F1: over all aligned residue pairs" in flat
    narrow = Console(file=io.StringIO(), width=80, color_system=None)
    narrow.print(render_table(rows, title="demo"))
    text80 = narrow.file.getvalue()
    assert "\u2026" not in text80 and max(len(line) for line in text80.splitlines()) <= 80
    assert "0.150 [" in text80 and f"{rows[-1]['micro_f1']:.3f}" in text80
    with pytest.raises(ValueError, match=r"row 'x' lacks keys \['n', 'precision', 'recall', 'f1'\]"):
        render_table([{"bin": "x"}])


def test_binned_table_errors():
    scores = _scores_from_f1([0.1, 0.2])
    with pytest.raises(ValueError, match=r"ci='exact' is not one of \('bootstrap', 'normal'\)"):
        binned_table(scores, [1.0, 2.0], ci="exact")
    with pytest.raises(ValueError, match="confidence=1.5 must be in"):
        binned_table(scores, [1.0, 2.0], confidence=1.5)
    with pytest.raises(ValueError, match="n_boot=0 must be a positive integer"):
        binned_table(scores, [1.0, 2.0], n_boot=0)
    with pytest.raises(ValueError, match="got 2 scores but 3 identities"):
        binned_table(scores, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"scores\[1\] must be a PairScores, got dict"):
        binned_table([scores[0], {}], [1.0, 2.0])


def test_pair_input_errors():
    with pytest.raises(ValueError, match=r"predicted must have shape \[k, 2\]"):
        pair_scores(np.zeros((2, 3), int), [[0, 0]])
    with pytest.raises(ValueError, match="reference must hold integer indices"):
        pair_scores([[0, 0]], [[0.5, 1.0]])
    with pytest.raises(ValueError, match=r"reference\[0\]=\[-1, 0\] is not a valid 0-based index pair"):
        pair_scores([[0, 0]], [[-1, 0]])
    with pytest.raises(ValueError, match=r"predicted lists the pair \[1, 2\] more than once"):
        pair_scores([[0, 0], [1, 2], [1, 2]], [[0, 0]])


def _reference_pairs(state: str) -> tuple[np.ndarray, int, int]:
    """TM-align state string -> pairs (':'/'.' aligned, '1' seq1 only, '2' seq2 only)."""
    i = j = 0
    out = []
    for c in state:
        if c in ":.":
            out.append((i, j))
            i, j = i + 1, j + 1
        elif c == "1":
            i += 1
        else:
            j += 1
    return np.array(out, dtype=np.int64).reshape(-1, 2), i, j


@pytest.mark.shared_data
def test_needleman_wunsch_accuracy_rises_with_identity_on_tmalign_pairs(shared_data):
    with open(shared_data / "tmalign_pairs" / "valid.tsv", newline="") as handle:
        rows = list(itertools.islice(csv.reader(handle, delimiter="\t"), 200))
    scores, ids = [], []
    for row in rows:
        q, t = row[5], row[6]
        ref, i, j = _reference_pairs(row[7])
        assert (i, j) == (len(q), len(t))
        if ref.shape[0] == 0:
            continue
        scores.append(pair_scores(align_pair(q, t, "nw").pairs, ref))
        ids.append(percent_identity(q, t, ref))
    table = binned_table(scores, ids)
    assert table[-1]["n"] == len(scores) == sum(r["n"] for r in table[:-1])
    low, mid = table[0], table[1]
    assert low["n"] > 50 and mid["n"] >= 3
    # Sequence alignment is near useless in the twilight zone and much better above 20%.
    assert mid["f1"] > low["f1"] + 0.2


def _random_counts(rng, n):
    n_ref = rng.integers(5, 60, n)
    n_pred = rng.integers(0, 60, n)
    tp = np.minimum(n_ref, n_pred) - rng.integers(0, 5, n).clip(0, None)
    return np.stack([tp.clip(0, None), n_pred, n_ref], axis=1)


def test_micro_difference_matches_explicit_cluster_resampling():
    rng = np.random.default_rng(3)
    a = _random_counts(rng, 40)
    b = a.copy()
    b[:, 0] = np.minimum(b[:, 0] + rng.integers(0, 3, 40), b[:, 1:].min(axis=1))  # b finds a little more
    clusters = [f"fam{k % 7}" for k in range(40)]  # 7 families, interleaved
    out = micro_difference(a, b, clusters, n_boot=300, seed=11)
    # the same resamples drawn by hand: whole families, with replacement, pairs pooled
    names = sorted(set(clusters))
    draw = np.random.default_rng(11)
    diffs = []
    for _ in range(300):
        chosen = [names[i] for i in draw.integers(0, len(names), size=len(names))]
        rows = [k for fam in chosen for k in range(40) if clusters[k] == fam]
        ta, tb = a[rows].sum(axis=0), b[rows].sum(axis=0)
        diffs.append(2 * ta[0] / (ta[1] + ta[2]) - 2 * tb[0] / (tb[1] + tb[2]))
    assert out["ci"]["f1"] == pytest.approx(list(np.quantile(diffs, [0.025, 0.975])), abs=1e-12)
    whole_a, whole_b = micro_average(PairScores(*r, 0, 0, 0) for r in a), micro_average(PairScores(*r, 0, 0, 0) for r in b)
    assert out["difference"]["f1"] == pytest.approx(whole_a["f1"] - whole_b["f1"], abs=1e-15)
    assert out["difference"]["f1"] < 0 and out["share_a_better"] < 0.5
    assert (out["n"], out["clusters"]) == (40, 7)


def test_micro_difference_identical_and_dominating():
    rng = np.random.default_rng(0)
    a = _random_counts(rng, 30)
    same = micro_difference(a, a.copy(), n_boot=200)
    assert same["difference"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert same["ci"]["f1"] == [0.0, 0.0] and same["share_a_better"] == 0.5
    worse = a.copy()
    worse[:, 0] = np.maximum(worse[:, 0] - 2, 0)  # a finds at least as much on every pair, more on most
    out = micro_difference(a, worse, n_boot=200)
    assert out["ci"]["f1"][0] > 0 and out["share_a_better"] == 1.0
    # PairScores are accepted as well as count rows
    scores = [PairScores(int(t), int(p), int(r), 0.0, 0.0, 0.0) for t, p, r in a]
    assert micro_difference(scores, worse, n_boot=200)["ci"] == out["ci"]


def test_micro_difference_clusters_widen_correlated_evidence():
    # a wins in some families and loses in others, by the same amount on each of a family's pairs:
    # pairs are not independent, and the family-level interval must be the wider one
    n_fam, per = 12, 15
    a = np.tile([30, 50, 50], (n_fam * per, 1))
    b = a.copy()
    fam = np.repeat(np.arange(n_fam), per)
    b[:, 0] += np.where(fam % 2 == 0, 5, -4)
    by_pair = micro_difference(a, b, n_boot=2000, seed=1)["ci"]["f1"]
    by_family = micro_difference(a, b, fam, n_boot=2000, seed=1)["ci"]["f1"]
    assert by_family[1] - by_family[0] > 2 * (by_pair[1] - by_pair[0])


@pytest.mark.parametrize("b, clusters, match", [
    (np.array([[1, 2, 3]]), None, "same N"),
    (np.array([[1, 2, 4], [1, 2, 3]]), None, "n_ref"),
    (np.array([[1, 2, 3], [1, 2, 3]]), ["x"], "one label per pair"),
    (np.array([[3, 2, 3], [1, 2, 3]]), None, "tp <= n_pred"),
])
def test_micro_difference_errors(b, clusters, match):
    a = np.array([[1, 2, 3], [1, 2, 3]])
    with pytest.raises(ValueError, match=match):
        micro_difference(a, b, clusters)


def test_references_without_an_aligned_pair_get_their_own_row(tmp_path):
    """Pfam fragments that do not overlap align no residue pair: no identity. `evaluate`
    crashed on them (a NaN identity outside every bin); they now get a row of their own and
    count in "all"."""
    from click.testing import CliRunner

    from sinkalign.align.metrics import NO_IDENTITY_BIN
    from sinkalign.cli.main import cli

    ref = tmp_path / "frag.sto"
    ref.write_text("# STOCKHOLM 1.0\n#=GF ID FRAG\n"
                   "s1/1-12 ACDEFGHIKLMN------------\n"
                   "s2/1-12 ------------PQRSTVWYACDE\n"
                   "s3/1-24 ACDEFGHIKLMNPQRSTVWYACDE\n//\n")
    out = tmp_path / "e.json"
    r = CliRunner().invoke(cli, ["evaluate", "--reference", str(ref), "--methods", "nw", "--json", str(out)])
    assert r.exit_code == 0, r.output
    import json

    data = json.loads(out.read_text())
    (table,) = [s["methods"]["nw"]["bins"] for s in data["sets"].values()]
    rows = {row["bin"]: row for row in table}
    assert rows[NO_IDENTITY_BIN]["n"] == 1 and rows["all"]["n"] == 3
    assert sum(row["n"] for row in table if row["bin"] not in (NO_IDENTITY_BIN, "all")) == 2


def test_binned_table_rows_for_unaligned_references_only_when_there_are_some():
    from sinkalign.align.metrics import NO_IDENTITY_BIN

    s = pair_scores([(0, 0), (1, 1), (2, 2), (3, 4)], [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)])
    labels = [row["bin"] for row in binned_table([s, s], [10.0, 50.0], n_boot=10)]
    assert NO_IDENTITY_BIN not in labels and labels[-1] == "all"
    rows = binned_table([s, s, s], [10.0, float("nan"), 50.0], n_boot=10)
    assert [row["bin"] for row in rows][-2:] == [NO_IDENTITY_BIN, "all"]
    assert rows[-2]["n"] == 1 and rows[-1]["n"] == 3
    with pytest.raises(ValueError, match="outside the bin range"):
        binned_table([s], [101.0])
