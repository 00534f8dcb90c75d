"""Nucleotide pairs on both strands: the aligner's `strand`, the minus-strand AlignedPair and
how every output format reports it."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pysam
import pytest
from click.testing import CliRunner

from sinkalign import write_alignments
from sinkalign.align.aligner import Aligner
from sinkalign.alignment import AlignedPair, alignment_stats, reverse_complement
from sinkalign.cli.main import cli
from sinkalign.errors import InputError


def _mutated(seq: str, rng, rate: float = 0.12) -> str:
    return "".join(rng.choice(list("ACGT")) if rng.random() < rate else c for c in seq)


@pytest.fixture(scope="module")
def seqs():
    """A 300 bp query, a mutated copy of its middle 200 bp (the plus-strand homolog) and the
    reverse complement of that copy (the minus-strand homolog)."""
    rng = np.random.default_rng(11)
    query = "".join(rng.choice(list("ACGT"), 300))
    fwd = _mutated(query[50:250], rng)
    return query, fwd, reverse_complement(fwd)


@pytest.fixture(scope="module")
def dna():
    return Aligner.load("dna")


def test_reverse_complement_keeps_codes_case_and_rna():
    assert reverse_complement("ACGTNRYKMacgt") == "acgtKMRYNACGT"
    assert reverse_complement("AUGGCU") == "AGCCAU"  # RNA stays RNA
    assert reverse_complement(reverse_complement("GATTACANNRY")) == "GATTACANNRY"


def test_default_strands(dna):
    assert dna.strand == "both" and Aligner.load("learned").strand == "plus"
    with pytest.raises(InputError, match="strands are for nucleotide models"):
        Aligner.load("learned", strand="minus")
    with pytest.raises(InputError, match="strands are for nucleotide models"):
        Aligner.load("blosum").align("MKV", "MKV", strand="both")
    with pytest.raises(InputError, match="is not one of"):
        Aligner.load("dna", strand="reverse")


def test_strand_signs_name_the_strands(dna, seqs, tmp_path):
    """``"+"`` and ``"-"``, the signs the results and SAM/PAF carry, name ``plus`` and
    ``minus`` wherever a strand is asked for (they were refused)."""
    from sinkalign.pipelines.align import align_fasta

    query, _, rev = seqs
    assert Aligner.load("dna", strand="-").strand == "minus"
    by_sign, by_name = dna.align(query, rev, strand="-"), dna.align(query, rev, strand="minus")
    assert by_sign.strand == "-" and by_sign.pairs.tolist() == by_name.pairs.tolist()
    assert dna.align(query, rev, strand="+").strand == "+"
    assert Aligner.load("dna", strand="Minus").strand == "minus"  # any case, as the CLI reads it
    (tmp_path / "q.fa").write_text(f">q\n{query}\n")
    (tmp_path / "t.fa").write_text(f">t\n{rev}\n")
    align_fasta(tmp_path / "q.fa", tmp_path / "t.fa", output=tmp_path / "o.paf", strand="-")
    assert (tmp_path / "o.paf").read_text().split("\t")[4] == "-"
    with pytest.raises(InputError, match=r"is not one of \('plus', 'minus', 'both'\) \(or '\+', '-'; any case\)"):
        dna.align(query, rev, strand="*")


def test_minus_aligns_the_reverse_complement_as_given(dna, seqs):
    """strand="minus" is the plus-strand alignment of the query's reverse complement, E-value
    included (one comparison), flagged "-"; its stats span the query as given. (A symmetric
    model solves it from whichever end makes it the same problem whichever side is the query,
    here the target's reverse complement against the query, turned back: the same alignment,
    its floating-point sums taken in another order.)"""
    query, _, rev = seqs
    minus = dna.align(query, rev, strand="minus", keep_plan=True)
    plain = dna.align(reverse_complement(query), rev, strand="plus", keep_plan=True)
    assert minus.strand == "-" and plain.strand == "+"
    assert minus.query == reverse_complement(query)
    np.testing.assert_array_equal(minus.pairs, plain.pairs)
    np.testing.assert_allclose(minus.plan, plain.plan, rtol=1e-12, atol=0)
    assert minus.evalue == pytest.approx(plain.evalue, rel=1e-9) and minus.score == pytest.approx(plain.score, rel=1e-12)
    # the other way round it is the same comparison, exactly: the transpose
    other = dna.align(rev, query, strand="minus", keep_plan=True).transposed()
    np.testing.assert_array_equal(other.pairs, minus.pairs)
    np.testing.assert_array_equal(other.plan, minus.plan)
    np.testing.assert_array_equal(other.alignment.match_posterior, minus.alignment.match_posterior)
    assert (other.query, other.target, other.score, other.evalue) == (minus.query, minus.target, minus.score,
                                                                       minus.evalue)
    raw = alignment_stats(minus.query, minus.target, minus.pairs)
    st = minus.stats
    assert (st.query_start, st.query_end) == (300 - raw.query_end, 300 - raw.query_start)
    assert (st.target_start, st.target_end) == (raw.target_start, raw.target_end)
    assert 40 <= st.query_start <= 60 and 240 <= st.query_end <= 260  # the middle 200 bp, as given
    assert st.identity > 80


def test_both_keeps_the_strand_of_smaller_evalue_and_doubles_it(dna, seqs):
    query, fwd, rev = seqs
    results = list(dna.align_many([("q", query, "fwd", fwd), ("q", query, "rev", rev)]))
    for res, target, strand in zip(results, (fwd, rev), ("+", "-")):
        alone = dna.align(query, target, strand="plus" if strand == "+" else "minus")
        other = dna.align(query, target, strand="minus" if strand == "+" else "plus")
        assert res.strand == strand and alone.evalue < other.evalue
        np.testing.assert_array_equal(res.pairs, alone.pairs)
        assert res.query == alone.query and res.score == alone.score
        assert res.evalue == 2 * alone.evalue  # two comparisons, one per strand
    # the same homology found either way, on the query as given
    assert results[0].stats.query_start == results[1].stats.query_start
    assert results[0].stats.query_end == results[1].stats.query_end


def test_a_bad_pair_fails_as_given_after_the_pairs_before_it(dna, seqs):
    query, fwd, _ = seqs
    stream = dna.align_many([("q", query, "fwd", fwd), ("empty", "", "fwd", fwd)])
    assert next(stream).strand == "+"
    with pytest.raises(InputError, match="pair empty / fwd: the query sequence is empty"):
        next(stream)


def test_a_minus_pair_turned_round_is_the_same_alignment(dna, seqs):
    """Transposing a minus-strand pair makes the target's reverse complement the query, aligned
    to the query as given: the same residue pairs read from the other end, plan and posteriors
    with them; turning it round again gives the pair back."""
    query, _, rev = seqs
    pair = dna.align(query, rev, strand="minus", keep_plan=True)
    back = pair.transposed()
    m, n = len(query), len(rev)
    assert back.strand == "-" and back.query == reverse_complement(rev) and back.target == reverse_complement(
        pair.query) == query
    # rc(q)[i] ~ t[j]  <=>  rc(t)[n-1-j] ~ q[m-1-i]
    expect = sorted([n - 1 - j, m - 1 - i] for i, j in pair.pairs.tolist())
    assert back.pairs.tolist() == expect
    got = {tuple(p): c for p, c in zip(back.pairs.tolist(), back.alignment.match_posterior)}
    for (i, j), c in zip(pair.pairs.tolist(), pair.alignment.match_posterior):
        assert got[(n - 1 - j, m - 1 - i)] == c
    P, Q = pair.plan, back.plan
    assert Q.shape == (n + 1, m + 1)
    for i, j in [(0, 0), (m - 1, n - 1), (17, 33), (m - 1, 0)]:
        assert Q[n - 1 - j, m - 1 - i] == P[i, j]
    np.testing.assert_array_equal(Q[:n, m], P[m, :n][::-1])  # the target's gap mass, now the query's
    np.testing.assert_array_equal(Q[n, :m], P[:m, n][::-1])
    again = back.transposed()
    assert (again.query, again.target, again.strand) == (pair.query, pair.target, "-")
    np.testing.assert_array_equal(again.pairs, pair.pairs)
    np.testing.assert_array_equal(again.plan, pair.plan)
    np.testing.assert_array_equal(again.alignment.query_gap_posterior, pair.alignment.query_gap_posterior)
    assert again.stats == pair.stats and back.stats.aligned_length == pair.stats.aligned_length
    plain = AlignedPair("q", pair.query, "t", pair.target, pair.pairs, 1.0, None, None, "-")  # pairs only
    assert plain.transposed().pairs.tolist() == expect


def _written(pair, fmt: str) -> str:
    out = io.StringIO()
    write_alignments([pair], out, fmt)
    return out.getvalue()


def test_every_format_reports_the_minus_strand(dna, seqs, tmp_path):
    query, _, rev = seqs
    pair = dna.align(query, rev, query_id="q", target_id="rev")  # strand both: the minus strand wins
    assert pair.strand == "-"
    st, raw = pair.stats, alignment_stats(pair.query, pair.target, pair.pairs)
    # TSV and JSON: spans on the query as given, the strand, the CIGAR along the reverse complement
    header, row = (line.split("\t") for line in _written(pair, "tsv").splitlines())
    row = dict(zip(header, row))
    assert row["strand"] == "-" and (int(row["query_start"]), int(row["query_end"])) == (st.query_start, st.query_end)
    assert row["cigar"] == pair.cigar and row["cigar"].startswith(f"{raw.query_start}S" if raw.query_start else "")
    obj = json.loads(_written(pair, "json"))
    assert obj["strand"] == "-" and (obj["query_start"], obj["query_end"]) == (st.query_start, st.query_end)
    assert obj["pairs"] == pair.pairs.tolist() and obj["query_gapped"].replace("-", "") == pair.query
    # blast6: the query forward, the subject descending
    b6 = _written(pair, "blast6").split("\t")
    qstart, qend, sstart, send = map(int, b6[6:10])
    assert (qstart, qend) == (st.query_start + 1, st.query_end) and (sstart, send) == (st.target_end, st.target_start + 1)
    assert sstart > send
    # PAF: the query span as given, strand -, the CIGAR along the reverse complement (no clips)
    paf = _written(pair, "paf").rstrip("\n").split("\t")
    assert paf[2:5] == [str(st.query_start), str(st.query_end), "-"]
    assert paf[7:9] == [str(st.target_start), str(st.target_end)] and paf[12:14] == ["tp:A:P", "cg:Z:" + re.sub(r"^\d+S|\d+S$", "", pair.cigar)]
    # MAF: the query line on the minus strand, read back by Biopython onto the query as given
    from Bio import Align

    (tmp_path / "x.maf").write_text(_written(pair, "maf"))
    (block,) = list(Align.parse(str(tmp_path / "x.maf"), "maf"))
    assert "s q " in _written(pair, "maf") and " - 300 " in _written(pair, "maf")
    idx = block.indices
    got = idx[:, (idx >= 0).all(0)].T  # (target, query as given) per aligned column
    m = len(query)
    np.testing.assert_array_equal(got, np.stack([pair.pairs[:, 1], m - 1 - pair.pairs[:, 0]], 1))
    # SAM / BAM: flag 16, the reverse complement as SEQ; pysam turns it back into the read as given
    for fmt in ("sam", "bam"):
        path = tmp_path / f"x.{fmt}"
        write_alignments([pair], path, fmt)
        with pysam.AlignmentFile(str(path)) as fh:
            (seg,) = list(fh)
        assert seg.flag == 16 and seg.is_reverse and seg.query_sequence == pair.query
        assert seg.get_forward_sequence() == query and seg.cigarstring == pair.cigar
        assert seg.reference_start == st.target_start and seg.query_alignment_start == raw.query_start
    # FASTA, Stockholm: the strand in the description / comment
    assert "strand=-" in _written(pair, "fasta").splitlines()[0]
    assert "#=GF CC   score=" in (sto := _written(pair, "stockholm")) and "strand=-" in sto
    # text: strand=- on the '#' line, the query rows numbered on the query as given, descending
    text = _written(pair, "text")
    assert text.splitlines()[0].endswith("strand=-") and str(pair) == text
    q_rows = [line.split() for line in text.splitlines() if line.startswith("q ")]
    first_row, last_q = q_rows[0], q_rows[-1]
    assert int(first_row[3]) < int(first_row[1])  # descending
    # the aligned region and up to TEXT_CONTEXT columns each side, numbered on the query as given
    st = pair.stats
    shown = "".join(row[2] for row in q_rows).replace("-", "")
    assert int(first_row[1]) - int(last_q[3]) + 1 == len(shown)
    assert int(first_row[1]) >= st.query_end and int(last_q[3]) <= st.query_start + 1


def test_plus_strand_pairs_write_as_before(dna, seqs):
    query, fwd, _ = seqs
    pair = dna.align(query, fwd)
    assert pair.strand == "+"
    row = _written(pair, "tsv").splitlines()[1].split("\t")
    assert row[-1] == "+" and int(row[5]) == pair.stats.query_start
    assert "strand" not in _written(pair, "text").splitlines()[0]
    assert "strand" not in _written(pair, "fasta")


def test_cli_strand_option(tmp_path, seqs):
    query, fwd, rev = seqs
    (tmp_path / "q.fa").write_text(f">q\n{query}\n")
    (tmp_path / "t.fa").write_text(f">fwd\n{fwd}\n>rev\n{rev}\n")
    (tmp_path / "p.fa").write_text(">p\nMKVLAAGHWERTYLLKPQ\n")

    def rows(*extra):
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), *extra])
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        return [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]

    both = rows()
    assert [(r["target"], r["strand"]) for r in both] == [("fwd", "+"), ("rev", "-")]
    assert both[0]["query_start"] == both[1]["query_start"] and both[0]["query_end"] == both[1]["query_end"]
    assert [r["strand"] for r in rows("--strand", "plus")] == ["+", "+"]
    minus = rows("--strand", "minus")
    assert [r["strand"] for r in minus] == ["-", "-"]
    assert float(minus[1]["evalue"]) == pytest.approx(float(both[1]["evalue"]) / 2, rel=1e-2)
    plans = tmp_path / "plans.npz"
    rows("--plan-out", str(plans))
    with np.load(plans) as z:
        plan = z["q|rev|1"]
    expect = Aligner.load("dna").align(reverse_complement(query), rev, strand="plus", keep_plan=True).plan
    np.testing.assert_allclose(plan, expect.astype(np.float32))
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "p.fa"), str(tmp_path / "p.fa"), "--strand", "minus"])
    assert r.exit_code == 1 and "--strand minus: strands are for nucleotide sequences" in r.output


def test_cli_strand_option_takes_the_signs_in_any_case(tmp_path, seqs):
    """``--strand`` reads what :func:`strand_name` reads (``+``, ``-``) in any case: ``-`` as a
    separate value and after ``=`` (it was refused: only plus/minus/both, lower case)."""
    query, fwd, rev = seqs
    (tmp_path / "q.fa").write_text(f">q\n{query}\n")
    (tmp_path / "t.fa").write_text(f">fwd\n{fwd}\n>rev\n{rev}\n")

    def run(*strand):
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), *strand,
                                     "--no-progress"])
        assert r.exit_code == 0, r.output
        return r.output

    minus, plus = run("--strand", "minus"), run("--strand", "plus")
    assert minus != plus
    for strand in (["--strand", "-"], ["--strand=-"], ["--strand", "MINUS"]):
        assert run(*strand) == minus, strand
    for strand in (["--strand", "+"], ["--strand=+"], ["--strand", "Plus"]):
        assert run(*strand) == plus, strand
    assert run("--strand", "BOTH") == run()
    r = CliRunner().invoke(cli, ["align", "--help"])
    assert "--strand [plus|minus|both|+|-]" in r.output
    from sinkalign.align.aligner import STRANDS
    from sinkalign.cli.options import Strand

    assert Strand.CHOICES == (*STRANDS, "+", "-")  # the help's copy (the aligner is too heavy for --help)
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--strand", "rev"])
    assert r.exit_code == 2 and "'rev' is not a strand: plus|minus|both|+|- (any case)" in r.output


def test_x_masked_dna_aligns_with_the_dna_model(tmp_path):
    """`sinkalign align` on X-masked DNA (RepeatMasker -x): the DNA model, X read as N (it was
    'DNA against protein', and --model dna then refused the X)."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    (tmp_path / "q.fa").write_text(">xm\nACGTACGGATCCXXXXXXXXXXACGTTAGCATCGATCGA\n")
    (tmp_path / "t.fa").write_text(">t\nACGTACGGATCCAAGGTTCCAAACGTTAGCATCGATCGA\n")
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--strand", "plus",
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    header, row = r.output.splitlines()
    assert dict(zip(header.split("\t"), row.split("\t")))["cigar"] == "39M"


@pytest.mark.parametrize("seed", [1, 6, 15, 33])
def test_the_dna_model_leaves_near_zero_confidence_end_columns_unaligned(dna, seed):
    """A 300 bp copy (10% substitutions) of the middle of 500 bp: MEA without a threshold pulled
    an end base or two tens of bases away across a long gap (``1M83D299M``) at a confidence of
    about 0.002; the DNA model's threshold (0.1 since 2026-11-29, chosen on flanked pairs of the
    validation genera) leaves them unaligned, soft-clipped."""
    rng = np.random.default_rng(seed)
    target = "".join(rng.choice(list("ACGT"), 500))
    query = "".join(c if rng.random() > 0.1 else rng.choice([x for x in "ACGT" if x != c]) for c in target[100:400])
    plain = Aligner.load("dna", min_confidence=0.0).align(query, target, strand="plus")
    assert re.search(r"\d{2}D", plain.cigar)  # the pathology, without the threshold
    assert dna.min_confidence == pytest.approx(0.1)
    hit = dna.align(query, target, strand="plus")
    assert re.fullmatch(r"(\d+S)?\d+M(\d+S)?", hit.cigar), hit.cigar
    assert 100 <= hit.stats.target_start and hit.stats.target_end <= 400
