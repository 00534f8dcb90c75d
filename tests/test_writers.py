"""Alignment writers: every format is read back with Biopython / pysam and checked."""

from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pysam
import pytest
from Bio import Align, SeqIO

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.decode import Alignment, alignment_stats, cigar, mea_align, to_gapped
from sinkalign.io.writers import FORMATS, TSV_COLUMNS, AlignedPair, write_alignments

PROT_Q = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQ"
PROT_T = "MKTAYIAKQRQISFVKSHFSRQDILDLWIYHTQGYFPDWQNYTPGPGVRYPLTFGWCYKLVPV"
DNA_Q = "ACGTTGCAACGTAGCTAGCTAGGCTTACG"
DNA_T = "TTACGTTGCAACGAAGCTAGCTAGCTTACGAA"


def mea_record():
    """An MEA alignment of two proteins from a plan concentrated on their SW alignment."""
    base = align_pair(PROT_Q, PROT_T, "sw")
    m, n = len(PROT_Q), len(PROT_T)
    rng = np.random.default_rng(0)
    plan = rng.random((m + 1, n + 1)) * 0.001
    plan[base.pairs[:, 0], base.pairs[:, 1]] = rng.uniform(1.0, 3.0, base.pairs.shape[0])
    plan[m, :] += 0.05
    plan[:, n] += 0.05
    aln = mea_align(plan)
    assert aln.pairs.shape[0] > 10
    return AlignedPair("prot_q", PROT_Q, "prot_t", PROT_T, aln)


@pytest.fixture(scope="module")
def records():
    dna = align_pair(DNA_Q, DNA_T, "sw", scoring=Scoring.dna())
    return [
        mea_record(),
        AlignedPair("prot_q2", PROT_Q, "prot_t", PROT_T, align_pair(PROT_Q, PROT_T, "nw")),
        ("dna_q", DNA_Q, "dna_t", DNA_T, dna.pairs, 12.5),
        ("lonely", "MKV", "prot_t", PROT_T, np.zeros((0, 2), int)),
    ]


def as_pairs(rec):
    aln = rec[4]
    return np.asarray(getattr(aln, "pairs", aln))


def score_of(rec):
    if len(rec) > 5 and rec[5] is not None:
        return float(rec[5])
    return float(getattr(rec[4], "score", float("nan")))


# --------------------------------------------------------------------------- formats


def test_fasta_round_trip(tmp_path, records):
    path = tmp_path / "out.fasta"
    assert write_alignments(records, path, "fasta") == 4
    got = list(SeqIO.parse(path, "fasta"))
    assert len(got) == 8
    for k, rec in enumerate(records):
        qrec, trec = got[2 * k], got[2 * k + 1]
        assert (qrec.id, trec.id) == (rec[0], rec[2])
        assert (str(qrec.seq), str(trec.seq)) == to_gapped(rec[1], rec[3], as_pairs(rec))
        assert str(qrec.seq).replace("-", "") == rec[1]
        assert f"aligned_to={rec[2]}" in qrec.description
    assert "score=12.5" in got[4].description and "score=NA" in got[6].description


def test_tsv_round_trip(tmp_path, records):
    path = tmp_path / "out.tsv"
    write_alignments(records, path, "tsv")
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        assert tuple(reader.fieldnames) == TSV_COLUMNS
        rows = list(reader)
    assert len(rows) == 4
    for rec, row in zip(records, rows):
        pairs = as_pairs(rec)
        st = alignment_stats(rec[1], rec[3], pairs)
        assert (row["query"], row["target"]) == (rec[0], rec[2])
        assert int(row["aligned_length"]) == pairs.shape[0]
        if pairs.shape[0]:
            assert float(row["score"]) == pytest.approx(score_of(rec), rel=1e-9)
            assert float(row["identity"]) == pytest.approx(st.identity, rel=1e-5)
            got_span = tuple(int(row[k]) for k in ("query_start", "query_end", "target_start", "target_end"))
            assert got_span == (st.query_start, st.query_end, st.target_start, st.target_end)
            assert row["cigar"] == cigar(pairs, len(rec[1]), len(rec[3]), local=True)
    assert float(rows[0]["mean_posterior"]) == pytest.approx(records[0][4].mean_posterior, rel=1e-5)
    assert rows[1]["mean_posterior"] == "NA"
    assert (rows[3]["cigar"], rows[3]["identity"], rows[3]["score"]) == ("*", "NA", "NA")


def check_sam_records(path, records, mode):
    with pysam.AlignmentFile(str(path), mode) as handle:
        refs = dict(zip(handle.references, handle.lengths))
        assert refs == {"prot_t": len(PROT_T), "dna_t": len(DNA_T)}
        segs = list(handle)
    assert [s.query_name for s in segs] == [r[0] for r in records]
    for rec, seg in zip(records, segs):
        pairs = as_pairs(rec)
        if pairs.shape[0] == 0:
            assert seg.is_unmapped
            continue
        assert not seg.is_unmapped
        assert seg.reference_name == rec[2]
        assert seg.reference_start == pairs[0, 1]
        # htslib walks our CIGAR: the aligned pairs must be exactly ours.
        assert seg.get_aligned_pairs(matches_only=True) == [tuple(p) for p in pairs.tolist()]
        assert seg.infer_query_length() == len(rec[1])
        mismatches = sum(rec[1][i] != rec[3][j] for i, j in pairs.tolist())
        internal = (pairs[-1] - pairs[0] + 1 - len(pairs)).sum()
        assert seg.get_tag("NM") == mismatches + internal
        # AS is an integer in the SAM spec (a real-valued score was AS:f); the score itself is ZS:f
        assert isinstance(seg.get_tag("AS"), int) and seg.get_tag("AS") == math.floor(score_of(rec) + 0.5)
        if not float(score_of(rec)).is_integer():
            assert seg.get_tag("ZS") == pytest.approx(score_of(rec), rel=1e-6)
    prot, nw, dna = segs[0], segs[1], segs[2]
    # Protein residues do not fit BAM's 4-bit code: SEQ '*' and the residues in XQ:Z.
    assert prot.query_sequence is None and prot.get_tag("XQ") == PROT_Q
    assert dna.query_sequence == DNA_Q and not dna.has_tag("XQ")
    mean_post = records[0][4].mean_posterior
    assert prot.get_tag("XP") == pytest.approx(mean_post, rel=1e-6)
    assert prot.mapping_quality == min(60, round(-10 * math.log10(1 - mean_post)))
    assert nw.mapping_quality == 255 and not nw.has_tag("XP")  # posterior unknown
    # AS is an integer for integral scores (htslib picks the smallest integer width), else a float.
    assert nw.get_tag("AS", with_value_type=True)[1] in "cCsSiI"
    assert dna.get_tag("AS") == 13 and dna.get_tag("ZS", with_value_type=True) == (12.5, "f")


def test_sam_round_trip(tmp_path, records):
    path = tmp_path / "out.sam"
    write_alignments(records, path, "sam")
    check_sam_records(path, records, "r")
    header = [line for line in path.read_text().splitlines() if line.startswith("@")]
    assert header[0].startswith("@HD") and any(line.startswith("@PG") and "ID:sinkalign" in line for line in header)


def test_bam_round_trip_and_samtools_view(tmp_path, records):
    bam, sam = tmp_path / "out.bam", tmp_path / "out.sam"
    write_alignments(records, bam, "bam")
    write_alignments(records, sam, "sam")
    assert bam.read_bytes()[:2] == b"\x1f\x8b"  # BGZF
    check_sam_records(bam, records, "rb")
    # samtools view of the BAM gives exactly the records of our SAM.
    body = [line for line in pysam.view(str(bam)).splitlines() if line]
    ours = [line for line in sam.read_text().splitlines() if line and not line.startswith("@")]
    assert body == ours
    # ... and samtools can convert our SAM to a BAM it reads back identically.
    again = tmp_path / "again.bam"
    pysam.view("-b", "-o", str(again), str(sam), catch_stdout=False)
    assert [line for line in pysam.view(str(again)).splitlines() if line] == ours


def test_mapq_from_mean_posterior(tmp_path):
    recs = []
    for k, p in enumerate([0.0, 0.5, 0.9, 0.999, 1.0]):
        aln = Alignment(np.array([[0, 0], [1, 1]]), [p, p], np.zeros(3), np.zeros(3), p, 2 * p)
        recs.append((f"q{k}", "ACG", "t", "ACG", aln))
    path = tmp_path / "mapq.sam"
    write_alignments(recs, path, "sam")
    with pysam.AlignmentFile(str(path)) as handle:
        assert [s.mapping_quality for s in handle] == [0, 3, 10, 30, 60]


def test_stockholm_round_trip(tmp_path, records):
    path = tmp_path / "out.sto"
    write_alignments(records, path, "stockholm")
    blocks = list(Align.parse(path, "stockholm"))
    assert len(blocks) == 4
    for rec, block in zip(records, blocks):
        assert [s.id for s in block.sequences] == [rec[0], rec[2]]
        assert (block[0], block[1]) == to_gapped(rec[1], rec[3], as_pairs(rec))
        assert block.annotations["identifier"] == f"{rec[0]}_vs_{rec[2]}"
    assert blocks[2].annotations["comment"] == "score=12.5"
    # Posterior line: HMMER digits per column from the MEA posteriors.
    aln = records[0][4]
    pp = blocks[0].column_annotations["consensus posterior probability"]
    qrow, trow = blocks[0][0], blocks[0][1]
    assert len(pp) == len(qrow)
    mp = iter(aln.match_posterior)
    qi = tj = 0
    for col, char in enumerate(pp):
        if qrow[col] != "-" and trow[col] != "-":
            p = next(mp)
        elif trow[col] == "-":
            p = aln.query_gap_posterior[qi]
        else:
            p = aln.target_gap_posterior[tj]
        qi += qrow[col] != "-"
        tj += trow[col] != "-"
        expect = "*" if p >= 0.95 else str(int(math.floor(p * 10 + 0.5)))
        assert char == expect, (col, p)
    assert "*" in pp  # confident aligned columns
    assert not getattr(blocks[1], "column_annotations", None)  # no posteriors for a baseline
    assert "#=GC PP_cons" in path.read_text().split("//")[0]


