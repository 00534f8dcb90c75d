"""The search prefilter: Smith-Waterman ranking of a query's targets, and `--prefilter N`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.align.prefilter import best_targets, prefilter_scores
from sinkalign.align.significance import local_nats
from sinkalign.alignment import reverse_complement
from sinkalign.cli.main import cli
from sinkalign.errors import InputError

HBA = ("MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNALSALSDLHAHKLRVDPVNFKLLS"
       "HCLLVTLAAHLPAEFTPAVHASLDKFLASVSTVLTSKYR")
HBB = ("MVHLTPEEKSAVTALWGKVNVDEVGGEALGRLLVVYPWTQRFFESFGDLSTPDAVMGNPKVKAHGKKVLGAFSDGLAHLDNLKGTFATLSELHCDKLHVDPE"
       "NFRLLGNVLVCVLAHHFGKEFTPPVQAAYQKVVAGVANALAHKYH")


def _random(rng, n: int, letters: str = "ACDEFGHIKLMNPQRSTVWY") -> str:
    return "".join(rng.choice(list(letters), n))


def test_scores_are_nats_less_the_log_target_length():
    rng = np.random.default_rng(0)
    targets = [HBB, _random(rng, 80), _random(rng, 400)]
    got = prefilter_scores(HBA, targets)
    want = [local_nats(HBA, t) - math.log(len(t)) for t in targets]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[0] > max(got[1:])  # the homolog ranks first


def test_best_targets_keeps_the_best_in_input_order():
    rng = np.random.default_rng(1)
    decoys = [_random(rng, int(rng.integers(60, 300))) for _ in range(30)]
    targets = decoys[:7] + [HBB] + decoys[7:19] + [HBA[:90]] + decoys[19:]
    scores = prefilter_scores(HBA, targets)
    for keep in (1, 2, 5):
        kept = best_targets(HBA, targets, keep)
        assert kept.tolist() == sorted(kept.tolist()) and len(kept) == keep
        assert min(scores[kept]) >= max(np.delete(scores, kept))  # nothing left out ranks better
    assert set(best_targets(HBA, targets, 2).tolist()) == {7, 20}
    assert best_targets(HBA, targets, 100).tolist() == list(range(len(targets)))
    same = [HBB, HBB, HBB]
    assert best_targets(HBA, same, 2).tolist() == [0, 1]  # ties: the earlier targets
    with pytest.raises(InputError, match="keep=0"):
        best_targets(HBA, targets, 0)
    with pytest.raises(InputError, match="strands are for nucleotide"):
        prefilter_scores(HBA, targets, strand="both")


def test_dna_queries_are_scored_on_the_strands_searched():
    rng = np.random.default_rng(2)
    query = _random(rng, 300, "ACGT")
    copy = reverse_complement(query[40:260])
    targets = [_random(rng, 220, "ACGT") for _ in range(5)] + [copy]
    assert best_targets(query, targets, 1, kind="dna", strand="both").tolist() == [5]
    assert best_targets(query, targets, 1, kind="dna", strand="minus").tolist() == [5]
    plus = prefilter_scores(query, targets, kind="dna")
    minus = prefilter_scores(query, targets, kind="dna", strand="minus")
    assert minus[5] > plus[5] + 50  # 220 bp of identity in nats, on the minus strand only
    np.testing.assert_allclose(prefilter_scores(query, targets, kind="dna", strand="both"), np.maximum(plus, minus))


def test_cli_prefilter_aligns_only_the_kept_targets_the_same_way(tmp_path):
    """`--prefilter N`: each query's N best targets, in input order, each row exactly as the full
    run writes it; `--db-size targets` still counts every target searched."""
    rng = np.random.default_rng(3)
    (tmp_path / "q.fa").write_text(f">hba\n{HBA}\n>rnd\n{_random(rng, 120)}\n")
    decoys = "".join(f">d{k}\n{_random(rng, int(rng.integers(80, 200)))}\n" for k in range(6))
    (tmp_path / "t.fa").write_text(decoys[: decoys.index(">d3")] + f">hbb\n{HBB}\n" + decoys[decoys.index(">d3"):])

    def rows(*extra):
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), *extra])
        assert r.exit_code == 0, r.output
        return r.output.splitlines()

    full = rows()
    kept = rows("--prefilter", "2")
    assert len(kept) == 1 + 2 * 2 and kept[0] == full[0]
    assert set(kept[1:]) <= set(full[1:])  # the same rows, just fewer
    hba_rows = [line.split("\t")[1] for line in kept[1:] if line.startswith("hba\t")]
    assert "hbb" in hba_rows and hba_rows == [t for t in ["d0", "d1", "d2", "hbb", "d3", "d4", "d5"] if t in hba_rows]
    full_e = {tuple(line.split("\t")[:2]): float(line.split("\t")[11]) for line in full[1:]}
    for line in rows("--prefilter", "2", "--db-size", "targets")[1:]:
        fields = line.split("\t")
        assert float(fields[11]) == pytest.approx(7 * full_e[(fields[0], fields[1])], rel=1e-2)
    (tmp_path / "pairs.tsv").write_text("hba\thbb\n")
    for args in ([str(tmp_path / "q.fa"), str(tmp_path / "q.fa"), "--pairing", "zip"],
                 ["--pairs", str(tmp_path / "pairs.tsv"), str(tmp_path / "q.fa"), str(tmp_path / "t.fa")]):
        r = CliRunner().invoke(cli, ["align", *args, "--prefilter", "1"])
        assert r.exit_code == 1 and "--prefilter picks each query's targets in an all-vs-all run" in r.output


def test_batched_scores_are_the_single_pair_numbers():
    """local_scores (one SIMD profile for the query, a 32-bit rerun where 16 bits saturate) and
    composition_lambdas (every target's Newton iteration at once) give what the one-pair
    functions give, including pairs without a root (the floor) and empty targets."""
    from sinkalign.align.baselines import Scoring, local_score, local_scores
    from sinkalign.align.significance import composition_lambda, composition_lambdas

    rng = np.random.default_rng(4)
    long = _random(rng, 7000)
    targets = [HBB, _random(rng, 50), "WWWWWWWW", "", long, long[:6500], "X"]
    for query in (HBA, long, "W" * 40):
        want = [local_score(query, t) for t in targets]
        assert local_scores(query, targets).tolist() == want
        lam = composition_lambdas(query, targets)
        np.testing.assert_allclose(lam, [composition_lambda(query, t) for t in targets], rtol=1e-12)
    assert local_score(long, long) > 2**15  # the 16-bit kernel saturates: the 32-bit rerun ran
    assert 0.01 in composition_lambdas("W" * 40, targets)  # a no-root pair gets the floor
    dna = _random(rng, 200, "ACGT")
    dtargets = [_random(rng, 150, "ACGT") for _ in range(20)] + ["AAAAAAAA"]
    assert local_scores(dna, dtargets, scoring=Scoring.dna()).tolist() == [
        local_score(dna, t, scoring=Scoring.dna()) for t in dtargets]
    np.testing.assert_allclose(composition_lambdas(dna, dtargets, kind="dna"),
                               [composition_lambda(dna, t, kind="dna") for t in dtargets], rtol=1e-12)
