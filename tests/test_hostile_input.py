"""Hostile input: truncated gzip, binary files and other bad files give one clear error naming the file."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from sinkalign.errors import FormatError, SinkalignError
from sinkalign.io.alignments import read_aligned_fasta, read_stockholm
from sinkalign.io.fasta import open_text, read_fasta
from sinkalign.lm.data import read_genome_records

_BINARY = bytes(range(256)) * 8  # \x80.. are not UTF-8


def _truncated_gz(path: Path, text: str) -> Path:
    data = gzip.compress(text.encode())
    path.write_bytes(data[: len(data) // 2])
    return path


def _fasta_text(n: int = 200) -> str:
    return "".join(f">r{k}\n{'ACGT' * 50}\n" for k in range(n))


@pytest.mark.parametrize("reader", [lambda p: list(read_fasta(p, "dna")), read_genome_records,
                                    lambda p: read_aligned_fasta(p, format="fasta")])
def test_truncated_gzip_names_the_file(tmp_path: Path, reader) -> None:
    path = _truncated_gz(tmp_path / "g.fa.gz", _fasta_text())
    with pytest.raises(FormatError, match=r"g\.fa\.gz: truncated gzip file"):
        reader(path)


def test_truncated_gzip_stockholm(tmp_path: Path) -> None:
    text = "# STOCKHOLM 1.0\n" + "".join(f"s{k} ACDEFGHIKL\n" for k in range(500)) + "//\n"
    path = _truncated_gz(tmp_path / "a.sto.gz", text)
    with pytest.raises(FormatError, match=r"a\.sto\.gz: truncated gzip file"):
        list(read_stockholm(path))


@pytest.mark.parametrize("reader", [lambda p: list(read_fasta(p)), lambda p: list(read_stockholm(p)),
                                    lambda p: read_aligned_fasta(p)])
def test_binary_file_names_the_file(tmp_path: Path, reader) -> None:
    path = tmp_path / "picture.png"
    path.write_bytes(_BINARY)
    with pytest.raises(FormatError, match=r"picture\.png: line \d+: (byte 0x[0-9a-f]{2} of the file is not UTF-8 text|a NUL byte): a binary file"):
        reader(path)


def test_binary_after_a_valid_header(tmp_path: Path) -> None:
    path = tmp_path / "mixed.fa"
    path.write_bytes(b">ok\nACGT\n" + _BINARY)
    with pytest.raises(FormatError, match=r"mixed\.fa: line 5: byte 0x80 of the file is not UTF-8 text"):
        list(read_fasta(path, "dna"))


def test_a_latin1_annotation_in_stockholm_is_read_and_a_latin1_residue_is_not(tmp_path: Path, caplog) -> None:
    """Some real Stockholm releases (Pfam's) hold Latin-1 accents in #=GF author lines: the whole
    file was refused as 'not a text file'. Such a byte in a row is still refused, by line."""
    path = tmp_path / "fam.sto"
    path.write_bytes(b"# STOCKHOLM 1.0\n#=GF ID fam\n#=GF AU M\xfcller J\na ACDE\nb ACDF\n//\n")
    with caplog.at_level("WARNING", logger="sinkalign.io.fasta"):
        (msa,) = read_stockholm(path)
    assert list(msa.ids) == ["a", "b"] and msa.family == "fam"
    assert "fam.sto: line 3 holds bytes that are not UTF-8" in caplog.text
    path.write_bytes(b"# STOCKHOLM 1.0\n#=GF ID fam\na ACDE\nb AC\xfcF\n//\n")
    with pytest.raises(FormatError, match=r"fam\.sto: line 4: byte 0xfc of the file is not UTF-8 text"):
        list(read_stockholm(path))
    # the row's line, not the annotation's read before it (a review: line 2 was named)
    path.write_bytes(b"# STOCKHOLM 1.0\n#=GF AU Jos\xe9\na ACDE\nb AC\xe9E\n//\n")
    with pytest.raises(FormatError, match=r"fam\.sto: line 4: a byte of the file is not UTF-8 text"):
        list(read_stockholm(path))


def test_the_line_of_a_byte_that_is_not_utf8_with_any_line_end(tmp_path: Path) -> None:
    """Lines end at \\n, \\r\\n or a bare \\r, as the reader's (CR-only files were named at line 1)."""
    for name, end in (("lf", b"\n"), ("crlf", b"\r\n"), ("cr", b"\r")):
        path = tmp_path / f"{name}.fa"
        path.write_bytes(end.join([b">a", b"ACGT", b">b", b"AC\xe9T", b""]))
        with pytest.raises(FormatError, match=rf"{name}\.fa: line 4: byte 0xe9 of the file is not UTF-8"):
            list(read_fasta(path))


def test_binary_genome_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "genome.bin"
    path.write_bytes(b">x\n" + _BINARY)
    with pytest.raises(FormatError, match=r"genome\.bin"):
        read_genome_records(path)


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(SinkalignError, match="is a directory"):
        open_text(tmp_path)


def test_genome_without_a_header_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.fa"
    path.write_text("\nhello\n>a\nACGT\n")
    with pytest.raises(FormatError, match=r"notes\.fa: not a valid FASTA file: line 2: expected a '>' header, found 'hello'"):
        read_genome_records(path)
    path.write_text("\n\n>a desc\nACGT\n")
    (rec,) = read_genome_records(path)
    assert (rec.id, rec.seq) == ("a", "ACGT")


def test_gc_profile_cli_on_a_binary_file_names_it(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    path = tmp_path / "scan.bin"
    path.write_bytes(_BINARY)
    res = CliRunner().invoke(cli, ["gc-profile", str(path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 1 and "scan.bin: line 3: byte 0x80 of the file is not UTF-8 text" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_genome_lm_reads_masked_and_ambiguous_bases_as_n(tmp_path: Path) -> None:
    path = tmp_path / "g.fa"
    path.write_text(">g\nACGTXXXXRYacgt\n")
    assert [r.seq for r in read_genome_records(path)] == ["ACGTNNNNNNACGT"]