def test_json_lines_round_trip(tmp_path, records):
    path = tmp_path / "out.jsonl"
    write_alignments(records, path, "json")
    objs = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(objs) == 4
    for k, (rec, obj) in enumerate(zip(records, objs)):
        assert obj["index"] == k and (obj["query_id"], obj["target_id"]) == (rec[0], rec[2])
        assert obj["pairs"] == as_pairs(rec).tolist()
        assert (obj["query_gapped"], obj["target_gapped"]) == to_gapped(rec[1], rec[3], as_pairs(rec))
    aln = records[0][4]
    assert objs[0]["match_posterior"] == pytest.approx(aln.match_posterior.tolist())
    assert objs[0]["expected_accuracy"] == pytest.approx(aln.expected_accuracy)
    assert objs[1]["match_posterior"] is None and objs[1]["score"] == records[1][4].score
    assert objs[3]["score"] is None and objs[3]["identity"] is None and objs[3]["cigar"] is None


def test_text_shows_the_layout_for_reading_by_eye(tmp_path, records):
    """Each pair: a '#' line with the figures, then blocks of 60 columns whose rows join up to
    the global layout from TEXT_CONTEXT columns before the first aligned pair to as many after
    the last (a second '#' line says which when ends are cut), 1-based first/last positions per
    row and block, a match line (| identical, . mismatch, blank at a gap) and, with posteriors,
    the PP digits."""
    from sinkalign.alignment import TEXT_CONTEXT, posterior_digits

    path = tmp_path / "out.txt"
    recs = [*records[:3], AlignedPair(*records[3][:5], None, None, 2.5e-4)]
    assert write_alignments(recs, path, "text") == 4
    pairs_text = [p for p in re.split(r"(?m)^# (?=\S+ \(\d+\) vs )", path.read_text()) if p.strip()]
    assert len(pairs_text) == 4
    assert re.search(r"^# columns 1-32 of \d+:", pairs_text[0], re.M)  # a local hit: its ends cut
    for rec, text in zip(recs, pairs_text):
        head, *blocks = [b for b in text.split("\n\n") if b.strip()]
        pairs = as_pairs(rec)
        st = alignment_stats(rec[1], rec[3], pairs)
        assert head.startswith(f"{rec[0]} ({len(rec[1])}) vs {rec[2]} ({len(rec[3])}): ")
        assert f"aligned={len(pairs)} identity={st.n_identical}/{len(pairs)}" in head
        qrow, trow = to_gapped(rec[1], rec[3], pairs)
        aligned = [c for c, (a, b) in enumerate(zip(qrow, trow)) if "-" not in (a, b)]
        lo, hi = (max(0, aligned[0] - TEXT_CONTEXT), min(len(qrow), aligned[-1] + 1 + TEXT_CONTEXT)) if aligned \
            else (0, len(qrow))
        if (lo, hi) != (0, len(qrow)):
            assert blocks[0] == f"# columns {lo + 1}-{hi} of {len(qrow)}: the unaligned ends beyond {TEXT_CONTEXT} " \
                                "columns are not shown"
            blocks = blocks[1:]
        with_pp = isinstance(rec[4], Alignment)
        got = {"q": "", "m": "", "t": "", "pp": ""}
        done = [len(qrow[:lo]) - qrow[:lo].count("-"), len(trow[:lo]) - trow[:lo].count("-")]
        for block in blocks:
            lines = block.split("\n")
            assert len(lines) == (4 if with_pp else 3)
            for k, (key, line) in enumerate((("q", lines[0]), ("t", lines[2]))):
                name, first, piece, last = line.split()
                assert name == (rec[0], rec[2])[k][:20]
                residues = len(piece) - piece.count("-")
                assert (int(first), int(last)) == (done[k] + (1 if residues else 0), done[k] + residues)
                done[k] += residues
                got[key] += piece
            offset = len(lines[0]) - len(lines[0].split()[-1]) - 1 - len(lines[0].split()[2])
            width = len(lines[0].split()[2])
            got["m"] += lines[1][offset:].ljust(width)
            if with_pp:
                assert lines[3].startswith("PP ")
                got["pp"] += lines[3][offset:]
            assert width == 60 or block is blocks[-1]
        assert (got["q"], got["t"]) == (qrow[lo:hi], trow[lo:hi])
        assert got["m"] == "".join(" " if "-" in (a, b) else "|" if a.upper() == b.upper() else "."
                                   for a, b in zip(qrow[lo:hi], trow[lo:hi]))
        if with_pp:
            assert got["pp"] == posterior_digits(rec[4])[lo:hi]
    assert "mean_confidence=" in pairs_text[0] and "score=12.5" in pairs_text[2]
    assert "evalue=0.00025" in pairs_text[3] and "evalue" not in pairs_text[0]
    assert "identity=0/0 mean_confidence=NA" in pairs_text[3]
    long_id = AlignedPair("a_very_long_query_identifier_here", "MKV", "t", "MKV", np.array([[0, 0], [1, 1], [2, 2]]))
    write_alignments([long_id], path, "text", overwrite=True)
    assert path.read_text().splitlines()[2].startswith("a_very_long_query_id 1 MKV 3")


def test_printing_a_pair_shows_the_text_layout(records):
    """print(pair) shows what --format text writes for it, posteriors or not; format_text's
    width folds the same columns into other blocks."""
    import io

    from sinkalign.alignment import format_text

    for rec in records[:3]:
        pair = AlignedPair(*rec[:5], rec[5] if len(rec) > 5 else None, None, 3e-7)
        written = io.StringIO()
        write_alignments([pair], written, "text")
        assert str(pair) == written.getvalue()
        assert str(pair).count("evalue=3e-07") == 1
    pair = AlignedPair(*records[0][:5])
    narrow = format_text(pair.query_id, pair.query, pair.target_id, pair.target, pair.alignment, width=7)
    wide_rows, narrow_rows = ([line.split()[2] for line in text.splitlines() if line.startswith(pair.query_id + " ")]
                              for text in (str(pair), narrow))
    assert "".join(narrow_rows) == "".join(wide_rows) and {len(r) for r in narrow_rows[:-1]} == {7}
    with pytest.raises(ValueError, match="width"):
        format_text("a", "MK", "b", "MK", np.array([[0, 0]]), width=0)


def test_to_biopython_is_the_same_alignment(records):
    """AlignedPair.to_biopython: Biopython's order (target row first: ``aln.target``,
    ``aln.query``), the rows, the aligned pairs (read back from Biopython's indices), its
    counts, score and posterior digits, no annotation (Biopython's SAM writer made the E-value
    note an invalid ``comment`` tag); Biopython writes it as Clustal and reads it back, and its
    SAM line is the query read against the target."""
    import io

    from sinkalign.alignment import posterior_digits

    for k, rec in enumerate(records):
        pair = rec if isinstance(rec, AlignedPair) else AlignedPair(*rec[:5], *rec[5:], None, 1e-5 * k)
        aln = pair.to_biopython()
        pairs = as_pairs(rec)
        assert [r.id for r in aln.sequences] == [rec[2], rec[0]] and (aln.target.id, aln.query.id) == (rec[2], rec[0])
        assert (aln[1], aln[0]) == to_gapped(rec[1], rec[3], pairs)
        idx = aln.indices
        both = (idx[0] >= 0) & (idx[1] >= 0)
        assert np.array_equal(idx[::-1, both].T, pairs.reshape(-1, 2))
        assert aln.counts().identities == alignment_stats(rec[1], rec[3], pairs).n_identical
        score = score_of(rec)
        assert getattr(aln, "score", float("nan")) == score or math.isnan(score) and not hasattr(aln, "score")
        assert not getattr(aln, "annotations", None)
        buf = io.StringIO()
        Align.write([aln], buf, "clustal")
        back = Align.read(io.StringIO(buf.getvalue()), "clustal")
        assert (back[0], back[1]) == (aln[0], aln[1])
        if len(pairs):
            fields = aln.format("sam").split("\t")
            assert fields[:3] == [rec[0], "0", rec[2]]  # the query is the read, on the target
    first = records[0].to_biopython()
    assert first.column_annotations["consensus posterior probability"] == posterior_digits(records[0].alignment)
    assert not getattr(records[1].to_biopython(), "column_annotations", None)


def test_to_biopython_on_the_minus_strand_reads_the_query_as_given():
    """A minus-strand hit: Biopython's query row is the query as given with descending
    coordinates, so Biopython's SAM writer sets flag 16 and its PSL strand is ``-``, with the
    span on the query as given that :attr:`AlignedPair.stats` reports; ``aln[1]`` is the row as
    aligned (the reverse complement)."""
    from Bio.Seq import reverse_complement as rc

    gene = "ATGGCTAGCAAAGGAGAAGAACTTTTCACTGGAGTTGTCCCAATTCTTGTTGAATTAGATGGTGATGTTAATGGGCACAAATTTTC"
    contig = "TTAGCATTCA" + rc(gene[10:80]) + "GCCATTAGGC"
    hit = Aligner.load("dna").align(gene, contig, query_id="gene", target_id="contig")
    assert hit.strand == "-"
    aln = hit.to_biopython()
    assert str(aln.query.seq) == gene and str(aln.target.seq) == contig
    assert aln.coordinates[1, 0] > aln.coordinates[1, -1]
    assert aln[1].replace("-", "") == hit.query and aln[0].replace("-", "") == contig
    assert int(aln.format("sam").split("\t")[1]) & 16
    psl = aln.format("psl").split("\t")
    st = hit.stats
    assert psl[8] == "-" and psl[9] == "gene" and psl[13] == "contig"
    assert (int(psl[11]), int(psl[12])) == (st.query_start, st.query_end)
    assert (int(psl[15]), int(psl[16])) == (st.target_start, st.target_end)


