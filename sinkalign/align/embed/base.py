"""The embedder protocol, input checking shared by the embedders, and the on-disk cache."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import abc
from collections.abc import Sequence as SequenceT
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from sinkalign.errors import AlphabetError, InputError
from sinkalign.io.fasta import Sequence, record_alphabet, validate_residues
from sinkalign.utils import atomic_write, atomic_write_text, user_cache_dir

__all__ = [
    "EMBEDDER_ALPHABETS",
    "EMBED_CACHE_ENV",
    "Embedder",
    "EmbeddingCache",
    "SequenceLike",
    "as_records",
    "config_key",
    "default_cache_dir",
    "sequence_sha1",
]

logger = logging.getLogger(__name__)

#: Values of :attr:`Embedder.alphabet`.
EMBEDDER_ALPHABETS = ("protein", "dna", "both")
#: The environment variable that moves (``DIR``) or turns off (``off``, ``0``, ``false``, ``no``
#: or empty) the default embedding cache.
EMBED_CACHE_ENV = "SINKALIGN_EMBED_CACHE"

SequenceLike = str | Sequence


@runtime_checkable
class Embedder(Protocol):
    """Per-residue embeddings of biological sequences.

    Attributes:
        name: registry name (``"esm2"``, ``"builtin"``).
        dim: D, the embedding width (fixed for the embedder).
        alphabet: what it embeds: ``"protein"``, ``"dna"`` or ``"both"``.
    """

    name: str

    @property
    def dim(self) -> int: ...

    @property
    def alphabet(self) -> str: ...

    def embed(self, seqs: SequenceT[SequenceLike] | SequenceLike) -> list[np.ndarray]:
        """Embed sequences: one ``[L_i, D]`` float32 array per input, in input order.

        ``seqs`` holds strings (upper- or lower-case residues, no gaps) and/or
        :class:`sinkalign.io.fasta.Sequence` records; a single string or record is
        read as a list of one.
        """
        ...

    def config(self) -> dict:
        """A JSON-able dict that identifies the embedder's output exactly (for caches and checkpoints)."""
        ...


def as_records(
    seqs: SequenceT[SequenceLike] | SequenceLike, default_alphabet: str, accepted: tuple[str, ...], embedder: str
) -> list[tuple[str, str]]:
    """Check embedder input and return ``(residues, alphabet)`` per item, in input order.

    Strings are upper-cased and take ``default_alphabet`` (``"protein"``, ``"dna"`` or
    ``"auto"``, decided per string with :func:`sinkalign.io.fasta.detect_alphabet`);
    :class:`Sequence` records keep their own alphabet. Ambiguous letters are allowed
    (each embedder documents how it maps them). A protein string's one trailing stop ``*``
    is dropped, as the FASTA reader drops it (its embedding has a row fewer than the string).

    Raises:
        SequenceFormatError: an illegal character; the message names the item's
            0-based index in the input, its record id when it has one, the 0-based
            residue position and the character.
        InputError: an empty sequence. AlphabetError: an alphabet not in ``accepted``.
        ValueError: a non-string item (InputError and AlphabetError are ValueErrors too).
    """
    if isinstance(seqs, (str, Sequence)):
        seqs = [seqs]
    if not isinstance(seqs, abc.Sequence):
        raise ValueError(f"seqs must be a list of strings or Sequence records, got {type(seqs).__name__}")
    out: list[tuple[str, str]] = []
    for k, item in enumerate(seqs):
        if isinstance(item, Sequence):
            residues, alphabet = _upper(item.seq), item.alphabet
            where = f"{embedder} input sequence #{k} (0-based, record {item.id!r})"
        elif isinstance(item, str):
            residues = _upper(item)
            where = f"{embedder} input sequence #{k} (0-based)"
            if not residues:
                raise InputError(f"{where} is empty")
            alphabet = record_alphabet(residues) if default_alphabet == "auto" \
                else default_alphabet
        else:
            raise ValueError(f"{embedder} input sequence #{k} (0-based) is a {type(item).__name__}, not a string")
        if alphabet == "protein" and residues.endswith("*"):  # a stop codon's '*', as read_fasta drops it
            residues = residues[:-1]
            if not residues:
                raise InputError(f"{where} is empty (only a stop '*')")
        if alphabet not in accepted:
            raise AlphabetError(f"{where}: alphabet {alphabet!r} cannot be embedded by {embedder} (accepts {accepted})")
        validate_residues(residues, alphabet, allow_ambiguous=True, where=where)
        out.append((residues, alphabet))
    return out


