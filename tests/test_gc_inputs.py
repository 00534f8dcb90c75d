"""What gc_profile takes: the project's own records, Biopython's, a FASTA path, RNA."""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from Bio import SeqIO
from Bio.Seq import Seq
from Bio.SeqRecord import SeqRecord

import sinkalign as sa
from sinkalign.errors import MissingFileError
from sinkalign.lm.data import GenomeRecord, read_genome_records
from sinkalign.pipelines.gc_profile import TSV_COLUMNS, compare_continuations, continuation_description, gc_profile

CDIPH = "genomes/GCF_001457455.1_NCTC11397_genomic.fna.gz"  # "... chromosome 1, complete sequence"


def _random_dna(rng, n):
    return "".join(rng.choice(list("ACGT"), size=n))


def _same(a, b) -> None:
    """Two profiles are the same table with the same summaries."""
    assert a.summaries == b.summaries
    for column in TSV_COLUMNS:
        np.testing.assert_array_equal(getattr(a, column), getattr(b, column))


@pytest.fixture
def fasta(tmp_path) -> Path:
    """A circular record by its description ("complete sequence") and a contig, gzipped."""
    rng = np.random.default_rng(0)
    text = (f">chr1 Testus exemplaris chromosome, complete sequence\n{_random_dna(rng, 5000)}\n"
            f">ctg2 Testus exemplaris contig 2, whole genome shotgun sequence\n{_random_dna(rng, 3000)}\n")
    path = tmp_path / "genome.fna.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(text)
    return path


def test_records_of_read_fasta_biopython_and_a_path_read_as_the_cli_reads_the_file(fasta):
    """read_fasta's Sequences were refused ("expected an (id, seq) pair or a GenomeRecord, got
    Sequence"), SeqRecords too, and a Path raised a bare TypeError; each is now the file's profile,
    circularity read from the description as for the file itself."""
    ref = gc_profile(read_genome_records(fasta), window=1000)
    assert [s.circular for s in ref.summaries] == [True, False]
    with gzip.open(fasta, "rt") as fh:
        seqrecords = list(SeqIO.parse(fh, "fasta"))
    for records in (list(sa.read_fasta(fasta, "dna")), sa.read_fasta(fasta, "dna"), seqrecords, fasta, str(fasta)):
        _same(gc_profile(records, window=1000), ref)
    # one record alone (a SeqRecord iterates over its letters: it is still one record)
    _same(gc_profile(seqrecords[0], window=1000), ref.record("chr1"))
    _same(gc_profile(next(sa.read_fasta(fasta, "dna")), window=1000), ref.record("chr1"))
    # a pair has no description: linear, unless circular= says otherwise
    pair = [(r.id, str(r.seq)) for r in seqrecords]
    assert [s.circular for s in gc_profile(pair, window=1000).summaries] == [False, False]
    _same(gc_profile(pair, window=1000, circular=True), gc_profile(fasta, window=1000, circular=True))


def test_any_record_with_id_and_seq_its_description_led_by_its_id():
    """read_fasta keeps the header after the id as the description: the id leads it again, so a
    RefSeq NC_ accession reads as circular as it does in the file."""
    seq = _random_dna(np.random.default_rng(1), 2000)
    plain = SimpleNamespace(id="NC_000001.1", seq=seq)  # no description: the id alone
    described = SimpleNamespace(id="NC_000001.1", description="Testus exemplaris", seq=seq)
    contig = SimpleNamespace(id="NC_000001.1", description="NODE_1_length_2000", seq=seq)
    bio = SeqRecord(Seq(seq), id="NC_000001.1", description="Testus exemplaris")
    assert [s.circular for r in (plain, described, bio, contig) for s in gc_profile([r], window=500).summaries] == \
        [True, True, True, False]
    assert gc_profile([("NC_000001.1", seq)], window=500).summaries[0].circular is False


def test_a_fasta_path_from_standard_input(fasta, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(fasta.read_bytes())))
    _same(gc_profile("-", window=1000), gc_profile(fasta, window=1000))


