"""sinkalign: differentiable biological sequence alignment by entropic optimal transport.

The public operator API lives in :mod:`sinkalign.sinkhorn` and is re-exported here.
Subpackages: ``sinkalign.io`` (FASTA, reference alignments, pair shards, writers),
``sinkalign.align`` (decoding, baselines, metrics), ``sinkalign.kernels`` (Pallas and
Triton kernels), ``sinkalign.lm`` (genome language models, PyTorch),
``sinkalign.pipelines`` (GC profiles) and ``sinkalign.cli``.
"""

from sinkalign.sinkhorn import (
    DustbinConfig,
    SinkhornConfig,
    SinkhornResult,
    sinkhorn_attention,
    sinkhorn_solve,
    transport_plan,
)
from sinkalign.sinkhorn.dustbin import dustbin_attention, dustbin_plan

__version__ = "0.1.0"

__all__ = [
    "DustbinConfig",
    "SinkhornConfig",
    "SinkhornResult",
    "__version__",
    "dustbin_attention",
    "dustbin_plan",
    "sinkhorn_attention",
    "sinkhorn_solve",
    "transport_plan",
]
