"""Structure-based reference alignments: HOMSTRAD (PIR) and bench1.0 aligned FASTA with a core mask.

Two readers, both returning an :class:`~sinkalign.io.alignments.MSA`:

* :func:`read_pir` - a PIR alignment as HOMSTRAD writes it (``>P1;id``, a description line
  such as ``structureX:...``, then the gapped sequence ending in ``*``), parsed with
  Biopython (``SeqIO.parse(path, "pir")``). Every residue is trusted (upper case); ``-``
  and ``.`` are gaps, ``/`` (a chain break) is read as a gap. ``MSA.format`` is ``"pir"``.
* :func:`read_bench_fasta` - an aligned FASTA file of Edgar's bench1.0 collection (SABRE,
  PREFAB, OXBench): UPPER-CASE residues lie in the trusted structural *core*, lower-case
  residues in columns where the structures do not superpose (aligned in the file, but the
  reference is not trusted there); ``-`` and ``.`` are gaps. Case is kept in ``MSA.rows``
  and ``MSA.format`` is ``"bench"``.

For both, :func:`sinkalign.io.alignments.msa_to_pairs` gives the reference pairs: the
*trusted* aligned residue pairs are the columns where both rows hold an upper-case residue,
and each pair carries a per-residue core mask (``ReferencePair.query_core`` /
``target_core``): residue ``i`` of the query is *trusted* when it is upper case and the
other row's character in its column is an upper-case residue or a gap. Losses and metrics
count trusted residues only (:func:`sinkalign.align.metrics.core_pair_scores`).

Family names. The family of a structural file is ``<parent directory>/<file stem>`` (e.g.
``sabre/sup_002``, ``homstrad/6PGD``), so that sets of different collections that share a
file name stay apart.

:func:`read_reference_alignment` picks the reader from the content (``>P1;`` -> PIR, a
Stockholm header -> Stockholm, ``>`` -> bench1.0 aligned FASTA; A2M, Clustal, MSF and PHYLIP
through :func:`~sinkalign.io.alignments.read_alignment`) and is what ``sinkalign shards
build``, ``sinkalign evaluate --reference`` and ``sinkalign score-msa`` use for these files.

Errors are :class:`~sinkalign.errors.FormatError` naming the file, the record (id and
1-based number) and the 0-based column.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from sinkalign.errors import FormatError
from sinkalign.io.alignments import MSA, _finish_msa
from sinkalign.io.fasta import _seek_first_header, open_text

log = logging.getLogger(__name__)

__all__ = [
    "STRUCTURAL_FORMATS",
    "detect_alignment_format",
    "family_name",
    "pdb_code",
    "read_bench_fasta",
    "read_pir",
    "read_reference_alignment",
]

#: MSA.format values whose lower case means "aligned but not trusted" (not an insertion).
STRUCTURAL_FORMATS = ("bench", "pir")
_GAPS = "-."
_SUFFIXES = (".ali", ".pir", ".fa", ".fasta", ".afa", ".sto", ".stk")


def family_name(path: str | os.PathLike) -> str:
    """``<parent directory>/<stem>`` of a structural alignment file (``sabre/sup_002``)."""
    p = Path(path)
    parent = p.resolve().parent.name
    stem = p.stem if p.suffix.lower() in _SUFFIXES else p.name
    return f"{parent}/{stem}" if parent else stem


_SCOP = re.compile(r"^d([0-9][a-z0-9]{3})[a-z0-9_.][a-z0-9_]$", re.IGNORECASE)
_PDB = re.compile(r"^([0-9][a-z0-9]{3})", re.IGNORECASE)


def pdb_code(name: str) -> str | None:
    """The PDB code of a structure name, lower case, or ``None``.

    SCOP/ASTRAL domain ids (``d1gtea1``) give the four characters after the ``d``; other
    names give their first four characters when those look like a PDB code (a digit, then
    three letters or digits): ``1pgjb`` -> ``1pgj``, ``1axn-4-AUTO.1`` -> ``1axn``,
    ``153l`` -> ``153l``.
    """
    m = _SCOP.match(name)
    if m:
        return m.group(1).lower()
    m = _PDB.match(name)
    return m.group(1).lower() if m else None


def _check_rows(path: Path, ids: list[str], rows: list[str]) -> None:
    """Equal row lengths and letters/gaps only, with file, record and column in the message."""
    if not ids:
        raise FormatError(f"{path}: no aligned sequences")
    width = len(rows[0])
    for n, (rid, row) in enumerate(zip(ids, rows)):
        if len(row) != width:
            raise FormatError(f"{path}: record {rid!r} (#{n + 1}) has {len(row)} columns, the first record has "
                              f"{width}")
        for col, c in enumerate(row):
            if not (c.isascii() and (c.isalpha() or c in _GAPS)):
                raise FormatError(f"{path}: record {rid!r} (#{n + 1}): illegal character {c!r} at column {col} "
                                  "(0-based)")


def read_pir(path: str | os.PathLike) -> MSA:
    """Read a PIR alignment (HOMSTRAD ``.ali``) with Biopython; every residue is trusted.

    Raises:
        FormatError: a file Biopython rejects, no records, rows of unequal length, an
            illegal character (record id, number and column), duplicate ids.
        FileNotFoundError: no such file.
    """
    from Bio import SeqIO

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such PIR file")
    ids: list[str] = []
    rows: list[str] = []
    with open_text(path) as handle:
        try:
            for rec in SeqIO.parse(handle, "pir"):
                ids.append(rec.id)
                # '/' marks a chain break (no residue): a gap column for this row
                rows.append(str(rec.seq).rstrip("*").replace("/", "-"))
        except (ValueError, AssertionError) as err:
            where = f" after record {ids[-1]!r} (#{len(ids)})" if ids else ""
            raise FormatError(f"{path}: cannot parse PIR{where}: {err}") from err
    if not ids:
        raise FormatError(f"{path}: no PIR records (expected '>P1;id' lines)")
    _check_rows(path, ids, rows)
    rows = [r.upper() for r in rows]
    msa = _finish_msa(ids, rows, path=path, fmt="pir", alphabet="auto")
    return _named(msa, path)


def read_bench_fasta(path: str | os.PathLike) -> MSA:
    """Read a bench1.0 aligned FASTA file (SABRE, PREFAB, OXBench) keeping the core mask.

    Upper case = trusted core, lower case = aligned but not trusted, ``-`` / ``.`` = gaps. A
    file with no upper-case residue at all marks nothing (an aligner that kept its input's soft
    masking, as MAFFT does): it is read as wholly trusted, with a warning.

    Raises:
        FormatError: empty file, rows of unequal length, illegal characters (record id,
            number and column), duplicate ids.
        FileNotFoundError: no such file.
    """
    from Bio import SeqIO

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such aligned FASTA file")
    ids, rows = [], []
    with open_text(path) as handle:
        _seek_first_header(handle, path)  # data before the first '>' is an error, not skipped
        try:
            for rec in SeqIO.parse(handle, "fasta"):  # Biopython keeps the case: the core mask
                if not rec.id:
                    raise FormatError(f"{path}: record #{len(ids) + 1}: a record without an id")
                ids.append(rec.id)
                rows.append(str(rec.seq))
        except (ValueError, UnicodeDecodeError) as err:
            if isinstance(err, FormatError):
                raise
            where = f" after record {ids[-1]!r} (#{len(ids)})" if ids else ""
            raise FormatError(f"{path}: cannot parse aligned FASTA{where}: {err}") from err
    if not ids:
        raise FormatError(f"{path}: no aligned sequences (expected '>id' lines)")
    _check_rows(path, ids, rows)
    if not any(ch.isupper() for row in rows for ch in row):
        log.warning("%s has no upper-case residue, so its case marks no trusted core: every residue counts", path)
        rows = [row.upper() for row in rows]
    msa = _finish_msa(ids, rows, path=path, fmt="bench", alphabet="auto")
    return _named(msa, path)


def _named(msa: MSA, path: Path) -> MSA:
    from dataclasses import replace

    return replace(msa, family=family_name(path))


def detect_alignment_format(path: str | os.PathLike) -> str:
    """``"stockholm"``, ``"pir"``, ``"bench"`` (aligned FASTA), ``"a2m"`` (by a ``.a2m``
    suffix, as :func:`~sinkalign.io.alignments.read_aligned_fasta` tells it), ``"clustal"``,
    ``"msf"`` or ``"phylip"`` from a file's content
    (:func:`~sinkalign.io.alignments.detect_msa_format`).

    Raises:
        FormatError: an empty file, or one in none of these formats.
    """
    from sinkalign.io.alignments import detect_msa_format

    fmt = detect_msa_format(path)
    if fmt != "fasta":
        return fmt
    suffixes = [s.lower() for s in Path(path).suffixes if s.lower() != ".gz"]
    return "a2m" if suffixes and suffixes[-1] == ".a2m" else "bench"


def read_reference_alignment(path: str | os.PathLike) -> list[MSA]:
    """Every alignment of a reference file, by content: Stockholm, PIR and bench1.0 aligned
    FASTA (its case a core mask; rows of unequal length with A2M's insertions are read as A2M)
    here; A2M, Clustal, MSF and PHYLIP by :func:`~sinkalign.io.alignments.read_alignment`,
    every residue trusted (Clustal, MSF and PHYLIP case means nothing; A2M's lower case are
    insertions)."""
    from sinkalign.io.alignments import read_alignment, read_stockholm

    fmt = detect_alignment_format(path)
    if fmt == "stockholm":
        return list(read_stockholm(path))
    if fmt == "pir":
        return [read_pir(path)]
    if fmt == "bench":
        try:
            return [read_bench_fasta(path)]
        except FormatError:
            msa = read_alignment(path)  # A2M under another name, else the same error again
            if msa.format != "a2m":
                raise
            return [_named(msa, path)]
    return [_named(read_alignment(path), path)]