def test_bad_record_inputs_name_what_is_accepted(tmp_path):
    with pytest.raises(MissingFileError, match="FASTA file not found: .*nowhere.fa"):
        gc_profile(tmp_path / "nowhere.fa", window=4)
    with pytest.raises(MissingFileError, match="FASTA file not found: nowhere.fa"):
        gc_profile("nowhere.fa", window=4)
    # letters alone that name no file: a sequence where records were expected
    with pytest.raises(ValueError, match=r"no FASTA file 'ACGTACGT' exists, and records are \(id, seq\) pairs, "
                                         r"records with \.id and \.seq .* not one sequence: give \[\(id, seq\)\]"):
        gc_profile("ACGTACGT", window=4)
    with pytest.raises(ValueError, match="not one sequence"):
        gc_profile("ACGT" * 100_000, window=4)  # too long a name for a file: still a sequence
    with pytest.raises(ValueError, match=r"records are \(id, seq\) pairs, .* got int 5"):
        gc_profile(5, window=4)
    with pytest.raises(ValueError, match=r"record 0 \('x'\): the sequence must be a str, got int"):
        gc_profile([("x", 5)], window=4)
    with pytest.raises(ValueError, match=r"record 1: expected an \(id, seq\) pair or a record with \.id and \.seq, "
                                         r"got dict"):
        gc_profile([("a", "ACGT"), {"id": "b", "seq": "ACGT"}], window=2)
    with pytest.raises(ValueError, match=r"duplicate record ids: \['a'\]"):
        gc_profile([("a", "ACGT"), SeqRecord(Seq("ACGT"), id="a")], window=2)


def test_rna_is_read_as_dna_as_the_aligner_reads_it():
    """gc_profile([("x", "ACGU" * 100)]) raised on U; U (and u) is now T."""
    rna, dna = gc_profile([("x", "ACGU" * 100)], window=40), gc_profile([("x", "ACGT" * 100)], window=40)
    _same(rna, dna)
    _same(gc_profile([SeqRecord(Seq("acgu" * 100), id="x")], window=40), dna)
    rng = np.random.default_rng(3)
    genome = [("chr1", _random_dna(rng, 600))]
    rna_genome = [("chr1", genome[0][1].replace("T", "U"))]
    gen = [GenomeRecord("g", continuation_description("g", "chr1", 100), genome[0][1][100:300].replace("T", "u"))]
    (a,), (b,) = compare_continuations(rna_genome, gen), compare_continuations(genome, gen)
    assert a.pearson_r == pytest.approx(1.0) and a.true_gc == b.true_gc == a.generated_gc


def test_an_rna_fasta_file_is_read_as_records_in_memory_are(tmp_path, monkeypatch):
    """A FASTA file with U (and u) was refused ("invalid character 'U'") by gc_profile(path), '-'
    and ``sinkalign gc-profile`` while the same records given in memory read U as T: one rule
    now (as_model_bases(..., rna=True)); other letters are still refused, naming file, record and
    position; the LM's own reader (rna=False) still refuses U."""
    from click.testing import CliRunner

    from sinkalign.cli.main import cli
    from sinkalign.errors import FormatError

    rng = np.random.default_rng(8)
    seqs = {"chr1": _random_dna(rng, 3000), "chr2": _random_dna(rng, 1200)}
    dna, rna = tmp_path / "dna.fa", tmp_path / "rna.fa"
    dna.write_text("".join(f">{k}\n{v}\n" for k, v in seqs.items()))
    rna.write_text(f">chr1\n{seqs['chr1'].replace('T', 'U')}\n>chr2\n{seqs['chr2'].lower().replace('t', 'u')}\n")
    ref = gc_profile(dna, window=500)
    for records in (rna, str(rna), [(k, v.replace("T", "U")) for k, v in seqs.items()]):
        _same(gc_profile(records, window=500), ref)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(rna.read_bytes())))
    _same(gc_profile("-", window=500), ref)
    # the CLI, the overlay read by the same rule
    gen = tmp_path / "gen.fa"
    gen.write_text(f">{continuation_description('g', 'chr1', 1000)}\n{seqs['chr1'][1000:1400].replace('T', 'U')}\n")
    for name, genome in (("dna", dna), ("rna", rna)):
        res = CliRunner().invoke(cli, ["gc-profile", str(genome), "--window", "500", "--overlay", str(gen),
                                       "-o", str(tmp_path / name), "--no-progress"])
        assert res.exit_code == 0, res.output
    for name in ("gc_profile.tsv", "overlay.tsv"):
        assert (tmp_path / "rna" / name).read_text() == (tmp_path / "dna" / name).read_text()
    # a letter that is no nucleotide: the file, the record and the position
    bad = tmp_path / "bad.fa"
    bad.write_text(">r1\nACGU\n>r2\nACGUAEU\n")
    with pytest.raises(FormatError, match=r"bad\.fa: record 'r2' has invalid character 'E' at 0-based position 5 "
                                          r"\(allowed: ACGTN, U \(read as T\) and IUPAC codes"):
        gc_profile(bad, window=4)
    res = CliRunner().invoke(cli, ["gc-profile", str(bad), "-o", str(tmp_path / "out")])
    assert res.exit_code == 1 and "bad.fa: record 'r2' has invalid character 'E' at 0-based position 5" in res.output
    with pytest.raises(FormatError, match=r"record 'r1' has invalid character 'U' at 0-based position 3 "
                                          r"\(allowed: ACGTN and IUPAC"):
        read_genome_records(bad)


