"""Writers for pairwise alignments: FASTA, TSV, SAM, BAM, Stockholm, JSON Lines, text.

Input is a stream of records ``(query_id, query, target_id, target, alignment, score)``
(:class:`AlignedPair` or any 6-tuple). ``alignment`` is an
:class:`~sinkalign.alignment.Alignment` (posteriors known), any object with ``.pairs``
(e.g. a baseline result), or a pair array ``[k, 2]`` of 0-based aligned residue indices.
``score=None`` takes ``alignment.score`` when there is one, else it is missing (NaN).
Every output is written atomically (temporary file beside the destination, then rename).

A nucleotide pair aligned on the minus strand (:class:`AlignedPair` with ``strand="-"``, whose
``query`` is the reverse complement of the query as given) is written as each format writes a
reverse-strand hit: SAM/BAM flag 16 with that reverse complement as SEQ (pysam's
``get_forward_sequence()`` gives the query back) and the CIGAR along it; TSV and JSON spans on
the query as given (PAF's convention), with a ``strand`` column / key; blast6 with the query
forward and the target's positions descending (BLAST's); ``strand=-`` in the FASTA
descriptions, the Stockholm ``#=GF CC`` line and the text format's ``#`` line, whose query rows
are numbered on the query as given (descending). The gapped rows (FASTA, Stockholm, JSON, text)
show the query as aligned.

Formats (:data:`FORMATS`):

* ``fasta``: each pair as two gapped records (query then target, global layout), in input
  order; descriptions ``aligned_to=<other id> score=<score>`` (and ``evalue=<E>`` when known).
* ``tsv``: one row per pair, header ``query target score identity aligned_length
  query_start query_end target_start target_end cigar mean_posterior evalue strand``. Spans are 0-based
  half-open; identity is percent of aligned pairs that are identical; the CIGAR is the
  SAM-style local one (soft clips for unaligned query ends, target span from
  ``target_start``); the E-value (:mod:`sinkalign.align.significance`) when the model has a
  fitted null; ``*`` / ``NA`` when nothing is aligned or a value is unknown.
* ``sam`` / ``bam`` (pysam): targets are the references (``@SQ`` with their lengths, in
  first-seen order; one id must always carry the same sequence), the query is the read;
  ``@PG`` names sinkalign, its version and the command (``CL``, when given:
  ``sinkalign align`` gives its own).
  POS = first aligned target residue, CIGAR local with soft clips, MAPQ =
  ``min(60, round(-10 log10 P(wrong)))``, ``P(wrong) = 1 - (1 - o) * mean posterior * e^-E``
  (``e^-E``: the chance that no unrelated pair scores as well; 1 without an E-value), where
  ``o`` is the chance that the query belongs to another hit of its part of the query (below)
  in the same run of records, the hits weighed by ``1 / E`` per residue of their targets
  (:func:`~sinkalign.alignment.other_loci`: in one search space, as a database search's
  E-values are) (a repeat's
  two copies get MAPQ 3 each, the two halves of a chimeric read keep theirs; ``o = 0``
  without E-values; a query met again after other queries, as a ``--pairs`` list may, is
  weighed on that later run's hits alone), and 255 = unavailable when the posterior is
  unknown; tags ``AS``
  (``i``, the score rounded: the SAM spec's type; a score that is no whole number is also in
  ``ZS:f``), ``XP:f`` (mean
  posterior), ``NM:i`` (mismatches + inserted + deleted residues), ``ZE:f`` (the E-value, when
  known; as GraphMap and DIAMOND write it; a ``f`` tag is float32 in SAM and BAM, so below
  ~1e-45 it reads 0: the TSV, blast6, PAF and text outputs print smaller E-values from their logs). A
  query with nothing aligned in any of its pairs is written once, unmapped (flag 4), after the
  aligned records (``sinkalign align`` passes one such record for a query whose every pair
  ``--max-evalue`` dropped); a pair without aligned residues of a query aligned elsewhere is not written
  (SAM wants exactly one primary line per read). A query's best hit (smallest E-value; the first
  aligned record without E-values) is its primary alignment. Taken best first, a hit competes
  with a part already taken when it holds more than half of the lesser one's confidence on the
  same stretches of the query as the part's best hit does (minimap2's ``mm_set_parent`` and
  ``--mask-level`` 0.5, on confidence mass: :func:`~sinkalign.alignment.query_parts`, so that a
  trail of unlikely columns past a homologous segment places nothing); a hit that competes with
  none starts another part, written supplementary (flag 2048) when its E-value is at most
  :data:`SUPPLEMENTARY_EVALUE` (1e-3; a chance hit on a stretch no better hit covers stays
  secondary), as minimap2 and BWA write a chimeric read, and the others are secondary (flag
  256). The primary and supplementary lines each carry ``SA:Z``
  with the other parts (``rname,pos,strand,CIGAR,mapQ,NM;``, best first; a reference name
  with ``;`` makes it ambiguous and is warned of). Every line keeps its soft clips and whole
  SEQ (minimap2 ``-Y`` writes supplementary lines so; its secondary lines have SEQ ``*``).
  A pair is one alignment, so two parts on one reference (an inversion, a long deletion) are
  no supplementary lines. Each run of a query's consecutive records (all its pairs
  all-vs-all, or with ``--max-hits``) is held until it ends; a query met again after other
  queries keeps the primary it has (its later lines are all secondary). BAM
  stores SEQ in a 4-bit nucleotide code, so a protein read gets SEQ ``*`` and its residues in
  the ``XQ:Z`` tag (same rule in SAM so the two round-trip identically), even one whose
  residues are all IUPAC nucleotide codes (``MKVDHWS``): the pair's alphabet decides (its
  own, else ``alphabet=``, else told from the pair's letters). SAM and BAM need every reference before the
  first record: these two formats read the whole stream unless the references are given.
* ``stockholm``: each pair as a 2-sequence Stockholm block (Biopython ``Bio.Align``), ``#=GF
  ID <query>_vs_<target>``, ``#=GF CC score=... [evalue=...]``, and, when posteriors are known, ``#=GC
  PP_cons`` with HMMER-style digits per column (``0`` < 5%, ``k`` in [10k-5, 10k+5)%,
  ``*`` >= 95%): the match posterior on aligned columns, the residue's gap posterior on
  gap columns. The two ids of a pair must differ.
* ``json``: JSON Lines, one object per pair (keys: see :func:`_json_object`); NaN is null.
* ``blast6``: BLAST's tabular output (``-outfmt 6``, MMseqs2's and DIAMOND's ``m8``), no header,
  one row per pair with something aligned: ``qseqid sseqid pident length mismatch gapopen
  qstart qend sstart send evalue bitscore``. As BLAST counts them, over the local alignment
  from the first to the last aligned pair: ``length`` is its columns (aligned pairs plus the
  unaligned residues between them), ``pident`` the identical pairs in percent of ``length``,
  ``gapopen`` its runs of gap columns (residues of both sequences between two aligned pairs
  are two runs, laid out as the FASTA output lays them out), positions 1-based and inclusive.
  ``evalue`` is the pair's E-value (``NA`` without a fitted null); the last column holds the
  pair's score (for the OT aligner the transport plan's match mass on the aligned pairs, a
  value of the model, not bits: the model has no bit score). The score depends on how the
  pair was solved (dense, in a box or on a corridor: ``sinkalign align --band``, whose default
  changes with the pair's lengths), so it is no ranking across pairs: rank hits by ``evalue``
  (smaller first), as its own statistic is the same however a pair is solved.
* ``paf``: minimap2's Pairwise mApping Format, no header, one line per pair with something
  aligned: ``qname qlen qstart qend strand tname tlen tstart tend nmatch alen mapq`` (0-based
  half-open spans, the query's on the query as given; ``nmatch`` the identical pairs, ``alen``
  the local alignment's columns as blast6 counts them, ``mapq`` as the SAM output's), then the
  tags ``tp:A`` (``P`` for the SAM output's primary and supplementary lines, ``S`` for its
  secondary ones, as minimap2 writes it), ``cg:Z`` (the CIGAR from the first to the last aligned pair, no clips; on the minus
  strand along the query's reverse complement, as minimap2 writes it), ``AS`` (the score, as
  in SAM), ``XP:f`` (mean posterior, when known) and ``ZE:f`` (the E-value, when known).
* ``maf``: the Multiple Alignment Format of UCSC, LAST and LASTZ (Biopython's writer), one
  ``a`` block per pair with something aligned, holding its local alignment (from the first to
  the last aligned pair): the target's ``s`` line first (the reference), then the query's;
  ``a score=...``, and the E-value, when known, on a ``# evalue=...`` comment line before the
  block (MAF's ``a`` line has no key for it, and readers such as Biopython's refuse unknown
  keys). A minus-strand pair's query line has strand ``-`` with its start counted on the
  reverse complement, as MAF counts it.
* ``text``: for reading by eye: per pair a ``#`` line (ids and lengths, score, aligned pairs,
  identity, mean confidence, E-value when known), then the global layout in blocks of 60
  columns, as EMBOSS and BLAST show a pair: the query row, a match line (``|`` identical,
  ``.`` mismatch, blank at a gap), the target row, each row between the 1-based positions of
  its first and last residue in the block (a block of gaps repeats the last), and, when
  posteriors are known, a ``PP`` line of HMMER-style digits (as Stockholm's ``PP_cons``).
  Ids are cut to 20 letters in the blocks.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from sinkalign.alignment import (
    STRAND_SIGNS,
    AlignedPair,
    Alignment,
    alignment_stats,
    biopython_layout,
    check_pairs,
    cigar,
    count_identical,
    evalue_rank,
    format_evalue,
    format_text,
    place_hits,
    query_footprint,
    reverse_complement,
    stranded_stats,
    to_gapped,
)
from sinkalign.alignment import format_number as _fmt
from sinkalign.errors import InputError, OutputExistsError
from sinkalign.io.fasta import detect_alphabet
from sinkalign.io.formats import ALIGNMENT_SUFFIXES, output_format
from sinkalign.utils import atomic_path, atomic_write, wants_gzip

__all__ = ["FORMATS", "TSV_COLUMNS", "AlignedPair", "write_alignments"]

logger = logging.getLogger(__name__)

FORMATS = ("fasta", "tsv", "sam", "bam", "stockholm", "json", "text", "blast6", "paf", "maf")
TSV_COLUMNS = (
    "query",
    "target",
    "score",
    "identity",
    "aligned_length",
    "query_start",
    "query_end",
    "target_start",
    "target_end",
    "cigar",
    "mean_posterior",
    "evalue",
    "strand",
)
_BAD_SEQ_RE = re.compile(r"[^A-Za-z*]")
_QNAME_MAX = 254  # BAM stores a read name's length, with its NUL, in one byte
_QNAME_RE = re.compile(rf"[!-?A-~]{{1,{_QNAME_MAX}}}")
_RNAME_RE = re.compile(r"[0-9A-Za-z!#$%&+./:;?@^_|~-][0-9A-Za-z!#$%&*+./:;=?@^_|~-]*")

_BAM_SEQ = frozenset("=ACMGRSVTWYHKDBN")
_MAX_MAPQ = 60


def _sam_name_fault(name: str, role: str) -> str | None:
    """What keeps ``name`` from being a SAM QNAME (``role="query"``) or RNAME (a target): its
    length (a QNAME has at most 254 characters) or its first offending character and its
    0-based position; ``None`` when it is valid."""
    shown = repr(name) if len(name) <= 60 else repr(name[:25] + "..." + name[-25:])
    if role == "query":
        if _QNAME_RE.fullmatch(name):
            return None
        bad = re.search(r"[^!-?A-~]", name)
        if bad is None:  # only the length is wrong (the records are never empty here)
            return (f"{shown} is {len(name):,} characters long, and SAM allows at most {_QNAME_MAX}; shorten it or "
                    "use another --format")
    else:
        if _RNAME_RE.fullmatch(name):
            return None
        if name and name[0] in "*=":
            return f"{shown} starts with {name[0]!r}, which SAM does not allow first; rename it or use another --format"
        bad = re.search(r"[^0-9A-Za-z!#$%&*+./:;=?@^_|~-]", name)
        if bad is None:  # pragma: no cover - an empty name is refused before
            return f"{shown}; rename it or use another --format"
    return (f"{shown} has {bad.group()!r} at 0-based position {bad.start()}, which SAM does not allow there; "
            "rename it or use another --format")


def shared_id_message(records: str, name: str, option: str = "") -> str:
    """Why ``records`` (two different sequences sharing the id ``name``) cannot be one Stockholm
    block, and what to do; ``option``: what names a format (``"--format "`` on the command line)."""
    return (f"{records} share the id {name!r} but are different sequences, and a Stockholm block needs two distinct "
            f"sequence names: rename one of them, or use a format without that limit ({option}tsv, sam, bam, "
            "fasta, json)")


def check_name(fmt: str, name: str, role: str, where: str) -> None:
    """:class:`InputError` if the record name ``name`` (a ``"query"`` or ``"target"``) cannot be
    written in ``fmt``: SAM/BAM's QNAME and RNAME grammars (the message says what is wrong: the
    length, or the character and its 0-based position), and a Stockholm row name starting
    with ``#`` (a comment or markup line to every reader) or ``//`` (the end of the alignment).
    The pipelines run it on every record before the first pair, so that nothing is half
    written; the SAM/BAM writer runs it on each record it writes."""
    if fmt in ("sam", "bam"):
        fault = _sam_name_fault(name, role)
        if fault is not None:
            grammar = (f"a valid SAM QNAME ({_QNAME_RE.pattern})" if role == "query" else
                       f"a valid SAM reference name ({_RNAME_RE.pattern})")
            raise InputError(f"{where}: {role}_id is not {grammar}: {fault}")
    elif fmt == "stockholm" and (name.startswith("#") or name.startswith("//")):
        raise InputError(f"{where}: a Stockholm row named {name!r} would be read as "
                         f"{'markup' if name.startswith('#') else 'the end of the alignment'}; rename it or use "
                         "another --format")


class _Record(NamedTuple):
    index: int
    query_id: str
    query: str
    target_id: str
    target: str
    pairs: np.ndarray
    posterior: Alignment | None
    score: float
    evalue: float | None = None
    strand: str = "+"
    log_evalue: float | None = None
    other_loci: float | None = None
    alphabet: str = "protein"  # the pair's (AlignedPair.alphabet, else told from its letters): N-N is no identity

    @property
    def evalue_text(self) -> str:
        """The E-value as the text formats write it (``NA`` when unknown; from its log where it
        underflows to 0: :func:`~sinkalign.alignment.format_evalue`)."""
        return "NA" if self.evalue is None else format_evalue(self.evalue, self.log_evalue)

    @property
    def where(self) -> str:
        return f"record {self.index} ({self.query_id} vs {self.target_id})"


def _prepare(records: Iterable[Any], default_alphabet: str | None = None) -> Iterator[_Record]:
    """Validate and normalise the input stream (InputError naming the record); a record without
    an alphabet of its own takes ``default_alphabet``, else the one its letters suggest."""
    if isinstance(records, AlignedPair) or (isinstance(records, tuple) and records and isinstance(records[0], str)):
        raise InputError("expected an iterable of pairs, got one pair: wrap it in a list ([pair])")
    for index, rec in enumerate(records):
        evalue, strand, log_evalue, other_loci, alphabet = None, "+", None, None, default_alphabet
        try:
            if isinstance(rec, AlignedPair):  # its plan is not written
                qid, q, tid, t, aln, *rest = rec[:6]
                evalue, strand, log_evalue, other_loci = rec.evalue, rec.strand, rec.log_evalue, rec.other_loci
                alphabet = rec.alphabet or default_alphabet
            else:
                qid, q, tid, t, aln, *rest = rec
        except (TypeError, ValueError):
            raise InputError(
                f"record {index}: expected (query_id, query, target_id, target, alignment[, score])"
            ) from None
        if len(rest) > 1:
            raise InputError(f"record {index}: expected at most 6 fields, got {5 + len(rest)}")
        for name, value in (("query_id", qid), ("target_id", tid)):
            if not isinstance(value, str) or not value or any(c.isspace() for c in value):
                raise InputError(f"record {index}: {name}={value!r} must be a non-empty string without whitespace")
        where = f"record {index} ({qid} vs {tid})"
        for name, seq in (("query", q), ("target", t)):
            if not isinstance(seq, str):
                raise InputError(f"{where}: {name} sequence must be a str, got {type(seq).__name__}")
            if not seq:
                raise InputError(f"{where}: {name} sequence is empty")
            bad = _BAD_SEQ_RE.search(seq)
            if bad:
                raise InputError(
                    f"{where}: {name} sequence has {bad.group()!r} at position {bad.start()}; expected letters or '*'"
                )
        # upper case, as the aligner and the FASTA reader give them: identities compare letters,
        # and a lower-case row is insertions to Stockholm, A2M and Biopython readers
        q, t = q.upper(), t.upper()
        try:
            if isinstance(aln, Alignment):
                if (aln.m, aln.n) != (len(q), len(t)):
                    raise InputError(
                        f"alignment is for lengths ({aln.m}, {aln.n}) but the sequences have ({len(q)}, {len(t)})"
                    )
                pairs, posterior = aln.pairs, aln
            else:
                pairs, posterior = check_pairs(getattr(aln, "pairs", aln), len(q), len(t)), None
        except ValueError as err:
            raise InputError(f"{where}: {err}") from None
        score = rest[0] if rest and rest[0] is not None else getattr(aln, "score", float("nan"))
        try:
            score = float(score)
        except (TypeError, ValueError):
            raise InputError(f"{where}: score={score!r} is not a number") from None
        if strand not in STRAND_SIGNS:
            raise InputError(f"{where}: strand={strand!r} is not one of {STRAND_SIGNS}")
        if other_loci is not None and not 0.0 <= other_loci <= 1.0:
            raise InputError(f"{where}: other_loci={other_loci!r} is not a probability")
        if alphabet not in ("dna", "protein"):  # not said: as the aligner tells it (a genome by its start)
            alphabet = detect_alphabet(q + t[:2000])
        yield _Record(index, qid, q, tid, t, pairs, posterior, score, None if evalue is None else float(evalue),
                      strand, None if evalue is None or log_evalue is None else float(log_evalue),
                      None if other_loci is None else float(other_loci), alphabet)


# --------------------------------------------------------------------------- formatting helpers


def _mean_posterior(rec: _Record) -> float:
    return rec.posterior.mean_posterior if rec.posterior is not None else float("nan")


def _mapq(mean_posterior: float, other_loci: float = 0.0, evalue: float | None = None) -> int:
    """``-10 log10 P(wrong)``, capped at 60: the alignment is right when the hit is no chance
    one (``e^{-E}``, the chance that no unrelated pair scores as well; 1 without an E-value),
    the read belongs here (``1 - other_loci``, :func:`_hit_roles`) and its columns are right
    (the mean posterior); 255 when the posterior is unknown."""
    if not math.isfinite(mean_posterior):
        return 255
    real = 1.0 if evalue is None or math.isnan(evalue) else math.exp(-evalue)
    err = max(1.0 - (1.0 - other_loci) * mean_posterior * real, 10 ** (-_MAX_MAPQ / 10))
    return int(min(_MAX_MAPQ, max(0, round(-10.0 * math.log10(err)))))


#: a hit starts a part of the query of its own (a supplementary line) only with an E-value at most
#: this: a chance hit on a stretch that no better hit covers stays secondary, out of the SA tags
SUPPLEMENTARY_EVALUE = 1e-3

_PRIMARY, _SUPPLEMENTARY, _SECONDARY = 0, 2048, 256  # SAM's flags for a query's lines


def _hit_roles(aligned: list[_Record], placed: bool) -> tuple[list[int], list[float], list[float]]:
    """For one run of one query's aligned records, each one's SAM flag (of primary,
    supplementary and secondary) and its ``other_loci`` (the MAPQ's). The parts of the query
    (:func:`~sinkalign.alignment.query_parts`, minimap2's rule) each have one best hit,
    primary for the best part (smallest E-value by its log; ties and models without E-values
    in input order) and supplementary for the others of E-value at most
    :data:`SUPPLEMENTARY_EVALUE`, as minimap2 and BWA write a chimeric read; the rest are
    secondary, and so is every line of a query whose primary was written in an earlier run
    (``placed``). ``other_loci`` weighs the hits of each one's part
    (:func:`~sinkalign.alignment.place_hits`); records that carry it (weighed by ``sinkalign
    align --max-hits`` over every hit, before it kept the best) keep it; 0 without E-values.
    Also returns the records' :func:`~sinkalign.alignment.evalue_rank`."""
    footprints = [query_footprint(rec.pairs, len(rec.query), rec.strand,
                                  None if rec.posterior is None else rec.posterior.match_posterior) for rec in aligned]
    ranks = [evalue_rank(rec.evalue, rec.log_evalue) for rec in aligned]
    parts, shares = place_hits(ranks, footprints, [max(len(rec.target), 1) for rec in aligned])
    if aligned and all(rec.other_loci is not None for rec in aligned):  # weighed before hits were dropped
        others = [rec.other_loci for rec in aligned]
    else:
        others = [0.0] * len(aligned) if shares is None else shares
    if placed:
        return [_SECONDARY] * len(aligned), others, ranks
    best = min(range(len(aligned)), key=lambda k: (ranks[k], k))
    sure = math.log(SUPPLEMENTARY_EVALUE)
    flags = [_PRIMARY if k == best else _SUPPLEMENTARY if parts[k] == k and ranks[k] <= sure else _SECONDARY
             for k in range(len(aligned))]
    return flags, others, ranks


def _score_tags(score: float) -> list[str]:
    """``AS:i`` (the SAM spec's type for it: the score rounded) and, for a score that is not a
    whole number (or beyond AS's int32), ``ZS:f`` with its value; none for an unknown score."""
    if not math.isfinite(score):
        return []
    rounded = math.floor(score + 0.5)  # half up, as a reader rounds
    tags = [f"AS:i:{rounded}"] if abs(rounded) < 2**31 else []  # (beyond int32: the score alone)
    if not score.is_integer() or not tags:
        tags.append(f"ZS:f:{score:.6g}")
    return tags


#: every byte outside BAM's 4-bit nucleotide code as N (after upper-casing), but RNA's U as T
_AS_N = {c: ord("N") for c in range(128) if chr(c) not in _BAM_SEQ} | {ord("U"): ord("T")}


def _nm(rec: _Record) -> int:
    """Edit distance of the local alignment: mismatched pairs + internal gap residues. As the SAM
    spec counts it (and samtools calmd), an ambiguity code against itself (N-N) is a mismatch
    (X-X, B-B, Z-Z and J-J of a protein too)."""
    p = rec.pairs
    mismatches = len(p) - count_identical(rec.query, rec.target, p, rec.alphabet)
    internal = int((p[-1, 0] - p[0, 0] + 1 - len(p)) + (p[-1, 1] - p[0, 1] + 1 - len(p)))
    return mismatches + internal


# --------------------------------------------------------------------------- writers


def _fasta_to(records: Iterable[_Record], handle: IO[str]) -> int:
    from Bio import SeqIO
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    count = 0

    def seq_records() -> Iterator[SeqRecord]:
        nonlocal count
        for rec in records:
            qg, tg = to_gapped(rec.query, rec.target, rec.pairs)
            score = f"score={_fmt(rec.score, '.10g')}{_evalue_note(rec)}{_strand_note(rec)}"
            yield SeqRecord(Seq(qg), id=rec.query_id, description=f"aligned_to={rec.target_id} {score}")
            yield SeqRecord(Seq(tg), id=rec.target_id, description=f"aligned_to={rec.query_id} {score}")
            count += 1

    SeqIO.write(seq_records(), handle, "fasta")
    return count


def _evalue_note(rec: _Record) -> str:
    """`` evalue=...`` for the FASTA descriptions and the Stockholm comment, when known."""
    return "" if rec.evalue is None else f" evalue={rec.evalue_text}"


def _strand_note(rec: _Record) -> str:
    """`` strand=-`` for the FASTA descriptions and the Stockholm comment of a minus-strand pair."""
    return " strand=-" if rec.strand == "-" else ""


def _tsv_row(rec: _Record) -> list[str]:
    st = stranded_stats(rec.query, rec.target, rec.pairs, rec.strand, alphabet=rec.alphabet)
    empty = st.aligned_length == 0
    return [
        rec.query_id,
        rec.target_id,
        _fmt(rec.score, ".10g"),
        _fmt(st.identity),
        str(st.aligned_length),
        str(st.query_start),
        str(st.query_end),
        str(st.target_start),
        str(st.target_end),
        "*" if empty else cigar(rec.pairs, len(rec.query), len(rec.target), local=True),
        _fmt(_mean_posterior(rec)),
        rec.evalue_text,
        rec.strand,
    ]


def _tsv_to(records: Iterable[_Record], handle: IO[str]) -> int:
    count = 0
    # ids hold no whitespace (checked), so no field needs quoting: written as they are, as BLAST
    # writes them (csv's default would put an id with a '"' in quotes, doubled)
    writer = csv.writer(handle, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE, quotechar=None)
    writer.writerow(TSV_COLUMNS)
    for rec in records:
        writer.writerow(_tsv_row(rec))
        count += 1
    return count


def _blast6_row(rec: _Record) -> list[str] | None:
    """One ``-outfmt 6`` row (see the module docstring); ``None`` when nothing is aligned."""
    st = alignment_stats(rec.query, rec.target, rec.pairs, alphabet=rec.alphabet)
    k = st.aligned_length
    if k == 0:
        return None
    # the local alignment's columns: every residue of both spans, an aligned pair counted once
    length = (st.query_end - st.query_start) + (st.target_end - st.target_start) - k
    steps = np.diff(rec.pairs, axis=0) - 1  # unaligned residues of each sequence between consecutive pairs
    qstart, qend, sstart, send = st.query_start + 1, st.query_end, st.target_start + 1, st.target_end
    if rec.strand == "-":  # as BLAST: the query forward, the subject's positions descending
        m = len(rec.query)
        qstart, qend, sstart, send = m - st.query_end + 1, m - st.query_start, send, sstart
    return [
        rec.query_id,
        rec.target_id,
        format(100.0 * st.n_identical / length, ".3f"),
        str(length),
        str(k - st.n_identical),
        str(int(np.count_nonzero(steps))),
        str(qstart),
        str(qend),
        str(sstart),
        str(send),
        "NA" if rec.evalue is None else format_evalue(rec.evalue, rec.log_evalue, ".2e"),
        _fmt(rec.score, ".4g"),
    ]


def _blast6_to(records: Iterable[_Record], handle: IO[str]) -> int:
    count = 0
    writer = csv.writer(handle, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE, quotechar=None)
    for rec in records:
        row = _blast6_row(rec)
        if row is not None:  # as BLAST, a pair without a hit has no line
            writer.writerow(row)
            count += 1
    return count


_CLIPS_RE = re.compile(r"^\d+S|\d+S$")


def _paf_row(rec: _Record, other_loci: float = 0.0, secondary: bool = False) -> list[str] | None:
    """One PAF line (see the module docstring); ``None`` when nothing is aligned."""
    st = stranded_stats(rec.query, rec.target, rec.pairs, rec.strand, alphabet=rec.alphabet)
    k = st.aligned_length
    if k == 0:
        return None
    length = (st.query_end - st.query_start) + (st.target_end - st.target_start) - k
    mean_post = _mean_posterior(rec)
    row = [rec.query_id, str(len(rec.query)), str(st.query_start), str(st.query_end), rec.strand,
           rec.target_id, str(len(rec.target)), str(st.target_start), str(st.target_end), str(st.n_identical),
           str(length), str(_mapq(mean_post, other_loci, rec.evalue)), f"tp:A:{'S' if secondary else 'P'}",
           "cg:Z:" + _CLIPS_RE.sub("", cigar(rec.pairs, len(rec.query), len(rec.target), local=True))]
    row += _score_tags(rec.score)
    if math.isfinite(mean_post):
        row.append(f"XP:f:{mean_post:.6g}")
    if rec.evalue is not None and math.isfinite(rec.evalue):  # from its log: 1e-426 is no 0 here
        row.append(f"ZE:f:{format_evalue(rec.evalue, rec.log_evalue, '.3g')}")
    return row


def _paf_to(records: Iterable[_Record], handle: IO[str]) -> int:
    """Each run of one query's consecutive records is held until it ends: its hits compete
    for their parts of the query in the MAPQ and ``tp:A`` (:func:`_hit_roles`), as in SAM."""
    count = 0
    placed: set[str] = set()
    for query_id, run in itertools.groupby(records, key=lambda rec: rec.query_id):
        aligned = [rec for rec in run if rec.pairs.shape[0]]  # as minimap2, an unmapped query has no line
        if not aligned:
            continue
        flags, others, _ = _hit_roles(aligned, query_id in placed)
        placed.add(query_id)
        for rec, flag, other in zip(aligned, flags, others):
            row = _paf_row(rec, other, secondary=flag == _SECONDARY)
            if row is not None:
                handle.write("\t".join(row) + "\n")
                count += 1
    return count


def _maf_block(rec: _Record) -> str | None:
    """One MAF block (see the module docstring); ``None`` when nothing is aligned."""
    from Bio import Align
    from Bio.Align import maf
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    if rec.pairs.shape[0] == 0:
        return None
    whole = _biopython(rec)  # query row, then target row: the global layout
    both = np.flatnonzero((whole.indices >= 0).all(0))  # the columns that align two residues
    local = whole[:, both[0] : both[-1] + 1]
    query, coords = rec.query, local.coordinates[0]
    if rec.strand == "-":  # position x of the reverse complement is len - x of the query as given
        query, coords = reverse_complement(rec.query), len(rec.query) - coords
    block = Align.Alignment([SeqRecord(Seq(rec.target), id=rec.target_id, description=""),
                             SeqRecord(Seq(query), id=rec.query_id, description="")],
                            np.stack([local.coordinates[1], coords]))
    if math.isfinite(rec.score):
        block.score = rec.score
    text = maf.AlignmentWriter(None).format_alignment(block)
    return text if rec.evalue is None else f"# evalue={rec.evalue_text}\n{text}"


def _maf_to(records: Iterable[_Record], handle: IO[str]) -> int:
    count = 0
    handle.write("##maf version=1 program=sinkalign\n\n")
    for rec in records:
        block = _maf_block(rec)
        if block is not None:
            handle.write(block)
            count += 1
    return count


def _json_object(rec: _Record) -> dict[str, Any]:
    """Keys: index, query_id, target_id, query_length, target_length, score, identity,
    aligned_length, query_start, query_end, target_start, target_end, cigar (local, SAM
    style; null when empty), mean_posterior, expected_accuracy, evalue (null when unknown), log_evalue (its natural
    log, finite where the E-value underflows to 0; null when unknown), pairs ([[i, j], ...]),
    match_posterior (list or null), query_gapped, target_gapped, strand (``+`` or ``-``: on the minus strand
    the spans are on the query as given; pairs, cigar and query_gapped read its reverse complement)."""
    st = stranded_stats(rec.query, rec.target, rec.pairs, rec.strand, alphabet=rec.alphabet)
    qg, tg = to_gapped(rec.query, rec.target, rec.pairs)

    def num(x: float) -> float | None:
        return float(x) if x is not None and math.isfinite(x) else None

    post = rec.posterior
    return {
        "index": rec.index,
        "query_id": rec.query_id,
        "target_id": rec.target_id,
        "query_length": len(rec.query),
        "target_length": len(rec.target),
        "score": num(rec.score),
        "identity": num(st.identity),
        "aligned_length": st.aligned_length,
        "query_start": st.query_start,
        "query_end": st.query_end,
        "target_start": st.target_start,
        "target_end": st.target_end,
        "cigar": cigar(rec.pairs, len(rec.query), len(rec.target), local=True) if st.aligned_length else None,
        "mean_posterior": num(_mean_posterior(rec)),
        "expected_accuracy": num(post.expected_accuracy) if post is not None else None,
        "evalue": num(rec.evalue),
        "log_evalue": None if rec.evalue is None else num(evalue_rank(rec.evalue, rec.log_evalue)),
        "pairs": rec.pairs.tolist(),
        "match_posterior": [num(x) for x in post.match_posterior.tolist()] if post is not None else None,
        "query_gapped": qg,
        "target_gapped": tg,
        "strand": rec.strand,
    }


def _json_to(records: Iterable[_Record], handle: IO[str]) -> int:
    count = 0
    for rec in records:
        handle.write(json.dumps(_json_object(rec), allow_nan=False) + "\n")
        count += 1
    return count


def _biopython(rec: _Record):
    """The record's global layout as a Biopython alignment, query row first, both as aligned
    (Stockholm writes its own annotations; MAF reads the coordinates)."""
    return biopython_layout(rec.query_id, rec.query, rec.target_id, rec.target,
                             rec.pairs if rec.posterior is None else rec.posterior, score=rec.score)


def _stockholm_to(records: Iterable[_Record], handle: IO[str]) -> int:
    from Bio import Align

    count = 0

    def blocks() -> Iterator[Align.Alignment]:
        nonlocal count
        for rec in records:
            if rec.query_id == rec.target_id:
                if rec.query != rec.target and not (rec.strand == "-" and reverse_complement(rec.query) == rec.target):
                    raise InputError(f"{rec.where}: {shared_id_message('the query and the target', rec.query_id)}")
                raise InputError(f"{rec.where}: Stockholm needs distinct sequence names within a block")
            block = _biopython(rec)
            block.annotations = {
                "identifier": f"{rec.query_id}_vs_{rec.target_id}",
                "comment": f"score={_fmt(rec.score, '.10g')}{_evalue_note(rec)}{_strand_note(rec)}",
            }
            count += 1
            yield block

    Align.write(blocks(), handle, "stockholm")
    return count


def _text_to(records: Iterable[_Record], handle: IO[str]) -> int:
    count = 0
    for rec in records:
        handle.write(format_text(rec.query_id, rec.query, rec.target_id, rec.target,
                                 rec.pairs if rec.posterior is None else rec.posterior, score=rec.score,
                                 evalue=rec.evalue, strand=rec.strand, log_evalue=rec.log_evalue,
                                 alphabet=rec.alphabet))
        count += 1
    return count


class _SamOptions(NamedTuple):
    """What a SAM or BAM header is made from besides the records (:func:`write_alignments`)."""

    references: Iterable[tuple[str, int]] | None = None
    command_line: str | None = None


def _header_text(text: str) -> str:
    """``text`` as a header field value may hold it (printable ASCII, ``[ -~]+``): any other
    character (a tab, a newline, a non-ASCII letter of a file name) written as its Python
    escape (``\\t``, ``\\xe9``)."""
    return "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in text)


def _sam_header(references: Iterable[tuple[str, int]],
                command_line: str | None = None) -> tuple[dict[str, Any], dict[str, int]]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        vn = version("sinkalign")
    except PackageNotFoundError:  # pragma: no cover - the package is installed in development
        vn = "unknown"
    refs = list(references)
    header = {
        "HD": {"VN": "1.6", "SO": "unsorted"},
        "SQ": [{"SN": name, "LN": int(length)} for name, length in refs],
        "PG": [{"ID": "sinkalign", "PN": "sinkalign", "VN": vn}],
    }
    if command_line:
        header["PG"][0]["CL"] = _header_text(command_line)
    return header, {name: k for k, (name, _) in enumerate(refs)}


def _references_of(records: list[_Record]) -> list[tuple[str, int]]:
    """The targets of a materialised stream, in first-seen order (checked by :func:`_segments`)."""
    refs: dict[str, int] = {}
    for rec in records:
        if _RNAME_RE.fullmatch(rec.target_id):
            refs.setdefault(rec.target_id, len(rec.target))
    return list(refs.items())


def _check_references(references: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    refs, seen = [], set()
    for name, length in references:
        if not isinstance(name, str) or not name:
            raise InputError(f"reference {name!r} is not a valid SAM reference name ({_RNAME_RE.pattern})")
        fault = _sam_name_fault(name, "target")
        if fault is not None:
            raise InputError(f"reference {name!r} is not a valid SAM reference name ({_RNAME_RE.pattern}): {fault}")
        if name in seen:
            raise InputError(f"reference {name!r} is listed twice")
        if int(length) < 1:
            raise InputError(f"reference {name!r}: length {length} must be >= 1")
        seen.add(name)
        refs.append((name, int(length)))
    return refs


def _segments(records: Iterable[_Record], header, ref_index: dict[str, int]):
    """One pysam ``AlignedSegment`` per record with something aligned, and one unmapped
    segment (after them) per query with nothing aligned in any of its records (SAM wants
    exactly one primary line per read); checks names and that each target id keeps one
    sequence (the one the header was made from).

    Each run of consecutive records of one query (all of a query's pairs all-vs-all) is held
    until it ends, so that its primary line is its best hit: the smallest E-value (by its log),
    ties and models without E-values in input order; the best hit of each other part of the
    query is supplementary (flag 2048, with ``SA:Z`` tags), the rest secondary (flag 256), and
    so is every line of a query whose primary was written in an earlier run
    (:func:`_hit_roles`)."""
    primary: set[str] = set()  # queries whose primary alignment is written
    warned: set[str] = set()  # reference names with ';' said to make SA:Z tags ambiguous
    unmapped: dict[str, Any] = {}  # the first empty record of each query not aligned so far
    seqs: dict[str, str] = {}
    lengths = {name: header.get_reference_length(name) for name in ref_index}
    for query_id, run in itertools.groupby(records, key=lambda rec: rec.query_id):
        aligned = []
        for rec in run:
            seg = _segment(rec, header, ref_index, seqs, lengths)
            if seg.flag & 4:
                if query_id not in primary and query_id not in unmapped:
                    unmapped[query_id] = seg
            else:
                aligned.append((rec, seg))
        if not aligned:
            continue
        flags, others, ranks = _hit_roles([rec for rec, _ in aligned], query_id in primary)
        for (rec, seg), flag, other in zip(aligned, flags, others):
            seg.flag |= flag
            seg.mapping_quality = _mapq(_mean_posterior(rec), other, rec.evalue)
        _split_tags([seg for _, seg in aligned], flags, ranks, warned)
        yield from (seg for _, seg in aligned)
        primary.add(query_id)
        unmapped.pop(query_id, None)
    yield from unmapped.values()


def _split_tags(segs: list, flags: list[int], ranks: list[float], warned: set[str]) -> None:
    """The ``SA:Z`` tag of a query's primary and supplementary lines, when it has both: each
    lists the other parts (``rname,pos,strand,CIGAR,mapQ,NM;``, the SAM spec's form), best hit
    first, so that a supplementary line's first entry is the primary (as BWA and minimap2
    write it). A reference name with ``;`` (SAM allows it) makes the tag ambiguous to its
    readers: said once per name (``warned``), the tag written all the same."""
    parts = sorted((k for k, flag in enumerate(flags) if flag != _SECONDARY), key=lambda k: (ranks[k], k))
    if len(parts) < 2:
        return
    for name in {segs[k].reference_name for k in parts} - warned:
        if ";" in name:
            warned.add(name)
            logger.warning("reference %r has a ';', which the SA:Z tag of a split query's lines uses to part "
                           "its entries: readers of that tag will misread the entries naming it", name)
    entries = {k: f"{segs[k].reference_name},{segs[k].reference_start + 1},{'-' if segs[k].is_reverse else '+'},"
                  f"{segs[k].cigarstring},{segs[k].mapping_quality},{segs[k].get_tag('NM')};" for k in parts}
    for k in parts:
        segs[k].set_tag("SA", "".join(entries[j] for j in parts if j != k), "Z")


def _segment(rec: _Record, header, ref_index: dict[str, int], seqs: dict[str, str], lengths: dict[str, int]):
    """The record as a pysam ``AlignedSegment`` without its secondary flag and, when aligned,
    without its MAPQ (:func:`_segments` sets both, knowing the query's other hits): unmapped
    (flag 4) when nothing is aligned."""
    import pysam

    if rec.target_id not in ref_index:  # (its names checked as the stream came: _sam_named)
        raise InputError(f"{rec.where}: target_id {rec.target_id!r} is not one of the header's references")
    if lengths[rec.target_id] != len(rec.target):
        raise InputError(f"{rec.where}: target_id {rec.target_id!r} is {len(rec.target)} letters long, and the "
                         f"header's reference of that name {lengths[rec.target_id]}")
    seen = seqs.setdefault(rec.target_id, rec.target)
    if seen != rec.target:
        raise InputError(f"{rec.where}: target_id {rec.target_id!r} was given two different sequences")
    seg = pysam.AlignedSegment(header)
    seg.query_name = rec.query_id
    empty = rec.pairs.shape[0] == 0
    # an unmapped read is written as given (flag 4 alone), as minimap2 and BWA write it
    query = reverse_complement(rec.query) if empty and rec.strand == "-" else rec.query
    # the pair's alphabet decides, not the letters: a protein read of M, K, V, D, H, W, S... alone
    # is no nucleotide read (the alphabet is told from the letters only where nothing said it)
    if rec.alphabet == "dna" and not set(query) <= _BAM_SEQ:  # X (a masked base) is N there, as read
        query = query.upper().translate(_AS_N)
    if rec.alphabet == "dna" and set(query) <= _BAM_SEQ:
        seg.query_sequence = query
    else:
        seg.query_sequence = None
        seg.set_tag("XQ", query, "Z")
    reverse = 16 if rec.strand == "-" else 0  # SEQ (the query as aligned) is the reverse complement
    if empty:
        seg.flag = 4
        seg.reference_id = -1
        seg.reference_start = -1
        seg.mapping_quality = 0
        return seg
    seg.flag = reverse
    seg.reference_id = ref_index[rec.target_id]
    seg.reference_start = int(rec.pairs[0, 1])
    seg.cigarstring = cigar(rec.pairs, len(rec.query), len(rec.target), local=True)
    mean_post = _mean_posterior(rec)
    for tag in _score_tags(rec.score):
        name, kind, value = tag.split(":", 2)
        seg.set_tag(name, int(value) if kind == "i" else float(value), kind)
    if math.isfinite(mean_post):
        seg.set_tag("XP", mean_post, "f")
    seg.set_tag("NM", _nm(rec), "i")
    if rec.evalue is not None and math.isfinite(rec.evalue):
        seg.set_tag("ZE", rec.evalue, "f")
    return seg


def _sam_named(records: Iterable[_Record]) -> Iterator[_Record]:
    """The records, each one's ids checked as SAM names as it comes (:func:`check_name`)."""
    for rec in records:
        check_name("sam", rec.query_id, "query", rec.where)
        check_name("sam", rec.target_id, "target", rec.where)
        yield rec


def _sam_setup(records: Iterable[_Record], sam: _SamOptions):
    """``(records, header dict, ref_index)``: the header from ``sam.references`` (streaming) or
    from the whole stream, read into memory first (``references=None``)."""
    references = sam.references
    records = _sam_named(records)
    if references is None:
        records = list(records)  # (a bad name stops the stream, and its aligner, at that record)
        references = _references_of(records)
    header, ref_index = _sam_header(_check_references(references), sam.command_line)
    return records, header, ref_index


def _sam_to(records: Iterable[_Record], handle: IO[str], sam: _SamOptions = _SamOptions()) -> int:
    import pysam

    records, header_dict, ref_index = _sam_setup(records, sam)
    header = pysam.AlignmentHeader.from_dict(header_dict)
    handle.write(str(header).rstrip("\n") + "\n")  # without @SQ lines pysam adds a blank line, which readers refuse
    count = 0
    for seg in _segments(records, header, ref_index):
        handle.write(seg.to_string() + "\n")
        count += 1
    return count


def _write_bam(records: Iterable[_Record], path: Path, sam: _SamOptions = _SamOptions()) -> int:
    import pysam

    records, header_dict, ref_index = _sam_setup(records, sam)
    count = 0
    with atomic_path(path) as tmp, pysam.AlignmentFile(tmp, "wb", header=header_dict) as out:
        for seg in _segments(records, out.header, ref_index):
            out.write(seg)
            count += 1
    return count


_TEXT_WRITERS: dict[str, Callable[..., int]] = {
    "fasta": lambda recs, handle, sam: _fasta_to(recs, handle),
    "tsv": lambda recs, handle, sam: _tsv_to(recs, handle),
    "sam": _sam_to,
    "stockholm": lambda recs, handle, sam: _stockholm_to(recs, handle),
    "json": lambda recs, handle, sam: _json_to(recs, handle),
    "text": lambda recs, handle, sam: _text_to(recs, handle),
    "blast6": lambda recs, handle, sam: _blast6_to(recs, handle),
    "paf": lambda recs, handle, sam: _paf_to(recs, handle),
    "maf": lambda recs, handle, sam: _maf_to(recs, handle),
}


#: other names of :data:`FORMATS` (MMseqs2 and DIAMOND call BLAST's tabular output ``m8``)
FORMAT_ALIASES = {"m8": "blast6", "sto": "stockholm", "jsonl": "json", "fa": "fasta"}


def format_name(fmt: str | None) -> str | None:
    """``fmt`` as one of :data:`FORMATS`: any case, or an alias of :data:`FORMAT_ALIASES`
    (``"SAM"`` is ``"sam"``, ``"m8"`` is ``"blast6"``); ``None`` stays ``None``.

    Raises:
        InputError: a name that is none of them, listing the valid ones."""
    if fmt is None:
        return None
    name = str(fmt).lower()
    name = FORMAT_ALIASES.get(name, name)
    if name not in FORMATS:
        raise InputError(f"format {fmt!r} is not one of {FORMATS} (or their aliases {sorted(FORMAT_ALIASES)})")
    return name


def write_alignments(
    records: Iterable[Any],
    path: str | os.PathLike | IO[str],
    fmt: str | None = None,
    *,
    references: Iterable[tuple[str, int]] | None = None,
    overwrite: bool = False,
    alphabet: str | None = None,
    command_line: str | None = None,
) -> int:
    """Write aligned pairs to ``path`` in ``fmt`` (one of :data:`FORMATS`); returns the count.

    The records are consumed one at a time and written as they come, in input order, so a
    stream of any length is written in constant memory; the exception is SAM/BAM without
    ``references``, whose header needs every target first (the stream is read into memory).

    Args:
        records: iterable of :class:`AlignedPair` or 6-tuples ``(query_id, query, target_id,
            target, alignment, score)`` (``score`` may be omitted or None); ids without
            whitespace, sequences of letters or ``*``.
        path: destination file, written atomically (temporary file beside it, renamed at the
            end; any previous file is kept on error), or an open text stream (e.g.
            ``sys.stdout``), written as records arrive; ``bam`` needs a file.
        fmt: output format (see the module docstring; any case, ``"m8"`` for ``"blast6"``:
            :func:`format_name`); ``None`` (default): the one ``path``'s
            extension names (:data:`~sinkalign.io.formats.ALIGNMENT_SUFFIXES`: ``.sam``,
            ``.bam``, ``.paf``, ``.m8``, ...), else ``tsv``. A format the extension contradicts
            (``"tsv"`` to ``hits.bam``) is an error, as in ``sinkalign align``.
        references: SAM/BAM only: the ``(target id, length)`` of every reference, in header
            order, known before the first record (e.g. the records of the target FASTA); the
            records are then streamed, and a record whose target is not listed, or has
            another length, is an error.
        overwrite: replace an existing file ``path`` (when the writing succeeds); without it
            an existing file is an error, raised before any record is read.
        alphabet: ``"protein"`` or ``"dna"``: the alphabet of the records that do not carry
            one (plain tuples; an :class:`AlignedPair` from the aligner has its model's). It
            decides what counts as an identity (a DNA ``N`` or a protein ``X`` against itself
            is none; in a protein, ``N`` is asparagine) and SAM/BAM's ``SEQ``. ``None``
            (default): told from each pair's letters, so a short peptide written only in
            ``ACGTN`` reads as DNA.
        command_line: SAM/BAM only: the command that made the alignments, as the header's
            ``@PG CL:`` (samtools and minimap2 record theirs there; ``sinkalign align`` passes
            its own); characters a header cannot hold (tabs, newlines, non-ASCII) are written
            as Python escapes. ``None``: no ``CL``.

    Raises:
        InputError (a ValueError): unknown ``fmt`` (listing the valid ones), a malformed
            record (naming its index and ids), ``bam`` to a stream, ``references`` for
            another format.
        OutputExistsError (a FileExistsError): ``path`` is an existing file and not ``overwrite``.
    """
    fmt = format_name(fmt)
    fmt = output_format(path, fmt, "tsv", ALIGNMENT_SUFFIXES)
    if not hasattr(path, "write") and Path(path).is_file() and not overwrite:
        raise OutputExistsError(f"{path} already exists; remove it, or pass overwrite=True to replace it (it is "
                                "replaced only when the writing succeeds)")
    if references is not None and fmt not in ("sam", "bam"):
        raise InputError(f"references are for the sam and bam formats, not {fmt!r}")
    if command_line is not None and fmt not in ("sam", "bam"):
        raise InputError(f"command_line is for the sam and bam formats, not {fmt!r}")
    sam = _SamOptions(references, command_line)
    if alphabet not in (None, "dna", "protein"):
        raise InputError(f"alphabet={alphabet!r} is not one of ('protein', 'dna', None)")
    recs = _prepare(records, alphabet)
    if hasattr(path, "write"):
        if fmt == "bam":
            raise InputError("bam is binary and BGZF-compressed: write it to a file, not a text stream")
        count = _TEXT_WRITERS[fmt](recs, path, sam)
        where = getattr(path, "name", "a stream")
    elif fmt == "bam":
        count = _write_bam(recs, Path(path), sam)
        where = path
    else:
        with atomic_write(path, "w", gzip=wants_gzip(path)) as handle:
            count = _TEXT_WRITERS[fmt](recs, handle, sam)
        where = path
    logger.info("wrote %d alignments to %s (%s)", count, where, fmt)
    return count
