"""FASTA reading (validation, streaming, gzip) and atomic writing."""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pytest
from Bio.Seq import Seq
from Bio.SeqRecord import SeqRecord

from sinkalign.io.fasta import Sequence, SequenceFormatError, detect_alphabet, read_fasta, write_fasta


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------- round trips


def test_round_trip_protein_with_descriptions(tmp_path: Path) -> None:
    records = [
        Sequence(id="sp|P1|A", description="first protein, two words", seq="MKV" * 50, alphabet="protein"),
        Sequence(id="B", description="", seq="ACDEFGHIKLMNPQRSTVWYXBZJUO", alphabet="protein"),
    ]
    out = tmp_path / "p.fa"
    assert write_fasta(records, out, line_width=60) == 2
    lines = out.read_text().splitlines()
    assert lines[0] == ">sp|P1|A first protein, two words"
    assert max(len(line) for line in lines if not line.startswith(">")) == 60
    assert list(read_fasta(out, "protein")) == records


def test_round_trip_dna_gzip_and_no_wrapping(tmp_path: Path) -> None:
    records = [Sequence(id=f"chr{k}", description="", seq="ACGTN" * (10 + k), alphabet="dna") for k in range(3)]
    out = tmp_path / "g.fna.gz"
    write_fasta(records, out, line_width=0)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    with gzip.open(out, "rt") as handle:
        assert len(handle.read().splitlines()) == 6  # one line per sequence
    assert list(read_fasta(out, "dna")) == records


def test_write_seqrecords_and_single_record(tmp_path: Path) -> None:
    out = tmp_path / "r.fa"
    write_fasta([SeqRecord(Seq("MKVL"), id="r1", description="r1 some text"), SeqRecord(Seq("GG"), id="r2")], out)
    got = list(read_fasta(out, "protein"))
    assert [(s.id, s.description, s.seq) for s in got] == [("r1", "some text", "MKVL"), ("r2", "", "GG")]
    write_fasta(Sequence(id="one", description="", seq="MK", alphabet="protein"), out)
    assert [s.id for s in read_fasta(out)] == ["one"]


def test_gzip_detected_from_content_not_suffix(tmp_path: Path) -> None:
    path = tmp_path / "plain_name.fa"
    path.write_bytes(gzip.compress(b">a\nMKV\n"))
    assert [s.seq for s in read_fasta(path)] == ["MKV"]


@pytest.mark.parametrize("name,compress,undo", [
    ("an xz", lambda b: lzma.compress(b), "xz -d"),
    ("a bzip2", lambda b: bz2.compress(b), "bunzip2"),
    ("a zstd", lambda b: b"\x28\xb5\x2f\xfd" + b"\x00" * 8, "zstd -d"),  # the frame magic is what is read
    ("a zip", lambda b: b"PK\x03\x04" + b"\x00" * 26, "unzip"),
])
def test_other_compressions_are_named_not_read_as_binary(tmp_path: Path, name, compress, undo) -> None:
    """A FASTA compressed other than by gzip is refused with its compression and the command that
    undoes it, by every reader of sequence files (FASTA, genomes for the LMs)."""
    from sinkalign.lm.data import read_genome_records

    path = tmp_path / "seqs.fa.x"
    path.write_bytes(compress(b">a\nACGT\n"))
    want = rf"{path}: {name}-compressed file; sinkalign reads plain text and gzip .*\({undo}\)"
    with pytest.raises(SequenceFormatError, match=want):
        list(read_fasta(path))
    with pytest.raises(SequenceFormatError, match=want):
        read_genome_records(path)


@pytest.mark.parametrize("kind", ["BAM", "CRAM"])
def test_bam_and_cram_are_named_with_the_way_to_fasta(tmp_path: Path, kind) -> None:
    """A BAM (BGZF-compressed, so it opened as gzip) was refused as a line that is not UTF-8."""
    from sinkalign.lm.data import read_genome_records

    path = tmp_path / f"reads.{kind.lower()}"
    path.write_bytes(gzip.compress(b"BAM\x01" + b"\x00" * 40) if kind == "BAM" else b"CRAM\x03\x00" + b"\x00" * 20)
    want = rf"{path}: a {kind} file \(binary alignments\), not text; for its reads as FASTA run `samtools fasta`"
    with pytest.raises(SequenceFormatError, match=want):
        list(read_fasta(path))
    with pytest.raises(SequenceFormatError, match=want):
        read_genome_records(path)