def test_compare_continuations_takes_seqrecords_and_files(tmp_path):
    rng = np.random.default_rng(4)
    seq = _random_dna(rng, 1000)
    genome = tmp_path / "g.fa"
    genome.write_text(f">chr1\n{seq}\n")
    generated = tmp_path / "gen.fa"
    generated.write_text(f">{continuation_description('c', 'chr1', 200)}\n{seq[200:400]}\n")
    (from_files,) = compare_continuations(genome, generated)
    assert (from_files.id, from_files.start, from_files.length) == ("c", 200, 200)
    assert from_files.pearson_r == pytest.approx(1.0)
    (from_records,) = compare_continuations(list(sa.read_fasta(genome, "dna")), list(SeqIO.parse(generated, "fasta")))
    assert from_records[:7] == from_files[:7]


def test_real_complete_chromosome_from_read_fasta_gets_its_origin(shared_data):
    """The audit's case: C. diphtheriae's "complete sequence" read by sa.read_fasta was refused, and as
    (id, seq) pairs it lost its description, so the origin at its end was not called."""
    path = shared_data / CDIPH
    (ref,) = gc_profile(path, window=10_000).summaries
    assert ref.circular and ref.origin is not None and ref.terminus is not None
    (s,) = gc_profile(list(sa.read_fasta(path, "dna")), window=10_000).summaries
    assert s == ref
    (pair,) = gc_profile([(r.id, r.seq) for r in sa.read_fasta(path, "dna")], window=10_000).summaries
    assert not pair.circular and pair.origin is None and pair.terminus == ref.terminus


def test_gc_profile_is_part_of_the_top_level_api():
    """``sa.gc_profile`` (the audit's first try) is the pipeline's function, named in ``__all__``."""
    import sinkalign as sa
    from sinkalign.pipelines.gc_profile import gc_profile

    assert "gc_profile" in sa.__all__ and sa.gc_profile is gc_profile
    assert np.allclose(sa.gc_profile([("x", "ACGU" * 100)], window=100).gc, 0.5)


def test_one_pair_with_a_biopython_seq_an_empty_string_and_generated_sequences(tmp_path):
    """A review: ``("x", Seq(...))`` alone was refused while ``[("x", Seq(...))]`` was read; ``""``
    was read as the path "." ; compare_continuations took any str given as ``generated`` for a
    path (a long sequence gave a bare OSError)."""
    from sinkalign.errors import InputError

    rng = np.random.default_rng(4)
    seq = _random_dna(rng, 400)
    _same(gc_profile(("x", Seq(seq)), window=100), gc_profile([("x", seq)], window=100))
    with pytest.raises(InputError, match="not one sequence"):
        gc_profile("")
    with pytest.raises(InputError, match="not one sequence"):
        compare_continuations([("chr1", seq)], "ACGT" * 100_000)
