"""Validated, streaming FASTA input and atomic FASTA output.

``read_fasta`` parses with Biopython (``Bio.SeqIO.parse(handle, "fasta")``), reads
gzip-compressed files transparently (detected by their magic bytes, whatever the
suffix) and yields one :class:`Sequence` per record, in file order, checking each
record as it goes. Every problem raises :class:`SequenceFormatError` (a
``ValueError``) whose message names the file, the record id and its ordinal number
in the file (``record #3``, counted from 1) and, for a bad character, its 0-based
position in the record's residue string (FASTA line breaks and spaces removed) and
the character itself.

Alphabets (all checks are made on upper-cased letters):

=========  ===========================  ==================================================
alphabet   standard letters             ambiguous / non-standard (``allow_ambiguous``)
=========  ===========================  ==================================================
protein    ``ACDEFGHIKLMNPQRSTVWY``     ``X B Z J U O`` (unknown, Asx, Glx, Leu/Ile,
                                        selenocysteine, pyrrolysine)
dna        ``ACGT`` and ``U``           ``N`` and the IUPAC codes ``R Y S W K M B D H V``
=========  ===========================  ==================================================

* ``alphabet="auto"`` decides per record: ``dna`` when every letter is a nucleotide
  code (``ACGTUN`` or an IUPAC code) and at least half of them are ``ACGTUN``,
  otherwise ``protein``. A short peptide made only of nucleotide letters (``"GAGA"``)
  is read as DNA; pass the alphabet explicitly when that matters.
* Stop codons: one trailing ``*`` on a protein record (a translated ORF) is removed;
  a ``*`` anywhere else, or in DNA, is an illegal character.
* Gaps (``-`` and ``.``) are illegal here: aligned input belongs to
  :mod:`sinkalign.io.alignments`.
* Lower case (soft-masking) is upper-cased when ``uppercase=True`` (the default) and
  rejected when ``uppercase=False``.
* Duplicate record ids, records with no id, records with no residues and files with
  no records are errors.
"""

from __future__ import annotations

import codecs
import gzip
import io
import logging
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from Bio import SeqIO
from Bio.SeqRecord import SeqRecord

from sinkalign.errors import FormatError, InputError, MissingFileError
from sinkalign.utils import atomic_write, short_repr

__all__ = [
    "ALPHABETS",
    "AMBIGUOUS",
    "NUCLEOTIDE_CODES",
    "STANDARD",
    "Sequence",
    "SequenceFormatError",
    "detect_alphabet",
    "record_alphabet",
    "not_fasta_hint",
    "open_bytes",
    "open_text",
    "read_fasta",
    "validate_residues",
    "write_fasta",
]

logger = logging.getLogger(__name__)

ALPHABETS = ("protein", "dna", "auto")

#: Standard letters per alphabet.
STANDARD = {"protein": frozenset("ACDEFGHIKLMNPQRSTVWY"), "dna": frozenset("ACGTU")}
#: Letters accepted only with ``allow_ambiguous=True``.
AMBIGUOUS = {"protein": frozenset("XBZJUO"), "dna": frozenset("NRYSWKMBDHVX")}
# U (selenocysteine) is listed as non-standard for protein; for DNA it is standard. X in DNA is a
# masked base (RepeatMasker -x, some assemblers): read as N by the models.
#: Every nucleotide code, IUPAC's ambiguous ones included: what a DNA model can encode.
NUCLEOTIDE_CODES = STANDARD["dna"] | AMBIGUOUS["dna"]
_CORE_NUCLEOTIDES = frozenset("ACGTUN")
_GAPS = frozenset("-.")


