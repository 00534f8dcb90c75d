"""Reference alignments: multiple alignments (Stockholm, aligned FASTA / A2M, MSF) and
structural pairwise alignments (TM-align state strings), turned into aligned residue pairs.

Two objects:

* :class:`MSA` - one multiple alignment: row ids and gapped row strings of equal
  length. In ``MSA.rows`` every gap is ``'-'``, an UPPER-case letter is a residue in
  an aligned (match) column and a lower-case letter is an *insertion* residue that is
  aligned to nothing. Readers map each format onto this convention:

  - Stockholm (``read_stockholm``): case is kept. Pfam/HMMER write insert-state
    residues in lower case (with ``.`` gaps) - e.g. ``SMC_N`` - so those residues are
    unaligned, as HMMER defines them.
  - A2M (``read_aligned_fasta(..., format="a2m")``): upper case and ``-`` are match
    columns, lower case are insertions, ``.`` is a gap in an insert column. Rows may
    omit ``.`` padding; they are re-padded so that the rows are rectangular.
  - plain aligned FASTA (``format="fasta"``) and MSF: case carries no meaning and
    every letter is upper-cased (so every residue sits in an aligned column); ``-``,
    ``.`` (and ``~`` in MSF) are gaps.

* :class:`ReferencePair` - one pair of ungapped sequences and their reference aligned
  residue pairs ``pairs[k] = (i, j)``: residue ``i`` of the query (0-based, into the
  ungapped sequence) is aligned to residue ``j`` of the target. Both columns are
  strictly increasing.

``msa_to_pairs`` makes a ReferencePair for every two rows ``a < b`` of an MSA: the
aligned residue pairs are the columns where both rows hold an upper-case residue.
Ungapped sequences keep insertion residues (upper-cased), so indices count them.

Errors are :class:`~sinkalign.io.fasta.SequenceFormatError` naming the file, the
alignment number (Stockholm), the row id and the 0-based column (or, for TM-align
files, the 1-based line number and 0-based position in the state string).
"""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from Bio import Align, AlignIO, SeqIO

from sinkalign.alignment import percent_identity as _percent_identity
from sinkalign.errors import MissingFileError
from sinkalign.io.fasta import (
    AMBIGUOUS,
    STANDARD,
    SequenceFormatError,
    detect_alphabet,
    open_text,
)

__all__ = [
    "MSA",
    "ReferencePair",
    "detect_msa_format",
    "msa_to_pairs",
    "percent_identity",
    "read_aligned_fasta",
    "read_alignment",
    "read_msf",
    "read_stockholm",
    "row_descriptions",
    "rows_as_written",
    "read_tmalign_pairs",
]

logger = logging.getLogger(__name__)

_ALIGNED_FASTA_FORMATS = ("fasta", "a2m")
_MSA_ALPHABETS = ("protein", "dna", "auto")


# --------------------------------------------------------------------------- pairs


