"""What the Python API takes: the same input the command line takes, refused the same way, before
any alignment (it aligned digits, gaps and spaces as unknown residues, and protein with the DNA
model, silently)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
from Bio.Seq import Seq

import sinkalign as sa
from sinkalign.errors import AlphabetError, InputError

HBA = "MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNALSALSDLHAHKL"
HBB = "MVHLTPEEKSAVTALWGKVNVDEVGGEALGRLLVVYPWTQRFFESFGDLSTPDAVMGNPKVKAHGKKVLGAFSDGLAHLDNLKGTFATLSELH"


@pytest.fixture(scope="module")
def protein():
    return sa.Aligner.load()


@pytest.fixture(scope="module")
def dna():
    return sa.Aligner.load("dna")


@pytest.mark.parametrize("char", ["1", "-", ".", " ", "\n", "#", "*", "é"])
def test_a_character_that_is_no_residue_is_refused_with_its_position(protein, char):
    query = HBA[:50] + char + HBA[50:]
    with pytest.raises(InputError, match=r"pair query / target: the query has '.+' at position 50 \(0-based\)"):
        protein.align(query, HBB)
    with pytest.raises(InputError, match=r"the target has"):
        protein.align(HBB, query)


def test_a_bad_pair_fails_in_turn_after_the_results_before_it(protein):
    got = []
    with pytest.raises(InputError, match=r"pair c / d: the query is of type NoneType, not a sequence"):
        for res in protein.align_many([("a", HBA, "b", HBB), ("c", None, "d", HBB), ("e", HBA, "f", HBB)]):
            got.append(res.query_id)
    assert got == ["a"]
    for bad in (5, ["M", "K"], np.array(list("MKV"))):
        with pytest.raises(InputError, match="not a sequence"):
            protein.align(bad, HBB)
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    with pytest.raises(InputError, match=r"type SeqRecord, not a sequence .*records go to align_pairs"):
        protein.align(SeqRecord(Seq(HBA), id="hba"), HBB)


def test_bytes_biopython_seqs_and_a_trailing_stop_are_the_sequence(protein):
    plain = protein.align(HBA, HBB)
    for query in (HBA.encode(), Seq(HBA), HBA + "*"):
        other = protein.align(query, HBB)
        assert other.query == HBA
        np.testing.assert_array_equal(other.pairs, plain.pairs)
        np.testing.assert_array_equal(other.alignment.match_posterior, plain.alignment.match_posterior)
    with pytest.raises(InputError, match=r"'\*' at position 3"):
        protein.align("MKV*LAG", HBB)  # a stop inside is no residue


def test_lower_case_is_the_same_sequence_and_is_written_upper_case(protein, tmp_path):
    """Lower-case (soft-masked) letters are the residues they name, as the FASTA reader reads
    them: the pair holds them upper case, so Biopython counts identities and a Stockholm file
    written from it reads back aligned (a lower-case row was read as insertions: 0 aligned
    pairs); plain tuples given to the writers likewise."""
    upper = protein.align(HBA, HBB, query_id="a", target_id="b")
    lower = protein.align(HBA.lower(), HBB, query_id="a", target_id="b")
    assert lower.query == HBA and lower.pairs.tolist() == upper.pairs.tolist()
    assert lower.to_biopython().counts().identities == upper.stats.n_identical > 0
    for name, rec in (("pair", lower), ("tuple", ("a", HBA.lower(), "b", HBB.lower(), upper.pairs, 1.0))):
        path = tmp_path / f"{name}.sto"
        sa.write_alignments([rec], path)
        msa = sa.read_alignment(path)
        assert [row.replace("-", "") for row in msa.rows] == [HBA, HBB]
        columns = [(a, b) for a, b in zip(*msa.rows) if a != "-" and b != "-"]
        assert len(columns) == len(upper.pairs)


def test_the_dna_model_refuses_protein_and_takes_rna(dna):
    with pytest.raises(AlphabetError, match=r"the query has 'L' at position 2 \(0-based\), no nucleotide code"):
        dna.align("MVLSPADKTNVKAAWGKVGAHAG", "ACGTACGTACGT")
    rna = dna.align("ACGUACGUUUAGCAUGGCUA", "ACGTACGTTTAGCATGGCTA", strand="plus")
    assert rna.cigar == "20M"
    assert dna.align("ACGTNRYACGT", "ACGTACGTACGT", strand="plus").cigar  # IUPAC codes are nucleotides


def test_a_protein_model_given_nucleotides_says_so_once(caplog):
    aligner = sa.Aligner.load()
    gene = "ATGGCTAGCAAAGGAGAAGAACTTTTCACTGGAGTTGTCCCAATTCTTGTTGAATTAGATGGTGATG"
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.aligner"):
        aligner.align("AAA", "GGG")  # short peptides may be made of nucleotide letters: not said
        aligner.align("GATTACA", "CAT")
        assert not caplog.records
        aligner.align(gene, gene[10:50])
        aligner.align(gene, gene[5:40])
        aligner.align(HBA, HBB)
    said = [r for r in caplog.records if "both sequences are nucleotides" in r.getMessage()]
    assert len(said) == 1 and "Aligner.load('dna')" in said[0].getMessage()


def test_align_multiple_refuses_gaps_and_reads_case_as_nothing(protein):
    with pytest.raises(InputError, match=r"sequence 'a' has '-' at position 21: a sequence to align is letters"):
        sa.align_multiple(["a", "b"], [HBA[:20] + "---" + HBA[20:], HBB], protein)
    with pytest.raises(InputError, match="not one string"):
        sa.align_multiple(["a"], HBA, protein)
    with pytest.raises(InputError, match="'a' is repeated"):
        sa.align_multiple(["a", "a"], [HBA, HBB], protein)
    upper = sa.align_multiple(["a", "b"], [HBA, HBB], protein, refine_rounds=0)
    lower = sa.align_multiple(["a", "b"], [HBA.lower(), HBB], protein, refine_rounds=0)
    assert lower.rows == upper.rows  # written lower case, a row would read as insertions
    np.testing.assert_array_equal(lower.confidence[0], upper.confidence[0])


def test_align_multiple_without_an_aligner_says_what_it_takes():
    """``align_multiple(ids, seqs, None)`` said the model had no calibration."""
    for nothing in (None, 5):
        with pytest.raises(InputError, match=f"come from an Aligner .* not {type(nothing).__name__}"):
            sa.align_multiple(["a", "b"], [HBA, HBB], nothing)


def test_add_to_alignment_independent_needs_no_consistency_argument(protein):
    base = sa.align_multiple(["a", "b"], [HBA, HBB], protein, refine_rounds=0)
    out = sa.add_to_alignment(base.ids, base.rows, ["c"], [HBA[5:60].lower()], protein, independent=True)
    assert out.rows[2].replace("-", "") == HBA[5:60]
    again = sa.add_to_alignment(base.ids, base.rows, ["c"], [HBA[5:60]], protein, independent=True, consistency=0)
    assert again.rows == out.rows
    with pytest.raises(InputError, match="independent placement takes no consistency rounds"):
        sa.add_to_alignment(base.ids, base.rows, ["c"], [HBA[5:60]], protein, independent=True, consistency=1)


def test_missing_files_are_missing_file_errors(tmp_path):
    # README: a missing file is a MissingFileError (a FileNotFoundError and a SinkalignError)
    for read in (lambda p: list(sa.read_fasta(p)), sa.read_alignment):
        with pytest.raises(sa.MissingFileError, match="nope.fa: no such"):
            read(tmp_path / "nope.fa")


def test_reprs_fit_a_notebook_line(protein):
    assert repr(protein).startswith("Aligner(alphabet='protein', engine=") and "calibrated=True" in repr(protein)
    seqs = [HBA[:40], HBB[:40], HBA[2:42], HBB[3:40], HBA[:38]]
    msa = sa.align_multiple(list("abcde"), seqs, protein, refine_rounds=0)
    text = repr(msa)
    assert text.startswith("MultipleAlignment(5 rows x ") and "'d', ...]" in text and HBA[:20] not in text
    # a pair with its plan, a genome's record: a line each, not the whole sequence and plan (31 kB, 870 kB)
    pair = protein.align(HBA * 4, HBB, keep_plan=True)
    text = repr(pair)
    assert len(text) < 600 and f"({4 * len(HBA)} letters)" in text and f"<plan {4 * len(HBA) + 1} x {len(HBB) + 1}>" in text, text
    assert f"target={HBB[:25] + '...' + HBB[-25:]!r}" in text and "strand='+'" in text
    assert repr(pair._replace(query="MKV")).count("'MKV'") == 1
    from sinkalign.io.fasta import Sequence

    record = Sequence("chr", "a genome", "ACGT" * 250_000, "dna")
    assert repr(record) == ("Sequence(id='chr', description='a genome', seq='ACGTACGTACGTACGTACGTACGTA...TACGTACGTACGTACGT"
                            "ACGTACGT' (1,000,000 letters), alphabet='dna')")


def test_items_that_are_no_pairs_are_refused_in_turn_naming_their_index(protein):
    """align_many takes (query_id, query, target_id, target) and align_pairs (query, target):
    anything else is refused as the k-th item, in its turn (after the results before it), not
    with a bare unpacking error, and a string is not taken for a pair of one-letter sequences."""
    for bad, shown in ((("a", HBA, HBB), "tuple"), ((HBA, HBB), "tuple"), (HBA, "str"), (5, "int")):
        got = []
        with pytest.raises(InputError, match=rf"pair 1: expected \(query_id, query, target_id, target\), got {shown}"):
            for res in protein.align_many([("a", HBA, "b", HBB), bad, ("e", HBA, "f", HBB)]):
                got.append(res.query_id)
        assert got == ["a"]
    for bad in ((HBA, HBB, HBA), "MK", [HBA]):
        with pytest.raises(InputError, match=r"pair 0: expected \(query, target\)"):
            list(protein.align_pairs([bad]))
    dna = sa.Aligner.load("dna")  # its strands take the same path
    with pytest.raises(InputError, match=r"pair 0: expected \(query_id, query, target_id, target\)"):
        list(dna.align_many([("a", "ACGTACGT", "ACGTACGT")]))


def test_batch_size_is_a_whole_number_and_record_pairs_point_to_align_pairs(protein):
    """align_many's batch_size is refused unless a whole number >= 1 (a string, a fraction, a
    bool), before any pair is aligned; a pair of Biopython records given to align_many is refused
    with the method that takes them."""
    from Bio.SeqRecord import SeqRecord

    for bad in ("2", 3.5, True, 0):
        with pytest.raises(InputError, match=rf"batch_size={bad!r} must be a whole number >= 1"):
            protein.align_many([("a", HBA, "b", HBB)], batch_size=bad)
    assert next(protein.align_many([("a", HBA, "b", HBB)], batch_size=np.int64(2))).query_id == "a"
    records = (SeqRecord(Seq(HBA), id="a"), SeqRecord(Seq(HBB), id="b"))
    with pytest.raises(InputError, match=r"pair 0: .*a pair of Biopython records: Aligner.align_pairs takes those"):
        list(protein.align_many([records]))
    assert next(protein.align_pairs([records])).target_id == "b"


def test_results_compare_by_value(protein):
    """Two results of the same pair are equal (their alignments, posteriors, plans by value), a
    pair built from a pair array equals one built from a copy of it (no 'truth value of an array
    is ambiguous'), and any field differing makes them unequal; NaN equals NaN in a field."""
    a, b = (protein.align(HBA[:40], HBB[:40], keep_plan=True) for _ in range(2))
    assert a == b and not a != b and a.alignment == b.alignment
    assert a != a._replace(plan=None) and a != a._replace(score=a.score + 1e-12)
    moved = a.alignment.match_posterior.copy()
    moved[0] += 1e-9
    assert a.alignment != dataclasses.replace(a.alignment, match_posterior=moved)
    arr = np.array([[0, 0], [1, 1]])
    p = sa.AlignedPair("x", "MKV", "y", "MKV", arr, float("nan"))
    assert p == sa.AlignedPair("x", "MKV", "y", "MKV", arr.copy(), float("nan")) == tuple(p)
    assert p != p._replace(alignment=arr[:1]) and p != p._replace(query_id="z")
    with pytest.raises(TypeError):
        hash(p)
    # a baseline's result compares by value too, and a float32 NaN score equals itself
    from sinkalign.align.baselines import align_pair

    nw = [sa.AlignedPair("x", HBA, "y", HBB, align_pair(HBA, HBB, "nw"), np.float32("nan")) for _ in range(2)]
    assert nw[0] == nw[1] and nw[0].alignment == nw[1].alignment
    assert nw[0].alignment != align_pair(HBA, HBB, "sw") and nw[0] != nw[1]._replace(score=np.float32(1))


def test_ids_must_be_strings_and_weights_finite(protein):
    for qid in (None, 5, ""):
        with pytest.raises(InputError, match=r"query_id=.* must be a non-empty string"):
            protein.align(HBA, HBB, query_id=qid)
    for qid in ("q x", "q\t1", "q\n"):  # refused when aligned, not by the writer after the run
        with pytest.raises(InputError, match=r"query_id=.* must be a non-empty string without whitespace"):
            protein.align(HBA, HBB, query_id=qid)
    with pytest.raises(InputError, match=r"target_id='t 1' must be a non-empty string without whitespace"):
        list(protein.align_many([("q", HBA, "t 1", HBB)]))
    with pytest.raises(InputError, match="gap_weight=nan must be a finite number >= 0"):
        sa.Aligner.load(gap_weight=float("nan"))
    for workers in (1.5, True, "2", 0):
        with pytest.raises(InputError, match=r"workers=.* must be a whole number >= 1"):
            sa.Aligner.load(workers=workers)
    assert sa.Aligner.load(workers=np.int64(2)).workers == 2


def test_nucleotides_against_protein_on_a_protein_model_say_so_once(caplog):
    aligner = sa.Aligner.load()
    gene = "ATGGCTAGCAAAGGAGAAGAACTTTTCACTGGAGTTGTCCCAATTCTTGTTGAATTAGATGGTGATG"
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.aligner"):
        aligner.align(gene, HBA)
        aligner.align(HBB, gene)
        aligner.align("GAGA", HBA)  # a short peptide may look like nucleotides: not said
    said = [r.getMessage() for r in caplog.records if "looks like nucleotides" in r.getMessage()]
    assert len(said) == 1 and "the query looks like nucleotides and the target like protein" in said[0]


def test_read_fasta_takes_a_path(tmp_path):
    import io

    with pytest.raises(InputError, match="read_fasta takes the path of a FASTA file .* not StringIO"):
        list(sa.read_fasta(io.StringIO(">a\nMKV\n")))


def test_large_banded_pairs_share_the_processes_cell_budget(monkeypatch):
    """Banded pairs above AUTO_BAND_CELLS (their dense classical guides) are in work at once only
    while their residue pairs fit HOST_CELL_BUDGET (a pair alone may exceed it); the results are
    the same whatever the budget. None: half the memory available, at least MAX_PAIR_CELLS."""
    import threading
    import time

    import sinkalign.align.aligner as A

    rng = np.random.default_rng(0)
    long = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 4000))
    items = [(f"q{k}", long[400 * k: 400 * k + 300], "t", long) for k in range(4)]  # lopsided: banded
    assert all(len(q) * len(t) > A.AUTO_BAND_CELLS for _, q, _, t in items)
    aligner = sa.Aligner.load("blosum", workers=2)
    inside, most, lock = [0], [0], threading.Lock()
    solve = A.Aligner._band_solve

    def counted(self, item, keep_plan):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # long enough for the other thread to try
        try:
            return solve(self, item, keep_plan)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(A.Aligner, "_band_solve", counted)
    monkeypatch.setattr(A, "HOST_CELL_BUDGET", 300 * 4000)  # one of these pairs at a time
    one_at_a_time = [p.pairs.tolist() for p in aligner.align_many(items)]
    assert most[0] == 1
    monkeypatch.setattr(A, "HOST_CELL_BUDGET", 4 * 300 * 4000)
    most[0] = 0
    assert [p.pairs.tolist() for p in aligner.align_many(items)] == one_at_a_time
    assert most[0] == 2
    monkeypatch.setattr(A, "HOST_CELL_BUDGET", None)
    assert A._CellBudget().cap() >= A.MAX_PAIR_CELLS