def _with_evalues(records) -> list[AlignedPair]:
    """The records as AlignedPairs with E-values (one unknown), the pair with nothing aligned last."""
    evalues = [1.5e-30, None, 0.25, 2.0]
    return [(r if isinstance(r, AlignedPair) else AlignedPair(*r[:5], *r[5:]))._replace(evalue=e)
            for r, e in zip(records, evalues)]


def test_blast6_counts_as_blast_does(tmp_path, records):
    """-outfmt 6 rows against Biopython's counts of the same pair cut to its local part (the
    columns from the first to the last aligned pair): length = its columns, mismatches, gap
    openings, pident of length; 1-based inclusive positions; a pair with nothing aligned has no
    row; no header."""
    out = tmp_path / "hits.m8"
    recs = _with_evalues(records)
    assert write_alignments(recs, out, "blast6") == 3
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert [row[:2] for row in rows] == [[r.query_id, r.target_id] for r in recs if len(r.pairs)]
    for row, rec in zip(rows, [r for r in recs if len(r.pairs)]):
        assert len(row) == 12
        aln = rec.to_biopython()
        both = np.flatnonzero((aln.indices >= 0).all(0))  # the columns that align two residues
        local = aln[:, both[0] : both[-1] + 1]
        counts = local.counts()
        length = local.length
        assert int(row[3]) == length == counts.aligned + counts.gaps and int(row[4]) == counts.mismatches
        assert int(row[5]) == counts.open_gaps
        assert float(row[2]) == pytest.approx(100 * counts.identities / length, abs=5e-4)
        p = rec.pairs
        assert [int(x) for x in row[6:10]] == [p[0, 0] + 1, p[-1, 0] + 1, p[0, 1] + 1, p[-1, 1] + 1]
        assert row[10] == ("NA" if rec.evalue is None else format(rec.evalue, ".2e"))
        assert float(row[11]) == pytest.approx(score_of(rec), rel=1e-3)
    assert any(int(row[5]) > 0 for row in rows)  # the records have internal gaps to count


def test_paf_as_minimap2_writes_it(tmp_path, records):
    """PAF lines: the 12 columns (0-based half-open spans, identical pairs, columns as blast6
    counts them, MAPQ as SAM's), the clip-free CIGAR, score, mean confidence and E-value tags; a
    pair with nothing aligned has no line."""
    out = tmp_path / "hits.paf"
    recs = _with_evalues(records)
    assert write_alignments(recs, out, "paf") == 3
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    b6 = [line.split("\t") for line in _written_text(recs, "blast6").splitlines()]
    sam = [line.split("\t") for line in _written_text(recs, "sam").splitlines() if not line.startswith("@")]
    aligned = [r for r in recs if len(r.pairs)]
    for row, rec, blast, seg in zip(rows, aligned, b6, [s for s in sam if s[1] != "4"]):
        st = rec.stats
        assert row[:12] == [rec.query_id, str(len(rec.query)), str(st.query_start), str(st.query_end), "+",
                            rec.target_id, str(len(rec.target)), str(st.target_start), str(st.target_end),
                            str(st.n_identical), blast[3], seg[4]]
        tags = dict(t.split(":", 1) for t in row[12:])
        assert tags["cg"] == "Z:" + re.sub(r"^\d+S|\d+S$", "", seg[5]) and "S" not in tags["cg"]
        assert tags["AS"] == f"i:{math.floor(score_of(rec) + 0.5)}"  # minimap2's type; the score is ZS:f
        if not float(score_of(rec)).is_integer():
            assert float(tags["ZS"].split(":")[1]) == pytest.approx(score_of(rec), rel=1e-5)
        assert ("ZE" in tags) == (rec.evalue is not None)
        assert ("XP" in tags) == isinstance(rec.alignment, Alignment)


def _written_text(recs, fmt: str) -> str:
    import io

    buf = io.StringIO()
    write_alignments(recs, buf, fmt)
    return buf.getvalue()


def test_a_pair_turned_round(records):
    """AlignedPair.transposed: ids, sequences and pairs exchanged, gap posteriors swapped,
    the plan transposed; twice is the pair itself."""
    rng = np.random.default_rng(1)
    for k, rec in enumerate(records):
        pair = rec if isinstance(rec, AlignedPair) else AlignedPair(*rec[:5], *rec[5:])
        m, n = len(pair.query), len(pair.target)
        pair = pair._replace(plan=rng.random((m + 1, n + 1)), evalue=1e-3 * k)
        turned = pair.transposed()
        assert (turned.query_id, turned.query, turned.target_id, turned.target) == (
            pair.target_id, pair.target, pair.query_id, pair.query)
        np.testing.assert_array_equal(turned.pairs, pair.pairs[:, ::-1])
        np.testing.assert_array_equal(turned.plan, pair.plan.T)
        assert (turned.score, turned.evalue) == (pair.score, pair.evalue)
        back = turned.transposed()
        np.testing.assert_array_equal(back.pairs, pair.pairs)
        if isinstance(pair.alignment, Alignment):
            a, t = pair.alignment, turned.alignment
            assert (t.m, t.n) == (a.n, a.m)
            np.testing.assert_array_equal(t.query_gap_posterior, a.target_gap_posterior)
            np.testing.assert_array_equal(t.target_gap_posterior, a.query_gap_posterior)
            np.testing.assert_array_equal(t.match_posterior, a.match_posterior)
            assert (t.expected_accuracy, t.score) == (a.expected_accuracy, a.score)


def test_empty_stream(tmp_path):
    write_alignments([], tmp_path / "e.tsv", "tsv")
    assert (tmp_path / "e.tsv").read_text() == "\t".join(TSV_COLUMNS) + "\n"
    write_alignments(iter([]), tmp_path / "e.bam", "bam")
    with pysam.AlignmentFile(str(tmp_path / "e.bam"), "rb", check_sq=False) as handle:
        assert list(handle) == []


# --------------------------------------------------------------------------- atomicity and errors


@pytest.mark.parametrize("fmt", FORMATS)
def test_failure_keeps_previous_file_and_leaves_no_temp(tmp_path, records, fmt):
    path = tmp_path / f"out.{fmt}"
    path.write_text("previous\n")
    bad = list(records[:2]) + [("bad", "MKV", "prot_t", PROT_T, np.array([[5, 0]]))]
    with pytest.raises(ValueError, match=r"record 2 \(bad vs prot_t\): pairs\[0\]=\[5, 0\] is out of range"):
        write_alignments(bad, path, fmt, overwrite=True)
    assert path.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_unknown_format():
    valid = r"\('fasta', 'tsv', 'sam', 'bam', 'stockholm', 'json', 'text', 'blast6', 'paf', 'maf'\)"
    with pytest.raises(ValueError, match=rf"format 'clustal' is not one of {valid}"):
        write_alignments([], "x.aln", "clustal")


def test_format_names_in_any_case_and_m8(tmp_path, records):
    """A format is named in any case, and ``m8`` (MMseqs2's and DIAMOND's name, the ``.m8``
    suffix's format) is ``blast6``, in the writers and in ``align_fasta``: they were refused."""
    from sinkalign.io.writers import format_name
    from sinkalign.pipelines.align import align_fasta

    assert [format_name(x) for x in ("SAM", "m8", "M8", "Blast6", "sto", None)] == \
        ["sam", "blast6", "blast6", "blast6", "stockholm", None]
    write_alignments(records, tmp_path / "a.txt", "m8")
    write_alignments(records, tmp_path / "b.txt", "blast6")
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    write_alignments(records, tmp_path / "hits.sam", "SAM")  # the suffix agrees
    (tmp_path / "q.fa").write_text(">q\nMVLSPADKTNVKAAWGKVGAHAGEYGAE\n")
    assert align_fasta(tmp_path / "q.fa", tmp_path / "q.fa", output=tmp_path / "c.txt", fmt="M8") == 1
    assert len((tmp_path / "c.txt").read_text().split("\t")) == 12
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    for name in ("M8", "Blast6"):  # and on the command line
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "q.fa"), "--format", name,
                                     "--no-progress"])
        assert r.exit_code == 0 and r.output == (tmp_path / "c.txt").read_text(), r.output