def _upper(seq: str) -> str:
    """Upper-case ASCII letters only (``str.upper`` can change the length of non-ASCII text)."""
    return seq.upper() if seq.isascii() else "".join(c.upper() if c.isascii() else c for c in seq)


def sequence_sha1(seq: str) -> str:
    """Hex sha1 of the upper-case residue string (UTF-8)."""
    return hashlib.sha1(seq.encode("utf-8")).hexdigest()


def config_key(config: dict) -> str:
    """A short stable hash of a JSON-able embedder config (canonical JSON, sorted keys)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def default_cache_dir() -> Path | None:
    """The default embedding cache: ``$SINKALIGN_EMBED_CACHE`` when set (``off``, ``0``,
    ``false``, ``no`` or empty: no cache, ``None``), else ``$XDG_CACHE_HOME/sinkalign/embeddings``
    (default ``~/.cache/sinkalign/embeddings``)."""
    return user_cache_dir(EMBED_CACHE_ENV, "embeddings")


class EmbeddingCache:
    """Per-sequence embeddings on disk, keyed by (embedder config, sequence sha1).

    Layout::

        <root>/<name>-<config_key>/config.json          the embedder config, for people
        <root>/<name>-<config_key>/<sha[:2]>/<sha>.npy  one [L, D] float32 array per sequence

    Files are written atomically (temp file + rename), so concurrent writers and
    interrupted runs never leave a partial entry. An entry that cannot be read or
    has the wrong shape (length, or width when ``dim`` is given) is logged, ignored and
    recomputed by the caller. A cache that cannot be written (a read-only disk, a path
    through a file) is said once, in a warning naming the directory and the reason, and
    the run goes on without storing its embeddings (:attr:`writable` turns False).
    """

    def __init__(self, root: str | os.PathLike, config: dict, dim: int | None = None) -> None:
        self.root = Path(root)
        self.config = config
        self.dir = self.root / f"{config.get('name', 'embedder')}-{config_key(config)}"
        self.dim = dim
        self.writable = True
        self._config_written = False

    def path(self, seq: str) -> Path:
        sha = sequence_sha1(seq)
        return self.dir / sha[:2] / f"{sha}.npy"

    def get(self, seq: str) -> np.ndarray | None:
        """The cached ``[L, D]`` float32 array of ``seq``, or ``None`` (missing or unreadable)."""
        path = self.path(seq)
        if not path.is_file():
            return None
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:
            logger.warning("ignoring unreadable cache entry %s: %s", path, err)
            return None
        if (
            arr.ndim != 2
            or arr.shape[0] != len(seq)
            or (self.dim is not None and arr.shape[1] != self.dim)
            or arr.dtype != np.float32
        ):
            logger.warning("ignoring cache entry %s with shape %s %s (L=%d)", path, arr.shape, arr.dtype, len(seq))
            return None
        return arr

    def put(self, seq: str, arr: np.ndarray) -> None:
        """Store ``arr`` (``[L, D]`` float32) for ``seq`` atomically; after a failed write
        (one warning), nothing more is written."""
        if not self.writable:
            return
        try:
            if not self._config_written:
                cfg_path = self.dir / "config.json"
                if not cfg_path.is_file():
                    atomic_write_text(cfg_path, json.dumps(self.config, indent=1, sort_keys=True) + "\n")
                self._config_written = True
            with atomic_write(self.path(seq), "wb") as handle:
                np.save(handle, np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
        except OSError as err:
            self.writable = False
            reason = err.strerror or str(err)
            if err.filename and not str(err.filename).startswith(str(self.dir)):
                reason += f": {err.filename}"
            logger.warning("embedding cache %s cannot be written (%s); embeddings are computed without it "
                           "(%s=DIR puts it elsewhere, %s=off turns it off)", self.dir, reason, EMBED_CACHE_ENV,
                           EMBED_CACHE_ENV)
