"""Genome data for DNA language models: FASTA reading, train/validation split, window sampling.

Token mapping used throughout (``encode`` / ``decode`` / ``GenomeWindows``)::

    A=0  C=1  G=2  T=3  N=4

Tokens are ``numpy.int8``. The language models map these five ids onto their own
tokenizer; this module stays free of torch so that the Markov baseline and the GC-profile
pipeline can use it without the PyTorch extra.

Coordinates are 0-based and half-open throughout.
"""

from __future__ import annotations

import gzip
import logging
import math
import os
import re
import string
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from Bio.SeqIO.FastaIO import SimpleFastaParser

from sinkalign.errors import FormatError, InputError, MissingFileError
from sinkalign.io.fasta import not_fasta_hint, open_text, rna_as_dna

__all__ = [
    "ALPHABET",
    "GenomeRecord",
    "GenomeWindows",
    "as_model_bases",
    "decode",
    "encode",
    "read_genome",
    "read_genome_records",
    "train_val_split",
]

logger = logging.getLogger(__name__)

#: Token alphabet: index i of this string is token id i (A=0, C=1, G=2, T=3, N=4).
ALPHABET = "ACGTN"

# IUPAC ambiguity codes (besides N) that read_genome maps to N.
_IUPAC_AMBIGUOUS = "RYSWKMBDHVX"  # and X: a masked base (RepeatMasker -x)
# ASCII letters uppercased, the ambiguity codes of either case read as N; nothing else changes
# (str.upper would turn a non-ASCII letter into others, 'ß' into 'SS', hiding it as two Ns)
_ASCII_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)
_TO_N = str.maketrans({**{c: c.upper() for c in string.ascii_lowercase},
                       **{c: "N" for c in _IUPAC_AMBIGUOUS + _IUPAC_AMBIGUOUS.lower()}})
_INVALID = re.compile(r"[^ACGTN]")

# Byte -> token lookup; every byte outside ACGTN maps to 255 (invalid).
_ENCODE_LUT = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(ALPHABET):
    _ENCODE_LUT[ord(_c)] = _i
_DECODE_LUT = np.frombuffer(ALPHABET.encode("ascii"), dtype=np.uint8)


def as_model_bases(seq: str, *, rna: bool = False) -> str:
    """``seq`` with its ASCII letters uppercased and the IUPAC ambiguity codes ``RYSWKMBDHV`` and
    a masked base ``X`` read as N, as :func:`read_genome` reads a genome (what is left outside
    ``ACGTN``, a non-ASCII letter too, stays, for the caller's error); with ``rna``, ``U`` (either
    case) as T too (:func:`sinkalign.io.fasta.rna_as_dna`, as the aligner reads RNA)."""
    bases = seq.translate(_TO_N)
    return rna_as_dna(bases) if rna else bases


@dataclass(frozen=True)
class GenomeRecord:
    """One FASTA record: ``id`` (first word of the header), full ``description``, ``seq``.

    ``seq`` is uppercase over ``ACGTN`` (IUPAC ambiguity codes already mapped to N).
    """

    id: str
    description: str
    seq: str


def _first_line_is_a_header(handle, path: Path) -> None:
    """Raise FormatError unless the first non-blank line is a '>' header (Biopython's own
    message for this is a page long); leave ``handle`` at that header."""
    line_no = 0
    while True:
        pos = handle.tell()
        line = handle.readline()
        line_no += 1
        if not line or line.strip():
            break
    if line and not line.startswith(">"):
        raise FormatError(f"{path}: not a valid FASTA file: line {line_no}: expected a '>' header, found "
                          f"{line.strip()[:40]!r}{not_fasta_hint(line)}")
    handle.seek(pos)


