"""sinkalign: differentiable biological sequence alignment by entropic optimal transport.

The names below are the public API, imported on first use (so ``import sinkalign`` and
``sinkalign --help`` stay fast and never import PyTorch)::

    import sinkalign as sa

    aligner = sa.Aligner.load()                 # the shipped protein model
    pair = aligner.align("MVLSPADKTNVKAAW", "MVHLTPEEKSAVTAL")   # an AlignedPair
    sa.sinkhorn_attention(q, k, v, config=sa.SinkhornConfig(eps=1.0, band=256))

Subpackages: ``sinkalign.sinkhorn`` (the operator), ``sinkalign.io`` (FASTA, reference
alignments, pair shards, writers), ``sinkalign.align`` (the aligner: model, decoding,
baselines, metrics), ``sinkalign.kernels`` (Pallas and Triton kernels), ``sinkalign.lm``
(genome language models, PyTorch), ``sinkalign.pipelines`` and ``sinkalign.cli``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

try:
    __version__ = version("sinkalign")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # the operator
    "DustbinConfig": "sinkalign.sinkhorn",
    "SinkhornConfig": "sinkalign.sinkhorn",
    "SinkhornResult": "sinkalign.sinkhorn",
    "sinkhorn_attention": "sinkalign.sinkhorn",
    "sinkhorn_solve": "sinkalign.sinkhorn",
    "transport_plan": "sinkalign.sinkhorn",
    "dustbin_attention": "sinkalign.sinkhorn.dustbin",
    "dustbin_plan": "sinkalign.sinkhorn.dustbin",
    # the aligner
    "Aligner": "sinkalign.align.aligner",
    "AlignedPair": "sinkalign.alignment",
    "Alignment": "sinkalign.alignment",
    "align_fasta": "sinkalign.pipelines.align",
    "MultipleAlignment": "sinkalign.align.msa",
    "align_multiple": "sinkalign.align.msa",
    "add_to_alignment": "sinkalign.align.msa",
    "msa_fasta": "sinkalign.pipelines.msa",
    # genomes
    "gc_profile": "sinkalign.pipelines.gc_profile",
    "score_alignment": "sinkalign.align.msa_scores",
    # sequences and alignments on disk
    "read_fasta": "sinkalign.io.fasta",
    "read_alignment": "sinkalign.io.alignments",
    "write_alignments": "sinkalign.io.writers",
    # errors
    "SinkalignError": "sinkalign.errors",
    "InputError": "sinkalign.errors",
    "FormatError": "sinkalign.errors",
    "AlphabetError": "sinkalign.errors",
    "CheckpointError": "sinkalign.errors",
    "MissingFileError": "sinkalign.errors",
    "OutputExistsError": "sinkalign.errors",
    "DependencyError": "sinkalign.errors",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:  # pragma: no cover - what type checkers and editors read; at run time, __getattr__
    from sinkalign.align.aligner import Aligner
    from sinkalign.align.msa import MultipleAlignment, add_to_alignment, align_multiple
    from sinkalign.align.msa_scores import score_alignment
    from sinkalign.alignment import AlignedPair, Alignment
    from sinkalign.errors import (
        AlphabetError,
        CheckpointError,
        DependencyError,
        FormatError,
        InputError,
        MissingFileError,
        OutputExistsError,
        SinkalignError,
    )
    from sinkalign.io.alignments import read_alignment
    from sinkalign.io.fasta import read_fasta
    from sinkalign.io.writers import write_alignments
    from sinkalign.pipelines.align import align_fasta
    from sinkalign.pipelines.gc_profile import gc_profile
    from sinkalign.pipelines.msa import msa_fasta
    from sinkalign.sinkhorn import (
        DustbinConfig,
        SinkhornConfig,
        SinkhornResult,
        sinkhorn_attention,
        sinkhorn_solve,
        transport_plan,
    )
    from sinkalign.sinkhorn.dustbin import dustbin_attention, dustbin_plan


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'sinkalign' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