class SequenceFormatError(FormatError):
    """A sequence or alignment file that cannot be read as promised.

    A :class:`sinkalign.errors.FormatError` (so also a ``ValueError``).

    Attributes (``None`` where they do not apply): ``path``, ``record_id``,
    ``record_number`` (1-based ordinal in the file), ``position`` (0-based) and ``char``.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike | None = None,
        record_id: str | None = None,
        record_number: int | None = None,
        position: int | None = None,
        char: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.record_id = record_id
        self.record_number = record_number
        self.position = position
        self.char = char


@dataclass(frozen=True)
class Sequence:
    """One validated sequence record.

    Attributes:
        id: the record id (first word of the FASTA header).
        description: the rest of the header after the id ("" when there is none).
        seq: the residues, upper case, no gaps or whitespace; residue ``k`` is
            ``seq[k]`` (0-based).
        alphabet: ``"protein"`` or ``"dna"`` (resolved when reading with ``"auto"``).
    """

    id: str
    description: str
    seq: str
    alphabet: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or any(c.isspace() for c in self.id):
            raise ValueError(f"id={self.id!r} must be a non-empty string without whitespace")
        if not isinstance(self.description, str) or "\n" in self.description or "\r" in self.description:
            raise ValueError(f"description={self.description!r} must be a single-line string")
        if not isinstance(self.seq, str) or not self.seq:
            raise ValueError(f"seq={self.seq!r} of record {self.id!r} must be a non-empty string")
        if self.alphabet not in ("protein", "dna"):
            raise ValueError(f"alphabet={self.alphabet!r} is not one of ('protein', 'dna')")

    def __len__(self) -> int:
        return len(self.seq)

    def __repr__(self) -> str:  # a genome's record fits a notebook line
        return (f"Sequence(id={self.id!r}, description={self.description!r}, seq={short_repr(self.seq)}, "
                f"alphabet={self.alphabet!r})")


class _CheckedText(io.TextIOWrapper):
    """UTF-8 text over a plain or gzip byte stream whose read errors name the file.

    A truncated or corrupt gzip stream (``EOFError``, ``BadGzipFile``, ``zlib.error``) and
    bytes that are not UTF-8 text (a binary file) raise :class:`SequenceFormatError`
    naming the file, instead of a bare decoder error (or click's ``Aborted!`` for EOFError).
    """

    def __init__(self, buffer, path: Path, compressed: bool, lenient: bool = False, warn: bool = True) -> None:
        # a byte-order mark (Windows) is dropped; lenient: bytes that are not UTF-8 read as U+FFFD
        super().__init__(buffer, encoding="utf-8-sig", errors="replace" if lenient else "strict", newline=None)
        self._path = path
        self._compressed = compressed
        self._lenient = lenient  # only in '#' lines (annotations); a row or binary file is still refused
        self._warn = warn  # say once where the first replaced byte was
        self._line_no = 0

    def _seen(self, line: str) -> str:
        if self._lenient:
            self._line_no += 1
            if "\x00" in line:  # no text file has NUL: a binary one, whose first lines may decode
                raise SequenceFormatError(f"{self._path}: line {self._line_no}: a NUL byte: a binary file, not "
                                          "text", path=self._path)
            if "\ufffd" in line:  # (a real U+FFFD in the file is taken for one too)
                if not line.lstrip().startswith("#"):  # a row, or a binary file: refused as in strict mode
                    first = _first_undecodable_line(self._path, self._compressed)  # (this line's, unless an
                    byte = f"byte 0x{first[1]:02x}" if first and first[0] == self._line_no else "a byte"  # annotation's)
                    raise SequenceFormatError(
                        f"{self._path}: line {self._line_no}: {byte} of the {self._what} is not UTF-8 text: a binary "
                        "file, or text in another encoding (convert it to UTF-8, e.g. iconv -f latin1 -t utf-8)",
                        path=self._path)
                if self._warn:
                    self._warn = False
                    logger.warning("%s: line %d holds bytes that are not UTF-8 (a Latin-1 accent in an annotation?), "
                                   "read as U+FFFD (\ufffd); convert the file to UTF-8 to keep them (iconv -f latin1 "
                                   "-t utf-8)", self._path, self._line_no)
        return line

    @property
    def _what(self) -> str:
        return "decompressed content" if self._compressed else "file"

    def _wrap(self, exc: BaseException) -> SequenceFormatError:
        if isinstance(exc, UnicodeDecodeError):
            what = self._what
            where = _first_undecodable_line(self._path, self._compressed)
            at = (f"byte 0x{exc.object[exc.start]:02x}" if where is None and exc.object else
                  "a byte" if where is None else f"line {where[0]}: byte 0x{where[1]:02x}")
            return SequenceFormatError(
                f"{self._path}: {at} of the {what} is not UTF-8 text: a binary file, or text in another encoding "
                f"(convert it to UTF-8, e.g. iconv -f latin1 -t utf-8)", path=self._path)
        if isinstance(exc, EOFError):
            return SequenceFormatError(
                f"{self._path}: truncated gzip file (the compressed stream ends early); re-download or "
                f"re-compress it", path=self._path)
        return SequenceFormatError(f"{self._path}: corrupt gzip file ({exc})", path=self._path)

    def read(self, *args):
        try:
            return super().read(*args)
        except _READ_ERRORS as exc:
            raise self._wrap(exc) from exc

    def readline(self, *args):
        try:
            return self._seen(super().readline(*args))
        except _READ_ERRORS as exc:
            raise self._wrap(exc) from exc

    def readlines(self, *args):
        try:
            return super().readlines(*args)
        except _READ_ERRORS as exc:
            raise self._wrap(exc) from exc

    def __next__(self):
        line = self.readline()  # (the C __next__ of a subclass calls readline too: each line is seen once)
        if not line:
            raise StopIteration
        return line

    def __iter__(self):
        return self


_READ_ERRORS = (UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error)


def open_text(path: str | os.PathLike, *, lenient: bool = False, warn: bool = True) -> IO[str]:
    """Open ``path`` for reading UTF-8 text, decompressing gzip (detected by magic bytes).

    Reading a truncated or corrupt gzip file, or a binary (non-UTF-8) file, raises
    :class:`SequenceFormatError` naming ``path`` and the first line that is not UTF-8.
    ``lenient`` (iterating or ``readline`` only): bytes that are not UTF-8 in lines that start
    with ``#`` are read as U+FFFD (with a warning naming the first line, unless not ``warn``);
    in any other line they are refused as without it. For Stockholm files, whose annotations
    (``#=GF`` authors, references) are Latin-1 in some real releases.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    stream, compressed = _open_bytes(path)
    return _CheckedText(stream, path, compressed=compressed, lenient=lenient, warn=warn)


def _first_undecodable_line(path: Path, compressed: bool) -> tuple[int, int] | None:
    """(line number, byte) of the first byte of ``path`` that is not UTF-8, read again with an
    incremental decoder (after an error only; linear in the file, however long its lines);
    lines end at ``\n``, ``\r\n`` or ``\r`` as the reader's. ``None`` where it cannot be told."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, last = 1, b""
    try:
        with (gzip.open(path, "rb") if compressed else open(path, "rb")) as fh:
            while chunk := fh.read(1 << 20):
                pending = decoder.getstate()[0]  # (at most 3 bytes of a character the last chunk began)
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    data = pending + chunk
                    return line + _line_ends(last + data[:exc.start]) - _line_ends(last), data[exc.start]
                line += _line_ends(last + chunk) - _line_ends(last)
                last = chunk[-1:]
    except (OSError, EOFError, zlib.error):
        return None
    return None


def _line_ends(data: bytes) -> int:
    """Line ends in ``data``: ``\n``, and ``\r`` not followed by ``\n``."""
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


def open_bytes(path: str | os.PathLike) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing gzip (detected by magic bytes): the bytes a
    ``.fai`` index counts."""
    return _open_bytes(Path(path))[0]


#: Compressions read as gzip is not: (magic bytes, name, how to undo it). Refused with that said,
#: instead of "not UTF-8 text" at their first byte.
_OTHER_COMPRESSIONS = ((b"\xfd7zXZ\x00", "an xz", "xz -d"), (b"BZh", "a bzip2", "bunzip2"),
                       (b"\x28\xb5\x2f\xfd", "a zstd", "zstd -d"), (b"PK\x03\x04", "a zip", "unzip"))


def _open_bytes(path: Path) -> tuple[IO[bytes], bool]:
    with open(path, "rb") as raw:
        magic = raw.read(6)
    if magic.startswith(b"CRAM"):
        raise SequenceFormatError(f"{path}: a CRAM file (binary alignments), not text; for its reads as FASTA run "
                                  "`samtools fasta` on it", path=path)
    if magic[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as peek:
                bam = peek.read(4) == b"BAM\x01"
        except (OSError, EOFError, zlib.error):  # a damaged gzip: named as such when it is read
            bam = False
        if bam:
            raise SequenceFormatError(f"{path}: a BAM file (binary alignments), not text; for its reads as FASTA run "
                                      "`samtools fasta` on it", path=path)
        return gzip.open(path, "rb"), True
    for head, name, undo in _OTHER_COMPRESSIONS:
        if magic.startswith(head):
            raise SequenceFormatError(f"{path}: {name}-compressed file; sinkalign reads plain text and gzip "
                                      f"(or bgzip): decompress it first ({undo}), or compress it with gzip",
                                      path=path)
    return open(path, "rb"), False


def not_fasta_hint(line: str) -> str:
    """What a first line that is no FASTA header looks like, as a clause to add to an error
    (``""`` when it looks like nothing known): another sequence or alignment format."""
    text = line.lstrip()
    for start, what in (("# STOCKHOLM", "a Stockholm alignment"), ("CLUSTAL", "a Clustal alignment"),
                        ("!!AA_MULTIPLE_ALIGNMENT", "an MSF alignment"), ("!!NA_MULTIPLE_ALIGNMENT", "an MSF alignment"),
                        ("PileUp", "an MSF alignment"), ("LOCUS ", "a GenBank record"), ("ID   ", "an EMBL record"),
                        ("@HD\t", "a SAM file"), ("@SQ\t", "a SAM file"), ("@", "FASTQ reads"),
                        ("HEADER ", "a PDB structure"), ("ATOM  ", "a PDB structure"), ("HETATM", "a PDB structure"),
                        ("CRYST1", "a PDB structure"), ("REMARK ", "a PDB structure"), ("data_", "an mmCIF structure")):
        if text.startswith(start):
            return f" ({what}, it seems, not FASTA)"
    return ""


_U_AS_T = str.maketrans("Uu", "Tt")


def sequence_text(seq):
    """``seq`` as ``str`` where it is a sequence given another way: ``bytes`` (ASCII; anything
    else becomes U+FFFD, which the callers' checks then name) or a Biopython ``Seq`` /
    ``MutableSeq``; anything else as given, for the caller to accept (a ``str``) or refuse."""
    if isinstance(seq, bytes):
        return seq.decode("ascii", errors="replace")
    if type(seq).__name__ in ("Seq", "MutableSeq") and type(seq).__module__.startswith("Bio."):
        return str(seq)
    return seq


def rna_as_dna(seq: str) -> str:
    """``seq`` with U read as T (case kept), as minimap2 and BLAST read RNA against DNA: the
    nucleotide model, percent identity and the E-value then see one letter for one base."""
    return seq.translate(_U_AS_T)


def detect_alphabet(seq: str) -> str:
    """``"dna"`` if every letter of ``seq`` is a nucleotide code and >= half are ACGTUN, else ``"protein"``."""
    letters = seq.upper()
    if letters and set(letters) <= NUCLEOTIDE_CODES:
        core = sum(letters.count(c) for c in _CORE_NUCLEOTIDES)
        if 2 * core >= len(letters):
            return "dna"
    return "protein"


def record_alphabet(seq: str) -> str:
    """The alphabet of one record's residues, as the readers tell it: ``"protein"`` when it ends
    in a stop ``*`` (a translation; no nucleotide sequence has one), else :func:`detect_alphabet`
    (``GATTACA*`` is a peptide, ``GATTACA`` DNA)."""
    stripped = seq.rstrip("*")
    if stripped and len(stripped) < len(seq):
        return "protein"
    return detect_alphabet(stripped)


def validate_residues(
    seq: str,
    alphabet: str,
    *,
    allow_ambiguous: bool = True,
    where: str,
    path: str | os.PathLike | None = None,
    record_id: str | None = None,
    record_number: int | None = None,
    offset_of=None,
) -> None:
    """Raise :class:`SequenceFormatError` at the first residue of ``seq`` not allowed in ``alphabet``.

    ``seq`` must already be upper case. ``where`` prefixes the message (file and
    record). ``offset_of(k)`` maps a residue index to the position reported (default:
    the index itself), so alignment readers can report alignment columns.
    """
    if alphabet not in ("protein", "dna"):
        raise ValueError(f"alphabet={alphabet!r} is not one of ('protein', 'dna')")
    standard = STANDARD[alphabet]
    allowed = standard | AMBIGUOUS[alphabet] if allow_ambiguous else standard
    if set(seq) <= allowed:
        return
    for k, c in enumerate(seq):
        if c in allowed:
            continue
        pos = k if offset_of is None else offset_of(k)
        if c in AMBIGUOUS[alphabet]:
            why = f"ambiguous/non-standard {alphabet} residue {c!r} (allow_ambiguous=False)"
        elif c in _GAPS:
            why = (f"gap character {c!r} in unaligned input (remove the gaps; an alignment is read by `sinkalign "
                   "msa --add-to`, `sinkalign score-msa` or sinkalign.io.alignments)")
        elif c == "*" and alphabet == "protein":
            why = "stop '*' inside the sequence (only one trailing '*' on a protein is accepted)"
        else:
            why = f"illegal character {c!r} for alphabet {alphabet!r}"
        raise SequenceFormatError(
            f"{where}: {why} at position {pos} (0-based)",
            path=path,
            record_id=record_id,
            record_number=record_number,
            position=pos,
            char=c,
        )


def _seek_first_header(handle: IO[str], path: Path) -> None:
    """Skip leading blank lines; raise unless the first non-blank line is a '>' header."""
    line_no = 0
    while True:
        pos = handle.tell()
        line = handle.readline()
        line_no += 1
        if not line:
            raise SequenceFormatError(f"{path}: empty file, no FASTA records", path=path)
        if line.strip():
            break
    if not line.startswith(">"):
        raise SequenceFormatError(
            f"{path}: line {line_no}: expected a '>' header before any sequence, found {line.strip()[:40]!r}"
            f"{not_fasta_hint(line)}",
            path=path,
        )
    handle.seek(pos)


def read_fasta(
    path: str | os.PathLike,
    alphabet: str = "protein",
    *,
    allow_ambiguous: bool = True,
    uppercase: bool = True,
    unique_ids: bool = True,
) -> Iterator[Sequence]:
    """Stream validated records from a (possibly gzipped) FASTA file, in file order.

    Args:
        path: FASTA file; gzip is detected from the content.
        alphabet: ``"protein"``, ``"dna"`` or ``"auto"`` (decided per record, see the
            module docstring).
        allow_ambiguous: accept ambiguous / non-standard letters (protein
            ``XBZJUO``, DNA ``N`` and IUPAC codes); reject them when False.
        uppercase: upper-case soft-masked (lower-case) letters; when False a
            lower-case letter is an error.
        unique_ids: raise on a duplicate record id. The check remembers every id, so memory
            grows with the file (~100 bytes a record); pass False to stream in constant
            memory when the ids are checked some other way.

    Yields:
        :class:`Sequence` records. Errors are raised when the bad record is reached.

    Raises:
        SequenceFormatError: naming file, record id, record number and, for a bad
            residue, its 0-based position and the character.
        ValueError: for a bad ``alphabet`` value (before the file is opened).
    """
    if alphabet not in ALPHABETS:
        raise ValueError(f"alphabet={alphabet!r} is not one of {ALPHABETS}")
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"read_fasta takes the path of a FASTA file (str or os.PathLike), not "
                         f"{type(path).__name__}; an open handle reads with Bio.SeqIO.parse(handle, 'fasta')")
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such FASTA file")
    return _read_fasta(path, alphabet, allow_ambiguous, uppercase, unique_ids)


def _read_fasta(
    path: Path, alphabet: str, allow_ambiguous: bool, uppercase: bool, unique_ids: bool = True
) -> Iterator[Sequence]:
    seen: dict[str, int] | None = {} if unique_ids else None
    n = 0
    with open_text(path) as handle:
        _seek_first_header(handle, path)
        try:
            for n, rec in enumerate(SeqIO.parse(handle, "fasta"), start=1):
                yield _check_record(rec, n, path, alphabet, allow_ambiguous, uppercase, seen)
        except SequenceFormatError:
            raise
        except UnicodeEncodeError as err:  # Biopython keeps sequences ASCII
            char = err.object[err.start : err.start + 1]
            raise SequenceFormatError(f"{path}: record #{n + 1}: non-ASCII character {char!r} in the sequence",
                                      path=path, record_number=n + 1, char=char) from err
        except (ValueError, UnicodeDecodeError) as err:  # Biopython / decoding errors, with the file named
            raise SequenceFormatError(f"{path}: record #{n + 1}: cannot parse FASTA: {err}", path=path) from err
    if n == 0:
        raise SequenceFormatError(f"{path}: no FASTA records", path=path)
    logger.debug("read %d records from %s", n, path)


def _check_record(
    rec: SeqRecord,
    n: int,
    path: Path,
    alphabet: str,
    allow_ambiguous: bool,
    uppercase: bool,
    seen: dict[str, int] | None,
) -> Sequence:
    rid = rec.id
    if not rid:
        raise SequenceFormatError(f"{path}: record #{n}: empty header (no record id)", path=path, record_number=n)
    where = f"{path}: record {rid!r} (#{n})"
    if seen is not None and rid in seen:
        raise SequenceFormatError(
            f"{where}: duplicate record id (first seen as record #{seen[rid]})",
            path=path,
            record_id=rid,
            record_number=n,
        )
    if seen is not None:
        seen[rid] = n
    try:
        seq = str(rec.seq)
    except UnicodeError as err:  # Biopython keeps sequences as ASCII bytes, decoded when first read
        k = err.start  # the sequence is ASCII up to here: one byte (or character) a letter
        rest = err.object[k:]
        char = (rest.decode("utf-8", "replace") if isinstance(rest, bytes) else rest)[:1]
        raise SequenceFormatError(f"{where}: non-ASCII character {char!r} at position {k} (0-based)", path=path,
                                  record_id=rid, record_number=n, position=k, char=char) from err
    if not seq:
        raise SequenceFormatError(f"{where}: empty record (no residues)", path=path, record_id=rid, record_number=n)
    if not uppercase:
        for k, c in enumerate(seq):
            if c.islower():
                raise SequenceFormatError(
                    f"{where}: lower-case letter {c!r} at position {k} (0-based) with uppercase=False",
                    path=path,
                    record_id=rid,
                    record_number=n,
                    position=k,
                    char=c,
                )
    seq = seq.upper()
    resolved = record_alphabet(seq) if alphabet == "auto" else alphabet
    if resolved == "protein" and seq.endswith("*"):
        seq = seq[:-1]
        if not seq:
            raise SequenceFormatError(
                f"{where}: empty record (only a stop '*')", path=path, record_id=rid, record_number=n
            )
    validate_residues(
        seq, resolved, allow_ambiguous=allow_ambiguous, where=where, path=path, record_id=rid, record_number=n
    )
    # SeqIO's description is the whole header; keep only what follows the id.
    desc = rec.description
    desc = desc[len(rid):].strip() if desc.startswith(rid) else desc.strip()
    return Sequence(id=rid, description=desc, seq=seq, alphabet=resolved)


def write_fasta(
    records: Iterable[Sequence | SeqRecord] | Sequence | SeqRecord,
    path: str | os.PathLike,
    *,
    line_width: int = 60,
) -> int:
    """Write records to ``path`` atomically (temp file + rename); gzip when ``path`` ends in ``.gz``.

    Args:
        records: one or many :class:`Sequence` or Biopython ``SeqRecord`` objects.
        path: output file.
        line_width: residues per line (``0`` writes each sequence on one line).

    Returns:
        The number of records written.

    Raises:
        ValueError: for a non-positive ``line_width``, an empty or whitespace-containing
            id, an empty sequence or a duplicate id (nothing is written).
    """
    if not isinstance(line_width, int) or line_width < 0:
        raise ValueError(f"line_width={line_width!r} must be a non-negative integer (0 = no wrapping)")
    if isinstance(records, (Sequence, SeqRecord)):
        records = [records]
    path = Path(path)
    seen: set[str] = set()
    count = 0
    with atomic_write(path, "wb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.suffix == ".gz" else raw
        for rec in records:
            if isinstance(rec, SeqRecord):
                rid, seq = rec.id, str(rec.seq)
                desc = rec.description
                desc = desc[len(rid):].strip() if desc.startswith(rid) else desc.strip()
                if desc == "<unknown description>":
                    desc = ""
            elif isinstance(rec, Sequence):
                rid, desc, seq = rec.id, rec.description, rec.seq
            else:
                raise ValueError(f"record {rec!r} must be a Sequence or a Bio.SeqRecord.SeqRecord")
            if not rid or any(c.isspace() for c in rid):
                raise ValueError(f"record id {rid!r} (#{count + 1}) must be non-empty and contain no whitespace")
            if not seq:
                raise ValueError(f"record {rid!r} (#{count + 1}) has an empty sequence")
            if rid in seen:
                raise ValueError(f"duplicate record id {rid!r} (#{count + 1})")
            seen.add(rid)
            header = f">{rid} {desc}" if desc else f">{rid}"
            step = line_width or len(seq)
            body = "\n".join(seq[k : k + step] for k in range(0, len(seq), step))
            stream.write(f"{header}\n{body}\n".encode())
            count += 1
        if stream is not raw:
            stream.close()
    logger.debug("wrote %d records to %s", count, path)
    return count