def read_genome_records(path: str | os.PathLike, *, rna: bool = False) -> list[GenomeRecord]:
    """Read every record of a FASTA file (plain or gzip), validated, in file order.

    Sequences are read by :func:`as_model_bases`: uppercased; the IUPAC ambiguity codes
    ``RYSWKMBDHV`` and a masked base ``X`` become ``N``; with ``rna``, ``U`` becomes ``T``.
    Any other character (gap ``-``, stop ``*``, ``U`` without ``rna``, digits, ...) raises
    ``ValueError`` naming the file, the record and the 0-based position in that record.

    Raises:
        MissingFileError (a FileNotFoundError): ``path`` does not exist.
        FormatError (a ValueError): not FASTA, a truncated or corrupt gzip file, no records,
            an empty record, a duplicate record id, or an invalid character.
    """
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"FASTA file not found: {path}")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    records: list[GenomeRecord] = []
    seen: set[str] = set()
    try:
        with open_text(path) as handle:  # names the file for a truncated gzip or a binary file
            _first_line_is_a_header(handle, path)
            # the plain parser: a non-ASCII letter reaches the check below, which names it (SeqIO.parse
            # failed on it with an 'ascii' codec error naming neither record nor position)
            for title, raw in SimpleFastaParser(handle):
                rec_id = title.split(None, 1)[0] if title.strip() else ""
                seq = as_model_bases(raw.replace("\t", ""), rna=rna)  # (SeqIO dropped tabs in sequence lines too)
                if not seq:
                    raise FormatError(f"{path}: record {rec_id!r} is empty")
                bad = _INVALID.search(seq)
                if bad is not None:
                    raise FormatError(
                        f"{path}: record {rec_id!r} has invalid character {bad.group()!r} at "
                        f"0-based position {bad.start()} (allowed: ACGTN{', U (read as T)' if rna else ''} and "
                        f"IUPAC codes {_IUPAC_AMBIGUOUS}, which are read as N)"
                    )
                if rec_id in seen:
                    raise FormatError(f"{path}: duplicate record id {rec_id!r}")
                seen.add(rec_id)
                records.append(GenomeRecord(rec_id, title, seq))
    except EOFError as exc:
        raise FormatError(f"{path}: truncated gzip file (the compressed stream ends early)") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise FormatError(f"{path}: corrupt gzip file ({exc})") from exc
    except FormatError:
        raise
    except ValueError as exc:
        # Biopython's own parse errors (e.g. text before the first '>').
        raise FormatError(f"{path}: not a valid FASTA file: {exc}") from exc
    if not records:
        raise FormatError(f"{path}: no FASTA records found")
    logger.info("read %d record(s), %d nt from %s", len(records), sum(len(r.seq) for r in records), path)
    return records