@pytest.mark.parametrize(
    "record, fmt, match",
    [
        (("q 1", "MK", "t", "MK", [[0, 0]]), "tsv", r"record 0: query_id='q 1' must be a non-empty string without"),
        (("q", "MK", "", "MK", [[0, 0]]), "tsv", r"target_id='' must be"),
        (("q", "M-K", "t", "MK", [[0, 0]]), "fasta", r"record 0 \(q vs t\): query sequence has '-' at position 1"),
        (("q", "MK", "t", "", [[0, 0]]), "fasta", r"target sequence is empty"),
        (("q", "MK", "t", 5, [[0, 0]]), "fasta", r"target sequence must be a str, got int"),
        (("q", "MK", "t", "MK", [[1, 0], [0, 1]]), "json", r"record 0 \(q vs t\): pairs must be strictly increasing"),
        (("q", "MK", "t", "MK", [[0, 0]], "high"), "json", r"score='high' is not a number"),
        (("q", "MK"), "json", r"record 0: expected \(query_id, query, target_id, target, alignment\[, score\]\)"),
        (("q", "MK", "q", "MK", [[0, 0]]), "stockholm", r"Stockholm needs distinct sequence names"),
        (("q", "MK", "q", "MA", [[0, 0]]), "stockholm", r"record 0 \(q vs q\): the query and the target share the "
                                                         r"id 'q' but are different sequences.* rename one.*tsv"),
        (("q@x", "MK", "t", "MK", [[0, 0]]), "sam", r"query_id is not a valid SAM QNAME"),
        (("q", "MK", "*t", "MK", [[0, 0]]), "bam", r"target_id is not a valid SAM reference name"),
        # which is wrong: the length against SAM's 254, or the character and its position
        (("q" * 300, "MK", "t", "MK", [[0, 0]]), "sam",
         r"query_id is not a valid SAM QNAME \(\[!-\?A-~\]\{1,254\}\): 'q{25}\.\.\.q{25}' is 300 characters long, "
         r"and SAM allows at most 254; shorten it or use another --format"),
        (("q@x", "MK", "t", "MK", [[0, 0]]), "bam",
         r"query_id is not a valid SAM QNAME \(\[!-\?A-~\]\{1,254\}\): 'q@x' has '@' at 0-based position 1, "
         r"which SAM does not allow there; rename it"),
        (("q", "MK", "*t", "MK", [[0, 0]]), "sam",
         r"target_id is not a valid SAM reference name \(.*\): '\*t' starts with '\*', which SAM does not allow first"),
        (("q", "MK", "t\"x", "MK", [[0, 0]]), "sam",
         r"target_id is not a valid SAM reference name \(.*\): 't\"x' has '\"' at 0-based position 1, which SAM"),
    ],
)
def test_bad_records(tmp_path, record, fmt, match):
    with pytest.raises(ValueError, match=match):
        write_alignments([record], tmp_path / f"x.{fmt}", fmt)


def test_the_format_comes_from_the_file_name_and_may_not_contradict_it(tmp_path):
    """As ``sinkalign align -o``: ``write_alignments(recs, "hits.sam")`` writes SAM, and a format
    the name contradicts (text into ``hits.bam``) is refused before anything is written."""
    recs = [("q1", "MKV", "t", "MKV", [[0, 0], [1, 1], [2, 2]])]
    assert write_alignments(recs, tmp_path / "a.sam") == 1
    assert (tmp_path / "a.sam").read_text().startswith("@HD")
    assert write_alignments(recs, tmp_path / "a.m8.gz") == 1
    import gzip

    assert gzip.open(tmp_path / "a.m8.gz", "rt").read().startswith("q1\tt\t100")
    assert write_alignments(recs, tmp_path / "a.txt") == 1  # a name that says nothing: tsv
    assert (tmp_path / "a.txt").read_text() == (write_alignments(recs, tmp_path / "b.tsv", "tsv") and
                                                (tmp_path / "b.tsv").read_text())
    with pytest.raises(ValueError, match=r"named as a bam file, and the format asked for is tsv"):
        write_alignments(recs, tmp_path / "z.bam", "tsv")
    assert not (tmp_path / "z.bam").exists()


def test_alignment_length_mismatch_and_conflicting_references(tmp_path):
    aln = Alignment(np.array([[0, 0]]), [0.9], np.zeros(2), np.zeros(2), 0.9, 0.9)
    msg = r"record 0 \(q vs t\): alignment is for lengths \(2, 2\) but the sequences have \(3, 2\)"
    with pytest.raises(ValueError, match=msg):
        write_alignments([("q", "MKV", "t", "MK", aln)], tmp_path / "x.json", "json")
    recs = [("q1", "MK", "t", "MK", [[0, 0]]), ("q2", "MK", "t", "MW", [[0, 0]])]
    with pytest.raises(ValueError, match=r"record 1 \(q2 vs t\): target_id 't' was given two different sequences"):
        write_alignments(recs, tmp_path / "x.sam", "sam")


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_format_gets_the_usual_file_mode(tmp_path, records, umask):
    """Outputs are 0666 & ~umask like any file a user creates (SAM/BAM were 0600 via mkstemp)."""
    import os

    old = os.umask(umask)
    try:
        for fmt in FORMATS:
            path = tmp_path / f"out.{fmt}"
            recs = records[:2] if fmt == "stockholm" else records
            write_alignments(recs, path, fmt)
            assert path.stat().st_mode & 0o777 == 0o666 & ~umask, fmt
    finally:
        os.umask(old)


def test_readme_documents_every_tsv_column_and_the_stockholm_pp_line(tmp_path, records):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme[readme.index("| column | meaning |"):]
    table = table[: table.index("\n\n")]
    documented = {name.strip(" `") for line in table.splitlines()[2:] for name in line.split("|")[1].split(",")}
    assert documented == set(TSV_COLUMNS)
    assert "0-based half-open" in table and "Unit:" in table
    out = tmp_path / "a.sto"
    write_alignments(records[:1], out, "stockholm")
    assert "#=GC PP_cons" in out.read_text() and "`#=GC PP_cons`" in readme and "#=GC PP`" not in readme


# --------------------------------------------------------------------------- streams


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "bam"])
def test_a_text_stream_gets_the_file_contents(tmp_path, records, fmt):
    import io

    path, buf = tmp_path / f"out.{fmt}", io.StringIO()
    written = len(records) - (fmt in ("blast6", "paf", "maf"))  # nothing for the pair with nothing aligned
    assert write_alignments(records, path, fmt) == write_alignments(records, buf, fmt) == written
    assert buf.getvalue() == path.read_text()
    with pytest.raises(ValueError, match="bam is binary"):
        write_alignments(records, io.StringIO(), "bam")


@pytest.mark.parametrize("fmt", ["sam", "bam"])
def test_sam_and_bam_stream_when_the_references_are_given(tmp_path, records, fmt):
    """With the references known up front, each query's records are written once the next
    query's first record is read (its run is held to make its best hit the primary line), and
    the file is the one written from the whole stream."""
    refs = [("prot_t", len(PROT_T)), ("dna_t", len(DNA_T))]
    whole, streamed = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
    write_alignments(records, whole, fmt)
    write_alignments(iter(records), streamed, fmt, references=refs)
    if fmt == "sam":  # to a stream (one query a record): record k is read once record k - 2 is out
        import io

        buf, written = io.StringIO(), []

        def lazy():
            for rec in records:
                written.append(sum(not line.startswith("@") for line in buf.getvalue().splitlines()))
                yield rec

        write_alignments(lazy(), buf, fmt, references=refs)
        assert written == [0, 0, 1, 2] and buf.getvalue() == streamed.read_text()
    mode = "r" if fmt == "sam" else "rb"
    with pysam.AlignmentFile(str(whole), mode) as a, pysam.AlignmentFile(str(streamed), mode) as b:
        assert a.references == b.references == ("prot_t", "dna_t")
        assert [x.to_string() for x in a] == [x.to_string() for x in b]
    with pytest.raises(ValueError, match=r"record 2 \(dna_q vs dna_t\): target_id 'dna_t' is not one of the "
                                         "header's references"):
        write_alignments(records, tmp_path / f"c.{fmt}", fmt, references=refs[:1])
    with pytest.raises(ValueError, match=r"record 0 .*: target_id 'prot_t' is \d+ letters long, and the header's "
                                         r"reference of that name 5"):  # it said "two different sequences"
        write_alignments(records, tmp_path / f"c.{fmt}", fmt, references=[("prot_t", 5), ("dna_t", len(DNA_T))])
    with pytest.raises(ValueError, match="references are for the sam and bam formats, not 'tsv'"):
        write_alignments(records, tmp_path / "c.tsv", "tsv", references=refs)
    assert not (tmp_path / f"c.{fmt}").exists()


def test_maf_blocks_read_back_with_biopython(tmp_path, records):
    """MAF: one block per pair with something aligned, target first, its local alignment; read
    back by Biopython's parser to the same aligned pairs, score and sequences."""
    out = tmp_path / "x.maf"
    recs = _with_evalues(records)
    assert write_alignments(recs, out, "maf") == 3
    text = out.read_text()
    assert text.startswith("##maf version=1") and text.count("# evalue=") == 2  # one E-value unknown
    blocks = list(Align.parse(str(out), "maf"))
    for block, rec in zip(blocks, [r for r in recs if len(r.pairs)]):
        assert [s.id for s in block.sequences] == [rec.target_id, rec.query_id]
        idx = block.indices
        got = idx[:, (idx >= 0).all(0)][::-1].T  # (query, target) of every column that aligns both
        np.testing.assert_array_equal(got, rec.pairs)
        p = rec.pairs
        assert block.coordinates[1, 0] == p[0, 0] and block.coordinates[0, 0] == p[0, 1]  # local: no end gaps
        assert block.coordinates[1, -1] == p[-1, 0] + 1 and block.coordinates[0, -1] == p[-1, 1] + 1
        assert block.score == pytest.approx(score_of(rec), abs=1e-6)
        assert str(block[1]).replace("-", "") == rec.query[p[0, 0] : p[-1, 0] + 1]


