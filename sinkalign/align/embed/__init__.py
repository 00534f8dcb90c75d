"""Per-residue embeddings for the optimal-transport aligner.

``get_embedder(name, **options)`` returns an :class:`Embedder`:

* ``"builtin"``: fixed substitution-matrix / one-hot / physico-chemical features for
  protein and DNA, ``D = 53``, no download (:mod:`~sinkalign.align.embed.builtin`).
* ``"esm2"``: fair-esm ESM-2 representations from local weights or the torch hub
  cache, batched, windowed beyond 1022 residues, cached on disk
  (:mod:`~sinkalign.align.embed.esm2`). PyTorch is imported only when it is used.

Every embedder maps a list of sequences (strings or :class:`sinkalign.io.fasta.Sequence`
records) to one ``[L_i, D]`` float32 array each, in input order; row ``i`` is residue
``i`` (0-based). ``config()`` identifies the output exactly, for caches and checkpoints;
:func:`embedder_from_config` rebuilds the embedder from it.

File helpers: :func:`embed_fasta` (ids + arrays of a FASTA file) and
:func:`embed_shards` (fill a Pfam shard directory through
:func:`sinkalign.io.shards.add_embeddings`).
"""

from sinkalign.align.embed.base import Embedder, EmbeddingCache, default_cache_dir
from sinkalign.align.embed.builtin import BUILTIN_DIM, BuiltinConfig, BuiltinEmbedder
from sinkalign.align.embed.esm2 import DEFAULT_ESM2_MODEL, ESM2Config, ESM2Embedder, load_esm2, plan_windows
from sinkalign.align.embed.pipeline import EmbeddedRecords, embed_fasta, embed_shards
from sinkalign.align.embed.registry import EMBEDDERS, embedder_from_config, embedding_name, get_embedder

__all__ = [
    "BUILTIN_DIM",
    "DEFAULT_ESM2_MODEL",
    "EMBEDDERS",
    "BuiltinConfig",
    "BuiltinEmbedder",
    "ESM2Config",
    "ESM2Embedder",
    "EmbeddedRecords",
    "Embedder",
    "EmbeddingCache",
    "default_cache_dir",
    "embed_fasta",
    "embed_shards",
    "embedder_from_config",
    "embedding_name",
    "get_embedder",
    "load_esm2",
    "plan_windows",
]