def read_genome(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Read a FASTA genome (plain or ``.gz``) as ``[(id, seq), ...]`` in file order.

    See :func:`read_genome_records` for validation and the errors raised.
    """
    return [(r.id, r.seq) for r in read_genome_records(path)]


GENOME_SUFFIXES = (".fa", ".fasta", ".fna", ".fa.gz", ".fasta.gz", ".fna.gz")


def genome_files(sources: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The FASTA files of ``sources``, in order, each once.

    Each source is a FASTA file (plain or gzip); a directory (its files ending in
    :data:`GENOME_SUFFIXES`, sorted by name); or a manifest (``.tsv`` with a ``file`` column,
    paths relative to the manifest, like ``genomes/multi/MANIFEST.tsv``). Raises
    MissingFileError (a FileNotFoundError) / InputError naming the source.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    out: list[Path] = []
    for src in sources:
        path = Path(src)
        if not path.exists():
            raise MissingFileError(f"FASTA file not found: {path}")
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(GENOME_SUFFIXES))
            if not found:
                raise InputError(f"{path}: directory holds no FASTA file ({', '.join(GENOME_SUFFIXES)})")
            out.extend(found)
        elif path.suffix.lower() == ".tsv":
            import csv

            with open(path, newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh, delimiter="\t"))
            if not rows or "file" not in rows[0]:
                raise InputError(f"{path}: a genome manifest needs a tab-separated 'file' column")
            for n, row in enumerate(rows, start=2):
                if not (row["file"] or "").strip():
                    raise InputError(f"{path}: line {n}: the 'file' column is empty")
                f = path.parent / row["file"]
                if not f.is_file():
                    raise MissingFileError(f"{path}: line {n}: genome file not found: {f}")
                out.append(f)
        else:
            out.append(path)
    seen: set[Path] = set()
    return [p for p in out if not (p.resolve() in seen or seen.add(p.resolve()))]


def reverse_complement_tokens(tokens: np.ndarray) -> np.ndarray:
    """The reverse complement of token rows ``[..., L]`` (A<->T, C<->G, N stays N)."""
    tokens = np.asarray(tokens)
    return np.where(tokens < 4, 3 - tokens, tokens)[..., ::-1].astype(tokens.dtype)


def train_val_split(seq: str, val_fraction: float = 0.1) -> tuple[str, str]:
    """Split ``seq`` into ``(train, val)``; the validation split is the *last* part.

    Rounding: ``n_val = ceil(n * val_fraction)`` computed exactly with the fraction
    ``Fraction(val_fraction).limit_denominator(10**9)`` (so 0.1 is exactly 1/10, free of
    float error), and ``train = seq[:n - n_val]``, ``val = seq[n - n_val:]``. The
    validation split is therefore never smaller than the requested fraction. For the
    C. diphtheriae chromosome (n = 2,463,666) this gives train = ``seq[:2217299]`` and
    val = ``seq[2217299:]`` (246,367 nt).

    Raises:
        ValueError: ``val_fraction`` not in (0, 1), or either split would be empty.
    """
    if not (0.0 < val_fraction < 1.0):
        raise ValueError(f"{val_fraction=} must be in (0, 1)")
    n = len(seq)
    frac = Fraction(val_fraction).limit_denominator(10**9)
    n_val = math.ceil(n * frac)
    if n_val >= n or n_val == 0:
        raise ValueError(f"sequence of length {n} is too short for {val_fraction=}: a split would be empty")
    return seq[: n - n_val], seq[n - n_val :]


def encode(seq: str) -> np.ndarray:
    """Encode a DNA string into int8 tokens ``[L]`` (A=0, C=1, G=2, T=3, N=4).

    Lower case is accepted. Raises ``ValueError`` with the 0-based position of the first
    character outside ACGTN.
    """
    raw = np.frombuffer(seq.translate(_ASCII_UPPER).encode("ascii", errors="replace"), dtype=np.uint8)
    tokens = _ENCODE_LUT[raw]
    bad = np.flatnonzero(tokens == 255)
    if bad.size:
        pos = int(bad[0])
        raise ValueError(f"invalid character {seq[pos]!r} at 0-based position {pos} (expected ACGTN)")
    return tokens.astype(np.int8)


def decode(tokens: np.ndarray) -> str:
    """Decode int8 tokens ``[L]`` (values 0..4) back into a string over ``ACGTN``."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() > 4):
        raise ValueError(f"tokens must lie in 0..4, got range [{tokens.min()}, {tokens.max()}]")
    return _DECODE_LUT[tokens.astype(np.intp)].tobytes().decode("ascii")


class GenomeWindows:
    """Seeded sampler of fixed-length windows ``[B, L]`` (int8 tokens) from one or more sequences.

    Random starts are uniform over every position ``s`` with ``s + length <= len(record)``
    across all records (so a record is picked in proportion to its number of valid starts);
    windows never cross record boundaries. Records shorter than ``length`` are skipped
    (an error if all are). With ``max_n_fraction`` a window holding a larger fraction of N
    is redrawn.

    Args:
        seqs: one sequence (str) or a sequence of strings (e.g. the training split, or
            ``[seq for _, seq in read_genome(path)]``).
        length: window length L.
        seed: seed of the ``numpy.random.Generator``; equal seeds give equal batches.
        max_n_fraction: windows with a larger fraction of N are rejected (default 1.0:
            keep everything).
    """

    def __init__(
        self, seqs: str | Sequence[str], length: int, *, seed: int = 0, max_n_fraction: float = 1.0
    ) -> None:
        if isinstance(seqs, str):
            seqs = [seqs]
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length <= 0:
            raise ValueError(f"{length=} must be a positive integer")
        if not (0.0 <= max_n_fraction <= 1.0):
            raise ValueError(f"{max_n_fraction=} must be in [0, 1]")
        self.length = int(length)
        self.max_n_fraction = float(max_n_fraction)
        self._tokens = [encode(s) for s in seqs if len(s) >= self.length]
        if not self._tokens:
            longest = max((len(s) for s in seqs), default=0)
            raise ValueError(f"no sequence is at least {length=} long (longest is {longest})")
        n_starts = np.array([t.size - self.length + 1 for t in self._tokens], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(n_starts)])  # [R + 1]
        self.n_windows = int(self._offsets[-1])
        self._rng = np.random.default_rng(seed)

    def _window(self, flat_start: int) -> np.ndarray:
        r = int(np.searchsorted(self._offsets, flat_start, side="right") - 1)
        s = flat_start - int(self._offsets[r])
        return self._tokens[r][s : s + self.length]

    def sample(self, batch_size: int) -> np.ndarray:
        """Draw ``batch_size`` windows at random starts: int8 ``[B, L]``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"{batch_size=} must be a positive integer")
        out = np.empty((batch_size, self.length), dtype=np.int8)
        filled, tries = 0, 0
        max_n = self.max_n_fraction * self.length
        while filled < batch_size:
            tries += 1
            if tries > 1000:
                raise RuntimeError(
                    f"could not find windows with at most {self.max_n_fraction=} N after 1000 draws"
                )
            starts = self._rng.integers(0, self.n_windows, size=batch_size - filled)
            for flat in starts:
                w = self._window(int(flat))
                if self.max_n_fraction < 1.0 and np.count_nonzero(w == 4) > max_n:
                    continue
                out[filled] = w
                filled += 1
        return out

    def sequential(self, batch_size: int) -> Iterator[np.ndarray]:
        """Deterministic non-overlapping tiling for evaluation: yields int8 ``[b, L]`` batches.

        Windows start at 0, L, 2L, ... in each record (record order kept); a trailing
        remainder shorter than L is dropped. The last batch may hold fewer than
        ``batch_size`` windows. ``max_n_fraction`` does not apply.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"{batch_size=} must be a positive integer")
        buf: list[np.ndarray] = []
        for tokens in self._tokens:
            n = tokens.size // self.length
            for w in tokens[: n * self.length].reshape(n, self.length):
                buf.append(w)
                if len(buf) == batch_size:
                    yield np.stack(buf)
                    buf = []
        if buf:
            yield np.stack(buf)