@pytest.mark.parametrize("fmt", ["sam", "bam"])
@pytest.mark.parametrize("streamed", [False, True])
def test_sam_writes_one_primary_line_per_read(tmp_path, fmt, streamed):
    """SAM wants exactly one line per read with neither flag 256 nor 2048: a pair with nothing
    aligned (a raised threshold leaves many) is written only for a query aligned nowhere, once,
    unmapped; a query aligned elsewhere, before or after it, keeps only its aligned lines."""
    empty = np.zeros((0, 2), int)
    nw = align_pair(PROT_Q, PROT_T, "nw").pairs
    recs = [("qa", PROT_Q, "t1", PROT_T, empty), ("qa", PROT_Q, "t2", PROT_T[1:], nw[nw[:, 1] >= 1] - [0, 1]),
            ("qb", PROT_Q, "t1", PROT_T, empty), ("qb", PROT_Q, "t2", PROT_T[1:], empty),
            ("qc", PROT_Q, "t2", PROT_T[1:], nw[nw[:, 1] >= 1] - [0, 1]), ("qc", PROT_Q, "t1", PROT_T, nw),
            ("qc", PROT_Q, "t1", PROT_T, empty)]
    path = tmp_path / f"x.{fmt}"
    refs = [("t1", len(PROT_T)), ("t2", len(PROT_T) - 1)] if streamed else None
    write_alignments(iter(recs), path, fmt, references=refs)
    with pysam.AlignmentFile(str(path), "r" if fmt == "sam" else "rb") as f:
        lines = [(a.query_name, a.flag, a.reference_name) for a in f]
    assert [name for name, flag, _ in lines if flag & 0x900 == 0] == ["qa", "qc", "qb"]
    assert lines == [("qa", 0, "t2"), ("qc", 0, "t2"), ("qc", 256, "t1"), ("qb", 4, None)]


@pytest.mark.parametrize("fmt", ["tsv", "blast6"])
def test_tabular_ids_are_written_as_they_are(tmp_path, fmt):
    """Ids with quotes or commas come out unquoted in the tab-separated formats, as in SAM, PAF
    and BLAST's own output (a csv writer would write q"1 as "q""1")."""
    path = tmp_path / f"x.{fmt}"
    write_alignments([('q"1,a', PROT_Q, "t'2", PROT_T, align_pair(PROT_Q, PROT_T, "nw").pairs, 3.5)], path, fmt)
    row = path.read_text().splitlines()[-1].split("\t")
    assert row[:2] == ['q"1,a', "t'2"]


def test_sam_header_records_the_command_line(tmp_path):
    """``sinkalign align`` writes its command line to the SAM and BAM header as ``@PG CL:``
    (as samtools and minimap2 record theirs), quoted for a shell; a character a header field
    cannot hold (a tab, a non-ASCII letter of a file name) as its escape; no CL from the library
    unless given, and none asked of a format without a header."""
    import shlex

    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    (tmp_path / "q\tx.fa").write_text(f">q\n{PROT_Q}\n")
    (tmp_path / "t é.fa").write_text(f">t\n{PROT_T}\n")
    for fmt in ("sam", "bam"):
        out = tmp_path / f"o.{fmt}"
        args = ["align", str(tmp_path / "q\tx.fa"), str(tmp_path / "t é.fa"), "-o", str(out), "--no-progress"]
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
        with pysam.AlignmentFile(str(out)) as handle:
            (pg,) = handle.header.to_dict()["PG"]
        assert pg["ID"] == "sinkalign"
        want = shlex.join(["sinkalign", *args]).replace("\t", "\\t").replace("é", "\\xe9")
        assert pg["CL"] == want and all(" " <= c <= "~" for c in pg["CL"])
    rec = [("q", PROT_Q, "t", PROT_T, align_pair(PROT_Q, PROT_T, "nw").pairs)]
    write_alignments(rec, tmp_path / "lib.sam")
    assert "CL:" not in (tmp_path / "lib.sam").read_text()
    write_alignments(rec, tmp_path / "cl.sam", command_line="my pipeline step 3")
    assert "\tCL:my pipeline step 3\n" in (tmp_path / "cl.sam").read_text()
    with pytest.raises(ValueError, match="command_line is for the sam and bam formats, not 'tsv'"):
        write_alignments(rec, tmp_path / "x.tsv", command_line="x")


def test_sam_of_no_pairs_is_a_header_without_a_blank_line(tmp_path):
    """No pairs, so no @SQ lines: pysam's header text then ends in a blank line, which SAM
    readers take for an empty record; the file holds the header lines alone."""
    path = tmp_path / "empty.sam"
    assert write_alignments([], path, "sam") == 0
    lines = path.read_text().split("\n")
    assert lines[-1] == "" and all(line.startswith("@") for line in lines[:-1]), lines


@pytest.mark.parametrize("streamed", [False, True])
def test_sam_primary_line_is_the_best_hit(tmp_path, streamed):
    """A query's primary line is its hit of smallest E-value (by its log where E-values
    underflow), not its first in input order; without E-values, its first aligned record; a
    query met again after another keeps the primary it has."""
    nw = align_pair(PROT_Q, PROT_T, "nw").pairs
    recs = [AlignedPair("qa", PROT_Q, "t1", PROT_T, nw, 1.0, None, 0.3),
            AlignedPair("qa", PROT_Q, "t2", PROT_T, nw, 1.0, None, 0.0, "+", -900.0),
            AlignedPair("qa", PROT_Q, "t3", PROT_T, nw, 1.0, None, 0.0, "+", -1200.0),
            ("qb", PROT_Q, "t1", PROT_T, nw), ("qb", PROT_Q, "t2", PROT_T, nw),
            AlignedPair("qa", PROT_Q, "t4", PROT_T, nw, 1.0, None, 0.0, "+", -5000.0)]
    path = tmp_path / "x.sam"
    refs = [(f"t{k}", len(PROT_T)) for k in range(1, 5)] if streamed else None
    write_alignments(iter(recs), path, "sam", references=refs)
    with pysam.AlignmentFile(str(path), "r") as f:
        lines = [(a.query_name, a.reference_name, a.flag) for a in f]
    assert lines == [("qa", "t1", 256), ("qa", "t2", 256), ("qa", "t3", 0), ("qb", "t1", 0), ("qb", "t2", 256),
                     ("qa", "t4", 256)]


