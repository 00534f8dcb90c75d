"""Embedding whole files: FASTA records, and the sequences of a Pfam shard directory."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from sinkalign.align.embed.base import Embedder
from sinkalign.align.embed.registry import embedding_name
from sinkalign.errors import OutputExistsError
from sinkalign.io.fasta import Sequence, read_fasta
from sinkalign.io.shards import EMBEDDING_DTYPES, ShardDataset, add_embeddings, embedder_label, read_index

__all__ = ["EmbeddedRecords", "embed_fasta", "embed_shards"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class EmbeddedRecords:
    """Per-residue embeddings of the records of a file, in file order.

    Attributes:
        ids: record ids [N].
        records: the validated records [N].
        embeddings: ``[L_i, D]`` float32 arrays [N].
        config: ``embedder.config()``.
    """

    ids: list[str]
    records: list[Sequence]
    embeddings: list[np.ndarray]
    config: dict


def _check_chunk(chunk_size) -> None:
    if not isinstance(chunk_size, (int, np.integer)) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size!r} must be a positive integer")


def embed_fasta(
    path: str | os.PathLike,
    embedder: Embedder,
    *,
    alphabet: str | None = None,
    allow_ambiguous: bool = True,
    chunk_size: int = 256,
    progress: bool = False,
) -> EmbeddedRecords:
    """Read a (possibly gzipped) FASTA file and embed every record.

    Args:
        path: FASTA file (read with :func:`sinkalign.io.fasta.read_fasta`).
        embedder: from :func:`~sinkalign.align.embed.get_embedder`.
        alphabet: passed to ``read_fasta``; ``None`` uses the embedder's alphabet
            (``"auto"`` for an embedder of ``"both"``).
        allow_ambiguous: passed to ``read_fasta``.
        chunk_size: records handed to ``embedder.embed`` at once (ESM-2 batches within a chunk).
        progress: tqdm bar over records.

    Raises:
        SequenceFormatError: from the reader (file, record, position).
        ValueError: bad arguments, or records the embedder cannot embed (e.g. DNA for ESM-2).
    """
    _check_chunk(chunk_size)
    if alphabet is None:
        alphabet = "auto" if embedder.alphabet == "both" else embedder.alphabet
    records: list[Sequence] = []
    embeddings: list[np.ndarray] = []
    with tqdm(unit="seq", desc="embed", disable=not progress) as bar:
        chunk: list[Sequence] = []
        for rec in read_fasta(path, alphabet, allow_ambiguous=allow_ambiguous):
            chunk.append(rec)
            if len(chunk) == chunk_size:
                embeddings.extend(embedder.embed(chunk))
                records.extend(chunk)
                bar.update(len(chunk))
                chunk = []
        if chunk:
            embeddings.extend(embedder.embed(chunk))
            records.extend(chunk)
            bar.update(len(chunk))
    logger.info("embedded %d records of %s with %s", len(records), path, embedder.name)
    return EmbeddedRecords(
        ids=[r.id for r in records], records=records, embeddings=embeddings, config=embedder.config()
    )


def embed_shards(
    directory: str | os.PathLike,
    embedder: Embedder,
    *,
    dtype: str = "float32",
    overwrite: bool = False,
    chunk_size: int = 256,
    progress: bool = False,
) -> dict:
    """Embed every sequence of a shard directory and store the result with :func:`~sinkalign.io.shards.add_embeddings`.

    Each sequence is embedded with its family's alphabet (from ``index.json``), in
    chunks of ``chunk_size`` sequences so that ESM-2 can batch them; the embeddings are
    held in memory in ``dtype`` until ``add_embeddings`` writes them. ``dtype`` is
    ``"float32"`` (the default, as ``sinkalign shards embed --dtype``) or ``"float16"``
    (half the disk and memory, values rounded to about 3 significant digits). The stored
    ``name`` is :func:`~sinkalign.align.embed.embedding_name` (the canonical JSON of
    ``embedder.config()``), so a reader can check which embedder made them.

    Returns:
        The updated index.

    Raises:
        OutputExistsError: existing embeddings without ``overwrite`` (a FileExistsError).
        InputError / AlphabetError: a sequence the embedder cannot embed (ValueErrors).
        ValueError: bad arguments.
        MissingFileError: not a shard directory (a FileNotFoundError).
    """
    if dtype not in EMBEDDING_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {EMBEDDING_DTYPES}")
    _check_chunk(chunk_size)
    index = read_index(directory)
    if index.get("embeddings") and not overwrite:
        raise OutputExistsError(f"{directory} already has embeddings ({embedder_label(index['embeddings']['name'])}); pass "
                                "--overwrite to replace them")
    families = index["families"]
    records: dict[str, Sequence] = {}
    for split in index["splits"]:
        for example in ShardDataset(directory, split, load_embeddings=False):
            pair = example.pair
            alphabet = families[pair.family]["alphabet"]
            for sid, seq in ((pair.query_id, pair.query_seq), (pair.target_id, pair.target_seq)):
                if sid not in records:
                    records[sid] = Sequence(id=sid, description="", seq=seq, alphabet=alphabet)
    by_seq: dict[str, np.ndarray] = {}
    todo = list(records.values())
    with tqdm(total=len(todo), unit="seq", desc="embed", disable=not progress) as bar:
        for lo in range(0, len(todo), chunk_size):
            chunk = todo[lo : lo + chunk_size]
            for rec, emb in zip(chunk, embedder.embed(chunk)):
                by_seq.setdefault(rec.seq, emb.astype(dtype))
            bar.update(len(chunk))

    def embed_fn(seq: str) -> np.ndarray:
        return by_seq[seq]

    logger.info("embedded %d sequences of %s with %s", len(records), directory, embedder.name)
    return add_embeddings(
        directory, embed_fn, name=embedding_name(embedder), dtype=dtype, overwrite=overwrite, progress=progress
    )
