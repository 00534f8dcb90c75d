"""Sequence and alignment I/O: FASTA, reference alignments, Pfam pair shards.

Coordinates are 0-based; readers stream where the format allows and raise
:class:`SequenceFormatError` (a ``ValueError``) naming file, record and position.
"""

from sinkalign.io.alignments import (
    MSA,
    ReferencePair,
    msa_to_pairs,
    percent_identity,
    read_aligned_fasta,
    read_msf,
    read_stockholm,
    read_tmalign_pairs,
)
from sinkalign.io.fasta import Sequence, SequenceFormatError, detect_alphabet, read_fasta, write_fasta
from sinkalign.io.shards import (
    ShardDataset,
    ShardExample,
    add_embeddings,
    build_shards,
    read_index,
    shard_summary,
    split_families,
    verify_shards,
)

__all__ = [
    "MSA",
    "ReferencePair",
    "Sequence",
    "SequenceFormatError",
    "ShardDataset",
    "ShardExample",
    "add_embeddings",
    "build_shards",
    "detect_alphabet",
    "msa_to_pairs",
    "percent_identity",
    "read_aligned_fasta",
    "read_fasta",
    "read_index",
    "read_msf",
    "read_stockholm",
    "read_tmalign_pairs",
    "shard_summary",
    "split_families",
    "verify_shards",
    "write_fasta",
]
