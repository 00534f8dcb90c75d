"""GC profile of genomes: windowed GC content, GC skew, cumulative skew; reports and overlays.

Definitions (per window, counts taken over the window's bases):

* A window is *informative* when at least :data:`MIN_ACGT_FRACTION` (half) of the window
  length (``--window``, not the window's own length) is unambiguous A/C/G/T: ``acgt >=
  ceil(window / 2)``. GC or a skew from a handful of bases (a window that is almost all N, the
  few-base tail window of a record) is noise, so the other windows report NA for ``gc``,
  ``gc_skew`` and ``gc_deviation``, are never candidate islands and leave the cumulative skew
  where it was. A record shorter than half the window has no informative window.
* ``gc = (G + C) / (A + C + G + T)``; N bases are excluded from the denominator. The FASTA
  reader (:func:`~sinkalign.lm.data.read_genome_records`) uppercases every base, so
  soft-masked (lowercase) bases count like the others, and reads the IUPAC ambiguity codes
  ``RYSWKMBDHV`` and ``X`` as N: they count as N everywhere (``n_fraction``, the half-window
  rule below), even ``S`` (G or C), which is not added to G + C; ``U`` (RNA) is read as T, in
  a file as in a record given in memory.
* ``gc_skew = (G - C) / (G + C)``; NaN when the window has no G or C.
* ``cumulative_gc_skew``: running sum over the windows of one record, in order, of
  ``gc_skew * acgt / window`` (Grigoriev 1998; as in GenSkew). A full window without N adds
  its skew exactly; a window with fewer real bases (N, the shorter tail window) adds in
  proportion to the bases it has, so every base of sequence weighs the same whatever the N
  content or the window's length; NA windows and windows without G or C add 0. With overlapping windows
  (``step < window``) the sum grows by about ``window / step`` times but its minimum and
  maximum stay where they are.
* ``n_fraction = N / (end - start)``.

Windows are 0-based half-open ``[start, end)``: starts ``0, step, 2*step, ...`` while the
window fits (``start + window <= len``). If the last full window ends before the record
does, one final *partial* window ``[last_start + step, len)`` (shorter than ``window``)
covers the tail; a record shorter than ``window`` is a single partial window
``[0, len)``. Every base is therefore covered, and ``step <= window`` is required (larger
steps would leave gaps that the cumulative skew cannot account for).

The step defaults to half the window.

Origin/terminus prediction: on the leading strand G exceeds C, so the cumulative skew
falls from the terminus to the origin and rises from the origin to the terminus; its
minimum marks the origin and its maximum the terminus. The cumulative curve starts at 0
at position 0; the value after window ``i`` is placed at ``floor(midpoint_i + step / 2)``
(at most the record's length), the boundary between window ``i`` and window ``i + 1``
(exactly the window end when ``step == window``): origin and terminus are 0-based positions
good to one ``step``, and the plot draws the curve at the same positions (the TSV's
``cumulative_gc_skew`` is the value after the row's window). On a record read as circular
(``circular``; by default each record by its FASTA description, :func:`reads_as_circular`)
the end is position 0. A call
needs evidence, checked in this order (the report gives the first reason that stops it):

1. enough sequence: the informative windows span at least :data:`MIN_SKEW_WINDOWS` window
   lengths of the record (``covered / window >= 10``, ``covered`` the bases in the union of
   the informative windows: the whole record when none is NA);
2. a skew signal: the curve's range (maximum minus minimum) must exceed
   :data:`SKEW_NOISE_Z` (4) times ``sigma * sqrt(n * window / step)``. In a sequence
   without strand bias (a random one) the curve is a random walk: ``n`` steps of standard
   deviation ``sigma``, consecutive steps correlated through the ``window / step``-fold
   overlap, and the range of such a walk exceeds 4 of those standard deviations with
   probability below 1 in 1,000 (Brownian-motion range; about 1.6 on average). ``sigma``,
   one window's noise, is estimated from the differences between non-overlapping neighbours
   (``sigma^2 = mean((c[i + k] - c[i])^2) / 2``, ``k = ceil(window / step)``, over the
   informative windows' additions ``c``), which the replichore signal (a sign that changes
   twice per chromosome) hardly inflates;
3. a turning point: an extremum counts only where the curve *turns* inside the sequence:
   it is not at either end and the curve rises (or falls) on both sides of it by at least
   :data:`TURN_FRACTION` of the curve's range. On a circular record the curve also wraps:
   going past the end continues at the start, shifted by the curve's final value, and an
   extremum at or near an end (the origin of a complete chromosome that starts at oriC, the
   usual convention) turns when the curve rises (falls) by that much within half a record on
   each side of it (the curve rotated to put it in the middle). The check only picks among
   curves that passed check 2, so the false-call rate on sequences without strand bias stays
   below 1 in 1,000 (measured: no call on 500 random sequences of 0.2-1 Mb, windows of 1 and
   10 kb, GC 0.5 and 0.3; their ranges averaged 1.48-1.53 SD, the Brownian range 1.58).
   A sequence whose curve (with a signal) never turns (a draft contig, a plasmid, a fragment)
   lies on one replichore: neither origin nor terminus is on it, and the report says so
   instead of naming the contig's ends; wrapping does not change that, since a curve that
   climbs from one end to the other falls back by its whole rise across the ends;
4. a chromosome-sized record: at least :data:`MIN_SKEW_RECORD_LENGTH` (100,000) nt; the
   smallest known complete bacterial chromosomes are about 110 kb, while a draft or MAG
   contig of a few tens of kb that turns is a fragment whose turn says nothing about an
   origin.

The prediction is only meaningful for complete circular chromosomes; a draft contig is
better read with ``circular=False`` (``--linear``), where an extremum at an end never turns.

Candidate islands: an informative window whose GC differs from its record's GC (all
non-N bases) by more than ``island_threshold`` (default :data:`ISLAND_THRESHOLD`, 0.10 =
10 percentage points) is flagged (TSV column ``island``); flagged windows that overlap or
touch and depart in the same direction (all GC-rich or all AT-rich) are merged into
regions, listed in the report with their direction and shaded in the plot. A GC-rich run
next to an AT-rich run gives two islands, never one whose GC averages out. Horizontally
transferred islands (phages, pathogenicity islands) often differ from their genome's GC by
this much; a 1000-nt window of uniform sequence has a sampling SD of about 0.016, so the
default is about six SD. Small windows (a few hundred nt) flag noise: raise the threshold
for them.

Overlay mode compares generated continuations with the true genome: see
:func:`gc_trajectory`, :func:`trajectory_correlation` and :func:`compare_continuations`.
A generated FASTA record names the true sequence it continues with ``key=value`` tags
in its header (:func:`continuation_description`): ``chrom=<record id>`` (optional when the
genome has a single record) and ``start=<0-based position where the record begins>``. A
record that holds the prompt before the continuation (``sinkalign generate-dna
--include-prompt``) says so with ``prompt_included=true prompt_length=<P>`` (its ``start=``
is then the prompt's start): only the continuation is compared, its first ``P`` bases (the
prompt, copied from the genome itself) are dropped and the comparison starts at ``start +
P``. Without ``prompt_included=true`` the whole record is the continuation, beginning at
``start`` (the end of the prompt).

:func:`run_gc_profile` writes only the files in :data:`OUTPUT_NAMES` into its directory and
refuses a directory that already holds any of them unless ``overwrite`` is given, and an
input that is one of them in any case; it then replaces them and removes those of the
earlier run that this run does not write (an ``overlay.tsv`` / ``overlay.png`` left from a
run with an overlay), all at once, after the new set is complete (:func:`_swap_in`).
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.figure import Figure  # no pyplot: a library must not switch the user's backend
from tqdm.auto import tqdm

from sinkalign.errors import InputError, OutputExistsError
from sinkalign.io.fasta import sequence_text
from sinkalign.lm.data import GenomeRecord, as_model_bases, encode, read_genome_records
from sinkalign.lm.gc import gc_trajectory, trajectory_correlation
from sinkalign.pipelines.runner import STDIN_NAME, check_output, stdin_spooled
from sinkalign.utils import atomic_write, atomic_write_bytes, atomic_write_text, is_stdio

__all__ = [
    "ISLAND_THRESHOLD",
    "MIN_ACGT_FRACTION",
    "MIN_SKEW_RECORD_LENGTH",
    "MIN_SKEW_WINDOWS",
    "OUTPUT_NAMES",
    "PLOT_MAX_RECORDS",
    "SKEW_NOISE_Z",
    "TURN_FRACTION",
    "ContinuationComparison",
    "GCProfile",
    "GCProfileOutputs",
    "Island",
    "RecordSummary",
    "compare_continuations",
    "continuation_description",
    "gc_profile",
    "gc_trajectory",
    "parse_continuation_description",
    "plot_overlay",
    "plot_profile",
    "profile_figure",
    "prompt_bases",
    "read_records",
    "run_gc_profile",
    "trajectory_correlation",
    "window_bounds",
    "write_overlay_tsv",
    "write_report",
    "write_tsv",
]

logger = logging.getLogger(__name__)

TSV_COLUMNS = ("chrom", "start", "end", "gc", "gc_skew", "cumulative_gc_skew", "n_fraction", "gc_deviation", "island")
#: Default island threshold: |window GC - record GC| above this flags a window.
ISLAND_THRESHOLD = 0.10
#: An extremum of the cumulative skew is a turning point when the curve moves away from it by
#: at least this fraction of the curve's range on both sides.
TURN_FRACTION = 0.10
#: A window is informative (has a GC, a skew, may be an island, moves the cumulative skew) when at
#: least this fraction of the window length is A/C/G/T.
MIN_ACGT_FRACTION = 0.5
#: An origin/terminus call needs at least this many window lengths of informative windows.
MIN_SKEW_WINDOWS = 10
#: ... a cumulative-skew range above this many random-walk standard deviations (see the module docstring) ...
SKEW_NOISE_Z = 4.0
#: ... and a record at least this long (nt): the smallest complete bacterial chromosomes are about 110 kb.
MIN_SKEW_RECORD_LENGTH = 100_000
#: :func:`run_gc_profile` plots the longest this many records.
PLOT_MAX_RECORDS = 4
#: Every file :func:`run_gc_profile` writes into its output directory (and the only ones it replaces or removes).
OUTPUT_NAMES = ("gc_profile.tsv", "gc_profile.png", "report.md", "overlay.tsv", "overlay.png")
#: hidden folders in the output directory: a run's staging folder ("new") and the earlier run's files set
#: aside while the new ones move in ("old"); ``_SWAPPING`` in an "old" folder: all of them are set aside
_WORK_PREFIX = {"new": ".gc-profile-new-", "old": ".gc-profile-old-"}  # then the writing process's id
_WORK_DIR = re.compile(r"\.gc-profile-(new|old)-(?:(\d+)-)?\w+\.tmp")
_SWAPPING = "swapping"
_A, _C, _G, _T, _N = range(5)


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InputError(f"{name}={value!r} must be a positive integer")
    return int(value)


def window_bounds(length: int, window: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """0-based half-open window bounds ``(starts [W], ends [W])`` for a record of ``length``.

    Full windows at ``0, step, ...`` plus at most one final partial window covering the
    tail (see the module docstring). Requires ``0 < step <= window``.
    """
    window = _check_positive_int("window", window)
    step = _check_positive_int("step", step)
    if step > window:
        raise InputError(f"step={step} must not exceed window={window} (windows would leave gaps)")
    if length <= 0:
        raise InputError(f"{length=} must be positive")
    if length < window:
        return np.array([0], dtype=np.int64), np.array([length], dtype=np.int64)
    starts = np.arange(0, length - window + 1, step, dtype=np.int64)
    ends = starts + window
    if ends[-1] < length:
        starts = np.append(starts, starts[-1] + step)
        ends = np.append(ends, length)
    return starts, ends


class Island(NamedTuple):
    """A candidate island: merged flagged windows ``[start, end)`` (0-based) and their GC.

    ``direction`` is ``+1`` for a GC-rich island (its windows' GC above the record's) and ``-1``
    for an AT-rich one; only windows departing in the same direction are merged.
    """

    start: int
    end: int
    gc: float  # over the region's non-N bases
    n_windows: int
    direction: int

    @property
    def kind(self) -> str:
        """``"GC-rich"`` or ``"AT-rich"``, for tables and legends."""
        return "GC-rich" if self.direction > 0 else "AT-rich"


@dataclass(frozen=True)
class RecordSummary:
    """Whole-record statistics.

    ``origin``/``terminus`` are 0-based positions of the cumulative skew's minimum/maximum
    (:func:`_curve_positions`; a circular record's end is its position 0), ``None`` unless the
    evidence supports a call there (see the module docstring); ``circular``: the record was read
    as circular (its curve may turn across its ends);
    ``no_call_reason`` says why no call was made at all (too few windows, no skew signal
    above random, a record too short for a chromosome), empty when the curve was judged.
    ``skew_range`` is the curve's range and ``skew_noise_range`` the random-walk threshold it
    had to exceed (NaN where not computed). ``islands``: candidate islands (GC departing from
    ``gc`` by more than ``island_threshold``). ``n_na_windows``: windows with fewer than
    ``min_acgt`` A/C/G/T bases (NA in the table).
    """

    chrom: str
    length: int
    gc: float  # over all non-N bases of the record
    n_fraction: float
    n_windows: int
    min_window_gc: float
    max_window_gc: float
    origin: int | None
    terminus: int | None
    islands: tuple[Island, ...] = ()
    island_threshold: float = ISLAND_THRESHOLD
    has_skew: bool = False  # some informative window holds G or C
    skew_min_at: int | None = None  # positions of the cumulative skew's extremes, turning or not
    skew_max_at: int | None = None
    no_call_reason: str = ""
    skew_range: float = math.nan
    skew_noise_range: float = math.nan
    n_na_windows: int = 0
    min_acgt: int = 1
    circular: bool = False  # the turning point was looked for across the record's ends too

    @property
    def one_replichore(self) -> bool:
        """True when the skew has a signal but never turns: no origin or terminus on the record."""
        return self.origin is None and self.terminus is None and self.has_skew and not self.no_call_reason

    def replichore_note(self) -> str:
        """One line on the origin/terminus call, for tables and reports."""
        if not self.has_skew:
            if self.n_na_windows == self.n_windows:
                return f"no window has {self.min_acgt:,} A/C/G/T bases (half the window): no skew"
            return "no G/C: no skew"
        if self.no_call_reason:
            return f"no origin/terminus call: {self.no_call_reason}"
        if self.one_replichore:
            return "cumulative skew never turns: the sequence lies on one replichore (origin and terminus not on it)"
        parts = []
        for at, what, pos in ((self.origin, "minimum", self.skew_min_at), (self.terminus, "maximum", self.skew_max_at)):
            if at is None and self.circular:
                parts.append(f"the cumulative skew does not turn at its {what} ({pos:,}), even across the record's "
                             "ends (read as circular)")
            elif at is None:
                parts.append(f"the cumulative skew does not turn at its {what} ({pos:,}, at or near an end): the "
                             f"{'origin' if what == 'minimum' else 'terminus'} is there or beyond that end")
        return "; ".join(parts)


@dataclass(frozen=True)
class GCProfile:
    """Column table of windows over one or more records, ``W`` rows in record order.

    Columns: ``chrom [W]`` (str), ``start``/``end [W]`` (int64, 0-based half-open), ``gc``,
    ``gc_skew``, ``cumulative_gc_skew``, ``n_fraction``, ``gc_deviation [W]`` (float64;
    window GC minus the record's GC) and ``island [W]`` (bool; ``|gc_deviation|`` above the
    threshold). ``summaries`` holds one :class:`RecordSummary` per record.
    """

    window: int
    step: int
    chrom: np.ndarray
    start: np.ndarray
    end: np.ndarray
    gc: np.ndarray
    gc_skew: np.ndarray
    cumulative_gc_skew: np.ndarray
    n_fraction: np.ndarray
    gc_deviation: np.ndarray
    island: np.ndarray
    summaries: tuple[RecordSummary, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return int(self.start.size)

    def record(self, chrom: str) -> GCProfile:
        """The rows of one record (``KeyError`` if absent)."""
        sel = self.chrom == chrom
        if not sel.any():
            raise KeyError(f"no record {chrom!r} in profile (records: {[s.chrom for s in self.summaries]})")
        cols = {c: getattr(self, c)[sel] for c in TSV_COLUMNS}
        return GCProfile(
            self.window, self.step, summaries=tuple(s for s in self.summaries if s.chrom == chrom), **cols
        )


#: a FASTA description that marks a piece of an assembly (NCBI's "whole genome shotgun sequence",
#: "contig", "scaffold"; SPAdes' NODE_, MEGAHIT's k141_ names, assemblers' length= tags): linear
_DRAFT_WORDS = re.compile(r"contig|scaffold|shotgun|draft|partial|fragment|\bNODE_|\bk\d+_\d|\blength=",
                          re.IGNORECASE)
#: one that marks a whole circular molecule: NCBI's "complete genome" / "complete sequence", a
#: chromosome, a RefSeq NC_ accession, an assembler's circular=true
_CIRCULAR_WORDS = re.compile(r"complete (genome|sequence)|\bchromosome\b|^NC_|\bcircular\b(?!=)", re.IGNORECASE)
_CIRCULAR_TAG = re.compile(r"\bcircular=(true|yes|1)\b", re.IGNORECASE)


def reads_as_circular(description: str) -> bool:
    """Whether a record is read as a circular chromosome when ``circular`` is not given: only on
    evidence in its FASTA description (``complete genome``, ``complete sequence``,
    ``chromosome``, a RefSeq ``NC_`` accession, ``circular=true``), and never when it names a
    piece of an assembly (contig, scaffold, draft, partial, fragment, whole genome shotgun, an
    assembler's ``NODE_`` / ``k141_`` name or ``length=`` tag)."""
    if _CIRCULAR_TAG.search(description):  # an assembler's own word (Unicycler), beside its length= tag
        return True
    return _DRAFT_WORDS.search(description) is None and _CIRCULAR_WORDS.search(description) is not None


_RECORDS = ("(id, seq) pairs, records with .id and .seq (GenomeRecord, sinkalign.read_fasta's Sequence, Bio "
            "SeqRecord) or the path of a FASTA file")


def read_records(path: str | os.PathLike) -> list[GenomeRecord]:
    """The records of the FASTA file ``path`` (plain or gzip) as ``sinkalign gc-profile`` reads them
    (:func:`~sinkalign.lm.data.read_genome_records`: uppercased, IUPAC codes and X as N, U as T as
    in a record given in memory (:func:`_as_record`), the whole header kept as the description);
    ``-`` (standard input) and a named pipe are read through a temporary copy
    (:func:`~sinkalign.pipelines.runner.stdin_spooled`) and named as given in errors (``-``:
    :data:`~sinkalign.pipelines.runner.STDIN_NAME`)."""
    with stdin_spooled([path]) as (spooled,):
        return read_genome_records(spooled, rna=True)


def _as_record(r: object, k: int, what: str = "record") -> GenomeRecord:
    """Record ``k`` as a GenomeRecord over ACGTN: IUPAC codes and X as N (as a FASTA file is read) and
    U as T (as the aligner reads RNA). A pair's description is ''; a record object's is its
    ``.description`` led by its id (a FASTA title: ``read_fasta`` keeps the rest of the header there)."""
    if isinstance(r, GenomeRecord):
        rec_id, description, seq = r.id, r.description, r.seq
    elif isinstance(r, (tuple, list)) and len(r) == 2 and not hasattr(r, "seq"):
        (rec_id, seq), description = r, ""
    elif hasattr(r, "id") and hasattr(r, "seq") and not isinstance(r, (str, bytes)):
        rec_id, seq = r.id, r.seq
        description = getattr(r, "description", None)
        description = description if isinstance(description, str) else ""
        if description.split(None, 1)[:1] != [str(rec_id)]:
            description = f"{rec_id} {description}".rstrip()
    else:
        raise InputError(f"{what} {k}: expected an (id, seq) pair or a record with .id and .seq, got "
                         f"{type(r).__name__} {r!r:.40}")
    seq = sequence_text(seq)  # a Bio Seq (SeqRecord.seq) or bytes as str
    if not isinstance(seq, str):
        raise InputError(f"{what} {k} ({rec_id!r}): the sequence must be a str, got {type(seq).__name__}")
    return GenomeRecord(str(rec_id), description, as_model_bases(seq, rna=True))


def _looks_like_a_record(records: object) -> bool:
    """One record given alone: a pair of strs or an object with .id and .seq (a Bio SeqRecord
    iterates over its letters, so it must be told apart before the records are iterated)."""
    if isinstance(records, tuple) and len(records) == 2 and isinstance(records[0], str) \
            and not isinstance(records[1], (tuple, list)) and not hasattr(records[1], "id"):
        return True  # (id, seq), the seq a str, bytes or a Bio Seq
    return hasattr(records, "id") and hasattr(records, "seq")


def _is_a_path(text: str) -> bool:
    """Whether the str ``text`` is read as a FASTA path: ``-``, an existing path, or anything but
    letters alone (those, naming no file, are a sequence given where records were expected)."""
    if not text:
        return False
    if is_stdio(text) or not text.isalpha():
        return True
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # a name too long for the file system: a sequence
        return False


def _read_if_a_path(records):
    """``records`` read from their FASTA file when they name one (:func:`read_records`), else as
    given; a str or bytes that names no file (a sequence given alone) is refused."""
    if isinstance(records, os.PathLike) or (isinstance(records, str) and _is_a_path(records)):
        return read_records(records)
    if isinstance(records, (str, bytes)):
        raise InputError(f"no FASTA file {records!r:.40} exists, and records are {_RECORDS}, not one sequence: "
                         "give [(id, seq)], e.g. gc_profile([('chr1', seq)])")
    return records


def _as_records(records) -> list[GenomeRecord]:
    """Accept one record or an iterable of them (see :func:`gc_profile`), or a FASTA path."""
    records = _read_if_a_path(records)
    if isinstance(records, list) and all(isinstance(r, GenomeRecord) for r in records) and records:
        out = records
    elif _looks_like_a_record(records):
        out = [_as_record(records, 0)]
    else:
        try:
            records = iter(records)
        except TypeError:
            raise InputError(f"records are {_RECORDS}, got {type(records).__name__} {records!r:.40}") from None
        out = [_as_record(r, k) for k, r in enumerate(records)]
    if not out:
        raise InputError("no records given")
    ids = [r.id for r in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InputError(f"duplicate record ids: {dupes}")
    return out


def default_step(window: int) -> int:
    """The default step: half the window (at least 1)."""
    return max(1, _check_positive_int("window", window) // 2)


def _check_island_threshold(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise InputError(f"island_threshold={value!r} must be a GC fraction in (0, 1), e.g. 0.1")
    return float(value)


def _turning_points(curve: np.ndarray, circular: bool = False) -> tuple[int | None, int | None]:
    """Indices of the minimum and maximum of ``curve`` where it turns (else ``None``).

    ``circular``: ``curve[0]`` and ``curve[-1]`` are one point of a circular record, and an
    extremum that does not turn inside the record is tested again on the curve around it: half
    a record before it and half after it, across the record's ends (the curve continued past
    the end by ``curve[-1]`` per turn)."""
    span = float(curve.max() - curve.min())
    if span <= 0:
        return None, None
    need = TURN_FRACTION * span
    w = curve.size - 1
    around = np.concatenate([curve[:-1] - curve[-1], curve, curve[1:] + curve[-1]])  # point i at around[w + i]

    def turns(c: np.ndarray, i: int, sign: float) -> bool:
        if i in (0, c.size - 1):
            return False
        left, right = sign * (c[:i] - c[i]), sign * (c[i + 1 :] - c[i])
        return min(left.max(), right.max()) >= need

    def turning(i: int, sign: float) -> bool:
        start = w + i - w // 2  # the circle rotated to put point i in the middle
        return turns(curve, i, sign) or (circular and turns(around[start : start + w + 1], w // 2, sign))

    lo, hi = int(np.argmin(curve)), int(np.argmax(curve))
    return (lo if turning(lo, 1.0) else None), (hi if turning(hi, -1.0) else None)


def _islands(flag: np.ndarray, deviation: np.ndarray, starts: np.ndarray, ends: np.ndarray, cum_gc: np.ndarray,
             cum_n: np.ndarray) -> tuple[Island, ...]:
    """Merge runs of flagged windows into regions with their GC.

    Consecutive flagged windows join one region when they overlap or touch *and* depart from
    the record's GC in the same direction (sign of ``deviation``): a GC-rich run beside an
    AT-rich run gives two islands, not one whose GC averages out to the record's.
    """
    out = []
    k = 0
    idx = np.flatnonzero(flag)
    while k < idx.size:
        first = last = idx[k]
        direction = 1 if deviation[first] > 0 else -1
        count = 1
        while (k + 1 < idx.size and starts[idx[k + 1]] <= ends[last]
               and (1 if deviation[idx[k + 1]] > 0 else -1) == direction):
            k += 1
            last = idx[k]
            count += 1
        a, b = int(starts[first]), int(ends[last])
        acgt = (b - a) - int(cum_n[b] - cum_n[a])
        gc = int(cum_gc[b] - cum_gc[a]) / acgt if acgt else math.nan
        out.append(Island(a, b, gc, count, direction))
        k += 1
    return tuple(out)


def _min_acgt(window: int, fraction: float = MIN_ACGT_FRACTION) -> int:
    """The fewest A/C/G/T bases an informative window holds: ``ceil(fraction * window)``, at least 1.

    Counted against the window length, not the window's own length, so a short tail window
    or one that is mostly N is NA rather than a GC from a few bases.
    """
    return max(1, math.ceil(fraction * _check_positive_int("window", window)))


class _SkewCall(NamedTuple):
    """What :func:`_skew_call` decided: indices into the curve (or None) and why no call."""

    lo: int | None
    hi: int | None
    reason: str
    span: float
    noise_span: float


def _covered(starts: np.ndarray, ends: np.ndarray, informative: np.ndarray) -> int:
    """Bases in the union of the informative windows ``[starts, ends)`` (windows in order, ends
    non-decreasing): the sequence the informative windows span."""
    total, reach = 0, 0
    for a, b in zip(starts[informative].tolist(), ends[informative].tolist()):
        total += max(0, b - max(a, reach))
        reach = max(reach, b)
    return total


def _skew_call(curve: np.ndarray, added: np.ndarray, informative: np.ndarray, *, window: int, step: int,
               length: int, covered: int, circular: bool = False) -> _SkewCall:
    """Origin/terminus indices of ``curve`` (``[W + 1]``, starting at 0) where the evidence allows.

    ``added [W]`` is what each window added to the curve, ``informative [W]`` which windows
    count and ``covered`` the bases they span (:func:`_covered`). The checks (enough
    sequence, a range above random, a turning point (across the ends too when ``circular``:
    :func:`_turning_points`), a chromosome-sized record) are those of the module docstring;
    ``reason`` names the first one that stops a call (empty when the curve was judged,
    turning or not).
    """
    n = int(np.count_nonzero(informative))
    lengths = covered / window  # window lengths of sequence in informative windows
    span = float(curve.max() - curve.min())
    if lengths < MIN_SKEW_WINDOWS:
        shown = round(lengths, 2) if round(lengths, 2) < MIN_SKEW_WINDOWS else math.floor(lengths * 100) / 100
        return _SkewCall(None, None, f"too few informative windows to tell a skew from noise (they span {shown:.2f} "
                         f"window lengths of sequence, {covered:,} nt; at least {MIN_SKEW_WINDOWS} needed)", span,
                         math.nan)
    c = added[informative]
    lag = math.ceil(window / step)  # the nearest window that does not overlap
    sigma = math.sqrt(float(np.mean((c[lag:] - c[:-lag]) ** 2)) / 2)
    noise_span = SKEW_NOISE_Z * sigma * math.sqrt(n * window / step)
    if span <= noise_span:
        return _SkewCall(None, None, f"the cumulative skew's range ({span:.3g}) is within what a sequence without "
                         f"strand bias gives ({SKEW_NOISE_Z:g} SD of a random walk: {noise_span:.3g})", span, noise_span)
    lo, hi = _turning_points(curve, circular)
    if (lo is not None or hi is not None) and length < MIN_SKEW_RECORD_LENGTH:
        return _SkewCall(None, None, f"the record is too short for a chromosome ({length:,} nt; at least "
                         f"{MIN_SKEW_RECORD_LENGTH:,} nt)", span, noise_span)
    return _SkewCall(lo, hi, "", span, noise_span)


def _curve_positions(starts: np.ndarray, ends: np.ndarray, step: int, length: int) -> np.ndarray:
    """0-based positions ``[W + 1]`` of the cumulative skew: 0 before the first window, then the
    value after window ``i`` at ``floor(midpoint_i + step / 2)`` (at most ``length``): the
    boundary between window ``i`` and the next, so the resolution of an origin/terminus is ``step``."""
    pos = np.concatenate([[0.0], (starts + ends) / 2 + step / 2])
    return np.minimum(np.floor(pos), length).astype(np.int64)


def gc_profile(records, window: int = 1000, step: int | None = None, *, island_threshold: float = ISLAND_THRESHOLD,
               circular: bool | None = None, progress: bool = False) -> GCProfile:
    """Windowed GC content and GC skew of ``records`` (one record or many, or a FASTA file).

    Args:
        records: one record or an iterable of them, in order: ``(id, seq)`` pairs or any
            record with ``.id`` and ``.seq`` (and ``.description`` if it has one): a
            :class:`~sinkalign.lm.data.GenomeRecord`, a :class:`~sinkalign.io.fasta.Sequence`
            of :func:`sinkalign.read_fasta`, a Biopython ``SeqRecord`` (its ``Seq`` read as a
            str); or the path (``str`` or ``os.PathLike``; ``-``: standard input) of a FASTA file,
            plain or gzip, read as ``sinkalign gc-profile`` reads it (:func:`read_records`). A
            sequence is over ACGTN in either case, in a file or in memory alike
            (:func:`~sinkalign.lm.data.as_model_bases` with ``rna=True``): the IUPAC ambiguity
            codes and ``X`` are read as N and ``U`` as T (RNA, as the aligner reads it). A ``str``
            of letters alone that names no file is a sequence, refused: put it in a pair.
        window: window length (bases), > 0.
        step: distance between window starts, ``0 < step <= window``; ``None``: half the window.
        island_threshold: flag windows whose GC departs from their record's GC by more
            than this (a GC fraction in (0, 1)).
        circular: read every record as a circular chromosome: an extremum of the cumulative
            skew at or near a record's end may turn across the ends (the origin of a complete
            chromosome that starts at oriC); ``False``: only inside the record; ``None`` (the
            default): each record by its FASTA description (:func:`reads_as_circular`: circular
            where it says so, e.g. ``complete genome`` or a RefSeq ``NC_`` accession, and names no
            piece of an assembly): a record's ``.description`` led by its id, as in the FASTA
            header (``read_fasta`` keeps only the rest there); an ``(id, seq)`` pair, which has no
            description, is linear.
        progress: show a tqdm bar (bases processed) on stderr.

    Returns:
        :class:`GCProfile` with ``W`` rows (see module docstring for definitions). Windows with
        fewer than ``ceil(window / 2)`` A/C/G/T bases are NA (NaN ``gc``, ``gc_skew``,
        ``gc_deviation``), never islands, and leave the cumulative skew unchanged, so that
        neither an N gap nor a few-base tail window makes an island or a skew extremum.
    """
    window = _check_positive_int("window", window)
    step = default_step(window) if step is None else _check_positive_int("step", step)
    if step > window:
        raise InputError(f"step={step} must not exceed window={window} (windows would leave gaps)")
    island_threshold = _check_island_threshold(island_threshold)
    need = _min_acgt(window)
    recs = _as_records(records)
    rings = [reads_as_circular(r.description) if circular is None else bool(circular) for r in recs]
    cols: dict[str, list[np.ndarray]] = {c: [] for c in TSV_COLUMNS}
    summaries = []
    with tqdm(total=sum(len(r.seq) for r in recs), unit="nt", unit_scale=True, disable=not progress,
              desc="GC profile") as bar:
        for rec, circular in zip(recs, rings):
            chrom, seq = rec.id, rec.seq
            if len(seq) == 0:
                raise InputError(f"record {chrom!r} is empty")
            try:
                tokens = encode(seq)
            except ValueError as exc:
                raise InputError(f"record {chrom!r}: {exc}") from None
            starts, ends = window_bounds(tokens.size, window, step)
            dtype = np.int32 if tokens.size < 2**31 - 1 else np.int64
            cum = {b: np.concatenate([[0], np.cumsum(tokens == b, dtype=dtype)]) for b in (_C, _G, _N)}
            g = (cum[_G][ends] - cum[_G][starts]).astype(np.float64)
            c = (cum[_C][ends] - cum[_C][starts]).astype(np.float64)
            n = (cum[_N][ends] - cum[_N][starts]).astype(np.float64)
            acgt = (ends - starts) - n
            informative = acgt >= need
            with np.errstate(invalid="ignore", divide="ignore"):
                gc = np.where(informative, (g + c) / acgt, np.nan)
                skew = np.where(informative & (g + c > 0), (g - c) / (g + c), np.nan)
            added = np.where(np.isfinite(skew), skew, 0.0) * (acgt / window)  # a full window without N: its skew
            cumskew = np.cumsum(added)
            total_gc = int(cum[_G][-1] + cum[_C][-1])
            total_n = int(cum[_N][-1])
            origin = terminus = min_at = max_at = None
            call = _SkewCall(None, None, "", math.nan, math.nan)
            has_skew = bool(np.isfinite(skew).any())
            if has_skew:
                pos = _curve_positions(starts, ends, step, tokens.size)
                curve = np.concatenate([[0.0], cumskew])
                min_at, max_at = int(pos[np.argmin(curve)]), int(pos[np.argmax(curve)])
                call = _skew_call(curve, added, informative, window=window, step=step, length=int(tokens.size),
                                  covered=_covered(starts, ends, informative), circular=circular)
                if circular:  # a circle's end is its position 0
                    pos = np.where(pos == tokens.size, 0, pos)
                origin = None if call.lo is None else int(pos[call.lo])
                terminus = None if call.hi is None else int(pos[call.hi])
            n_acgt = tokens.size - total_n
            record_gc = total_gc / n_acgt if n_acgt else math.nan
            deviation = gc - record_gc
            with np.errstate(invalid="ignore"):
                flag = np.abs(deviation) > island_threshold  # NA windows are never flagged
            cum_gc = cum[_G] + cum[_C]
            summaries.append(
                RecordSummary(
                    chrom=chrom,
                    length=int(tokens.size),
                    gc=record_gc,
                    n_fraction=total_n / tokens.size,
                    n_windows=int(starts.size),
                    min_window_gc=float(np.nanmin(gc)) if np.isfinite(gc).any() else math.nan,
                    max_window_gc=float(np.nanmax(gc)) if np.isfinite(gc).any() else math.nan,
                    origin=origin,
                    terminus=terminus,
                    islands=_islands(flag, deviation, starts, ends, cum_gc, cum[_N]),
                    island_threshold=island_threshold,
                    has_skew=has_skew,
                    skew_min_at=min_at,
                    skew_max_at=max_at,
                    no_call_reason=call.reason,
                    skew_range=call.span,
                    skew_noise_range=call.noise_span,
                    n_na_windows=int(np.count_nonzero(~informative)),
                    min_acgt=need,
                    circular=bool(circular),
                )
            )
            cols["chrom"].append(np.full(starts.size, chrom, dtype=object))
            cols["start"].append(starts)
            cols["end"].append(ends)
            cols["gc"].append(gc)
            cols["gc_skew"].append(skew)
            cols["cumulative_gc_skew"].append(cumskew)
            cols["n_fraction"].append(n / (ends - starts))
            cols["gc_deviation"].append(deviation)
            cols["island"].append(flag)
            bar.update(tokens.size)
    return GCProfile(window, step, summaries=tuple(summaries), **{k: np.concatenate(v) for k, v in cols.items()})


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.6f}"


def write_tsv(profile: GCProfile, path: str | os.PathLike) -> Path:
    """Write the profile as TSV, atomically: header :data:`TSV_COLUMNS`; ``island`` is 1 for a
    flagged window, else 0."""
    path = Path(path)
    with atomic_write(path, "w") as fh:
        fh.write("\t".join(TSV_COLUMNS) + "\n")
        for i in range(len(profile)):
            fh.write(
                f"{profile.chrom[i]}\t{profile.start[i]}\t{profile.end[i]}\t{_fmt(profile.gc[i])}\t"
                f"{_fmt(profile.gc_skew[i])}\t{_fmt(profile.cumulative_gc_skew[i])}\t"
                f"{_fmt(profile.n_fraction[i])}\t{_fmt(profile.gc_deviation[i])}\t{int(profile.island[i])}\n"
            )
    return path


def _save_png(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)  # a pyplot-free Figure draws on Agg
    atomic_write_bytes(path, buf.getvalue())
    return path


def _plotted(profile: GCProfile, max_records: int) -> list[RecordSummary]:
    """The records :func:`plot_profile` draws: the ``max_records`` longest, in file order."""
    max_records = _check_positive_int("max_records", max_records)
    order = {s.chrom: i for i, s in enumerate(profile.summaries)}
    return sorted(sorted(profile.summaries, key=lambda s: -s.length)[:max_records], key=lambda s: order[s.chrom])


def plot_profile(profile: GCProfile, path: str | os.PathLike, *, max_records: int = PLOT_MAX_RECORDS) -> Path:
    """PNG of GC, GC skew and cumulative skew (with predicted origin/terminus) per record.

    Three stacked panels per record, for at most ``max_records`` records (the longest
    ones, in file order; :func:`write_report` and the command say so when records are left
    out). NA windows are gaps in the GC and skew lines; a record's three panels share its
    coordinates, 0 to its length. Written atomically; returns the path.
    """
    return _save_png(profile_figure(profile, max_records=max_records), Path(path))


def profile_figure(profile: GCProfile, *, max_records: int = PLOT_MAX_RECORDS) -> Figure:
    """The figure :func:`plot_profile` writes (for a caller that adds to it or saves it otherwise)."""
    shown = _plotted(profile, max_records)
    fig = Figure(figsize=(10, 2.2 * 3 * len(shown)))
    axes = fig.subplots(3 * len(shown), 1, squeeze=False)
    for r, summ in enumerate(shown):
        sub = profile.record(summ.chrom)
        mid = (sub.start + sub.end) / 2
        ax_gc, ax_skew, ax_cum = axes[3 * r : 3 * r + 3, 0]
        ax_gc.plot(mid, sub.gc, lw=0.8, color="tab:blue")
        if math.isfinite(summ.gc):
            ax_gc.axhline(summ.gc, color="grey", ls="--", lw=0.8, label=f"overall GC {summ.gc:.3f}")
            for sign in (-1, 1):
                ax_gc.axhline(summ.gc + sign * summ.island_threshold, color="grey", ls=":", lw=0.6,
                              label=f"island threshold \u00b1{summ.island_threshold:g}" if sign > 0 else None)
        if not np.isfinite(sub.gc).any():  # all NA (an all-N record): say so, not an empty frame
            for ax in (ax_gc, ax_skew):
                ax.text(0.5, 0.5, "no window with enough A/C/G/T bases (NA)", transform=ax.transAxes,
                        ha="center", va="center", color="grey")
            ax_gc.set_ylim(0, 1)
        for ax in (ax_gc, ax_skew, ax_cum):  # one x axis per record, the whole record (NA tails included)
            ax.set_xlim(0, max(summ.length, 1))
        for direction, color in ((1, "tab:orange"), (-1, "tab:cyan")):
            group = [isl for isl in summ.islands if isl.direction == direction]
            for k, isl in enumerate(group):
                ax_gc.axvspan(isl.start, isl.end, color=color, alpha=0.3, lw=0,
                              label=f"{isl.kind} candidate islands ({len(group)})" if k == 0 else None)
        ax_gc.set_ylabel("GC")
        ax_gc.set_title(f"{summ.chrom} ({summ.length:,} nt; window {profile.window}, step {profile.step})")
        if ax_gc.get_legend_handles_labels()[0]:
            ax_gc.legend(loc="upper right", fontsize=8)
        ax_skew.plot(mid, sub.gc_skew, lw=0.6, color="tab:green")
        ax_skew.axhline(0, color="grey", lw=0.6)
        ax_skew.set_ylabel("GC skew")
        # where the origin/terminus positions come from: the value after each window, at midpoint + step / 2
        ax_cum.plot(_curve_positions(sub.start, sub.end, profile.step, summ.length),
                    np.concatenate([[0.0], sub.cumulative_gc_skew]), lw=0.9, color="tab:purple")
        if summ.origin is not None:  # at the curve's extremum (a circular record's end is its position 0)
            ax_cum.axvline(summ.skew_min_at, color="tab:red", ls=":", label=f"origin? {summ.origin:,}")
        if summ.terminus is not None:
            ax_cum.axvline(summ.skew_max_at, color="tab:orange", ls=":", label=f"terminus? {summ.terminus:,}")
        if summ.origin is not None or summ.terminus is not None:
            ax_cum.legend(loc="best", fontsize=8)
        elif summ.one_replichore:
            ax_cum.set_title("no turning point: one replichore", fontsize=9)
        elif summ.no_call_reason:
            ax_cum.set_title("no origin/terminus call (see report.md)", fontsize=9)
        ax_cum.set_ylabel("cumulative skew")
        ax_skew.set_xlabel("position (0-based, window midpoint)", fontsize=8)
        ax_cum.set_xlabel(f"position (0-based): the value after each window, at its midpoint + step / 2 "
                          f"({profile.step:,} nt resolution)")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- overlay


def continuation_description(record_id: str, chrom: str, start: int) -> str:
    """FASTA header (without ``>``) for a generated continuation of ``chrom`` from ``start``."""
    return f"{record_id} chrom={chrom} start={int(start)}"


def _header_tags(description: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in description.split()[1:] if "=" in tok)


def parse_continuation_description(description: str) -> tuple[str | None, int]:
    """``(chrom or None, start)`` from the ``chrom=`` / ``start=`` header tags.

    ``start`` is where the record begins: with ``prompt_included=true`` the prompt's start
    (see :func:`prompt_bases`). Raises ``ValueError`` if ``start=`` is missing or not a
    non-negative integer.
    """
    tags = _header_tags(description)
    if "start" not in tags:
        raise InputError(f"header {description!r} lacks a start=<0-based position> tag")
    return tags.get("chrom"), _count_tag(description, tags, "start")


def _count_tag(description: str, tags: dict[str, str], name: str) -> int:
    """The tag ``name`` of a header as a non-negative integer (:class:`InputError` otherwise)."""
    try:
        value = int(tags[name])
    except ValueError:
        raise InputError(f"header {description!r}: {name}={tags[name]!r} is not an integer") from None
    if value < 0:
        raise InputError(f"header {description!r}: {name}={value} must be >= 0")
    return value


def prompt_bases(description: str) -> int:
    """How many bases at the start of a generated record are its prompt, not generated.

    ``sinkalign generate-dna --include-prompt --format fasta`` writes the prompt before the
    continuation and tags the header ``prompt_included=true prompt_length=<P>``: then ``P``.
    ``0`` when ``prompt_included`` is absent (headers of other tools, or written before the
    tag existed) or ``false``. Raises ``ValueError`` (:class:`~sinkalign.errors.InputError`)
    for ``prompt_included=true`` without a ``prompt_length=`` tag (the prompt could not be
    told from the continuation), or for values that are not ``true``/``false`` and a
    non-negative integer.
    """
    tags = _header_tags(description)
    included = tags.get("prompt_included")
    if included is None or included.lower() == "false":
        return 0
    if included.lower() != "true":
        raise InputError(f"header {description!r}: prompt_included={included!r} is neither true nor false")
    if "prompt_length" not in tags:
        raise InputError(f"header {description!r} says prompt_included=true but has no prompt_length= tag: the "
                         "prompt cannot be told from the continuation")
    return _count_tag(description, tags, "prompt_length")


class ContinuationComparison(NamedTuple):
    """One generated continuation against the true sequence at the same coordinates.

    ``start`` is where the continuation begins (after the prompt, also for a record that
    holds the prompt: those bases are not compared).
    """

    id: str
    chrom: str
    start: int
    length: int  # bases compared (generated length, cut at the end of the true record)
    true_gc: float
    generated_gc: float
    pearson_r: float  # of the two gc_trajectory curves
    true_trajectory: np.ndarray  # [length - window + 1]
    generated_trajectory: np.ndarray  # [length - window + 1]


def _overall_gc(seq: str) -> float:
    t = encode(seq)
    acgt = np.count_nonzero(t != _N)
    return float(np.count_nonzero((t == _C) | (t == _G)) / acgt) if acgt else math.nan


def compare_continuations(
    genome: Iterable | str | os.PathLike, generated: Iterable | str | os.PathLike, *, window: int = 25
) -> list[ContinuationComparison]:
    """Compare generated continuations with the genome at the coordinates in their headers.

    Args:
        genome: the true records, or their FASTA file, as :func:`gc_profile` takes them.
        generated: records whose descriptions carry ``chrom=``/``start=`` tags (see
            :func:`continuation_description`; GenomeRecords, ``read_fasta`` Sequences, Bio
            SeqRecords: any record with ``.id``, ``.seq`` and ``.description``), or their FASTA
            file (``sinkalign generate-dna --format fasta``); ``chrom`` may be omitted for a
            single-record genome.
        window: sliding window of :func:`gc_trajectory`.

    Only generated bases are compared: a record tagged ``prompt_included=true
    prompt_length=P`` (:func:`prompt_bases`) loses its first ``P`` bases, the prompt copied
    from the genome, and is compared from ``start + P`` (the prompt would be scored against
    the very bases it was taken from, inflating the correlation). A continuation running
    past the end of its true record is compared over the bases that exist (with a warning).
    Raises ``ValueError`` naming the generated record for a missing/unknown chrom, a start
    beyond the record, bad prompt tags, or fewer than ``window`` bases to compare.
    """
    window = _check_positive_int("window", window)
    true = {r.id: r.seq for r in _as_records(genome)}
    generated = _read_if_a_path(generated)
    out = []
    for rec in (_as_record(r, k, "generated record") for k, r in enumerate(generated)):
        try:
            chrom, start = parse_continuation_description(rec.description)
            skip = prompt_bases(rec.description)
        except ValueError as exc:
            raise InputError(f"generated record {rec.id!r}: {exc}") from None
        if skip >= len(rec.seq):
            raise InputError(f"generated record {rec.id!r}: prompt_length={skip} leaves no generated base (the record "
                             f"has {len(rec.seq)})")
        seq = rec.seq[skip:]
        start += skip
        if chrom is None:
            if len(true) != 1:
                raise InputError(
                    f"generated record {rec.id!r} has no chrom= tag and the genome has {len(true)} records"
                )
            chrom = next(iter(true))
        if chrom not in true:
            raise InputError(f"generated record {rec.id!r}: chrom={chrom!r} is not in the genome ({sorted(true)})")
        ref = true[chrom]
        if start >= len(ref):
            raise InputError(f"generated record {rec.id!r}: start={start} is beyond {chrom!r} (length {len(ref)})")
        length = min(len(seq), len(ref) - start)
        if length < len(seq):
            logger.warning("%s runs past the end of %s; comparing its first %d bases", rec.id, chrom, length)
        if length < window:
            raise InputError(
                f"generated record {rec.id!r}: only {length} bases to compare, fewer than window={window}"
            )
        t_seq, g_seq = ref[start : start + length], seq[:length]
        t_traj, g_traj = gc_trajectory(t_seq, window), gc_trajectory(g_seq, window)
        out.append(
            ContinuationComparison(
                rec.id, chrom, start, length, _overall_gc(t_seq), _overall_gc(g_seq),
                trajectory_correlation(t_traj, g_traj), t_traj, g_traj,
            )
        )
    if not out:
        raise InputError("no generated records to compare")
    return out


def plot_overlay(
    comparisons: Sequence[ContinuationComparison], path: str | os.PathLike, *, window: int = 25, max_panels: int = 6
) -> Path:
    """PNG: per prompt (chrom, start), the true GC trajectory and every generated one on one axes.

    One panel per distinct prompt, the first ``max_panels`` in input order.
    """
    max_panels = _check_positive_int("max_panels", max_panels)
    if not comparisons:
        raise InputError("no comparisons to plot")
    groups: dict[tuple[str, int], list[ContinuationComparison]] = {}
    for c in comparisons:
        key = (c.chrom, c.start)
        if key in groups or len(groups) < max_panels:
            groups.setdefault(key, []).append(c)
    fig = Figure(figsize=(10, 3 * len(groups)))
    axes = fig.subplots(len(groups), 1, squeeze=False)
    for ax, ((chrom, start), comps) in zip(axes[:, 0], groups.items()):
        longest = max(comps, key=lambda c: c.length)
        ax.plot(longest.true_trajectory, color="black", lw=1.4, label="true")
        for c in comps:
            ax.plot(c.generated_trajectory, lw=0.8, alpha=0.8, label=f"{c.id} (r={c.pearson_r:.2f})")
        ax.set_title(f"{chrom} from {start:,} (GC, sliding window {window})")
        ax.set_xlabel("offset from continuation start")
        ax.set_ylabel("GC")
        ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    return _save_png(fig, Path(path))


def write_overlay_tsv(comparisons: Sequence[ContinuationComparison], path: str | os.PathLike) -> Path:
    """TSV ``id chrom start length true_gc generated_gc pearson_r``, atomically."""
    path = Path(path)
    with atomic_write(path, "w") as fh:
        fh.write("id\tchrom\tstart\tlength\ttrue_gc\tgenerated_gc\tpearson_r\n")
        for c in comparisons:
            fh.write(
                f"{c.id}\t{c.chrom}\t{c.start}\t{c.length}\t{_fmt(c.true_gc)}\t{_fmt(c.generated_gc)}\t"
                f"{_fmt(c.pearson_r)}\n"
            )
    return path


# ----------------------------------------------------------------------------- report


def _f(x: float, digits: int = 4) -> str:
    return "NA" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell: ``|`` (as in ``gi|15282445|ref|NC_000918.1|``) escaped."""
    return str(text).replace("|", "\\|")


def write_report(
    profile: GCProfile,
    path: str | os.PathLike,
    *,
    source: str = "",
    png_name: str | None = "gc_profile.png",
    tsv_name: str | None = "gc_profile.tsv",
    overlay: Sequence[ContinuationComparison] | None = None,
    overlay_png_name: str | None = None,
    overlay_window: int = 25,
    plot_max_records: int = PLOT_MAX_RECORDS,
) -> Path:
    """Markdown report: per-record summary table, linked TSV, embedded PNG(s), overlay table.

    PNG/TSV names are written as relative links, so keep the report beside them. When the
    profile has more records than ``plot_max_records`` (what :func:`plot_profile` was given),
    the report says which ones the PNG shows. Record IDs are escaped for the tables.
    """
    lines = ["# GC profile", ""]
    if source:
        lines += [f"Input: `{source}`", ""]
    threshold = profile.summaries[0].island_threshold if profile.summaries else ISLAND_THRESHOLD
    need = _min_acgt(profile.window)
    lines += [
        f"Window {profile.window} nt, step {profile.step} nt; 0-based half-open coordinates. "
        "GC excludes N from the denominator; the IUPAC ambiguity codes (RYSWKMBDHV, S included) and X "
        "count as N, and soft-masked (lowercase) bases count like uppercase ones. Skew = (G-C)/(G+C). "
        "A window with fewer than "
        f"{need:,} A/C/G/T bases (half the window) is NA: no GC or skew, never an island, and it leaves "
        "the cumulative skew unchanged; every other window adds its skew times its A/C/G/T bases / window. "
        "Origin/terminus are the minimum/maximum of the cumulative GC skew, called only with the evidence "
        f"for it: informative windows spanning at least {MIN_SKEW_WINDOWS} window lengths, a curve whose range "
        f"exceeds {SKEW_NOISE_Z:g} standard deviations of the random walk that a sequence without strand "
        "bias gives, a turning point (the curve moves away by at least "
        f"{TURN_FRACTION:.0%} of its range on both sides: inside the record, and on a record read as circular "
        "(column 'read as') across its ends too) and a record of at least "
        f"{MIN_SKEW_RECORD_LENGTH:,} nt; meaningful for complete circular chromosomes only. Their positions are "
        "0-based: the cumulative skew after each window is placed at the window's midpoint + step/2 (the "
        f"boundary with the next window), so they are good to {profile.step:,} nt (the step); a circular "
        "record ends at position 0. A record is read as circular where its FASTA description says it is whole "
        "(complete genome or sequence, chromosome, a RefSeq NC_ accession, circular=true) and names no piece of "
        "an assembly (contig, scaffold, draft, partial, fragment, shotgun, NODE_, length=), unless "
        "--circular/--linear decided for all records. Candidate "
        f"islands: windows whose GC departs from the record's GC by more than {threshold:g}, merged where "
        "they overlap or touch and depart in the same direction (GC-rich or AT-rich).",
        "",
        "| record | length | read as | GC | N fraction | windows | min window GC | max window GC | predicted origin "
        "| predicted terminus | candidate islands |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in profile.summaries:
        ori = "-" if s.origin is None else f"{s.origin:,}"
        ter = "-" if s.terminus is None else f"{s.terminus:,}"
        lines.append(
            f"| {_cell(s.chrom)} | {s.length:,} | {'circular' if s.circular else 'linear'} | {_f(s.gc)} | "
            f"{_f(s.n_fraction)} | {s.n_windows} | "
            f"{_f(s.min_window_gc)} | {_f(s.max_window_gc)} | {ori} | {ter} | {len(s.islands)} |"
        )
    lines.append("")
    notes = [f"- {s.chrom}: {s.replichore_note()}." for s in profile.summaries if s.replichore_note()]
    if notes:
        lines += ["Origin and terminus:", "", *notes, ""]
    na = [f"- {s.chrom}: {s.n_na_windows} of {s.n_windows} windows." for s in profile.summaries if s.n_na_windows]
    if na:
        lines += [f"Windows with fewer than {need:,} A/C/G/T bases (NA in the table):", "", *na, ""]
    islands = [(s, isl) for s in profile.summaries for isl in s.islands]
    lines += ["## Candidate islands", ""]
    if islands:
        lines += [
            "| record | start | end | length | GC | record GC | difference | direction | windows |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for s, isl in islands:
            lines.append(
                f"| {_cell(s.chrom)} | {isl.start:,} | {isl.end:,} | {isl.end - isl.start:,} | {_f(isl.gc)} | "
                f"{_f(s.gc)} | {isl.gc - s.gc:+.4f} | {isl.kind} | {isl.n_windows} |"
            )
    else:
        lines.append(f"None: no window's GC departs from its record's GC by more than {threshold:g}.")
    lines.append("")
    if tsv_name:
        lines += [f"Window table: [{tsv_name}]({tsv_name})", ""]
    if png_name:
        shown = _plotted(profile, plot_max_records)
        if len(shown) < len(profile.summaries):
            lines += [f"Plotted: the {len(shown)} longest of {len(profile.summaries)} records "
                      f"({', '.join(s.chrom for s in shown)}); the tables cover all of them.", ""]
        lines += [f"![GC profile]({png_name})", ""]
    if overlay:
        lines += [
            "## Generated continuations",
            "",
            f"Pearson r of the sliding-window GC trajectories (window {overlay_window}) of each "
            "continuation against the true sequence at the same coordinates. Only generated bases are "
            "compared: a record that holds its prompt (prompt_included=true) is compared without it, from "
            "the continuation's start.",
            "",
            "| id | chrom | start | length | true GC | generated GC | Pearson r |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for c in overlay:
            lines.append(
                f"| {_cell(c.id)} | {_cell(c.chrom)} | {c.start:,} | {c.length:,} | {_f(c.true_gc)} | "
                f"{_f(c.generated_gc)} | {_f(c.pearson_r, 3)} |"
            )
        rs = np.array([c.pearson_r for c in overlay])
        if np.isfinite(rs).any():
            lines += ["", f"Mean Pearson r: {np.nanmean(rs):.3f} over {np.isfinite(rs).sum()} continuation(s)."]
        lines.append("")
        if overlay_png_name:
            lines += [f"![GC trajectories]({overlay_png_name})", ""]
    path = Path(path)
    atomic_write_text(path, "\n".join(lines))
    return path


class GCProfileOutputs(NamedTuple):
    """Files written by :func:`run_gc_profile` (overlay paths are None without an overlay).

    ``plotted``: the IDs of the records drawn in the PNG (the :data:`PLOT_MAX_RECORDS` longest);
    ``removed``: outputs of an earlier run that this run does not write, removed (with ``overwrite``).
    """

    profile: GCProfile
    tsv: Path
    png: Path
    report: Path
    overlay: list[ContinuationComparison] | None
    overlay_tsv: Path | None
    overlay_png: Path | None
    plotted: tuple[str, ...] = ()
    removed: tuple[Path, ...] = ()


def _earlier_outputs(out: Path, overwrite: bool, inputs: Sequence[Path] = ()) -> list[Path]:
    """The files of :data:`OUTPUT_NAMES` already in ``out`` (an earlier run's), checked before any work.

    Raises :class:`~sinkalign.errors.OutputExistsError` when ``out`` is not a directory, when
    one of those names is a directory (never replaced), or when any of them exists and
    ``overwrite`` is false: a second run must not silently replace the first's results, nor
    leave a stale ``overlay.*`` beside a new report. Raises
    :class:`~sinkalign.errors.InputError` when one of ``inputs`` is one of those files (written
    or removed by the run; links resolved), ``overwrite`` or not.
    """
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out} exists and is not a directory; give a directory for the outputs")
    for name in OUTPUT_NAMES:  # written, or removed as an earlier run's: never one of the inputs
        if not (out / name).is_dir():
            check_output(out / name, True, list(inputs), "gc-profile output")
    found = [out / name for name in OUTPUT_NAMES if (out / name).exists() or (out / name).is_symlink()]
    dirs = [p for p in found if p.is_dir()]
    if dirs:
        raise OutputExistsError(f"{dirs[0]} is a directory, where gc-profile writes a file; move it or choose "
                                "another output directory")
    if found and not overwrite:
        raise OutputExistsError(f"{out} already holds the outputs of a gc-profile run ({', '.join(p.name for p in found)}); "
                                "pass --overwrite to replace them (and remove the ones this run does not write), or "
                                "choose another directory")
    return found


def _put_back(out: Path, aside: Path) -> None:
    """Put the earlier run's files that :func:`_swap_in` set aside in ``aside`` back into ``out``.

    Once they were all set aside (``aside`` holds :data:`_SWAPPING`), the outputs in ``out`` are
    the new run's: they are removed, then the marker, and only then the earlier files are moved
    back, so that a kill anywhere on the way leaves what the next run puts back the same way."""
    if (aside / _SWAPPING).exists():
        for name in OUTPUT_NAMES:
            if (out / name).is_file() or (out / name).is_symlink():
                (out / name).unlink()
        (aside / _SWAPPING).unlink()
    for f in aside.iterdir():
        if f.name in OUTPUT_NAMES:
            os.replace(f, out / f.name)
    shutil.rmtree(aside, ignore_errors=True)


def _discard(aside: Path) -> None:
    """Remove the earlier run's files a completed swap set aside, the marker last (a kill on the
    way leaves the folder marked as a completed swap's, never as one to put back)."""
    for f in aside.iterdir():
        if f.name != _SWAPPING and not f.is_dir():
            f.unlink()
    shutil.rmtree(aside, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether a process ``pid`` other than this one is running (on this machine)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        return True
    except OSError:
        return False
    return True


def _clean_up_killed_runs(out: Path) -> None:
    """Undo what a run killed in ``out`` left: its staging folder is removed, and the earlier
    run's files that its swap (:func:`_swap_in`) had set aside are put back (:func:`_put_back`)
    unless the swap completed (all set aside and ``report.md``, moved in last, is there). Only
    folders named as a run names them, and the outputs, are touched."""
    if not out.is_dir():
        return
    for work in sorted(out.iterdir()):
        kind = _WORK_DIR.fullmatch(work.name)
        if kind is None or work.is_symlink() or not work.is_dir():
            continue
        if kind.group(2) is not None and _running(int(kind.group(2))):  # another run is writing here now
            logger.warning("%s: %s is another gc-profile run's (process %s, still running): left to it", out,
                           work.name, kind.group(2))
            continue
        if kind.group(1) == "new":
            logger.warning("%s: removing %s, left by an interrupted gc-profile run", out, work.name)
            shutil.rmtree(work, ignore_errors=True)
        elif (work / _SWAPPING).exists() and (out / "report.md").exists():
            logger.warning("%s: removing %s, the outputs of the run before the last, which was killed after "
                           "replacing them", out, work.name)
            _discard(work)
        else:
            logger.warning("%s: put back the outputs of the run before a gc-profile run killed while replacing "
                           "them (set aside in %s)", out, work.name)
            _put_back(out, work)


def _swap_in(out: Path, staging: Path, names: Sequence[str], earlier: Sequence[Path]) -> list[Path]:
    """Replace the ``earlier`` outputs in ``out`` by the complete set ``names`` in ``staging``, by
    renames: the earlier files are set aside in a hidden folder, then the new ones moved in
    (``report.md`` last) and only then the earlier ones removed. An exception on the way puts
    everything back; a kill leaves the set-aside folder, which the next run puts back
    (:func:`_clean_up_killed_runs`). Returns the earlier files that no new one replaced."""
    aside = Path(tempfile.mkdtemp(prefix=f"{_WORK_PREFIX['old']}{os.getpid()}-", suffix=".tmp", dir=out))
    try:
        for old in earlier:
            os.replace(old, aside / old.name)
        (aside / _SWAPPING).touch()  # all set aside: the outputs in out from here on are the new ones
        for name in sorted(names, key=lambda n: n == "report.md"):
            os.replace(staging / name, out / name)
    except BaseException:
        _put_back(out, aside)
        raise
    _discard(aside)
    return [old for old in earlier if old.name not in names]


def run_gc_profile(
    fasta: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    window: int = 1000,
    step: int | None = None,
    overlay: str | os.PathLike | None = None,
    overlay_window: int = 25,
    island_threshold: float = ISLAND_THRESHOLD,
    progress: bool = False,
    overwrite: bool = False,
    circular: bool | None = None,
) -> GCProfileOutputs:
    """Full pipeline: read ``fasta``, profile it, write TSV + PNG + ``report.md`` into ``out_dir``.

    With ``overlay`` (a FASTA of generated continuations with ``chrom=``/``start=`` header
    tags) also writes ``overlay.tsv`` and ``overlay.png`` and adds them to the report.
    ``out_dir`` is created if needed. ``step`` defaults to half the window. ``circular``: see
    :func:`gc_profile`.

    An ``out_dir`` that already holds any of :data:`OUTPUT_NAMES` raises
    :class:`~sinkalign.errors.OutputExistsError` before anything is read, unless
    ``overwrite``; an input (``fasta`` or ``overlay``) that is one of them raises
    :class:`~sinkalign.errors.InputError`, ``overwrite`` or not. The new files are all written
    into a hidden staging folder in ``out_dir`` and then swapped in (:func:`_swap_in`): the
    earlier run's files, those this run does not write included (``overlay.*`` after a run
    without ``overlay``), are replaced or removed only once the new set is complete, so the
    directory never mixes two runs; an error or a kill before the swap leaves them as they
    were, and the next run cleans up after a killed one (:func:`_clean_up_killed_runs`). No
    other file in ``out_dir`` is touched.

    ``fasta`` or ``overlay`` (not both) may be ``-``, standard input, or a named pipe: it is
    read through a temporary copy (:func:`~sinkalign.pipelines.runner.stdin_spooled`) and
    named ``<stdin>`` in messages and the report. ``out_dir`` cannot be ``-``: the outputs
    are several files (:class:`~sinkalign.errors.InputError`).
    """
    if is_stdio(out_dir):
        raise InputError("the output directory cannot be '-' (standard output): gc-profile writes several files "
                         f"({', '.join(OUTPUT_NAMES[:3])}, overlay.*); give a directory, e.g. gc_report")
    if is_stdio(fasta) and is_stdio(overlay):
        raise InputError("the genome and the overlay cannot both be '-' (standard input): give one of them a file")
    window = _check_positive_int("window", window)
    step = default_step(window) if step is None else _check_positive_int("step", step)
    overlay_window = _check_positive_int("overlay_window", overlay_window)
    if step > window:
        raise InputError(f"step={step} must not exceed window={window} (windows would leave gaps)")
    island_threshold = _check_island_threshold(island_threshold)
    out = Path(out_dir)
    inputs = [Path(p) for p in (fasta, overlay) if p is not None and not is_stdio(p)]
    _clean_up_killed_runs(out)
    _earlier_outputs(out, overwrite, inputs)  # refuse before the work, not after
    source = STDIN_NAME if is_stdio(fasta) else str(fasta)
    records = read_records(fasta)  # '-' or a pipe through a copy; messages name '-' <stdin>
    generated = read_records(overlay) if overlay is not None else None
    profile = gc_profile(records, window, step, island_threshold=island_threshold, circular=circular,
                         progress=progress)
    try:
        comps = compare_continuations(records, generated, window=overlay_window) if generated else None
    except InputError as exc:  # the records are named; name their file and the genome's
        what = STDIN_NAME if is_stdio(overlay) else overlay
        raise InputError(f"{what} (against {source}): {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{_WORK_PREFIX['new']}{os.getpid()}-", suffix=".tmp", dir=out))
    try:  # the whole set is written before any earlier file is replaced
        write_tsv(profile, staging / "gc_profile.tsv")
        plot_profile(profile, staging / "gc_profile.png", max_records=PLOT_MAX_RECORDS)
        if comps:
            write_overlay_tsv(comps, staging / "overlay.tsv")
            plot_overlay(comps, staging / "overlay.png", window=overlay_window)
        write_report(profile, staging / "report.md", source=source, overlay=comps,
                     overlay_png_name="overlay.png" if comps else None, overlay_window=overlay_window,
                     plot_max_records=PLOT_MAX_RECORDS)
        names = ["gc_profile.tsv", "gc_profile.png", *(["overlay.tsv", "overlay.png"] if comps else []), "report.md"]
        earlier = _earlier_outputs(out, overwrite, inputs)  # again: a file may have appeared during the run
        removed = _swap_in(out, staging, names, earlier)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    tsv, png, report = out / "gc_profile.tsv", out / "gc_profile.png", out / "report.md"
    ov_tsv, ov_png = (out / "overlay.tsv", out / "overlay.png") if comps else (None, None)
    logger.info("wrote %s, %s, %s%s", tsv, png, report, f"; removed {[str(p) for p in removed]}" if removed else "")
    plotted = tuple(s.chrom for s in _plotted(profile, PLOT_MAX_RECORDS))
    return GCProfileOutputs(profile, tsv, png, report, comps, ov_tsv, ov_png, plotted, tuple(removed))
