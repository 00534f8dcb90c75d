"""Stockholm markup kept through an edit of the alignment, and the Stockholm writer of the
multiple aligner.

:func:`~sinkalign.io.alignments.read_stockholm` reads a Stockholm file's rows (through
Biopython); everything else in the file - the ``#=GF`` family lines (Pfam's and Rfam's
identifiers, accessions, descriptions, references, thresholds), the ``#=GS`` lines of each
sequence (accession, description, database references), the ``#=GC`` column annotations
(``SS_cons``, ``RF``, ``seq_cons``, ``PP_cons``) and the ``#=GR`` residue annotations (``SS``,
``PP``, ``AS``) - is :class:`StockholmMarkup`, read as written by
:func:`read_stockholm_markup`. When records are added to an alignment
(``sinkalign msa --add-to``), :meth:`StockholmMarkup.spread` moves the column and residue
annotations to the columns the alignment's columns now have, ``.`` ("no annotation"; an
insert column on an ``RF`` line) in the new columns, and :func:`write_stockholm` writes
them back, so that nothing the file held is lost.

Biopython's ``Bio.Align`` Stockholm parser would keep the markup too, but it rejects
several real Pfam and Dfam files (the shared ``pfam_seed`` set: ``RRM_1``, ``Pkinase``,
``SMC_N``, ``MADE1``), and ``Bio.AlignIO``'s writer invents an accession for every row
(``#=GS id AC id``); hence this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from sinkalign.io.fasta import SequenceFormatError, open_text

__all__ = ["StockholmMarkup", "read_stockholm_markup", "write_stockholm"]

_SQ = re.compile(r"^#=GF\s+SQ(\s|$)")


@dataclass(frozen=True)
class StockholmMarkup:
    """The markup of one Stockholm alignment, as written.

    Attributes:
        file: the ``#=GF`` lines (without ``#=GF SQ``, the number of sequences, which a
            writer states afresh) and any other comment lines after the header, in file order.
        sequences: the ``#=GS`` lines, in file order.
        columns: ``#=GC`` tag -> its annotation, the blocks of an interleaved file joined, one
            character per column; in file order.
        residues: row id -> {``#=GR`` tag -> annotation, one character per column}.
        rows: row id -> the row as written (gap characters ``.`` and ``-`` and letter case kept).
    """

    file: tuple[str, ...] = ()
    sequences: tuple[str, ...] = ()
    columns: Mapping[str, str] = field(default_factory=dict)
    residues: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    rows: Mapping[str, str] = field(default_factory=dict)

    def descriptions(self) -> dict[str, str]:
        """Each row's ``#=GS id DE`` text (several ``DE`` lines of one row joined by a space);
        rows without one are left out."""
        out: dict[str, list[str]] = {}
        for line in self.sequences:
            parts = line.split(None, 3)
            if len(parts) == 4 and parts[2] == "DE":
                out.setdefault(parts[1], []).append(parts[3].strip())
        return {name: " ".join(texts) for name, texts in out.items()}

    def spread(self, place: Sequence[int], width: int) -> StockholmMarkup:
        """This markup on an alignment of ``width`` columns in which column ``c`` of this one is
        column ``place[c]`` (increasing): each annotation's characters moved there, ``.`` in the
        other columns; rows likewise, ``.`` (a gap in a column no existing row was aligned in)
        in the new columns. Raises ``ValueError`` when ``place`` does not fit the rows."""
        place = np.asarray(place, np.int64)
        if place.size and (np.any(np.diff(place) <= 0) or place[0] < 0 or place[-1] >= width):
            raise ValueError(f"place must increase within [0, {width}), got {place.tolist()[:8]}...")

        def moved(text: str) -> str:
            out = np.full(width, ord("."), np.uint8)
            out[place] = np.frombuffer(text.encode("ascii"), np.uint8)
            return out.tobytes().decode("ascii")

        for name, row in self.rows.items():
            if len(row) != place.size:
                raise ValueError(f"row {name!r} has {len(row)} columns, the column map {place.size}")
        return StockholmMarkup(self.file, self.sequences, {tag: moved(t) for tag, t in self.columns.items()},
                               {name: {tag: moved(t) for tag, t in tags.items()} for name, tags in self.residues.items()},
                               {name: moved(row) for name, row in self.rows.items()})


def read_stockholm_markup(path: str | os.PathLike) -> StockholmMarkup:
    """The markup (:class:`StockholmMarkup`) of the first alignment of a (possibly gzipped)
    Stockholm file, as written (the rows themselves are read by
    :func:`~sinkalign.io.alignments.read_stockholm`, which checks them).

    Raises:
        SequenceFormatError: a ``#=GC`` or ``#=GR`` annotation whose length is not the
            alignment's (naming the file, the line where it starts and its tag): no column
            could be given its characters.
    """
    path = Path(path)
    file: list[str] = []
    sequences: list[str] = []
    columns: dict[str, list[str]] = {}
    residues: dict[str, dict[str, list[str]]] = {}
    rows: dict[str, list[str]] = {}
    first: dict[tuple[str, ...], int] = {}  # where each annotation starts, for the error message
    with open_text(path, lenient=True, warn=False) as handle:  # (read_stockholm warns of it)
        for line_no, raw in enumerate(handle, 1):
            line = raw.rstrip("\r\n")
            stripped = line.strip()
            if not stripped or stripped.startswith("# STOCKHOLM"):
                continue
            if stripped == "//":
                break
            if stripped.startswith("#=GF"):
                if not _SQ.match(stripped):
                    file.append(line)
            elif stripped.startswith("#=GS"):
                sequences.append(line)
            elif stripped.startswith("#=GC"):
                parts = stripped.split(None, 2)
                if len(parts) == 3:
                    first.setdefault(("GC", parts[1]), line_no)
                    columns.setdefault(parts[1], []).append(parts[2].replace(" ", ""))
            elif stripped.startswith("#=GR"):
                parts = stripped.split(None, 3)
                if len(parts) == 4:
                    first.setdefault(("GR", parts[1], parts[2]), line_no)
                    residues.setdefault(parts[1], {}).setdefault(parts[2], []).append(parts[3].replace(" ", ""))
            elif stripped.startswith("#"):
                file.append(line)
            else:
                parts = stripped.split(None, 1)
                rows.setdefault(parts[0], []).append(parts[1].replace(" ", "") if len(parts) == 2 else "")
    joined_rows = {name: "".join(parts) for name, parts in rows.items()}
    widths = {len(row) for row in joined_rows.values()}
    width = widths.pop() if len(widths) == 1 else None
    joined_columns = {tag: "".join(parts) for tag, parts in columns.items()}
    joined_residues = {name: {tag: "".join(parts) for tag, parts in tags.items()} for name, tags in residues.items()}
    if width is not None:
        for tag, text in joined_columns.items():
            if len(text) != width:
                raise SequenceFormatError(f"{path}: line {first[('GC', tag)]}: the #=GC {tag} annotation has "
                                          f"{len(text)} characters, the alignment {width} columns", path=path)
        for name, tags in joined_residues.items():
            for tag, text in tags.items():
                if len(text) != width:
                    raise SequenceFormatError(f"{path}: line {first[('GR', name, tag)]}: the #=GR {name} {tag} "
                                              f"annotation has {len(text)} characters, the alignment {width} columns",
                                              path=path, record_id=name)
    return StockholmMarkup(tuple(file), tuple(sequences), joined_columns, joined_residues, joined_rows)


def write_stockholm(handle: IO[str], ids: Sequence[str], rows: Sequence[str], *,
                    markup: StockholmMarkup | None = None, descriptions: Mapping[str, str] | None = None,
                    residues: Mapping[str, Mapping[str, str]] | None = None,
                    columns: Mapping[str, str] | None = None) -> None:
    """Write one alignment as Stockholm 1.0, in one block: ``markup``'s ``#=GF`` lines, then
    ``#=GF SQ`` (the number of rows), ``markup``'s ``#=GS`` lines and a ``#=GS id DE`` line for
    each row of ``descriptions`` that ``markup`` does not describe, then each row (``markup``'s
    own spelling of it where it has the row with the same residues, else as given) followed by
    its ``#=GR`` lines (``markup``'s, then those of ``residues`` whose tag ``markup`` does not
    have for the row), then the ``#=GC`` lines (``markup``'s, then those of ``columns`` it does
    not have), and ``//``. Names are padded to one width, as HMMER writes them."""
    markup = markup or StockholmMarkup()
    ids, rows = list(ids), [str(r) for r in rows]
    width = len(rows[0]) if rows else 0
    if len(ids) != len(rows) or any(len(r) != width for r in rows):
        raise ValueError("write_stockholm needs one row per id, all of one length")
    described = set(markup.descriptions())
    gr: dict[str, dict[str, str]] = {}
    for name in ids:
        tags = dict(markup.residues.get(name, {}))
        for tag, text in (residues or {}).get(name, {}).items():
            tags.setdefault(tag, text)
        gr[name] = tags
    gc = dict(markup.columns)
    for tag, text in (columns or {}).items():
        gc.setdefault(tag, text)
    for text in [*gc.values(), *(t for tags in gr.values() for t in tags.values())]:
        if len(text) != width:
            raise ValueError(f"an annotation of {len(text)} characters for an alignment of {width} columns")
    labels = ids + [f"#=GR {name} {tag}" for name in ids for tag in gr[name]] + [f"#=GC {tag}" for tag in gc]
    pad = max(map(len, labels)) + 1
    lines = ["# STOCKHOLM 1.0", *markup.file, f"#=GF SQ {len(ids)}", *markup.sequences]
    lines += [f"#=GS {name} DE {text}" for name, text in (descriptions or {}).items()
              if text and name not in described and name in ids]
    lines.append("")
    for name, row in zip(ids, rows):
        written = markup.rows.get(name)
        same = written is not None and len(written) == width and written.replace(".", "-") == row
        lines.append(f"{name:<{pad}}{written if same else row}")
        lines += [f"{f'#=GR {name} {tag}':<{pad}}{text}" for tag, text in gr[name].items()]
    lines += [f"{f'#=GC {tag}':<{pad}}{text}" for tag, text in gc.items()]
    lines.append("//")
    handle.write("\n".join(lines) + "\n")