@dataclass(frozen=True, eq=False)
class ReferencePair:
    """Two ungapped sequences and their reference aligned residue pairs.

    Attributes:
        query_id, target_id: sequence ids.
        query_seq, target_seq: ungapped residues (upper case); lengths Lq, Lt.
        pairs: ``[n, 2]`` int32, row ``(i, j)`` aligns ``query_seq[i]`` with
            ``target_seq[j]`` (0-based); both columns strictly increasing. Read-only.
        source: where the reference came from (the alignment file path).
        family: family name (Stockholm ``#=GF ID``) or ``None``.
        meta: JSON-serialisable extras (alphabet, accession, TM-scores, ...).
        query_core, target_core: ``None`` (every residue trusted) or ``[Lq]`` / ``[Lt]`` bool
            arrays: which residues the reference is trusted for (structure-based references
            with a core mask, :mod:`sinkalign.io.structural`). ``pairs`` then lists the
            trusted aligned pairs only; a trusted residue outside ``pairs`` is a trusted gap.
            Metrics and losses ignore untrusted residues. Read-only.
    """

    query_id: str
    target_id: str
    query_seq: str
    target_seq: str
    pairs: np.ndarray
    source: str = ""
    family: str | None = None
    meta: dict = field(default_factory=dict)
    query_core: np.ndarray | None = None
    target_core: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("query_id", "target_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name}={value!r} must be a non-empty string")
        for name in ("query_seq", "target_seq"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name}={value!r} of pair ({self.query_id}, {self.target_id}) must be non-empty")
        raw = np.asarray(self.pairs)
        if raw.size == 0:
            raw = raw.reshape(0, 2)
        if raw.ndim != 2 or raw.shape[1] != 2:
            raise ValueError(f"pairs.shape={raw.shape} must be [n, 2] for ({self.query_id}, {self.target_id})")
        if raw.size and raw.dtype.kind not in "iu":
            raise ValueError(f"pairs.dtype={raw.dtype} must be an integer type")
        pairs = np.array(raw, dtype=np.int32, copy=True, order="C")
        if len(pairs):
            steps = pairs[1:] - pairs[:-1]
            if steps.size and steps.min() <= 0:
                k = int(np.nonzero((steps <= 0).any(axis=1))[0][0])
                raise ValueError(
                    f"pairs of ({self.query_id}, {self.target_id}) are not strictly increasing in both columns "
                    f"at rows {k}, {k + 1}: {pairs[k].tolist()} -> {pairs[k + 1].tolist()}"
                )
            # increasing columns: the first and last rows bound all the others
            lq, lt = len(self.query_seq), len(self.target_seq)
            if pairs[0, 0] < 0 or pairs[0, 1] < 0 or pairs[-1, 0] >= lq or pairs[-1, 1] >= lt:
                raise ValueError(
                    f"pairs of ({self.query_id}, {self.target_id}) out of range for lengths ({lq}, {lt})"
                )
        pairs.setflags(write=False)
        object.__setattr__(self, "pairs", pairs)
        for name, length in (("query_core", len(self.query_seq)), ("target_core", len(self.target_seq))):
            mask = getattr(self, name)
            if mask is None:
                continue
            mask = np.array(mask, dtype=bool, copy=True).reshape(-1)
            if mask.shape[0] != length:
                raise ValueError(f"{name} of ({self.query_id}, {self.target_id}) has {mask.shape[0]} entries, "
                                 f"the sequence has {length} residues")
            mask.setflags(write=False)
            object.__setattr__(self, name, mask)
        if (self.query_core is None) != (self.target_core is None):
            raise ValueError(f"pair ({self.query_id}, {self.target_id}): give both core masks or neither")
        if self.query_core is not None and len(pairs):
            if not (self.query_core[pairs[:, 0]].all() and self.target_core[pairs[:, 1]].all()):
                raise ValueError(f"pair ({self.query_id}, {self.target_id}): a reference pair involves a residue "
                                 "outside the core mask")
        if not isinstance(self.meta, dict):
            raise ValueError(f"meta={self.meta!r} must be a dict")

    @property
    def n_aligned(self) -> int:
        """Number of aligned residue pairs."""
        return int(self.pairs.shape[0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReferencePair):
            return NotImplemented
        return (
            self.query_id == other.query_id
            and self.target_id == other.target_id
            and self.query_seq == other.query_seq
            and self.target_seq == other.target_seq
            and np.array_equal(self.pairs, other.pairs)
            and self.source == other.source
            and self.family == other.family
            and self.meta == other.meta
            and _same_mask(self.query_core, other.query_core)
            and _same_mask(self.target_core, other.target_core)
        )

    @property
    def has_core(self) -> bool:
        """True when the reference is trusted on a core mask only."""
        return self.query_core is not None

    __hash__ = None  # mutable-looking contents (dict, array): not hashable


def _same_mask(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(a, b)


def percent_identity(pair: ReferencePair) -> float:
    """Percent identity of a reference pair (:func:`sinkalign.alignment.percent_identity`):
    ``100 * identical / aligned pairs``, NaN when nothing is aligned."""
    return _percent_identity(pair.query_seq, pair.target_seq, pair.pairs)


# --------------------------------------------------------------------------- MSA


@dataclass(frozen=True, eq=True)
class MSA:
    """One multiple sequence alignment (rows of equal length).

    Attributes:
        ids: row ids, unique.
        rows: gapped rows, ``'-'`` for gaps, upper case = aligned residue, lower case =
            insertion residue (aligned to nothing). All of length C (columns).
        source: file the alignment was read from.
        format: ``"stockholm"``, ``"fasta"``, ``"a2m"`` or ``"msf"``.
        alphabet: ``"protein"`` or ``"dna"``.
        family: Stockholm ``#=GF ID`` (``None`` when absent).
        accession: Stockholm ``#=GF AC`` (``None`` when absent).
        index: 0-based number of this alignment in its file.
    """

    ids: tuple[str, ...]
    rows: tuple[str, ...]
    source: str
    format: str
    alphabet: str
    family: str | None = None
    accession: str | None = None
    index: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(self.ids))
        object.__setattr__(self, "rows", tuple(self.rows))
        if not self.ids:
            raise ValueError(f"{self.source}: alignment has no rows")
        if len(self.ids) != len(self.rows):
            raise ValueError(f"{len(self.ids)} ids but {len(self.rows)} rows")
        if self.alphabet not in ("protein", "dna"):
            raise ValueError(f"alphabet={self.alphabet!r} is not one of ('protein', 'dna')")
        width = len(self.rows[0])
        for rid, row in zip(self.ids, self.rows):
            if len(row) != width:
                raise ValueError(f"{self.source}: row {rid!r} has {len(row)} columns, expected {width}")

    @property
    def n_columns(self) -> int:
        return len(self.rows[0])

    def __len__(self) -> int:
        return len(self.rows)

    def ungapped(self, k: int) -> str:
        """Residues of row ``k`` without gaps, upper case (insertions included)."""
        return self.rows[k].replace("-", "").upper()


def _where(path: Path, index: int | None) -> str:
    return f"{path}" if index is None else f"{path}: alignment #{index + 1}"


def _finish_msa(
    ids: list[str],
    raw_rows: list[str],
    *,
    path: Path,
    fmt: str,
    alphabet: str,
    family: str | None = None,
    accession: str | None = None,
    index: int = 0,
    numbered: bool = False,
) -> MSA:
    """Validate rows (characters, ids, alphabet), normalise gaps to '-', build the MSA."""
    where = _where(path, index if numbered else None)
    if not ids:
        raise SequenceFormatError(f"{where}: alignment has no sequences", path=path)
    seen: dict[str, int] = {}
    for n, rid in enumerate(ids):
        if not rid:
            raise SequenceFormatError(f"{where}: row #{n + 1} has an empty id", path=path, record_number=n + 1)
        if rid in seen:
            raise SequenceFormatError(
                f"{where}: duplicate row id {rid!r} (rows #{seen[rid] + 1} and #{n + 1})",
                path=path,
                record_id=rid,
                record_number=n + 1,
            )
        seen[rid] = n
    rows = [r.replace(".", "-").replace("~", "-") for r in raw_rows]
    width = len(rows[0])
    for n, (rid, row) in enumerate(zip(ids, rows)):
        if len(row) != width:
            raise SequenceFormatError(
                f"{where}: row {rid!r} (#{n + 1}) has {len(row)} columns, the first row has {width}"
                + ("; the rows of an alignment have one length: is this unaligned FASTA? (`sinkalign msa` aligns it)"
                   if fmt == "fasta" and not any("-" in r for r in rows) else ""),
                path=path,
                record_id=rid,
                record_number=n + 1,
            )
    if alphabet == "auto":
        alphabet = detect_alphabet("".join(rows).replace("-", ""))
    allowed = STANDARD[alphabet] | AMBIGUOUS[alphabet]
    allowed = allowed | {c.lower() for c in allowed} | {"-"}
    for n, (rid, row) in enumerate(zip(ids, rows)):
        if set(row) <= allowed:
            if row.count("-") == len(row):
                raise SequenceFormatError(
                    f"{where}: row {rid!r} (#{n + 1}) has no residues", path=path, record_id=rid, record_number=n + 1
                )
            continue
        col = next(k for k, c in enumerate(row) if c not in allowed)
        c = raw_rows[n][col]
        raise SequenceFormatError(
            f"{where}: row {rid!r} (#{n + 1}): illegal character {c!r} for alphabet {alphabet!r} "
            f"at column {col} (0-based)",
            path=path,
            record_id=rid,
            record_number=n + 1,
            position=col,
            char=c,
        )
    return MSA(
        ids=tuple(ids),
        rows=tuple(rows),
        source=str(path),
        format=fmt,
        alphabet=alphabet,
        family=family,
        accession=accession,
        index=index,
    )


def _check_alphabet(alphabet: str) -> None:
    if alphabet not in _MSA_ALPHABETS:
        raise ValueError(f"alphabet={alphabet!r} is not one of {_MSA_ALPHABETS}")


def _existing(path: str | os.PathLike, what: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such {what} file")
    return path


_GF = re.compile(r"^#=GF\s+(ID|AC)\s+(\S.*?)\s*$")


def read_stockholm(path: str | os.PathLike, *, alphabet: str = "auto") -> Iterator[MSA]:
    """Stream the alignments of a (possibly gzipped) Stockholm file, in file order.

    Each ``//``-terminated block is parsed by Biopython (``Bio.AlignIO`` stockholm
    parser; the newer ``Bio.Align`` parser rejects several real Pfam/Dfam files and
    interleaved blocks). ``#=GF ID`` and ``#=GF AC`` become ``MSA.family`` and
    ``MSA.accession``. Insert-state (lower-case) residues are kept lower case; see the
    module docstring.

    Args:
        path: Stockholm file.
        alphabet: ``"protein"``, ``"dna"`` or ``"auto"`` (decided per alignment).

    Raises:
        SequenceFormatError: empty file, no ``//``-terminated alignment, a block
            Biopython cannot parse (with its line), duplicate ids, an illegal
            character (row id and column).
    """
    _check_alphabet(alphabet)
    path = _existing(path, "Stockholm")
    return _read_stockholm(path, alphabet)


def _read_stockholm(path: Path, alphabet: str) -> Iterator[MSA]:
    index = 0
    block: list[str] = []
    start = 1
    gf: dict[str, str] = {}
    paragraph: dict[str, int] = {}  # row ids of the current interleaved paragraph -> line
    with open_text(path, lenient=True) as handle:  # (a Latin-1 annotation; a residue so read is refused)
        for line_no, line in enumerate(handle, start=1):
            if not block and not line.strip():
                start = line_no + 1
                continue
            block.append(line)
            stripped = line.strip()
            if not stripped:
                paragraph = {}
            elif stripped == "//":
                yield _parse_stockholm_block(block, path, index, start, alphabet, gf)
                index += 1
                block, gf, paragraph, start = [], {}, {}, line_no + 1
            elif stripped.startswith("#"):
                m = _GF.match(line)
                if m and m.group(1) not in gf:
                    gf[m.group(1)] = m.group(2)
            else:
                fields = stripped.split()
                rid = fields[0]
                if len(fields) != 2:  # Biopython: "Could not split line", or a space kept as a residue
                    what = ("has no sequence" if len(fields) == 1 else
                            f"has {len(fields) - 1} words after the id (a space inside the sequence?)")
                    raise SequenceFormatError(
                        f"{path}: alignment #{index + 1}: line {line_no}: row {rid!r} {what}; a Stockholm row is "
                        "an id and its aligned sequence, separated by spaces, with none inside the sequence",
                        path=path, record_id=rid)
                # Biopython silently concatenates a repeated id, so catch it here.
                if rid in paragraph:
                    raise SequenceFormatError(
                        f"{path}: alignment #{index + 1}: line {line_no}: duplicate row id {rid!r} "
                        f"(also on line {paragraph[rid]})",
                        path=path,
                        record_id=rid,
                    )
                paragraph[rid] = line_no
    if block:
        raise SequenceFormatError(
            f"{path}: alignment #{index + 1} starting at line {start} has no '//' terminator", path=path
        )
    if index == 0:
        raise SequenceFormatError(f"{path}: empty file, no Stockholm alignments", path=path)


def _parse_stockholm_block(
    block: list[str], path: Path, index: int, start: int, alphabet: str, gf: dict[str, str]
) -> MSA:
    where = f"{path}: alignment #{index + 1} (starting at line {start})"
    if not block[0].startswith("# STOCKHOLM"):
        raise SequenceFormatError(
            f"{where}: expected '# STOCKHOLM 1.0' header, found {block[0].strip()[:40]!r}", path=path
        )
    try:
        aln = AlignIO.read(io.StringIO("".join(block)), "stockholm")
    except (ValueError, TypeError) as err:  # TypeError: a #=GR line of the wrong length (Biopython's SeqRecord)
        _odd_gr_line(block, path, start, where, err)
        lengths: dict[str, int] = {}  # Biopython does not say which row: count them
        for line in block[1:]:
            fields = line.split()
            if len(fields) == 2 and not line.startswith(("#", "//")):
                lengths[fields[0]] = lengths.get(fields[0], 0) + len(fields[1])
        first = next(iter(lengths), None)
        odd = next((rid for rid, n in lengths.items() if n != lengths[first]), None)
        if odd is not None:
            raise SequenceFormatError(f"{where}: row {odd!r} has {lengths[odd]} columns, the first row "
                                      f"({first!r}) has {lengths[first]}", path=path, record_id=odd) from err
        raise SequenceFormatError(f"{where}: cannot parse Stockholm: {err}", path=path) from err
    ids = [rec.id for rec in aln]
    rows = [str(rec.seq) for rec in aln]
    return _finish_msa(
        ids,
        rows,
        path=path,
        fmt="stockholm",
        alphabet=alphabet,
        family=gf.get("ID"),
        accession=gf.get("AC"),
        index=index,
        numbered=True,
    )


def _odd_gr_line(block: list[str], path: Path, start: int, where: str, err: Exception) -> None:
    """Raise a SequenceFormatError naming the ``#=GR`` annotation whose length differs from its
    row's (the line where it starts, the row id and the tag), if there is one: Biopython raises a
    bare TypeError for it, naming neither; likewise a ``#=GC`` annotation whose length is not the
    alignment's (Biopython names the tag but not the line)."""
    rows: dict[str, int] = {}
    marks: dict[tuple[str, str], list[int]] = {}  # (row id, tag) -> [characters, first line]
    columns: dict[str, list[int]] = {}  # #=GC tag -> [characters, first line]
    for offset, line in enumerate(block):
        fields = line.split()
        if not fields or fields[0] == "//":
            continue
        if fields[0] == "#=GR" and len(fields) >= 4:
            mark = marks.setdefault((fields[1], fields[2]), [0, start + offset])
            mark[0] += len("".join(fields[3:]))
        elif fields[0] == "#=GC" and len(fields) >= 3:
            mark = columns.setdefault(fields[1], [0, start + offset])
            mark[0] += len("".join(fields[2:]))
        elif not fields[0].startswith("#") and len(fields) >= 2:
            rows[fields[0]] = rows.get(fields[0], 0) + len("".join(fields[1:]))
    for (rid, tag), (n, line_no) in marks.items():
        if rid in rows and n != rows[rid]:
            raise SequenceFormatError(f"{where}: line {line_no}: the #=GR {rid} {tag} annotation has {n} characters, "
                                      f"row {rid!r} has {rows[rid]} columns", path=path, record_id=rid) from err
    widths = set(rows.values())
    for tag, (n, line_no) in columns.items():
        if len(widths) == 1 and n not in widths:  # (rows of different lengths are named by the caller)
            raise SequenceFormatError(f"{where}: line {line_no}: the #=GC {tag} annotation has {n} characters, the "
                                      f"alignment {widths.pop()} columns", path=path) from err


def read_aligned_fasta(path: str | os.PathLike, *, format: str | None = None, alphabet: str = "auto") -> MSA:
    """Read an aligned FASTA or A2M file (one alignment per file; gzip is detected).

    Args:
        path: the file.
        format: ``"fasta"`` (case ignored, ``-``/``.`` are gaps, rows of equal
            length) or ``"a2m"`` (upper case + ``-`` are match columns, lower case
            are insertions, ``.`` is a gap in an insert column; every row must have
            the same number of match columns). ``None``: ``"a2m"`` for a ``.a2m``
            suffix (also before ``.gz``), or for rows of unequal length that have lower-case
            letters or ``.`` and the same number of match columns (hmmalign's A2M under
            another name, which no aligned FASTA can be); else ``"fasta"``.
        alphabet: ``"protein"``, ``"dna"`` or ``"auto"``.

    Raises:
        SequenceFormatError: empty file, unequal row lengths (fasta) or match-column
            counts (a2m), duplicate ids, illegal characters (row id and column).
    """
    _check_alphabet(alphabet)
    path = _existing(path, "aligned FASTA")
    told = format
    if format is None:
        suffixes = [s.lower() for s in path.suffixes]
        if suffixes and suffixes[-1] == ".gz":
            suffixes = suffixes[:-1]
        format = "a2m" if suffixes and suffixes[-1] == ".a2m" else "fasta"
    if format not in _ALIGNED_FASTA_FORMATS:
        raise ValueError(f"format={format!r} is not one of {_ALIGNED_FASTA_FORMATS} (or None)")
    ids: list[str] = []
    raw: list[str] = []
    with open_text(path) as handle:
        try:
            for rec in SeqIO.parse(handle, "fasta"):
                ids.append(rec.id)
                raw.append(str(rec.seq))
        except SequenceFormatError:
            raise
        except ValueError as err:
            if isinstance(err, UnicodeError):  # Biopython's Seq is ASCII: name the row and column instead
                found = _non_ascii_row_letter(path)
                if found is not None:
                    rid, number, column, char = found
                    raise SequenceFormatError(f"{path}: row {rid!r} (#{number}): non-ASCII character {char!r} at "
                                              f"column {column} (0-based)", path=path, record_id=rid) from err
            raise SequenceFormatError(f"{path}: cannot parse FASTA: {err}", path=path) from err
    if not ids:
        raise SequenceFormatError(f"{path}: empty file, no aligned sequences", path=path)
    if told is None and format == "fasta" and _looks_a2m(raw):
        logger.info("%s: rows of unequal length with insertions (lower case) and equal match columns: read as A2M",
                    path)
        format = "a2m"
    if format == "fasta":
        rows = [r.upper() for r in raw]
    else:
        rows = _a2m_rectangular(ids, raw, path)
    return _finish_msa(ids, rows, path=path, fmt=format, alphabet=alphabet)


def _looks_a2m(raw: list[str]) -> bool:
    """Rows of unequal length (no aligned FASTA) with A2M's insertions (lower case or ``.``)
    and one number of match columns (upper case and ``-``) in every row."""
    if len({len(r) for r in raw}) < 2 or not any(c.islower() or c == "." for r in raw for c in r):
        return False
    return len({sum(c.isupper() or c == "-" for c in r) for r in raw}) == 1


def _a2m_rectangular(ids: list[str], raw: list[str], path: Path) -> list[str]:
    """Return A2M rows as a rectangular alignment (inserts left-justified, '-' padded)."""
    # Split every row into match states and the insert blocks between them.
    parsed = []
    for n, (rid, row) in enumerate(zip(ids, raw)):
        inserts, matches, cur = [], [], []
        for c in row:
            if c.isupper() or c == "-":
                inserts.append("".join(cur))
                matches.append(c)
                cur = []
            elif c.islower() or c == ".":
                cur.append(c)
            else:
                col = len("".join(inserts)) + len(matches) + len(cur)
                raise SequenceFormatError(
                    f"{path}: row {rid!r} (#{n + 1}): illegal A2M character {c!r} at column {col} (0-based)",
                    path=path,
                    record_id=rid,
                    record_number=n + 1,
                    position=col,
                    char=c,
                )
        inserts.append("".join(cur))
        parsed.append((matches, inserts))
    n_match = len(parsed[0][0])
    for n, (rid, (matches, _)) in enumerate(zip(ids, parsed)):
        if len(matches) != n_match:
            raise SequenceFormatError(
                f"{path}: row {rid!r} (#{n + 1}) has {len(matches)} match columns (upper case or '-'), "
                f"the first row has {n_match}",
                path=path,
                record_id=rid,
                record_number=n + 1,
            )
    lengths = {len(r) for r in raw}
    consistent = len(lengths) == 1 and all(
        len({(c.isupper() or c == "-") for c in col}) == 1 for col in zip(*raw)
    )
    if consistent:  # already rectangular with aligned insert columns: keep as written
        return list(raw)
    widths = [max(len(ins[k].replace(".", "")) for _, ins in parsed) for k in range(n_match + 1)]
    rows = []
    for matches, inserts in parsed:
        parts = []
        for k in range(n_match + 1):
            residues = inserts[k].replace(".", "")
            parts.append(residues + "-" * (widths[k] - len(residues)))
            if k < n_match:
                parts.append(matches[k])
        rows.append("".join(parts))
    return rows


def read_msf(path: str | os.PathLike, *, alphabet: str = "auto") -> MSA:
    """Read a GCG MSF alignment with Biopython (``Bio.Align.read(path, "msf")``).

    Case is not significant (rows are upper-cased); ``.`` and ``~`` are gaps.

    Raises:
        SequenceFormatError: a file Biopython rejects (message kept), duplicate ids,
            illegal characters (row id and column).
    """
    _check_alphabet(alphabet)
    path = _existing(path, "MSF")
    try:
        with open_text(path) as handle:
            aln = Align.read(handle, "msf")
        ids = [rec.id for rec in aln.sequences]
        rows = [aln[k].upper() for k in range(len(ids))]
    except SequenceFormatError:
        raise
    except (ValueError, AssertionError) as err:
        # Bio.Align's parser drops the columns that are gaps in every row and then finds fewer
        # columns than the header says; Bio.AlignIO's keeps them
        try:
            with open_text(path) as handle:
                old = AlignIO.read(handle, "msf")
        except (ValueError, AssertionError):
            raise SequenceFormatError(f"{path}: cannot parse MSF: {err}", path=path) from err
        ids = [rec.id for rec in old]
        rows = [str(rec.seq).upper().replace("~", "-").replace(".", "-") for rec in old]
    return _finish_msa(ids, rows, path=path, fmt="msf", alphabet=alphabet)


def _non_ascii_row_letter(path: Path) -> tuple[str, int, int, str] | None:
    """(row id, row number, column, character) of the first non-ASCII character in a row of a
    FASTA file (headers may hold any text), or ``None``."""
    rid, number, column = None, 0, 0
    with open_text(path) as handle:
        for line in handle:
            if line.startswith(">"):
                rid, number, column = (line[1:].split() or [""])[0], number + 1, 0
                continue
            text = "".join(line.split())
            bad = next((k for k, c in enumerate(text) if ord(c) > 127), None)
            if bad is not None and rid is not None:
                return rid, number, column + bad, text[bad]
            column += len(text)
    return None


def detect_msa_format(path: str | os.PathLike) -> str:
    """``"stockholm"``, ``"clustal"``, ``"pir"``, ``"fasta"`` (aligned FASTA or A2M),
    ``"msf"`` or ``"phylip"`` from a file's first non-blank line (PIR comment lines ``C;``
    before the first record skipped, as HOMSTRAD writes them).

    Raises:
        SequenceFormatError: an empty file, or a first line that fits none of them.
    """
    path = Path(path)
    with open_text(path, lenient=True, warn=False) as handle:  # the first line only (its reader checks the rest)
        for line_no, line in enumerate(handle, 1):
            s = line.strip()
            if not s or s.startswith("C;"):
                continue
            if s.startswith("# STOCKHOLM"):
                return "stockholm"
            if s.upper().startswith(("CLUSTAL", "MUSCLE", "PROBCONS")):
                return "clustal"
            if s.startswith((">P1;", ">F1;", ">DL;")):
                return "pir"
            if s.startswith(">"):
                return "fasta"
            if s.startswith("!!") or "MSF:" in s or s.upper().startswith("PILEUP"):
                return "msf"
            if re.fullmatch(r"\d+\s+\d+", s):
                return "phylip"
            raise SequenceFormatError(f"{path}: line {line_no} starts with {s[:20]!r}: not an aligned FASTA, A2M, "
                                      "Stockholm, Clustal, MSF, PIR or PHYLIP alignment", path=path)
    raise SequenceFormatError(f"{path}: empty file, no alignment", path=path)


def read_alignment(path: str | os.PathLike, *, alphabet: str = "auto") -> MSA:
    """One multiple alignment from a file in any format the toolkit reads, told by its content:
    aligned FASTA or A2M (:func:`read_aligned_fasta`, A2M by a ``.a2m`` suffix or its rows), Stockholm
    (:func:`read_stockholm`; one alignment), Clustal and relaxed PHYLIP (Biopython's
    ``Bio.AlignIO``; rows upper-cased), GCG MSF (:func:`read_msf`) or PIR
    (:func:`sinkalign.io.structural.read_pir`).

    Raises:
        SequenceFormatError: an unknown or broken format, a Stockholm file of several
            alignments, bad rows (named as the readers name them).
    """
    _check_alphabet(alphabet)
    path = _existing(path, "alignment")
    fmt = detect_msa_format(path)
    if fmt == "fasta":
        return read_aligned_fasta(path, alphabet=alphabet)
    if fmt == "msf":
        return read_msf(path, alphabet=alphabet)
    if fmt == "pir":
        from sinkalign.io.structural import read_pir

        return read_pir(path)
    if fmt == "stockholm":
        msas = list(read_stockholm(path, alphabet=alphabet))
        if len(msas) != 1:
            raise SequenceFormatError(f"{path}: holds {len(msas)} alignments; give a file of one", path=path)
        return msas[0]
    aln = _biopython_alignment(path, fmt)
    return _finish_msa([rec.id for rec in aln], [str(rec.seq).upper() for rec in aln], path=path, fmt=fmt,
                       alphabet=alphabet)


_CONSERVATION = frozenset("*:. ")


def _biopython_alignment(path: Path, fmt: str):
    """A Clustal, PHYLIP (relaxed), MSF or aligned FASTA file through ``Bio.AlignIO``. A
    Clustal file's conservation lines are left out first: they carry nothing a reader needs,
    and Biopython's parser fails on one whose trailing blanks an editor trimmed."""
    name = {"clustal": "clustal", "phylip": "phylip-relaxed", "msf": "msf", "fasta": "fasta"}[fmt]
    try:
        with open_text(path) as handle:
            if fmt != "clustal":
                return AlignIO.read(handle, name)
            lines = [line for line in handle
                     if not (line[:1].isspace() and line.strip() and set(line.strip()) <= _CONSERVATION)]
            return AlignIO.read(io.StringIO("".join(lines)), name)
    except (ValueError, AssertionError) as err:
        raise SequenceFormatError(f"{path}: cannot parse {fmt}: {err or type(err).__name__}", path=path) from err


def rows_as_written(path: str | os.PathLike, msa: MSA) -> tuple[str, ...]:
    """The rows of ``msa`` (:func:`read_alignment` of ``path``) with the letter case they have
    in the file: the aligned FASTA, Clustal, PHYLIP and MSF readers upper-case them (case means
    nothing there to the toolkit), while a user's bench1.0 core or lower-case DNA should come
    back as it went in. Stockholm and A2M rows (whose case the readers keep) and PIR rows are
    ``msa.rows``; so are all rows when the file's do not match them letter for letter."""
    path = _existing(path, "alignment")
    fmt = detect_msa_format(path)
    if msa.format == "a2m" or fmt not in ("fasta", "clustal", "phylip", "msf"):
        return msa.rows
    try:
        raw = {rec.id: str(rec.seq).replace("~", "-") for rec in _biopython_alignment(path, fmt)}
    except SequenceFormatError:
        return msa.rows
    out = []
    for name, row in zip(msa.ids, msa.rows):
        mine = raw.get(name)
        if mine is None or mine.upper().replace(".", "-") != row.upper().replace(".", "-"):
            return msa.rows
        out.append(mine)
    return tuple(out)


def row_descriptions(path: str | os.PathLike) -> dict[str, str]:
    """The description of each row of an alignment file, by id, where its format has one: what
    follows the id on an aligned FASTA (or A2M) header (Biopython's parser), a Stockholm
    ``#=GS id DE`` line (:meth:`StockholmMarkup.descriptions
    <sinkalign.io.stockholm.StockholmMarkup.descriptions>`); ``{}`` for the other formats. For a
    file that :func:`read_alignment` reads; rows without a description are left out."""
    path = _existing(path, "alignment")
    fmt = detect_msa_format(path)
    if fmt == "stockholm":
        from sinkalign.io.stockholm import read_stockholm_markup

        return read_stockholm_markup(path).descriptions()
    if fmt != "fasta":
        return {}
    out = {}
    with open_text(path) as handle:
        for rec in SeqIO.parse(handle, fmt):
            desc = rec.description  # the whole header
            desc = desc[len(rec.id):] if desc.startswith(rec.id) else desc
            if desc.strip():
                out[rec.id] = desc.strip()
    return out


def _warn_nothing_aligned(msa: MSA, any_upper: bool) -> None:
    """Warn that no two rows of ``msa`` hold upper-case residues in one column, so none of its
    pairs has an aligned residue pair (an F1, a loss or a calibration on them measures nothing)."""
    name = f"{msa.source} (family {msa.family})" if msa.family else f"{msa.source} (alignment #{msa.index + 1})"
    if msa.format == "bench":
        why = ("lower case marks the residues a bench1.0 structural reference does not trust, and no column holds "
               "trusted residues of two sequences")
    elif not any_upper:
        why = (f"every residue is lower case, and in {msa.format.upper() if msa.format == 'a2m' else 'Stockholm'} "
               "(the Pfam/HMMER convention) lower case marks insert columns, aligned to nothing; upper-case the rows "
               "if their case means nothing")
    else:
        why = ("no column holds upper-case (aligned) residues of two sequences; lower case marks insert columns, "
               "aligned to nothing")
    logger.warning("%s: its %d sequences give no aligned residue pair: %s", name, len(msa), why)


def msa_to_pairs(
    msa: MSA,
    *,
    max_pairs: int | None = None,
    rng: np.random.Generator | int | None = None,
) -> list[ReferencePair]:
    """Every pair of rows ``a < b`` of ``msa`` as a :class:`ReferencePair`.

    Aligned residue pairs are the columns where both rows hold an upper-case residue;
    lower-case (insertion) residues are aligned to nothing but are counted in the
    ungapped sequences. Pairs come in row order ``(0, 1), (0, 2), ..., (1, 2), ...``.

    Args:
        msa: the alignment.
        max_pairs: keep at most this many pairs, drawn uniformly without replacement
            (then returned in row order). ``None`` keeps all ``N (N - 1) / 2``.
        rng: ``numpy.random.Generator`` or integer seed for the draw (``None`` = seed 0,
            so the draw is deterministic).

    Returns:
        list of ReferencePair with ``source = msa.source``, ``family = msa.family`` and
        ``meta = {"alphabet": ..., "accession": ...}``.
    """
    if max_pairs is not None and (not isinstance(max_pairs, (int, np.integer)) or max_pairs < 1):
        raise ValueError(f"max_pairs={max_pairs!r} must be a positive integer or None")
    if rng is not None and not isinstance(rng, (np.random.Generator, int, np.integer)):
        raise ValueError(f"rng={rng!r} must be a numpy Generator, an integer seed or None")
    n = len(msa)
    a_idx, b_idx = np.triu_indices(n, k=1)
    if max_pairs is not None and max_pairs < len(a_idx):
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(0 if rng is None else int(rng))
        keep = np.sort(gen.choice(len(a_idx), size=int(max_pairs), replace=False))
        a_idx, b_idx = a_idx[keep], b_idx[keep]
    grid = np.frombuffer("".join(msa.rows).encode("ascii"), dtype=np.uint8).reshape(n, msa.n_columns)
    upper = (grid >= ord("A")) & (grid <= ord("Z"))
    lower = (grid >= ord("a")) & (grid <= ord("z"))
    residue_index = np.cumsum(upper | lower, axis=1, dtype=np.int64) - 1  # [N, C]
    if n >= 2 and not (upper.sum(axis=0) >= 2).any():
        _warn_nothing_aligned(msa, bool(upper.any()))
    seqs = [msa.ungapped(k) for k in range(n)]
    meta = {"alphabet": msa.alphabet, "accession": msa.accession}
    # bench1.0 (structural) alignments: lower case = aligned but untrusted, not an insertion.
    with_core = msa.format == "bench"
    gap = ~(upper | lower)
    out = []
    for a, b in zip(a_idx.tolist(), b_idx.tolist()):
        cols = np.nonzero(upper[a] & upper[b])[0]
        pairs = np.empty((len(cols), 2), dtype=np.int32)
        pairs[:, 0] = residue_index[a, cols]
        pairs[:, 1] = residue_index[b, cols]
        cores = {}
        if with_core:
            # a residue is trusted when it is upper case and the other row is upper case or a gap there
            ok_a = upper[a] & (upper[b] | gap[b])
            ok_b = upper[b] & (upper[a] | gap[a])
            core_a = np.zeros(len(seqs[a]), bool)
            core_b = np.zeros(len(seqs[b]), bool)
            core_a[residue_index[a, ok_a]] = True
            core_b[residue_index[b, ok_b]] = True
            cores = {"query_core": core_a, "target_core": core_b}
        out.append(
            ReferencePair(
                query_id=msa.ids[a],
                target_id=msa.ids[b],
                query_seq=seqs[a],
                target_seq=seqs[b],
                pairs=pairs,
                source=msa.source,
                family=msa.family,
                meta=dict(meta),
                **cores,
            )
        )
    return out


# --------------------------------------------------------------------------- TM-align

_STATE_CODES = {ord(":"), ord("."), ord("1"), ord("2")}
_PDB_NAME = re.compile(r"^pdb([0-9][0-9a-z]{3})$", re.IGNORECASE)


def _structure_id(path_field: str) -> str:
    """``/scratch/pdb3bxk.ent`` -> ``3bxk``; other names keep their stem."""
    name = path_field.replace("\\", "/").rsplit("/", 1)[-1]
    stem = re.sub(r"\.(ent|pdb|cif)(\.gz)?$", "", name, flags=re.IGNORECASE)
    m = _PDB_NAME.match(stem)
    return m.group(1) if m else stem


def read_tmalign_pairs(path: str | os.PathLike, *, min_tm: float | None = None) -> Iterator[ReferencePair]:
    """Stream structural reference pairs from a DeepBLAST-style TM-align TSV file.

    Columns (tab-separated, no header; a first line starting with ``pdb1`` is taken
    as a header and skipped): ``pdb1, pdb2, tm1, tm2, rmsd, seq1, seq2, state``. In
    the state string ``:`` or ``.`` is an aligned pair (``:`` closer than 5 A), ``1``
    a residue of seq1 only and ``2`` a residue of seq2 only. Ids are the structure
    file names without directory, ``pdb`` prefix and ``.ent`` suffix (``3bxk``).

    Args:
        path: the TSV file (gzip detected).
        min_tm: keep only pairs with ``min(tm1, tm2) >= min_tm`` (``None``: all).

    Yields:
        ReferencePair with ``source = str(path)``, ``family = None`` and ``meta`` holding
        ``tm1, tm2, rmsd, line`` (1-based) and the original ``pdb1, pdb2`` fields.

    Raises:
        SequenceFormatError: wrong column count, a bad number, a bad sequence letter,
            a bad state character or a state string that does not use up exactly
            both sequences (file, 1-based line, 0-based position).
    """
    if min_tm is not None and not (isinstance(min_tm, (int, float)) and 0.0 <= min_tm <= 1.0):
        raise ValueError(f"min_tm={min_tm!r} must be a number in [0, 1] or None")
    path = _existing(path, "TM-align pairs")
    return _read_tmalign(path, min_tm)


def _read_tmalign(path: Path, min_tm: float | None) -> Iterator[ReferencePair]:
    n_rows = 0
    with open_text(path) as handle:
        for line_no, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if line_no == 1 and fields[0].strip().lower() == "pdb1":
                continue
            where = f"{path}: line {line_no}"
            if len(fields) != 8:
                raise SequenceFormatError(f"{where}: expected 8 tab-separated columns, found {len(fields)}", path=path)
            pdb1, pdb2, tm1_s, tm2_s, rmsd_s, seq1, seq2, state = fields
            try:
                tm1, tm2, rmsd = float(tm1_s), float(tm2_s), float(rmsd_s)
            except ValueError as err:
                raise SequenceFormatError(f"{where}: bad number in tm1/tm2/rmsd columns: {err}", path=path) from err
            n_rows += 1
            if min_tm is not None and min(tm1, tm2) < min_tm:
                continue
            pairs = _parse_state(state, seq1, seq2, where, path)
            yield ReferencePair(
                query_id=_structure_id(pdb1),
                target_id=_structure_id(pdb2),
                query_seq=seq1,
                target_seq=seq2,
                pairs=pairs,
                source=str(path),
                family=None,
                meta={"tm1": tm1, "tm2": tm2, "rmsd": rmsd, "line": line_no, "pdb1": pdb1, "pdb2": pdb2},
            )
    if n_rows == 0:
        raise SequenceFormatError(f"{path}: no TM-align pairs", path=path)


def _parse_state(state: str, seq1: str, seq2: str, where: str, path: Path) -> np.ndarray:
    for name, seq in (("seq1", seq1), ("seq2", seq2)):
        if not seq:
            raise SequenceFormatError(f"{where}: {name} is empty", path=path)
        allowed = STANDARD["protein"] | AMBIGUOUS["protein"]
        if not set(seq) <= allowed:
            k = next(k for k, c in enumerate(seq) if c not in allowed)
            raise SequenceFormatError(
                f"{where}: {name} has illegal character {seq[k]!r} at position {k} (0-based)",
                path=path,
                position=k,
                char=seq[k],
            )
    try:
        codes = np.frombuffer(state.encode("ascii"), dtype=np.uint8)
    except UnicodeEncodeError:
        codes = None
    if codes is None or not set(np.unique(codes).tolist()) <= _STATE_CODES:
        k = next(k for k, c in enumerate(state) if c not in ":.12")
        raise SequenceFormatError(
            f"{where}: illegal state character {state[k]!r} at position {k} (0-based); expected ':', '.', '1' or '2'",
            path=path,
            position=k,
            char=state[k],
        )
    aligned = (codes == ord(":")) | (codes == ord("."))
    in1 = aligned | (codes == ord("1"))
    in2 = aligned | (codes == ord("2"))
    i_idx = np.cumsum(in1) - 1
    j_idx = np.cumsum(in2) - 1
    for name, idx, mask, seq in (("seq1", i_idx, in1, seq1), ("seq2", j_idx, in2, seq2)):
        used = int(mask.sum())
        if used > len(seq):
            k = int(np.nonzero(mask & (idx >= len(seq)))[0][0])
            raise SequenceFormatError(
                f"{where}: state string runs past the end of {name} (length {len(seq)}) at position {k} (0-based)",
                path=path,
                position=k,
            )
        if used < len(seq):
            raise SequenceFormatError(
                f"{where}: state string ends at position {len(state)} (0-based) having used {used} of the "
                f"{len(seq)} residues of {name}",
                path=path,
                position=len(state),
            )
    return np.stack([i_idx[aligned], j_idx[aligned]], axis=1)