def test_mapq_counts_the_other_loci_of_a_query(tmp_path):
    """A gene with an identical second copy cannot be placed: SAM's MAPQ is the chance that
    the placement is wrong, so both copies get about 3 (it was 60 for each, from the columns'
    confidences alone), while a gene with one copy keeps its high MAPQ; PAF agrees with SAM."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    rng = np.random.default_rng(5)

    def dna(n):
        return "".join(rng.choice(list("ACGT"), n))

    repeat, single = dna(300), dna(300)
    contigs = {"c1": dna(200) + repeat + dna(200), "c2": dna(150) + repeat + dna(250),
               "c3": dna(100) + single + dna(300)}
    (tmp_path / "t.fa").write_text("".join(f">{k}\n{v}\n" for k, v in contigs.items()))
    (tmp_path / "q.fa").write_text(f">rep\n{repeat}\n>one\n{single}\n")
    for fmt in ("sam", "paf"):
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--format", fmt,
                                     "--max-evalue", "1e-3", "-o", str(tmp_path / f"out.{fmt}"), "--no-progress"])
        assert r.exit_code == 0, r.output
    with pysam.AlignmentFile(str(tmp_path / "out.sam")) as handle:
        sam = {(s.query_name, s.reference_name): (s.mapping_quality, s.is_secondary) for s in handle}
    assert set(sam) == {("rep", "c1"), ("rep", "c2"), ("one", "c3")}
    # the two copies' E-values differ a little (other flanks): each about 1/2 likely, MAPQ 2-4
    assert 2 <= sam[("rep", "c1")][0] <= 4 and 2 <= sam[("rep", "c2")][0] <= 4
    assert sam[("rep", "c1")][0] + sam[("rep", "c2")][0] <= 7
    assert sorted(sec for _, sec in (sam[("rep", "c1")], sam[("rep", "c2")])) == [False, True]
    assert sam[("one", "c3")][0] >= 30
    paf = {(f[0], f[5]): int(f[11]) for f in (line.split("\t") for line in (tmp_path / "out.paf").read_text().splitlines())}
    assert paf == {key: mapq for key, (mapq, _) in sam.items()}
    # --max-hits 1 writes one copy, still placed with a MAPQ of about 3, not as if unique
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--format", "sam",
                                 "--max-hits", "1", "-o", str(tmp_path / "best.sam"), "--no-progress"])
    assert r.exit_code == 0, r.output
    with pysam.AlignmentFile(str(tmp_path / "best.sam")) as handle:
        best = {(s.query_name, s.reference_name): (s.mapping_quality, s.is_secondary) for s in handle}
    primary = next(key for key, (_, sec) in sam.items() if key[0] == "rep" and not sec)
    assert best == {primary: sam[primary], ("one", "c3"): sam[("one", "c3")]}


def test_query_parts_and_their_rivals():
    """minimap2's rule for one query's hits, on confidence mass: two hits compete for the query
    when they hold more than half of the lesser one's confidence on the same query residues; taken
    best first, a hit that competes with the best hit of a part already taken is its rival, any
    other starts a part (of a chimeric read). The MAPQ's other loci are weighed over a hit's part
    alone, each part on its own scale (no underflow when the query's best part is far better)."""
    from sinkalign.alignment import Footprint, other_loci, query_footprint, query_parts, shared_confidence

    # on the minus strand the pairs read the reverse complement: its residues 0-9 are 29-20 of a 30-mer
    pairs = np.stack([np.arange(10), np.arange(10)], 1)
    plus, minus = query_footprint(pairs, 30), query_footprint(pairs, 30, "-")
    assert plus.positions.tolist() == list(range(10)) and minus.positions.tolist() == list(range(29, 19, -1))
    assert plus.mass.tolist() == [1.0] * 10 and query_footprint(np.zeros((0, 2), int), 30).total == 0.0
    conf = np.linspace(0.1, 1.0, 10)
    assert query_footprint(pairs, 30, "+", conf).mass.tolist() == conf.tolist()
    with pytest.raises(ValueError, match="confidence must hold one value per pair"):
        query_footprint(pairs, 30, "+", conf[:3])

    def foot(runs):  # [(first, last, confidence)] -> a Footprint
        pos = np.concatenate([np.arange(a, b + 1) for a, b, _ in runs])
        return Footprint(pos, np.concatenate([np.full(b - a + 1, c) for a, b, c in runs]))

    a = foot([(0, 99, 0.95)])
    trail = foot([(0, 99, 0.95), (110, 160, 0.25)])  # a half with a trail over the other half
    other = foot([(100, 199, 0.95)])
    def shared(x, y):  # per stretch of 16 query residues, as a plain loop
        def sums(f):
            out = {}
            for p, m in zip(f.positions.tolist(), f.mass.tolist()):
                out[p // 16] = out.get(p // 16, 0.0) + m
            return out
        sx, sy = sums(x), sums(y)
        return sum(min(sx[b], sy[b]) for b in sx.keys() & sy.keys()) / min(x.total, y.total)

    assert shared_confidence(a, a) == pytest.approx(1.0) and shared_confidence(a, foot([(112, 199, 0.9)])) == 0.0
    for x, y in ((a, other), (trail, other), (other, trail)):
        assert shared_confidence(x, y) == pytest.approx(shared(x, y), rel=1e-12) and shared(x, y) < 0.2
    assert shared_confidence(a, Footprint(np.zeros(0, np.int64), np.zeros(0))) == 0.0
    weak = foot([(0, 99, 0.4)])
    feet = [a, foot([(0, 99, 0.9)]), other, trail, weak, foot([(150, 260, 0.9)]), foot([(300, 320, 0.9)])]
    ranks = [-50.0, -40.0, -45.0, -30.0, -20.0, -10.0, 0.0]
    # the copy and the weak paralog share all of the lesser confidence with the first part; the trail
    # holds a little of the second part; (150, 260) shares 50 of 111 residues with the second part
    # (no more than half): a part of its own, as the stretch nothing else covers
    assert query_parts(ranks, feet) == [0, 0, 2, 0, 0, 5, 6]
    assert query_parts([0.0] * 3, [a, a, other]) == [0, 0, 2]  # ties: input order
    assert query_parts([0.0, 1.0], [trail, other]) == [0, 1]  # a chimera's halves, each with its trail

    parts = query_parts(ranks, feet)
    got = other_loci(ranks, parts=parts)
    want = []
    for k in range(len(feet)):
        w = {j: math.exp(-ranks[j]) for j in range(len(feet)) if parts[j] == parts[k]}
        want.append(1 - w[k] / sum(w.values()))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert got[6] == 0.0 and got[2] == 0.0 and got[0] > 0  # alone in their parts; the first has rivals
    np.testing.assert_allclose(other_loci(ranks, of=[3, 0], parts=parts), [got[3], got[0]], rtol=1e-15)
    for bad in ([-3.0], [7], [-1]):  # values, not indices; out of range
        with pytest.raises(ValueError, match="of must hold indices of hits in"):
            other_loci(ranks, of=bad, parts=parts)
    with pytest.raises(ValueError, match="parts must hold one part index per hit"):
        other_loci(ranks, parts=parts[:3])
    # a part at log E -2000 does not underflow the weights of another part's two even rivals
    far = other_loci([-2000.0, -10.0, -10.0], parts=[0, 1, 1])
    assert far == [0.0, 0.5, 0.5]
    # per residue of the target: a copy in a contig twice as long, its E-value twice as large,
    # weighs alike; a hit shorter than 1 residue or a length per hit missing is refused
    np.testing.assert_allclose(other_loci([-10.0, -10.0 + math.log(2)], target_lengths=[500, 1000]), [0.5, 0.5],
                               rtol=1e-12)
    np.testing.assert_allclose(other_loci([-10.0, -10.0], target_lengths=[500, 1000]), [2 / 3, 1 / 3], rtol=1e-12)
    for bad in ([500], [500, 0]):
        with pytest.raises(ValueError, match="target_lengths must be 2 lengths >= 1"):
            other_loci([-10.0, -10.0], target_lengths=bad)
    # without parts every hit is a rival of every other (as before: a repeat's copies)
    np.testing.assert_allclose(other_loci([-10.0, -10.0, -10.0 + math.log(2)]), [0.6, 0.6, 0.8], rtol=1e-12)
    assert other_loci([-10.0, math.nan], parts=[0, 1]) is None


def _core_reference(conf, threshold=0.5, drop=10.0):
    """confident_core as a plain loop: seed at the best column of the best 5-column window
    (first of ties), then per side add columns while the running log-odds stays within drop of
    its best, keeping up to the (first) best, taken only when it gains."""
    def logit(p):
        p = min(max(p, 1e-12), 1 - 1e-12)
        return math.log(p) - math.log1p(-p)

    s = [logit(float(c)) - logit(threshold) for c in conf]
    n, width = len(s), min(5, len(s))
    sums = [sum(s[i : i + width]) for i in range(n - width + 1)]
    start = sums.index(max(sums))
    window = s[start : start + width]
    seed = start + window.index(max(window))
    ends = []
    for side in (range(seed - 1, -1, -1), range(seed + 1, n)):
        run = best = 0.0
        end = seed
        for j in side:
            run += s[j]
            if run > best:
                best, end = run, j
            if run < best - drop:
                break
        ends.append(end)
    return ends[0], ends[1]


def test_one_pair_is_refused_for_a_list_and_sam_names_stop_the_stream(tmp_path):
    """write_alignments takes an iterable of pairs: one pair (a tuple itself) is refused saying
    so, not read field by field; SAM without references holds the stream for its header, so a
    name SAM refuses stops it at that record, not after every pair was made (and aligned)."""
    nw = align_pair(PROT_Q, PROT_T, "nw").pairs
    one = AlignedPair("q", PROT_Q, "t", PROT_T, nw)
    for pair in (one, ("q", PROT_Q, "t", PROT_T, nw)):
        with pytest.raises(ValueError, match=r"expected an iterable of pairs, got one pair: wrap it in a list"):
            write_alignments(pair, tmp_path / "x.tsv")
    assert not (tmp_path / "x.tsv").exists()
    made = []

    def stream():
        for k, qid in enumerate(["q0", "q\u00df1", "q2", "q3"]):
            made.append(k)
            yield AlignedPair(qid, PROT_Q, "t", PROT_T, nw)

    for fmt in ("sam", "bam"):
        made.clear()
        with pytest.raises(ValueError, match=r"record 1 \(q\u00df1 vs t\): query_id is not a valid SAM QNAME"):
            write_alignments(stream(), tmp_path / f"x.{fmt}")
        assert made == [0, 1] and not (tmp_path / f"x.{fmt}").exists()


def test_split_query_from_the_library_and_a_semicolon_reference(tmp_path, caplog):
    """Records without posteriors: the parts are taken by E-value (the best hit primary, a hit on
    another stretch of the query supplementary, one on the first's stretch secondary), MAPQ 255
    (unknown) inside SA as on the line; without E-values no part is sure to be one (a chance hit
    would make it), so the rest are secondary; a reference name with ';' (SAM allows it) makes SA
    ambiguous: warned of once, the file written all the same."""
    q = PROT_Q + PROT_T
    first = np.stack([np.arange(30), np.arange(30)], 1)
    second = np.stack([np.arange(len(PROT_Q), len(PROT_Q) + 30), np.arange(30)], 1)
    def hit(qid, tid, t, pairs, log_e):
        return AlignedPair(qid, q, tid, t, pairs, None, None, math.exp(log_e), "+", log_e)

    recs = [hit("q", "a;1", PROT_Q, first, -30.0), hit("q", "b", PROT_T, second, -20.0),
            hit("q", "c", PROT_Q, first + [0, 1], -10.0), hit("q2", "a;1", PROT_Q, first, -30.0),
            hit("q2", "b", PROT_T, second, -20.0),
            ("q3", q, "a;1", PROT_Q, first), ("q3", q, "b", PROT_T, second)]
    path = tmp_path / "x.sam"
    with caplog.at_level("WARNING", logger="sinkalign"):
        write_alignments(recs, path)
    with pysam.AlignmentFile(str(path)) as handle:
        segs = [(s.query_name, s.reference_name, s.flag, s.mapping_quality, s.get_tag("SA") if s.has_tag("SA") else None)
                for s in handle]
    assert segs == [("q", "a;1", 0, 255, "b,1,+,66S30M33S,255,0;"), ("q", "b", 2048, 255, "a;1,1,+,30M99S,255,0;"),
                    ("q", "c", 256, 255, None),
                    ("q2", "a;1", 0, 255, "b,1,+,66S30M33S,255,0;"), ("q2", "b", 2048, 255, "a;1,1,+,30M99S,255,0;"),
                    ("q3", "a;1", 0, 255, None), ("q3", "b", 256, 255, None)]  # no E-values: no part is sure
    said = [r.getMessage() for r in caplog.records if "';'" in r.getMessage()]
    assert len(said) == 1 and "reference 'a;1'" in said[0]


def test_confident_core_against_a_plain_loop():
    """The vectorised X-drop core equals a plain loop on random confidences (long and short,
    with ties, exact 0, 0.5 and 1, all unlikely), and leaves out a trail of unlikely columns and
    a sure island far beyond it, but keeps a short dip inside the core."""
    from sinkalign.alignment import confident_core

    rng = np.random.default_rng(0)
    for trial in range(400):
        n = int(rng.integers(1, 80))
        kind = trial % 4
        if kind == 0:
            conf = rng.random(n)
        elif kind == 1:
            conf = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], n)
        elif kind == 2:
            conf = rng.uniform(0.0, 0.45, n)
        else:
            conf = np.concatenate([rng.uniform(0.9, 1.0, n), rng.uniform(0.05, 0.4, n // 2 + 1)])
        assert confident_core(conf) == _core_reference(conf), conf
        assert confident_core(conf, 0.7, 3.0) == _core_reference(conf, 0.7, 3.0), conf
    assert confident_core([]) is None
    sure, trail = [0.99] * 50, [0.2, 0.3, 0.15, 0.25, 0.1, 0.3, 0.2, 0.35, 0.2]
    assert confident_core(sure + trail + [0.99] * 3) == (0, 49)  # 9 columns of ~-1.3 each: over 10 down
    assert confident_core(sure + [0.2, 0.2] + sure) == (0, 101)  # a dip of 2.8: bridged


def _dna(rng, n):
    return "".join(rng.choice(list("ACGT"), n))


def test_a_chimeric_read_gets_a_supplementary_line(tmp_path):
    """A read whose halves come from two contigs is no repeat: its best hit is primary, the best
    hit of its other half supplementary (flag 2048), each with an ``SA:Z`` tag naming the other
    (position, strand, CIGAR, MAPQ and NM as that line has them), and neither MAPQ counts the other
    half as a rival (the worse half was secondary with MAPQ 0-1). A second copy of one half
    elsewhere is that half's rival: secondary, without an SA tag. PAF agrees (``tp:A:P`` for
    the parts, ``S`` for the rival, the same MAPQs), also with ``--max-hits``."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    rng = np.random.default_rng(7)
    a, b = _dna(rng, 150), _dna(rng, 150)
    contigs = {"c1": _dna(rng, 200) + a + _dna(rng, 150), "c2": _dna(rng, 100) + b + _dna(rng, 250),
               "c3": _dna(rng, 120) + a + _dna(rng, 230), "c4": _dna(rng, 500)}
    (tmp_path / "q.fa").write_text(f">chim\n{a + b}\n")

    def run(names, fmt, *extra):
        (tmp_path / "t.fa").write_text("".join(f">{k}\n{contigs[k]}\n" for k in names))
        out = tmp_path / f"out{len(names)}{len(extra)}.{fmt}"
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--max-evalue", "1e-3",
                                     "-o", str(out), "--no-progress", "--overwrite", *extra])
        assert r.exit_code == 0, r.output
        if fmt == "paf":
            return {f[5]: (int(f[11]), f[12]) for f in (line.split("\t") for line in out.read_text().splitlines())}
        with pysam.AlignmentFile(str(out)) as handle:
            return {s.reference_name: s for s in handle}

    def sa_entry(seg):
        return (f"{seg.reference_name},{seg.reference_start + 1},{'-' if seg.is_reverse else '+'},{seg.cigarstring},"
                f"{seg.mapping_quality},{seg.get_tag('NM')};")

    for fmt in ("sam", "bam"):
        segs = run(["c1", "c2", "c4"], fmt)
        assert set(segs) == {"c1", "c2"}
        assert sorted(s.flag for s in segs.values()) == [0, 2048]
        for here, there in (("c1", "c2"), ("c2", "c1")):
            assert segs[here].get_tag("SA") == sa_entry(segs[there])
            assert segs[here].mapping_quality >= 5
            assert segs[here].query_sequence == a + b  # soft clips: the whole read on each line
        assert run(["c1", "c2", "c4"], "paf") == {k: (s.mapping_quality, "tp:A:P") for k, s in segs.items()}

    paf = run(["c1", "c2", "c3", "c4"], "paf")
    segs = run(["c1", "c2", "c3", "c4"], "sam")
    assert set(segs) == {"c1", "c2", "c3"}
    # the better copy of a takes its part, by E-value (ZE:f of SAM is float32: 1e-71 reads 0 there)
    evalues = {f[5]: float(f[-1].removeprefix("ZE:f:")) for f in (line.split("\t") for line in
                                                               (tmp_path / "out40.paf").read_text().splitlines())}
    copy, rival = sorted(("c1", "c3"), key=evalues.get)
    assert segs[rival].flag == 256 and not segs[rival].has_tag("SA")
    assert sorted([segs[copy].flag, segs["c2"].flag]) == [0, 2048]
    assert segs[copy].get_tag("SA") == sa_entry(segs["c2"]) and segs["c2"].get_tag("SA") == sa_entry(segs[copy])
    assert segs[rival].mapping_quality < segs["c2"].mapping_quality and segs[copy].mapping_quality < segs["c2"].mapping_quality
    assert paf == {k: (s.mapping_quality, "tp:A:S" if k == rival else "tp:A:P") for k, s in segs.items()}
    # --max-hits 2 keeps the two best (the two parts, not the rival), MAPQs weighed before it dropped one
    best = run(["c1", "c2", "c3", "c4"], "sam", "--max-hits", "2")
    assert {k: (s.flag, s.mapping_quality) for k, s in best.items()} == {
        k: (segs[k].flag, segs[k].mapping_quality) for k in (copy, "c2")}


def test_a_chance_hit_is_no_supplementary_line(tmp_path):
    """Without --max-evalue every pair is written: a read half of which is novel gets chance hits
    on that half from unrelated contigs, which no better hit covers. They are no part of a split
    read (E-value above 1e-3): secondary, without SA tags, the primary's SA empty, and their MAPQ
    low (a chance hit of E-value E is wrong with probability 1 - e^-E at least)."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    rng = np.random.default_rng(3)
    x = _dna(rng, 600)
    contigs = {"X": x, **{f"U{k}": _dna(rng, 600) for k in range(6)}}
    (tmp_path / "t.fa").write_text("".join(f">{k}\n{v}\n" for k, v in contigs.items()))
    (tmp_path / "q.fa").write_text(f">read\n{x[200:400] + _dna(rng, 200)}\n")
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "-o", str(tmp_path / "o.sam"),
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    with pysam.AlignmentFile(str(tmp_path / "o.sam")) as handle:
        segs = {s.reference_name: s for s in handle}
    assert segs["X"].flag & 0x900 == 0 and not segs["X"].has_tag("SA")
    chance = [s for name, s in segs.items() if name != "X"]
    assert chance and all(s.flag & 0x900 == 256 and not s.has_tag("SA") for s in chance)
    assert all(s.get_tag("ZE") > 1e-3 and s.mapping_quality < min(segs["X"].mapping_quality, 6) for s in chance)


def test_a_query_whose_every_pair_max_evalue_drops_is_written_unmapped(tmp_path):
    """SAM and BAM hold every read, as a mapper writes them: a query none of whose pairs passes
    ``--max-evalue`` is one unmapped line (flag 4, its sequence as given, both strands tried),
    after the aligned records, also with ``--max-hits``; the tabular formats have no line for it."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    rng = np.random.default_rng(11)

    def dna(n):
        return "".join(rng.choice(list("ACGT"), n))

    gene, stray = dna(300), dna(250)
    (tmp_path / "t.fa").write_text(f">c1\n{dna(150)}{gene}{dna(150)}\n>c2\n{dna(500)}\n")
    (tmp_path / "q.fa").write_text(f">stray\n{stray}\n>gene\n{gene}\n")
    for fmt, extra in (("sam", []), ("bam", []), ("sam", ["--max-hits", "1"]), ("tsv", [])):
        out = tmp_path / f"out{len(extra)}.{fmt}"
        r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--max-evalue", "1e-3",
                                     "-o", str(out), "--no-progress", *extra])
        assert r.exit_code == 0, r.output
        if fmt == "tsv":
            rows = [line.split("\t") for line in out.read_text().splitlines() if not line.startswith("#")]
            assert [row[:2] for row in rows[1:]] == [["gene", "c1"]]
            continue
        with pysam.AlignmentFile(str(out), check_sq=False) as handle:
            segs = [(s.query_name, s.flag, s.reference_name, s.query_sequence) for s in handle]
        assert segs == [("gene", segs[0][1], "c1", segs[0][3]), ("stray", 4, None, stray)], (fmt, extra)
        assert not segs[0][1] & (4 | 256)
        assert r.output == "" and r.exit_code == 0
    # every pair on the minus strand: none passes, each query one unmapped line with its sequence as given
    # (not the reverse complement it was aligned as), in the order their pairs came; the count is the lines
    from sinkalign.pipelines.align import align_fasta

    out = tmp_path / "minus.sam"
    assert align_fasta(tmp_path / "q.fa", tmp_path / "t.fa", output=out, max_evalue=1e-3, strand="minus") == 2
    with pysam.AlignmentFile(str(out), check_sq=False) as handle:
        assert [(s.query_name, s.flag, s.query_sequence) for s in handle] == [("stray", 4, stray), ("gene", 4, gene)]


def test_an_existing_file_is_kept_unless_overwrite(records, tmp_path):
    """As every command's outputs: an existing file is refused before any record is read (the
    generator is never started) and replaced with ``overwrite=True``."""
    from sinkalign.errors import OutputExistsError

    path = tmp_path / "kept.tsv"
    path.write_text("mine\n")
    started = []

    def stream():
        started.append(True)
        yield from records

    with pytest.raises(OutputExistsError, match=f"{path} already exists; remove it, or pass overwrite=True"):
        write_alignments(stream(), path, "tsv")
    assert path.read_text() == "mine\n" and not started
    assert write_alignments(records, path, "tsv", overwrite=True) == len(records)
    assert path.read_text().startswith("query\ttarget\tscore\t")


def test_n_against_n_is_no_identity_in_any_output(tmp_path):
    """An ambiguity code against itself is a mismatch, as the SAM spec's NM counts it (samtools
    calmd agrees): NM, the TSV identity, PAF's matches and blast6's pident and mismatches counted
    N-N as identical (an output audit). A protein's X-X likewise; equal letters otherwise."""
    t = "ACGTTGCAAGGCTTAC" + "NNNN" + "GATTACAGGCATTCAG"
    q = t[4:16] + "NNNN" + t[20:30]
    pairs = np.stack([np.arange(len(q)), np.arange(len(q)) + 4], 1)
    records = [AlignedPair("q", q, "t", t, pairs, 10.0), AlignedPair("q2", q, "t", t, pairs, 10.0, alphabet="dna")]
    sam, tsv, paf, m8 = (tmp_path / f"o.{x}" for x in ("sam", "tsv", "paf", "m8"))
    for path in (sam, tsv, paf, m8):
        write_alignments(records, path)
    with pysam.AlignmentFile(str(sam)) as handle:
        segs = list(handle)
    (tmp_path / "t.fa").write_text(f">t\n{t}\n")
    assert [seg.get_tag("NM") for seg in segs] == [4, 4]  # the four N-N pairs
    redone = pysam.calmd("-e", str(sam), str(tmp_path / "t.fa"))  # samtools' own NM from the reference
    assert [re.search(r"NM:i:(\d+)", line).group(1) for line in redone.splitlines() if not line.startswith("@")] \
        == ["4", "4"]
    identity = 100 * (len(q) - 4) / len(q)
    rows = list(csv.DictReader(tsv.open(), delimiter="\t"))
    assert [float(r["identity"]) for r in rows] == [pytest.approx(identity, abs=1e-3)] * 2
    assert [line.split("\t")[9] for line in paf.read_text().splitlines()] == [str(len(q) - 4)] * 2
    assert [(float(c[2]), int(c[4])) for c in (line.split("\t") for line in m8.read_text().splitlines())] \
        == [(pytest.approx(identity, abs=1e-3), 4)] * 2
    assert records[1].identity == pytest.approx(identity) and records[0].identity == 100.0  # alphabet unknown
    text = str(records[1])  # the text format: the figures and the match line ('.' under N-N)
    assert f"identity={len(q) - 4}/{len(q)}" in text and "||||||||||||....||||||||||" in text
    prot = AlignedPair("p", "MKXXLV", "pt", "MKXXLV", np.stack([np.arange(6)] * 2, 1), 5.0, alphabet="protein")
    assert prot.identity == pytest.approx(100 * 4 / 6) and prot.stats.n_identical == 4
    # B (D or N), Z (E or Q) and J (I or L) are ambiguity codes as X is; O and U are residues
    codes = AlignedPair("c", "MBZJOUW", "ct", "MBZJOUW", np.stack([np.arange(7)] * 2, 1), 5.0, alphabet="protein")
    assert codes.stats.n_identical == 4


def test_a_peptide_of_nucleotide_letters_is_protein_when_told(tmp_path):
    """A plain tuple carries no alphabet: the writers tell it from the letters, so a peptide of
    only nucleotide codes (asparagine N against itself) read as DNA, an N-N pair no identity.
    ``write_alignments(alphabet="protein")`` says what they are (a pair that carries its own
    alphabet keeps it); a bad alphabet is refused."""
    pep = "GATNNACAGT"
    rec = ("p", pep, "t", pep, np.stack([np.arange(10)] * 2, 1), 8.0)
    dna_pair = AlignedPair("d", "ACGTNNACGT", "e", "ACGTNNACGT", rec[4], 8.0, alphabet="dna")
    for alphabet, expected in ((None, 80.0), ("protein", 100.0)):
        out = tmp_path / f"{alphabet}.tsv"
        write_alignments([rec, dna_pair], out, alphabet=alphabet)
        rows = list(csv.DictReader(out.open(), delimiter="\t"))
        assert [float(r["identity"]) for r in rows] == [pytest.approx(expected), pytest.approx(80.0)]
    from sinkalign.errors import InputError

    with pytest.raises(InputError, match="alphabet='rna'"):
        write_alignments([rec], tmp_path / "x.tsv", alphabet="rna")
    assert not (tmp_path / "x.tsv").exists()


def test_sam_seq_of_a_dna_read_with_x_and_an_unmapped_read_as_given(tmp_path):
    """A nucleotide read with X (a masked base, read as N) lost its SEQ to '*' and XQ:Z; an
    unmapped minus-strand record was written reverse-complemented with flag 20 (minimap2 and BWA
    write an unmapped read as given, flag 4)."""
    from sinkalign.alignment import reverse_complement

    t = "ACGTTGCAAGGCTTACGATTACAGGCATTCAG"
    q = t[2:12] + "XX" + t[14:28]
    pairs = np.stack([np.arange(len(q)), np.arange(len(q)) + 2], 1)
    lost = "GGATCCATGCAAATTTGG"
    records = [AlignedPair("xq", q, "t", t, pairs, 5.0, alphabet="dna"),
               AlignedPair("lost", reverse_complement(lost), "t", t, np.zeros((0, 2), int), 0.0, strand="-",
                           alphabet="dna")]
    write_alignments(records, tmp_path / "o.sam")
    with pysam.AlignmentFile(str(tmp_path / "o.sam")) as handle:
        xq, unmapped = list(handle)
    assert xq.query_sequence == q.replace("X", "N") and not xq.has_tag("XQ")
    assert unmapped.flag == 4 and unmapped.query_sequence == lost
    # RNA's U is T there (a review: X-as-N made it N), and a score past int32 keeps ZS:f alone (AS:i overflowed)
    rna = q[:10].replace("T", "U")
    big = [AlignedPair("rna", rna, "t", t, pairs[:10], 2.0**31 + 0.6, alphabet="dna")]
    write_alignments(big, tmp_path / "u.sam")
    write_alignments(big, tmp_path / "u.paf")
    with pysam.AlignmentFile(str(tmp_path / "u.sam")) as handle:
        (seg,) = list(handle)
    assert seg.query_sequence == q[:10] and not seg.has_tag("AS") and seg.get_tag("ZS") == pytest.approx(2.0**31, rel=1e-5)
    assert "AS:i" not in (tmp_path / "u.paf").read_text() and "ZS:f:2.14748e+09" in (tmp_path / "u.paf").read_text()


def test_sam_seq_follows_the_pair_alphabet_not_its_letters(tmp_path):
    """A protein read whose residues all happen to be IUPAC nucleotide codes (M, K, V, D, H, W,
    S, R, ...) went into SEQ as nucleotides; the pair's alphabet (its own, else
    ``write_alignments(alphabet=)``) decides, the letters only when nothing says."""
    pep = "MKVDHWSAAGTKRHVDAGKMS"  # every letter is in =ACMGRSVTWYHKDBN
    pairs = np.stack([np.arange(len(pep))] * 2, 1)
    told = [AlignedPair("pep", pep, "t", pep, pairs, 5.0, alphabet="protein"),
            AlignedPair("dna", "ACGTACGTAC", "t2", "ACGTACGTAC", pairs[:10], 5.0, alphabet="dna")]
    for name in ("o.sam", "o.bam"):
        write_alignments(told, tmp_path / name)
        with pysam.AlignmentFile(str(tmp_path / name)) as handle:
            prot, dna = list(handle)
        assert prot.query_sequence is None and prot.get_tag("XQ") == pep
        assert dna.query_sequence == "ACGTACGTAC" and not dna.has_tag("XQ")
    # plain tuples: alphabet= says what they are; without it their letters do (a short DNA-like read is DNA)
    tup = [("pep", pep, "t", pep, pairs, 5.0)]
    write_alignments(tup, tmp_path / "told.sam", alphabet="protein")
    write_alignments([("d", "GATNNACAGT", "e", "GATNNACAGT", pairs[:10], 5.0)], tmp_path / "untold.sam")
    with pysam.AlignmentFile(str(tmp_path / "told.sam")) as handle:
        (seg,) = list(handle)
    assert seg.query_sequence is None and seg.get_tag("XQ") == pep
    with pysam.AlignmentFile(str(tmp_path / "untold.sam")) as handle:
        (seg,) = list(handle)
    assert seg.query_sequence == "GATNNACAGT" and not seg.has_tag("XQ")


def test_cli_sam_of_protein_reads_keeps_every_read_in_xq(tmp_path):
    """`sinkalign align` of peptides against a protein: pepA (all IUPAC nucleotide letters) had
    SEQ MKVD... while pepB had SEQ '*' and XQ:Z, as the README promises for every protein read."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    (tmp_path / "pep.fa").write_text(">pepA\nMKVDHWSAAGTKRHVDAGKMS\n>pepB\nMKVLEEFQ\n")
    (tmp_path / "t.fa").write_text(">tgt\nMKVLDHWSAAGTKRHVEEFQDAGKMSLLKV\n")
    out = tmp_path / "pep.sam"
    r = CliRunner().invoke(cli, ["align", str(tmp_path / "pep.fa"), str(tmp_path / "t.fa"), "-o", str(out),
                                 "--min-confidence", "0", "--no-progress"])
    assert r.exit_code == 0, r.output
    with pysam.AlignmentFile(str(out)) as handle:
        segs = {seg.query_name: seg for seg in handle}
    assert sorted(segs) == ["pepA", "pepB"]
    for name, seq in (("pepA", "MKVDHWSAAGTKRHVDAGKMS"), ("pepB", "MKVLEEFQ")):
        assert segs[name].query_sequence is None and segs[name].get_tag("XQ") == seq
