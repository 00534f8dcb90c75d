"""Sequences -> alignments: the pipeline behind ``sinkalign align``.

Which pairs are aligned:

* two FASTA files, ``pairing="all"`` (every query against every target) or ``"zip"``
  (record i with record i);
* a pair list (``pairs=``): one ``query_id target_id`` pair per line (tab- or space-separated,
  further columns ignored, so the first two columns of BLAST/MMseqs2 tabular output work
  as they are; blank lines and ``#`` comments skipped), the sequences fetched from an
  indexed FASTA file (pysam ``FastaFile``; the ``.fai`` index is built beside it when
  missing).

Everything streams, so memory does not grow with the number of pairs: the query FASTA (or the
pair list) is read record by record, pairs go to the aligner in chunks of ``chunk_size``, and
each result is written as soon as it and every pair before it are done, in input order, to a
file (a temporary file beside it, renamed at the end: an interrupted run leaves no partial
output) or to standard output (``output="-"``). The target FASTA of an all-vs-all run is held
in memory (it is read for every query). ``plan_out`` is a ``.npz`` written one plan at a time.
Exceptions: SAM/BAM headers list every target (``pairing="zip"`` keeps one name and length
per pair), a ``-`` input (standard input) is first copied to a temporary file, and
``max_hits`` holds each query's best ``max_hits`` pairs until its last one is done.

Every input is checked before the first pair is aligned: records (errors name file, record and
position), equal record counts for ``zip``, every pair-list id present in the FASTA (the error
names the line), a sequence paired with itself under its own name for Stockholm (a block needs
two distinct names; two different records sharing an id are told apart from that), what a
pair list's ``.fai`` index cannot hold (whitespace inside a sequence line, a byte-order mark,
CR line ends: named with the fix), and alphabets. Without ``model`` the shipped model for the
input is used (DNA when every record is nucleotides, else protein); DNA against protein, or a file mixing
the two, is an :class:`~sinkalign.errors.AlphabetError` naming file and record. With an
explicit ``model`` such a mismatch is only logged as a warning.

On a Dask cluster (``workers=N`` for a local cluster of N processes, or ``scheduler=ADDRESS``)
chunks of pairs are tasks: each worker loads the model once (:func:`load_aligner` caches it per
process), the client keeps a bounded number of chunks in flight and writes the results in
input order, and a chunk whose worker dies is recomputed by Dask on another worker, so nothing
is lost or written twice. Each chunk is aligned by the same function with the same batches as
in a single process, so the output is identical. Model paths must be readable by every worker
(the shipped models are resolved inside each worker's own installation).
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import decimal
import gzip
import hashlib
import heapq
import io
import itertools
import logging
import math
import numbers
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sinkalign.alignment import AlignedPair, Alignment, place_hits, query_footprint, reverse_complement
from sinkalign.errors import (
    AlphabetError,
    FormatError,
    InputError,
    require,
)
from sinkalign.io.fasta import (
    open_bytes,
    open_text,
    read_fasta,
    record_alphabet,
    rna_as_dna,
    validate_residues,
)
from sinkalign.io.formats import ALIGNMENT_SUFFIXES, output_format
from sinkalign.io.writers import check_name, format_name, shared_id_message, write_alignments
from sinkalign.pipelines.runner import (
    DEFAULT_CHUNK_SIZE,
    STDIO,
    ModelSpec,
    align_chunk,
    auto_processes,
    check_outputs,
    check_processes,
    chunks,
    is_stdio,
    load_aligner,
    run_cluster,
    run_local,
    stdin_spooled,
)
from sinkalign.utils import atomic_write

__all__ = ["DEFAULT_CHUNK_SIZE", "ModelSpec", "align_chunk", "align_fasta", "load_aligner"]

log = logging.getLogger(__name__)

PAIRINGS = ("all", "zip")


# --------------------------------------------------------------------------------------
# pair sources: each scans its input once before aligning, then streams the pairs
# --------------------------------------------------------------------------------------
#: A record this long made of nucleotide codes only is DNA, not a peptide that happens to use
#: those letters: a random 30-residue peptide does so with probability ~1e-6.
STRONG_DNA = 30


class _Kinds:
    """Per input file, the first record of each alphabet, for the alphabet checks.

    A file is protein when any record is; DNA when every record is nucleotides. A file mixes
    the two when it holds protein and a nucleotide record of at least :data:`STRONG_DNA`
    residues (a shorter one is a valid peptide, aligned as protein).
    """

    def __init__(self):
        self.files: dict[str, dict[str, str]] = {}

    def add(self, path, kind: str, where: str, length: int) -> None:
        first = self.files.setdefault(str(path), {})
        first.setdefault(kind, where)
        if kind == "dna" and length >= STRONG_DNA:
            first.setdefault("strong_dna", where)

    def kind(self, path: str) -> str:
        return "protein" if "protein" in self.files[path] else "dna"

    def all(self) -> set[str]:
        return {self.kind(path) for path in self.files}

    def first(self, kind: str) -> str | None:
        """The first record of the first file of ``kind``."""
        return next((f[kind] for path, f in self.files.items() if self.kind(path) == kind), None)

    def problems(self) -> list[str]:
        """Human-readable alphabet mismatches (mixed files first, then file against file)."""
        out = [f"{path} mixes DNA and protein: {f['strong_dna']} is DNA, {f['protein']} is protein"
               for path, f in self.files.items() if "protein" in f and "strong_dna" in f]
        if not out and len(self.all()) > 1:
            out.append(f"DNA against protein: {self.first('dna')} is DNA, {self.first('protein')} is protein")
        return out


class _UniqueIds:
    """Duplicate record ids of one FASTA file, in 8 bytes a record: a hash of each id, sorted
    at the end; only a repeated hash is confirmed by reading the file again."""

    def __init__(self, path: Path):
        self.path = path
        self._hashes = array.array("q")

    def add(self, rid: str) -> None:
        self._hashes.append(hash(rid))

    def check(self) -> None:
        h = np.sort(np.frombuffer(self._hashes, np.int64)) if len(self._hashes) else np.zeros(0, np.int64)
        suspects = set(h[1:][h[1:] == h[:-1]].tolist())
        if not suspects:
            return
        first: dict[str, int] = {}
        for n, rec in enumerate(read_fasta(self.path, alphabet="auto", unique_ids=False), 1):
            if hash(rec.id) in suspects:
                if rec.id in first:
                    raise FormatError(f"{self.path}: record {rec.id!r} (#{n}): duplicate record id (first seen "
                                      f"as record #{first[rec.id]})")
                first[rec.id] = n


@dataclasses.dataclass
class _Scan:
    total: int = 0
    references: list | None = None  # (target id, length), first-seen order; only for sam/bam
    kinds: _Kinds = dataclasses.field(default_factory=_Kinds)
    targets_per_query: int = 1  # comparisons per query in every query's search (all, zip) ...
    per_query: dict[str, int] | None = None  # ... or query id -> comparisons (a pair list)
    scattered: str | None = None  # where a query's pairs stop being consecutive (a pair list), if they do
    largest: int = 0  # residue pairs of the largest pair (all-vs-all: the longest query against the longest target)

    def comparisons(self, qid: str) -> int:
        """How many pairs of this run the query ``qid`` is in (its search's size)."""
        return self.targets_per_query if self.per_query is None else self.per_query[qid]


def _max_length() -> int:
    from sinkalign.align.aligner import MAX_LENGTH

    return MAX_LENGTH


def _max_cells(dense: bool = False) -> int:
    """The most residue pairs a pair may have: past the dense limit the numpy engine solves a
    pair on a corridor; with dense plans only (``band="dense"``, or a model the numpy engine
    cannot run) it cannot."""
    from sinkalign.align.aligner import MAX_CELLS, MAX_PAIR_CELLS

    return MAX_CELLS if dense else MAX_PAIR_CELLS


def _check_length(length: int, where: str, limit: int) -> None:
    if length > limit:
        raise InputError(f"{where} has {length} residues, more than the {limit} the aligner takes; split the "
                         "sequence (into domains, or windows) first")


def _check_cells(query: tuple[str, int], target: tuple[str, int], context: str = "", dense: bool = False) -> int:
    """``query`` and ``target`` are ``(where, length)``: an error naming both when the pair
    would pass the aligner's cell budget (:data:`~sinkalign.align.aligner.MAX_PAIR_CELLS`; a
    pair past the dense limit is solved on a corridor, unless every plan is dense); else the
    pair's residue pairs."""
    limit = _max_cells(dense)
    cells = query[1] * target[1]
    if cells > limit:
        why = ("the classical alignments that guide a long pair's corridor are dense" if not dense else
               "these plans are dense (--band dense, --backend pallas, or a model the numpy engine cannot run: "
               "embedder features, the paper's dustbin); otherwise longer pairs go on a corridor")
        raise InputError(f"{query[0]} ({query[1]} residues) against {target[0]} ({target[1]}) makes {cells:,} "
                         f"residue pairs{context}, more than the {limit:,} the aligner takes ({why}); split the "
                         "longer sequence first")
    return cells


def _self_pair(fmt: str, qid: str, tid: str, where: str, *, differ: str | None = None) -> None:
    """Refuse a pair under one name for Stockholm (a block needs two): ``where`` names the pair;
    ``differ``, where given, names its two records, which are different sequences under one id
    (not a record paired with itself)."""
    if fmt == "stockholm" and qid == tid and differ is not None:
        raise InputError(f"{where + ': ' if where else ''}{shared_id_message(differ, qid, '--format ')}")
    if fmt == "stockholm" and qid == tid:
        raise InputError(
            f"{where}: pairs {qid!r} with itself, and a Stockholm block needs two distinct sequence names: "
            "give the pairs without self pairs (--pairs FILE, two ids a line), or use another --format (tsv, fasta, "
            "json, sam, bam)"
        )


def _digest(seq: str) -> bytes:
    """A short digest of a record's residues: whether two records under one id are one sequence."""
    return hashlib.blake2b(seq.encode(), digest_size=16).digest()


class _FastaPairs:
    """Pairs of records of two FASTA files (``all`` or ``zip``); ``all`` with ``prefilter=N``:
    each query with its ``N`` best targets by :func:`sinkalign.align.prefilter.best_targets`."""

    def __init__(self, query: Path, target: Path, pairing: str, prefilter: int | None = None,
                 strand: str | None = None):
        if pairing not in PAIRINGS:
            raise InputError(f"pairing={pairing!r} is not one of {PAIRINGS}")
        if prefilter is not None and (pairing != "all" or prefilter < 1):
            raise InputError(f"prefilter={prefilter} needs pairing='all' and a count >= 1")
        self.query, self.target, self.pairing = query, target, pairing
        self.prefilter, self.strand = prefilter, strand
        self.dense = False  # whether every plan is dense (Aligner.dense_only): the cell budget
        self._targets: list[tuple[str, str]] | None = None

    def scan(self, fmt: str) -> _Scan:
        scan = _Scan(references=[] if fmt in ("sam", "bam") else None)
        sam = scan.references is not None

        limit = _max_length()

        def note(path, rec, n):
            where = f"record {rec.id!r} (#{n}) of {path}"
            scan.kinds.add(path, rec.alphabet, where, len(rec))
            _check_length(len(rec), where, limit)
            check_name(fmt, rec.id, "target" if path == self.target else "query", f"record #{n} of {path}")

        if self.pairing == "all":  # the targets are held anyway; the queries are streamed
            # id -> (record number, digest of its residues: Stockholm's self-pair check alone needs it)
            tids: dict[str, tuple[int, bytes | None]] = {}
            stockholm = fmt == "stockholm"
            longest_target = ("", 0)
            for n, t in enumerate(read_fasta(self.target, alphabet="auto"), 1):
                note(self.target, t, n)
                tids[t.id] = (n, _digest(t.seq) if stockholm else None)
                if len(t) > longest_target[1]:
                    longest_target = (f"record {t.id!r} (#{n}) of {self.target}", len(t))
                if sam:
                    scan.references.append((t.id, len(t)))
            n_targets, queries = len(tids), _UniqueIds(self.query)
            scan.targets_per_query = n_targets
            for n, q in enumerate(read_fasta(self.query, alphabet="auto", unique_ids=False), 1):
                note(self.query, q, n)
                scan.largest = max(scan.largest, _check_cells((f"record {q.id!r} (#{n}) of {self.query}", len(q)),
                                                              longest_target, " (all-vs-all aligns every pair)",
                                                              self.dense))
                queries.add(q.id)
                if stockholm and q.id in tids:
                    tn, digest = tids[q.id]
                    if digest == _digest(q.seq):
                        _self_pair(fmt, q.id, q.id, f"record {q.id!r} (#{n}) of {self.query} (all-vs-all)")
                    else:
                        _self_pair(fmt, q.id, q.id, "", differ=f"record {q.id!r} (#{n}) of {self.query} and record "
                                                                f"{q.id!r} (#{tn}) of {self.target}")
                scan.total += n_targets if self.prefilter is None else min(self.prefilter, n_targets)
            queries.check()
            return scan
        refs: dict[str, int] = {}
        nq = nt = 0
        qids, tids = _UniqueIds(self.query), _UniqueIds(self.target)
        for q, t in itertools.zip_longest(read_fasta(self.query, alphabet="auto", unique_ids=False),
                                          read_fasta(self.target, alphabet="auto", unique_ids=False)):
            if q is not None:
                nq += 1
                note(self.query, q, nq)
                qids.add(q.id)
            if t is not None:
                nt += 1
                note(self.target, t, nt)
                tids.add(t.id)
                if sam:
                    refs.setdefault(t.id, len(t))
            if q is not None and t is not None:
                _self_pair(fmt, q.id, t.id, f"pair #{nq} ({self.query} x {self.target})",
                           differ=None if q.seq == t.seq else "the query and the target")
                scan.largest = max(scan.largest, _check_cells((f"record {q.id!r} (#{nq}) of {self.query}", len(q)),
                                                              (f"record {t.id!r} (#{nt}) of {self.target}", len(t)),
                                                              dense=self.dense))
        qids.check()
        tids.check()
        if nq != nt:
            raise InputError(f"--pairing zip needs equal record counts: {self.query} has {nq}, "
                             f"{self.target} has {nt}")
        scan.total = nq
        if sam:
            scan.references = list(refs.items())
        return scan

    def pairs(self, alphabet: str) -> Iterator[tuple[str, str, str, str]]:
        # the ids were checked by scan(): read in constant memory
        if self.pairing == "zip":
            for q, t in zip(read_fasta(self.query, alphabet=alphabet, unique_ids=False),
                            read_fasta(self.target, alphabet=alphabet, unique_ids=False)):
                yield q.id, q.seq, t.id, t.seq
            return
        targets = [(t.id, t.seq) for t in read_fasta(self.target, alphabet=alphabet)]
        strand = self.strand or ("both" if alphabet == "dna" else "plus")
        for q in read_fasta(self.query, alphabet=alphabet, unique_ids=False):
            if self.prefilter is None:
                kept = targets
            else:
                from sinkalign.align.prefilter import best_targets

                kept = [targets[k] for k in best_targets(q.seq, [s for _, s in targets], self.prefilter,
                                                          kind=alphabet, strand=strand)]
            for tid, tseq in kept:
                yield q.id, q.seq, tid, tseq


def _writable_dir(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


class _IndexedFasta:
    """A FASTA file read by id through its ``.fai`` index (built beside it when missing)."""

    def __init__(self, path: Path):
        import pysam

        self.path = path
        fai = Path(f"{path}.fai")
        built = False
        if fai.exists():
            if fai.stat().st_mtime < path.stat().st_mtime:
                raise InputError(f"{fai} is older than {path}: the index may not match the file; delete it "
                                 "(it is rebuilt) or rebuild it with samtools faidx")
        else:
            with open(path, "rb") as fh:
                head = fh.read(18)
            if head[:2] == b"\x1f\x8b" and not (head[3] & 4 and head[12:14] == b"BC"):  # gzip, not BGZF
                raise InputError(f"{path}: a gzip-compressed FASTA cannot be indexed for --pairs; "
                                 "decompress it, or compress it with bgzip")
            if not _writable_dir(path.parent.resolve()):
                raise InputError(f"{path}: --pairs reads the FASTA through an index, {fai.name}, which is missing "
                                 f"and cannot be built because {path.parent.resolve()} is not writable; build it "
                                 f"elsewhere (copy the FASTA to a writable directory, or run samtools faidx "
                                 f"there) and give that copy")
            built = True
        head = _unindexable_head(path)  # a byte-order mark, CR line ends: htslib's error would not say so
        if head is not None:
            raise FormatError(f"{path}: {head}")
        old = pysam.set_verbosity(0)  # htslib's own messages (a duplicate name's warning) stay off stderr
        try:
            self._fa = pysam.FastaFile(str(path))
        except (OSError, ValueError) as exc:
            where = _line_width_problem(path)
            if where is not None:  # htslib's message (off) named the line; so does this one
                raise FormatError(f"{path}: {where}") from exc
            raise FormatError(f"{path}: cannot read or index it as FASTA for --pairs ({exc}); the index needs "
                              "the same line width within each record") from exc
        finally:
            pysam.set_verbosity(old)
        self.ids = frozenset(self._fa.references)
        self._check_unique(remove_index=built)

    def _check_unique(self, *, remove_index: bool) -> None:
        """htslib keeps the first of two records with the same id (and so does an index that
        samtools faidx built beside the file); that is an error here. An index built by this
        run is removed with it, one that was there before is left alone. The same pass checks
        that the index describes this file: each record's id, length and offset (an index of
        an earlier file whose copy kept an older time, as ``cp -p`` or ``rsync -a`` keep it,
        would fetch other records' residues)."""
        seen: set[str] = set()
        found: list[tuple[str, int, int]] = []  # (id, residues, offset of its first residue)

        def close(rid, length, start):
            if rid is not None:
                found.append((rid, length, start))

        def refuse(message: str):
            self._fa.close()
            if remove_index:
                Path(f"{self.path}.fai").unlink(missing_ok=True)
            raise FormatError(f"{self.path}: {message}")

        rid, length, start, offset = None, 0, 0, 0
        with open_bytes(self.path) as fh:
            for n, line in enumerate(fh, 1):
                if line.startswith(b">"):
                    close(rid, length, start)
                    text = line[1:].decode("utf-8", "replace")
                    rid = text.split(maxsplit=1)[0] if text.strip() else ""
                    if rid in seen:
                        refuse(f"line {n}: duplicate record id {rid!r}")
                    seen.add(rid)
                    length, start = 0, offset + len(line)
                else:
                    body = line.rstrip(b"\r\n")
                    if rid is not None and _SPACE.search(body):  # htslib counts it, or fetches it as a residue
                        if body.strip():
                            refuse(_whitespace_problem(self.path, body.decode("utf-8", "replace"), n, rid))
                        body = b""  # a line of whitespace alone: a blank line
                    length += len(body)
                offset += len(line)
        close(rid, length, start)
        self._check_index(found)

    def _check_index(self, found: list[tuple[str, int, int]]) -> None:
        """:class:`InputError` unless the ``.fai`` lists the records ``found`` (empty records
        aside: htslib leaves them out)."""
        fai = Path(f"{self.path}.fai")
        found = [r for r in found if r[1]]
        indexed = []
        for line in fai.read_text(encoding="utf-8", errors="replace").splitlines():
            cols = line.split("\t")
            try:
                indexed.append((cols[0], int(cols[1]), int(cols[2])))
            except (IndexError, ValueError):
                indexed.append((line[:40], -1, -1))
        indexed = [r for r in indexed if r[1]]
        for k in range(max(len(found), len(indexed))):
            want = found[k] if k < len(found) else None
            got = indexed[k] if k < len(indexed) else None
            if want != got:
                self._fa.close()
                what = (f"record #{k + 1} is {want[0]!r} of {want[1]} residues at byte {want[2]} in the file"
                        if want else f"the file has {len(found)} records")
                says = (f"the index says {got[0]!r} of {got[1]} residues at byte {got[2]}" if got
                        else f"the index lists {len(indexed)}")
                raise InputError(f"{fai} does not match {self.path} ({what}; {says}): delete it (it is rebuilt) "
                                 "or rebuild it with samtools faidx")

    def fetch(self, rid: str) -> str:
        return self._fa.fetch(rid).upper()


_WIDTHS = ("--pairs reads the FASTA through a .fai index, which needs every line of a record but its last to "
           "have one width: rewrap it")
#: ASCII whitespace but a line's end (in bytes, in text): a .fai index cannot skip it inside a sequence line
_SPACE = re.compile(rb"[ \t\v\f\r]")
_SPACE_TEXT = re.compile(r"[ \t\v\f\r]")


def _line_width_problem(path: Path) -> str | None:
    """Where ``path`` breaks the rule of a ``.fai`` index, every line of a record but its last of
    one width, or holds whitespace inside a sequence line: ``line N: record 'id' ...`` and what
    to do, or ``None``. (Whitespace breaks the widths too; it is named as what it is.)"""
    with open_text(path) as fh:
        rid, width, short = None, None, None
        for n, line in enumerate(fh, 1):
            if line.startswith(">"):
                rid, width, short = (line[1:].split(maxsplit=1) or [""])[0], None, None
                continue
            body = line.rstrip("\n")
            if rid is not None and _SPACE_TEXT.search(body):
                if body.strip():
                    return _whitespace_problem(path, body, n, rid)
                body = ""  # a line of whitespace alone: a blank line
            size = len(body)
            if rid is None or (short is not None and not size):
                continue
            if short is not None:
                return f"line {n}: record {rid!r} goes on after line {short}, which is shorter; {_WIDTHS}"
            if width is None and size:
                width = size
            elif not size or size < width:
                short = n
            elif size > width:
                return f"line {n}: record {rid!r} has a line longer than its first ({width} characters); {_WIDTHS}"
    return None


def _whitespace_problem(path: Path, body: str, n: int, rid: str | None) -> str:
    """What to say of whitespace inside sequence line ``n`` (``body``, its end stripped) of
    record ``rid`` of ``path``: where (1-based column), why ``--pairs`` cannot read it, how to
    fix it."""
    column = _SPACE_TEXT.search(body).start() + 1
    char = body[column - 1]
    what = {" ": "a space", "\t": "a tab", "\r": "a carriage return (CR)"}.get(char, f"whitespace {char!r}")
    return (f"line {n}, column {column}: record {rid!r} has {what} inside its sequence; --pairs reads the FASTA "
            "through a .fai index, which cannot skip whitespace there (it would fetch the wrong residues; "
            f"all-vs-all reading drops it): remove it and rewrap the records, e.g. `seqkit seq -g -w 60 {path} > "
            "fixed.fa` (-g drops spaces, tabs and gap characters)")


def _unindexable_head(path: Path) -> str | None:
    """What at the start of ``path`` (decompressed) a ``.fai`` index cannot read, with the fix: a
    UTF-8 byte-order mark, or classic Mac line ends (CR alone); ``None`` where neither. Both are
    read all-vs-all, but htslib cannot skip a BOM (its first byte is no '>') and takes a file of
    CR line ends for one line."""
    with open_bytes(path) as fh:
        head = fh.read(1 << 16)
        again = " on the decompressed file, compressed again with bgzip" if isinstance(fh, gzip.GzipFile) else ""
    if head.startswith(b"\xef\xbb\xbf"):
        return ("starts with a UTF-8 byte-order mark (BOM, the bytes EF BB BF some Windows editors write); --pairs "
                "reads the FASTA through a .fai index, which cannot skip it (all-vs-all reading does): remove it, "
                f"e.g. `sed -i '1s/^\\xEF\\xBB\\xBF//' {path}`{again}")
    cr = head.find(b"\r")
    if 0 <= cr < len(head) - 1 and head[cr + 1:cr + 2] != b"\n" and b"\n" not in head[:cr]:
        return ("its lines end in CR alone (classic Mac line ends); --pairs reads the FASTA through a .fai index, "
                "which needs LF (or CRLF) line ends (all-vs-all reading takes CR): convert them, e.g. "
                f"`tr '\\r' '\\n' < {path} > fixed.fa` (or mac2unix){again}")
    return None


def _protein_stop(seq: str, alphabet: str) -> str:
    return seq[:-1] if alphabet == "protein" and seq.endswith("*") and len(seq) > 1 else seq


class _ListedPairs:
    """The pairs of a pair list, sequences fetched by id from indexed FASTA."""

    def __init__(self, pairs: Path, query: Path, target: Path | None):
        self.path = pairs
        self.dense = False  # whether every plan is dense (Aligner.dense_only): the cell budget
        self.qfa = _IndexedFasta(query)
        self.tfa = self.qfa if target is None or Path(target).resolve() == Path(query).resolve() \
            else _IndexedFasta(target)

    def _lines(self) -> Iterator[tuple[int, str, str]]:
        with open_text(self.path) as fh:
            try:
                for n, line in enumerate(fh, 1):
                    text = line.strip()
                    if not text or text.startswith("#"):
                        continue
                    fields = text.split()
                    if len(fields) < 2:
                        raise FormatError(f"{self.path}: line {n}: expected a query id and a target id "
                                          f"(tab- or space-separated), found {text[:60]!r}")
                    yield n, fields[0], fields[1]
            except UnicodeDecodeError as exc:
                raise FormatError(f"{self.path}: not a text pair list ({exc})") from exc

    def scan(self, fmt: str) -> _Scan:
        scan = _Scan(references=[] if fmt in ("sam", "bam") else None)
        refs: dict[str, int] = {}
        scan.per_query = {}
        last_qid = None
        checked: dict[tuple[int, str], int] = {}  # (which FASTA, id) -> residues; one fetch per id
        limit = _max_length()
        for n, qid, tid in self._lines():
            for role, fa, rid in (("query", self.qfa, qid), ("target", self.tfa, tid)):
                if rid not in fa.ids:
                    why = "is an empty record of" if _has_header(fa.path, rid) else "is not in"  # the index skips those
                    raise InputError(f"{self.path}: line {n}: {role} id {rid!r} {why} {fa.path}")
                if (id(fa), rid) not in checked:
                    raw = fa.fetch(rid)
                    where = f"record {rid!r} of {fa.path}"
                    kind = record_alphabet(raw)
                    seq = _protein_stop(raw, kind)
                    validate_residues(seq, kind, where=f"{fa.path}: record {rid!r}", path=fa.path, record_id=rid)
                    _check_length(len(seq), where, limit)
                    checked[id(fa), rid] = len(seq)
                    scan.kinds.add(fa.path, kind, where, len(seq))
            differ = None
            if fmt == "stockholm" and qid == tid and self.tfa is not self.qfa \
                    and self.qfa.fetch(qid) != self.tfa.fetch(tid):  # one id in two files, two sequences
                differ = f"query {qid!r} of {self.qfa.path} and target {tid!r} of {self.tfa.path}"
            _self_pair(fmt, qid, tid, f"{self.path}: line {n}", differ=differ)
            check_name(fmt, qid, "query", f"{self.path}: line {n}")
            check_name(fmt, tid, "target", f"{self.path}: line {n}")
            scan.largest = max(scan.largest, _check_cells(
                (f"record {qid!r} of {self.qfa.path}", checked[id(self.qfa), qid]),
                (f"record {tid!r} of {self.tfa.path}", checked[id(self.tfa), tid]), f" ({self.path}: line {n})",
                self.dense))
            if scan.references is not None:
                refs.setdefault(tid, checked[id(self.tfa), tid])
            if qid != last_qid and qid in scan.per_query and scan.scattered is None:
                scan.scattered = f"{self.path}: line {n}: query {qid!r} again after other queries"
            last_qid = qid
            scan.per_query[qid] = scan.per_query.get(qid, 0) + 1
            scan.total += 1
        if scan.references is not None:
            scan.references = list(refs.items())
        return scan

    def pairs(self, alphabet: str) -> Iterator[tuple[str, str, str, str]]:
        for _, qid, tid in self._lines():
            yield (qid, _protein_stop(self.qfa.fetch(qid), alphabet), tid,
                   _protein_stop(self.tfa.fetch(tid), alphabet))


def _has_header(path, rid: str) -> bool:
    """Whether a FASTA file has a record named ``rid`` (its header's first word)."""
    with open(path, "rb") as handle:
        return any(line.startswith(b">") and line[1:].split(maxsplit=1)[:1] == [rid.encode()] for line in handle)


# --------------------------------------------------------------------------------------
# alphabets: which model, and whether the input fits it
# --------------------------------------------------------------------------------------
def _check_alphabets(scan: _Scan, model_alphabet: str | None) -> str:
    """The alphabet to align in: the model's, or (no model given) the input's."""
    problems = scan.kinds.problems()
    if model_alphabet is None:
        if problems:
            raise AlphabetError(f"{problems[0]}; no single shipped model fits both (give --model to align "
                                "them with one model anyway)")
        return "dna" if scan.kinds.all() == {"dna"} else "protein"
    other = "protein" if model_alphabet == "dna" else "dna"
    first = scan.kinds.first(other)
    # protein letters have no nucleotide code: an error, with no warning saying the same before it
    if model_alphabet == "dna" and first is not None:
        raise AlphabetError(f"the given model is a DNA model and {first} is protein: it cannot be encoded "
                            "with the DNA alphabet")
    for problem in problems:
        log.warning("%s; aligning with the given %s model anyway", problem, model_alphabet)
    if first is not None and not problems:
        log.warning("the given model is a %s model, but %s is %s", model_alphabet, first, other)
    return model_alphabet


# --------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------


class _PlanWriter:
    """Transport plans into an ``.npz`` (a ZIP of ``.npy`` members, deflated, as
    ``numpy.savez_compressed`` writes), one member ``{query_id}|{target_id}|{index}.npy`` per
    pair, written as the plans arrive.

    A ZIP ends with a central directory listing every member; :mod:`zipfile` keeps it in memory
    (~400 bytes per member), so here each entry is spooled to a temporary file and copied to
    the end on :meth:`close`: memory stays flat however many plans are written. ZIP64 records
    are used where offsets or the member count outgrow the classic format.
    """

    _U32, _U16 = 0xFFFFFFFF, 0xFFFF
    _ZIP64_AT = 0xFFFFFFFF  # offsets and sizes from here on need ZIP64 records (a test lowers it)

    def __init__(self, handle):
        self._out = handle
        self._offset = 0
        self._count = 0
        self._directory = tempfile.TemporaryFile()

    def add(self, key: str, plan: np.ndarray) -> None:
        import struct
        import zlib

        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.ascontiguousarray(plan, dtype=np.float32), allow_pickle=False)
        raw = buf.getvalue()
        packer = zlib.compressobj(6, zlib.DEFLATED, -15)
        data = packer.compress(raw) + packer.flush()
        crc, name = zlib.crc32(raw), f"{key}.npy".encode()
        if len(raw) >= self._U32 or len(data) >= self._U32:
            raise InputError(f"plan {key} is too large for --plan-out ({len(raw)} bytes)")
        # local header: version 4.5, UTF-8 names, deflate, DOS date 1980-01-01
        self._out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0x800, 8, 0, 0x21, crc, len(data), len(raw),
                                    len(name), 0) + name)
        self._out.write(data)
        extra = b""
        offset = self._offset
        if offset >= self._ZIP64_AT:  # ZIP64 extended information: the header offset only
            extra, offset = struct.pack("<HHQ", 0x0001, 8, self._offset), self._U32
        self._directory.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0x800, 8, 0, 0x21, crc,
                                          len(data), len(raw), len(name), len(extra), 0, 0, 0, 0, offset)
                              + name + extra)
        self._offset += 30 + len(name) + len(data)
        self._count += 1

    def close(self) -> None:
        import struct

        start, size = self._offset, self._directory.tell()
        self._directory.seek(0)
        shutil.copyfileobj(self._directory, self._out, 1 << 20)
        self._directory.close()
        end = start + size
        zip64 = start >= self._ZIP64_AT or size >= self._ZIP64_AT
        if self._count >= self._U16 or zip64:
            # ZIP64 end of central directory record and its locator
            self._out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, self._count, self._count,
                                        size, start))
            self._out.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
        self._out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(self._count, self._U16),
                                    min(self._count, self._U16), self._U32 if zip64 else size,
                                    self._U32 if zip64 else start, 0))