@pytest.mark.parametrize("first,what", [
    ("# STOCKHOLM 1.0", "a Stockholm alignment"), ("CLUSTAL W (1.83) multiple sequence alignment", "a Clustal alignment"),
    ("@r1", "FASTQ reads"), ("@HD\tVN:1.6", "a SAM file"), ("LOCUS       NC_000913", "a GenBank record"),
    ("!!AA_MULTIPLE_ALIGNMENT 1.0", "an MSF alignment"), ("ID   X56734; SV 1;", "an EMBL record"),
    ("HEADER    HYDROLASE                               01-JAN-00   1ABC", "a PDB structure"),
    ("ATOM      1  N   MET A   1      11.104  13.207   2.100  1.00  0.00           N", "a PDB structure"),
    ("data_1ABC", "an mmCIF structure"),
])
def test_another_format_is_named(tmp_path: Path, first, what) -> None:
    from sinkalign.errors import FormatError
    from sinkalign.lm.data import read_genome_records

    path = _write(tmp_path / "x.fa", first + "\nACGT\n")
    with pytest.raises(SequenceFormatError, match=rf"line 1: expected a '>' header .*\({what}, it seems, not FASTA\)"):
        list(read_fasta(path))
    with pytest.raises(FormatError, match=rf"\({what}, it seems, not FASTA\)"):
        read_genome_records(path)
    plain = _write(tmp_path / "y.fa", "ACGT\n>a\nACGT\n")
    with pytest.raises(SequenceFormatError, match=r"found 'ACGT'$"):  # no guess where nothing is recognised
        list(read_fasta(plain))


