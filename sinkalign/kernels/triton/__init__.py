"""Blockwise PyTorch + Triton Sinkhorn tail-refinement attention and its plain reference.

``sinkhorn_attention_triton`` (Triton, R = 2 one-reference backward) and
``sinkhorn_attention_ref`` (dense torch, any R, autograd) compute the same operator as the
JAX ``sinkalign.sinkhorn``; ``sinkhorn_dustbin_attention_triton`` and
``sinkhorn_dustbin_attention_ref`` the dustbin operator of ``sinkalign.sinkhorn.dustbin``
(``paper`` and ``banded`` variants). CPU tensors run in the Triton interpreter; CUDA tensors natively.
Importing this package imports torch only; triton is imported on the first kernel launch.
"""

from sinkalign.kernels.triton.op import sinkhorn_attention_triton, sinkhorn_dustbin_attention_triton
from sinkalign.kernels.triton.ref import (
    OneReferenceGrads,
    TailDuals,
    direct_backward_ref,
    one_reference_backward_ref,
    sinkhorn_attention_ref,
    sinkhorn_dustbin_attention_ref,
    sinkhorn_tail_duals_ref,
)

__all__ = [
    "OneReferenceGrads",
    "TailDuals",
    "direct_backward_ref",
    "one_reference_backward_ref",
    "sinkhorn_attention_ref",
    "sinkhorn_attention_triton",
    "sinkhorn_dustbin_attention_ref",
    "sinkhorn_dustbin_attention_triton",
    "sinkhorn_tail_duals_ref",
]