def plan_key(query_id: str, target_id: str, index: int) -> str:
    """A plan's name in a ``--plan-out`` file: ``query|target|index``, where ``%`` and ``|``
    in an id are written ``%25`` and ``%7C`` (ids such as UniProt's ``sp|P69905|HBA_HUMAN``
    hold ``|``), so that ``urllib.parse.unquote`` of each ``|``-separated field gives the ids
    back; other ids are written as they are."""
    def quote(rid: str) -> str:
        return rid.replace("%", "%25").replace("|", "%7C")

    return f"{quote(query_id)}|{quote(target_id)}|{index}"


@contextlib.contextmanager
def _plan_sink(plan_out):
    if plan_out is None:
        yield None
        return
    with atomic_write(plan_out, "wb") as handle:
        writer = _PlanWriter(handle)
        yield writer
        writer.close()



# --------------------------------------------------------------------------------------
# the pipeline
# --------------------------------------------------------------------------------------
def _best_per_query(stream, max_hits: int):
    """The ``max_hits`` items of smallest E-value of each run of one query in ``stream`` (items
    ``(index, plan, AlignedPair)``), best first (by the E-value's log: E-values that underflow
    to 0 keep their order), ties in input order. At most ``max_hits`` items
    (and their plans) are held at a time, however many targets a query has. Each kept pair
    carries ``other_loci`` weighed over all the query's hits that compete with it for its part
    of the query (the MAPQ of SAM and PAF, :func:`~sinkalign.alignment.other_loci`), so that
    dropping a repeat's second copy does not make the first look unique."""
    for _, group in itertools.groupby(stream, key=lambda item: item[2].query_id):
        ranks: list[float] = []
        footprints: list = []
        lengths: list[int] = []

        def ranked(items):
            for position, item in enumerate(items):
                pair = item[2]
                ranks.append(pair.evalue_rank)
                lengths.append(max(len(pair.target), 1))
                confidence = pair.alignment.match_posterior if isinstance(pair.alignment, Alignment) else None
                footprints.append(query_footprint(pair.pairs, len(pair.query), pair.strand, confidence))
                yield position, item

        kept = heapq.nsmallest(max_hits, ranked(group), key=lambda hit: (hit[1][2].evalue_rank, hit[1][0]))
        _, shares = place_hits(ranks, footprints, lengths, of=[position for position, _ in kept])
        for k in range(len(kept)):
            index, plan, pair = kept[k][1]
            kept[k] = None  # handed on: no plan outlives its turn here
            if shares is not None:
                pair = pair._replace(other_loci=shares[k])
            yield index, plan, pair
            del plan