def test_write_fasta_is_atomic_on_error(tmp_path: Path) -> None:
    out = tmp_path / "x.fa"
    write_fasta([Sequence(id="keep", description="", seq="MK", alphabet="protein")], out)
    before = out.read_bytes()
    good = Sequence(id="a", description="", seq="MK", alphabet="protein")
    with pytest.raises(ValueError, match=r"duplicate record id 'a' \(#2\)"):
        write_fasta([good, good], out)
    with pytest.raises(ValueError, match=r"record id 'a b' \(#1\) must be non-empty and contain no whitespace"):
        write_fasta([SeqRecord(Seq("MK"), id="a b")], out)
    with pytest.raises(ValueError, match=r"record 'e' \(#1\) has an empty sequence"):
        write_fasta([SeqRecord(Seq(""), id="e")], out)
    with pytest.raises(ValueError, match="line_width=-1"):
        write_fasta([good], out, line_width=-1)
    with pytest.raises(ValueError, match="must be a Sequence or a Bio.SeqRecord"):
        write_fasta([("a", "MK")], out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.fa"]


# ----------------------------------------------------------------------------- normalisation


def test_lowercase_uppercased_by_default_and_rejected_otherwise(tmp_path: Path) -> None:
    path = _write(tmp_path / "l.fa", ">a\nACGT\n>b soft masked\nACgtN\n")
    assert [s.seq for s in read_fasta(path, "dna")] == ["ACGT", "ACGTN"]
    with pytest.raises(SequenceFormatError) as err:
        list(read_fasta(path, "dna", uppercase=False))
    msg = str(err.value)
    assert str(path) in msg and "record 'b' (#2)" in msg and "'g' at position 2 (0-based)" in msg
    assert (err.value.record_id, err.value.record_number, err.value.position, err.value.char) == ("b", 2, 2, "g")


def test_trailing_stop_removed_from_protein_only(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.fa", ">orf\nMKV*\n")
    assert next(read_fasta(path)).seq == "MKV"
    inner = _write(tmp_path / "i.fa", ">orf\nMK*V\n")
    with pytest.raises(SequenceFormatError, match=r"record 'orf' \(#1\): stop '\*' inside the sequence .* at position 2"):
        list(read_fasta(inner))
    dna = _write(tmp_path / "d.fa", ">x\nACGT*\n")
    with pytest.raises(SequenceFormatError, match=r"illegal character '\*' for alphabet 'dna' at position 4"):
        list(read_fasta(dna, "dna"))
    only_stop = _write(tmp_path / "o.fa", ">x\n*\n")
    with pytest.raises(SequenceFormatError, match=r"record 'x' \(#1\): empty record \(only a stop"):
        list(read_fasta(only_stop))


def test_ambiguous_residues(tmp_path: Path) -> None:
    prot = _write(tmp_path / "p.fa", ">a\nMKVL\n>b\nMKXVL\n")
    assert [s.seq for s in read_fasta(prot)] == ["MKVL", "MKXVL"]
    with pytest.raises(SequenceFormatError) as err:
        list(read_fasta(prot, allow_ambiguous=False))
    assert f"{prot}: record 'b' (#2): ambiguous/non-standard protein residue 'X'" in str(err.value)
    assert "at position 2 (0-based)" in str(err.value)
    dna = _write(tmp_path / "d.fa", ">c\nACGTNNRY\n")
    assert next(read_fasta(dna, "dna")).seq == "ACGTNNRY"
    with pytest.raises(SequenceFormatError, match=r"record 'c' \(#1\): ambiguous/non-standard dna residue 'N' .* at position 4"):
        list(read_fasta(dna, "dna", allow_ambiguous=False))


@pytest.mark.parametrize(
    ("text", "alphabet", "expected"),
    [
        (">a\nMKV\n>b\nMK1V\n", "protein", r"record 'b' \(#2\): illegal character '1' for alphabet 'protein' at position 2 \(0-based\)"),
        (">a\nMK-V\n", "protein", r"record 'a' \(#1\): gap character '-' in unaligned input .* at position 2"),
        (">a\nAC.GT\n", "dna", r"record 'a' \(#1\): gap character '.' in unaligned input .* at position 2"),
        (">a\nACGTE\n", "dna", r"record 'a' \(#1\): illegal character 'E' for alphabet 'dna' at position 4"),
        (">a\nMK#V\n", "protein", r"illegal character '#' for alphabet 'protein' at position 2"),
    ],
)
def test_illegal_characters_name_file_record_position(tmp_path: Path, text: str, alphabet: str, expected: str) -> None:
    path = _write(tmp_path / "bad.fa", text)
    with pytest.raises(SequenceFormatError, match=expected) as err:
        list(read_fasta(path, alphabet))
    assert str(err.value).startswith(str(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", r"empty file, no FASTA records"),
        ("\n\n  \n", r"empty file, no FASTA records"),
        ("MKV\n>a\nMKV\n", r"line 1: expected a '>' header before any sequence, found 'MKV'"),
        ("\n# comment\n>a\nMKV\n", r"line 2: expected a '>' header"),
        (">a\nMKV\n>b\n>c\nMKV\n", r"record 'b' \(#2\): empty record \(no residues\)"),
        (">\nMKV\n", r"record #1: empty header \(no record id\)"),
        (">a x\nMKV\n>b\nGG\n>a y\nMK\n", r"record 'a' \(#3\): duplicate record id \(first seen as record #1\)"),
    ],
)
def test_structural_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path / "bad.fa", text)
    with pytest.raises(SequenceFormatError, match=expected) as err:
        list(read_fasta(path))
    assert str(err.value).startswith(str(path))


def test_reader_streams_and_fails_at_the_bad_record(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.fa", ">good\nMKV\n>bad\nMK9\n")
    records = read_fasta(path)
    assert next(records).id == "good"
    with pytest.raises(SequenceFormatError, match="record 'bad'"):
        next(records)


def test_bad_arguments_raise_before_reading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"alphabet='rna' is not one of \('protein', 'dna', 'auto'\)"):
        read_fasta(tmp_path / "missing.fa", "rna")
    with pytest.raises(FileNotFoundError, match="missing.fa: no such FASTA file"):
        read_fasta(tmp_path / "missing.fa")


def test_auto_alphabet_per_record(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.fa", ">dna\nACGTTGCANNA\n>prot\nMKVLLEFPQ\n>iupac_peptide\nKMRSWY\n>rna\nACGUUGCA\n")
    got = {s.id: s.alphabet for s in read_fasta(path, "auto")}
    assert got == {"dna": "dna", "prot": "protein", "iupac_peptide": "protein", "rna": "dna"}
    assert detect_alphabet("gattaca") == "dna"
    assert detect_alphabet("") == "protein"


def test_a_trailing_stop_makes_a_record_a_peptide(tmp_path: Path) -> None:
    """``GATTACA*`` is a translation (no nucleotide sequence ends in a stop): read as protein,
    its stop dropped; it was taken for DNA and refused ('*' illegal for alphabet 'dna')."""
    from sinkalign.io.fasta import record_alphabet

    path = _write(tmp_path / "p.fa", ">stop\nGATTACA*\n>dna\nGATTACA\n>two\nACGT**\n")
    with pytest.raises(SequenceFormatError, match=r"record 'two' .*stop '\*' inside the sequence .* position 4"):
        list(read_fasta(path, "auto"))
    path = _write(tmp_path / "q.fa", ">stop\nGATTACA*\n>dna\nGATTACA\n")
    got = {s.id: (s.alphabet, s.seq) for s in read_fasta(path, "auto")}
    assert got == {"stop": ("protein", "GATTACA"), "dna": ("dna", "GATTACA")}
    assert [record_alphabet(x) for x in ("ACGT*", "ACGT", "acgu*", "*", "MKV")] == \
        ["protein", "dna", "protein", "protein", "protein"]


def test_sequence_validation() -> None:
    with pytest.raises(ValueError, match="id='a b' must be a non-empty string without whitespace"):
        Sequence(id="a b", description="", seq="MK", alphabet="protein")
    with pytest.raises(ValueError, match="seq='' of record 'a' must be a non-empty string"):
        Sequence(id="a", description="", seq="", alphabet="protein")
    with pytest.raises(ValueError, match="alphabet='rna' is not one of"):
        Sequence(id="a", description="", seq="MK", alphabet="rna")
    with pytest.raises(ValueError, match="must be a single-line string"):
        Sequence(id="a", description="x\ny", seq="MK", alphabet="protein")


# ----------------------------------------------------------------------------- real data


def test_real_genomes(shared_data: Path) -> None:
    expected = {
        "GCF_001457455.1_NCTC11397_genomic.fna.gz": ("NZ_LN831026.1", 2_463_666),
        "MIIJ01000039.fna.gz": ("562.SAMN05730656.MIIJ01000039", 869_782),
    }
    for name, (rid, length) in expected.items():
        records = list(read_fasta(shared_data / "genomes" / name, "auto"))
        assert [(r.id, len(r), r.alphabet) for r in records] == [(rid, length, "dna")]
    chromosome = next(read_fasta(shared_data / "genomes" / "GCF_001457455.1_NCTC11397_genomic.fna.gz", "dna",
                                 allow_ambiguous=False))
    assert set(chromosome.seq) == set("ACGT")
    assert chromosome.description.startswith("Corynebacterium diphtheriae strain NCTC11397")
    contig = next(read_fasta(shared_data / "genomes" / "MIIJ01000039.fna.gz", "dna"))
    assert contig.seq.count("N") == 432_770
    with pytest.raises(SequenceFormatError, match=r"MIIJ01000039.fna.gz: record '562.SAMN05730656.MIIJ01000039' \(#1\): "
                       r"ambiguous/non-standard dna residue 'N' .* at position 383781 \(0-based\)"):
        list(read_fasta(shared_data / "genomes" / "MIIJ01000039.fna.gz", "dna", allow_ambiguous=False))


def test_real_genome_round_trip(shared_data: Path, tmp_path: Path) -> None:
    records = list(read_fasta(shared_data / "genomes" / "MIIJ01000039.fna.gz", "dna"))
    out = tmp_path / "copy.fa"
    write_fasta(records, out, line_width=80)
    assert list(read_fasta(out, "dna")) == records


def test_unique_ids_false_streams_without_the_duplicate_check(tmp_path):
    path = tmp_path / "dup.fa"
    path.write_text(">a x\nMKV\n>b\nGG\n>a y\nMK\n")
    with pytest.raises(SequenceFormatError, match=r"record 'a' \(#3\): duplicate record id"):
        list(read_fasta(path))
    assert [(r.id, r.seq) for r in read_fasta(path, unique_ids=False)] == [("a", "MKV"), ("b", "GG"), ("a", "MK")]


@pytest.mark.parametrize("alphabet", ["protein", "auto"])
def test_non_ascii_letter_names_its_record_and_position(tmp_path: Path, alphabet: str) -> None:
    """A non-ASCII letter (Biopython decodes a sequence only when it is read) is reported in
    its own record, with the letter and its position, not in the next record's name."""
    f = tmp_path / "x.fasta"
    f.write_text(">a\nMVLSPAD\n>b\nMK\nVVÄV\n>c\nMKV\n", encoding="utf-8")
    with pytest.raises(SequenceFormatError, match=r"record 'b' \(#2\): non-ASCII character 'Ä' at position 4") as err:
        list(read_fasta(f, alphabet=alphabet))
    assert (err.value.record_id, err.value.record_number, err.value.position) == ("b", 2, 4)


def test_x_masked_dna_is_dna(tmp_path: Path) -> None:
    """Runs of X in nucleotides (RepeatMasker -x masking) are masked bases: the record is DNA
    and X an ambiguous letter, which the models read as N; a protein stays protein."""
    path = _write(tmp_path / "x.fa", ">masked\nACGTACGGATCCXXXXXXXXXXACGTTAGCATCGATCGA\n>prot\nMKVLXXLEFPQ\n")
    got = {s.id: s.alphabet for s in read_fasta(path, "auto")}
    assert got == {"masked": "dna", "prot": "protein"}
    assert [s.seq for s in read_fasta(path, "auto")][0].count("X") == 10
    with pytest.raises(SequenceFormatError, match="'X'"):
        list(read_fasta(path, "dna", allow_ambiguous=False))


def test_genome_records_drop_tabs_and_spaces_in_sequence_lines_as_seqio_did(tmp_path: Path) -> None:
    from sinkalign.lm.data import read_genome_records

    path = _write(tmp_path / "g.fa", ">chr1 Bug chromosome\nAC\tGT ac\ngt\r\n>chr2\nNNry\n")
    assert [(r.id, r.description, r.seq) for r in read_genome_records(path)] == [
        ("chr1", "chr1 Bug chromosome", "ACGTACGT"), ("chr2", "chr2", "NNNN")]