def log_evalue_threshold(value: float | str | decimal.Decimal) -> float:
    """The natural log of an E-value threshold, ``-inf`` for 0. A string or
    :class:`decimal.Decimal` is read exactly, so a threshold below the double range
    (``"1e-400"``, which ``float`` reads as 0) keeps its meaning: E-values are compared as logs.
    Within the double range it gives what the same number as a float gives (``"0.01"`` and
    ``0.01`` keep the same pairs)."""
    if isinstance(value, (str, decimal.Decimal)):
        try:
            exact = decimal.Decimal(value.strip() if isinstance(value, str) else value)
        except decimal.InvalidOperation:
            raise InputError(f"max_evalue={value!r} is not a number") from None
        if not exact.is_finite() or exact < 0:
            raise InputError(f"max_evalue={value!r} must be a finite number >= 0")
        if exact == 0:
            return -math.inf
        near = float(exact)  # within the double range, the log of the double the API would be given
        return math.log(near) if sys.float_info.min <= near < math.inf else float(exact.ln())
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0 or not math.isfinite(value):
        raise InputError(f"max_evalue={value!r} must be a finite number >= 0")
    return math.log(float(value)) if value > 0 else -math.inf


def align_fasta(query_fasta, target_fasta=None, *, pairs=None, output=None, fmt: str | None = None,
                pairing: str = "all", model=None, embedder: str | None = None, esm_weights=None,
                backend: str = "reference", plan_out=None, batch_size: int = 8, gap_weight: float | None = None,
                min_confidence: float | None = None, max_evalue: float | str | None = None,
                db_size: int | str | None = None, max_hits: int | None = None,
                progress: bool = False, overwrite: bool = False,
                workers: int | None = None, engine: str = "auto", threads: int | None = None,
                scheduler: str | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE, strand: str | None = None,
                prefilter: int | None = None, band: int | str | None = None, identity_weight: float | None = None,
                identity_min: float | None = None, identity_gaps: str | None = None,
                identity_move_min: float | None = None, processes: int | None = None,
                command_line: str | None = None, _task=None) -> int:
    """Align pairs of sequences and write them in ``fmt``; returns the number of records written
    (in SAM and BAM, lines: a query's unmapped line included).

    Args:
        query_fasta, target_fasta: FASTA files (``-``: standard input). Without ``pairs``,
            every query record against every target record (``pairing="all"``) or record i
            with record i (``"zip"``). With ``pairs``, ``query_fasta`` holds the sequences
            (and the targets too, unless ``target_fasta`` is given).
        pairs: a pair list (``query_id target_id`` per line, see the module docstring).
        output: output file (written atomically); ``None`` or ``-``: standard output,
            written as the pairs are done (not for ``bam``).
        fmt: one of :data:`~sinkalign.io.writers.FORMATS` (any case, or ``m8``:
            :func:`~sinkalign.io.writers.format_name`); ``None`` (default): the one
            ``output``'s extension names (:data:`~sinkalign.io.formats.ALIGNMENT_SUFFIXES`:
            ``.sam``, ``.bam``, ``.paf``, ``.m8``, ...), else ``tsv``. A format the extension
            contradicts is an error.
        plan_out: also write every transport plan (with dustbin row and column) to this
            ``.npz``, ``{query_id}|{target_id}|{index}`` per pair (see :func:`plan_key`).
        overwrite: replace an existing ``output`` / ``plan_out`` (default: refuse, before
            anything is aligned).
        command_line: the command that asked for the run, written to a SAM or BAM header as
            ``@PG CL:`` (:func:`~sinkalign.io.writers.write_alignments`; ignored by the other
            formats, which have no header for it); ``sinkalign align`` passes its own.
        workers, scheduler: run the chunks on a local Dask cluster of ``workers`` processes,
            or on the cluster whose scheduler is at ``scheduler`` (needs the ``cluster`` extra).
        chunk_size: pairs per chunk (per cluster task); ``batch_size``: pairs per aligner batch.
        gap_weight, min_confidence, identity_weight, identity_min, identity_gaps, identity_move_min: decoding
            (:class:`~sinkalign.align.aligner.Aligner`); ``None``: the model's own.
        max_evalue: write only the pairs whose E-value (as reported: see ``db_size``) is at
            most this (their plans too; a plan keeps its input index in its name); the model
            must have an E-value null. A string (``"1e-400"``) or Decimal is read exactly, below
            the double range too (:func:`log_evalue_threshold`). In ``sam`` and ``bam`` a query with no pair left is
            written once, unmapped (flag 4), after the aligned records.
        db_size: report each pair's E-value for a search of this many comparisons (the
            per-comparison E-value times ``db_size``, HMMER's ``-Z``), or ``"targets"``: for
            the number of pairs of this run its query is in (the target count of an
            all-vs-all run, 1 for ``zip``, the query's lines in a pair list). ``None`` or 1:
            per comparison.
        max_hits: keep each query's ``max_hits`` pairs of smallest E-value (after
            ``max_evalue``), written best first (ties in input order), as BLAST's
            ``-max_target_seqs``; a query's pairs must be consecutive in the input (always
            so all-vs-all and ``zip``; a pair list must be grouped by query). Its pairs are
            held until the query's last one is done (with their plans, for ``plan_out``).
        engine: the aligner's engine (:data:`~sinkalign.align.aligner.ENGINES`): ``auto``
            (``numpy`` whenever the model allows it), ``numpy`` or ``jax``.
        threads: the numpy engine's threads in a local run (default: every CPU this process
            may use; a cluster's workers use their own thread counts).
        processes: a local run's host work (the numpy engine's pairs, the jax engine's
            decoding) on this many worker processes of this machine instead of threads
            (``Aligner(processes=)``): faster than threads on many cores; the same output.
            With neither ``threads`` nor ``processes`` (nor a cluster), a run of at least
            :data:`~sinkalign.pipelines.runner.AUTO_PROCESSES_MIN_PAIRS` pairs takes one
            process per usable CPU (:func:`~sinkalign.pipelines.runner.auto_processes`; 3.2x
            threads on 16 cores), a smaller one threads, as does a run with a pair past the
            aligner's ``AUTO_BAND_CELLS`` or a call from a script's unguarded top level.
        strand: nucleotide models: ``plus``, ``minus`` or ``both`` (default; the strand of
            smaller E-value is written, with twice its E-value: two comparisons), see
            :class:`~sinkalign.align.aligner.Aligner`; an error for protein.
        prefilter: all-vs-all only: align each query with only its ``prefilter`` best targets
            by Smith-Waterman score (:mod:`sinkalign.align.prefilter`), scored in this process
            before they are aligned (also with a cluster); E-values stay per comparison, and
            ``db_size="targets"`` counts every target searched.
        band: solve every pair on a corridor of ``band`` residues around its classical
            alignments, or (``"dense"``) every pair densely (:class:`~sinkalign.align.aligner.Aligner`);
            default: dense up to ``AUTO_BAND_CELLS`` residue pairs, a ``LONG_BAND`` corridor past
            it. A banded plan goes to ``plan_out`` dense, 0 outside its corridor.

    Raises:
        InputError (FormatError, AlphabetError), OutputExistsError, DependencyError, naming
        the file, record, line or option; all raised before the first pair is aligned, except
        a failure of the aligner itself.
    """
    fmt = output_format(output, format_name(fmt), "tsv", ALIGNMENT_SUFFIXES)
    from sinkalign.align.aligner import ENGINES, strand_name

    if engine not in ENGINES:
        raise InputError(f"engine={engine!r} is not one of {ENGINES}")
    if strand is not None:
        strand = strand_name(strand)
    max_log_evalue = None if max_evalue is None else log_evalue_threshold(max_evalue)
    if db_size is not None and db_size != "targets" and not (isinstance(db_size, int) and db_size >= 1):
        raise InputError(f"db_size={db_size!r} must be a whole number >= 1 or 'targets'")
    if max_hits is not None and not (isinstance(max_hits, int) and max_hits >= 1):
        raise InputError(f"max_hits={max_hits!r} must be a whole number >= 1")
    if batch_size < 1 or chunk_size < 1:
        raise InputError(f"batch_size={batch_size} and chunk_size={chunk_size} must be >= 1")
    if workers is not None and scheduler is not None:
        raise InputError("give either workers (a local cluster) or scheduler (an existing one), not both")
    if workers is not None and workers < 1:
        raise InputError(f"workers={workers} must be >= 1")
    if threads is not None and not (isinstance(threads, int) and threads >= 1):
        raise InputError(f"threads={threads!r} must be a whole number >= 1")
    if threads is not None and (workers is not None or scheduler is not None):
        raise InputError("threads is for a local run: on a cluster each worker aligns with its own threads "
                         "(dask worker --nthreads)")
    check_processes(processes, threads, workers, scheduler)
    if workers is not None or scheduler is not None:  # before anything is read or written
        require("distributed", "cluster", "sinkalign align --workers/--scheduler")
    to_stdout = output is None or is_stdio(output)
    if to_stdout and fmt == "bam":
        raise InputError("--format bam is binary: give an output file (-o FILE)")
    if is_stdio(plan_out):
        raise InputError("--plan-out is a .npz archive: give a file, not '-'")
    if pairs is not None and is_stdio(pairs) and (is_stdio(query_fasta) or is_stdio(target_fasta)):
        raise InputError("only one input can be read from standard input ('-'): the pair list or the FASTA")
    if pairs is None and target_fasta is None:
        raise InputError("give a query and a target FASTA file (or a pair list)")
    inputs = [Path(p) for p in (query_fasta, target_fasta, pairs) if p is not None and not is_stdio(p)]
    check_outputs([(STDIO if to_stdout else output, "output"), (plan_out, "--plan-out")], overwrite, inputs)
    if band is not None:  # before anything is read or written
        from sinkalign.align.aligner import check_band

        band = check_band(band)

    with stdin_spooled([query_fasta, target_fasta, pairs]) as (qpath, tpath, ppath):
        if prefilter is not None and (ppath is not None or pairing != "all"):
            raise InputError("--prefilter picks each query's targets in an all-vs-all run: not with --pairs or "
                             "--pairing zip")
        source = (_ListedPairs(ppath, qpath, tpath) if ppath is not None
                  else _FastaPairs(qpath, tpath, pairing, prefilter, strand))
        spec, model_alphabet = None, None
        # the aligner's settings, whichever model it loads
        options = dict(backend=backend, gap_weight=gap_weight, embedder=embedder,
                       esm_weights=None if esm_weights is None else str(esm_weights), min_confidence=min_confidence,
                       engine=engine, threads=threads, processes=processes, strand=strand, band=band,
                       identity_weight=identity_weight, identity_min=identity_min, identity_gaps=identity_gaps,
                       identity_move_min=identity_move_min)
        if model is not None:  # load it first: a bad model fails fast, and its alphabet is known
            from sinkalign.align.aligner import resolve_model

            spec = ModelSpec(str(resolve_model(model).resolve()), **options)
            loaded = load_aligner(spec)
            model_alphabet = loaded.config.alphabet
            source.dense = loaded.dense_only
        if backend != "reference" or band == "dense":  # (the shipped models, loaded later: only these)
            source.dense = True
        scan = source.scan(fmt)
        alphabet = _check_alphabets(scan, model_alphabet)
        if strand not in (None, "plus") and alphabet != "dna":
            raise InputError(f"--strand {strand}: strands are for nucleotide sequences and models; these are "
                             f"aligned with a {alphabet} model, as given")
        shipped = spec is None
        if shipped:
            spec = ModelSpec(None, alphabet, **options)
        n_auto = auto_processes(scan.total, largest_cells=scan.largest, threads=threads, processes=processes,
                                workers=workers, scheduler=scheduler)
        if n_auto is not None:  # a large local run: worker processes, not threads
            spec = dataclasses.replace(spec, processes=n_auto)
        if shipped and scheduler is None and workers is None:
            load_aligner(spec)  # the shipped model, loaded before the first pair
        # what weighs a query's pairs together reads them as one run (in SAM, BAM and PAF a second
        # run of a query would get a primary line and a MAPQ of its own)
        if scan.scattered is not None and (max_hits is not None or fmt in ("sam", "bam", "paf")):
            why = ("--max-hits keeps the best pairs of each query, which must be consecutive" if max_hits is not None
                   else f"{fmt.upper()} marks each query's best hit primary and weighs its MAPQ against the query's "
                        "other hits, so a query's pairs must be consecutive")
            raise InputError(f"{why}: {scan.scattered}; sort the pair list by query (e.g. sort -s -k1,1)")
        for option, value in (("--max-evalue", max_evalue), ("--db-size", db_size), ("--max-hits", max_hits)):
            if value is not None and load_aligner(spec).significance is None:
                raise InputError(f"{option}: the model {spec.path or 'shipped for ' + alphabet} has no E-value null "
                                 "(fit one with `sinkalign fit-evalues`)")
        keep_plan = plan_out is not None
        pairs = source.pairs(alphabet)
        if alphabet == "dna":  # U as T in the outputs too (identity, SAM SEQ), as the aligner reads it
            pairs = ((qid, rna_as_dna(q), tid, rna_as_dna(t)) for qid, q, tid, t in pairs)
        work = chunks(pairs, chunk_size)
        if scheduler is None and workers is None:
            results = run_local(spec, work, batch_size, keep_plan, _task or align_chunk)
        else:
            results = run_cluster(spec, work, batch_size, keep_plan, scheduler, workers, _task or align_chunk)

        from tqdm import tqdm

        with _plan_sink(plan_out) as plans, tqdm(total=scan.total, disable=not progress, unit="pair",
                                                  file=sys.stderr) as bar:

            # SAM/BAM: a query whose every pair --max-evalue drops is still written, once and unmapped
            # (flag 4), as every read is in a mapper's SAM; one dropped pair of each query is kept for it
            dropped: dict[str, AlignedPair] | None = {} if fmt in ("sam", "bam") else None

            def hits():  # (input index, plan, pair) of the pairs that pass max_evalue
                index = 0
                for chunk, out in results:
                    for (qid, q, tid, t), (aln, plan, evalue, strand, log_evalue) in zip(chunk, out):
                        index += 1
                        pair = AlignedPair(qid, reverse_complement(q) if strand == "-" else q, tid, t, aln,
                                           aln.score, None, evalue, strand, log_evalue, alphabet=alphabet)
                        if db_size is not None:
                            pair = pair.evalue_times(scan.comparisons(qid) if db_size == "targets" else db_size)
                        if max_evalue is not None and not pair.evalue_rank <= max_log_evalue:
                            # compared as logs: an E-value under 1e-308 is no 0 that passes --max-evalue 0
                            if dropped is not None and qid not in dropped:
                                dropped[qid] = AlignedPair(qid, q, tid, t, np.zeros((0, 2), np.int64), 0.0,
                                                           alphabet=alphabet)
                            continue
                        yield index - 1, plan, pair
                    bar.update(len(chunk))
                if index != scan.total:  # every pair exactly once, checked before the output is kept
                    raise RuntimeError(f"aligned {index} pairs of {scan.total}")

            def records():
                stream = hits()
                if max_hits is not None:
                    stream = _best_per_query(stream, max_hits)
                for index, plan, pair in stream:
                    if plans is not None:
                        plans.add(plan_key(pair.query_id, pair.target_id, index), plan)
                    yield pair
                # last, as the writer puts its unmapped lines: it writes none for a query aligned elsewhere
                yield from dropped.values() if dropped else ()

            target = sys.stdout if to_stdout else output
            try:
                n = write_alignments(records(), target, fmt, references=scan.references, overwrite=overwrite,
                                     command_line=command_line if fmt in ("sam", "bam") else None)
            finally:
                results.close()
            if to_stdout:
                sys.stdout.flush()
    return n
