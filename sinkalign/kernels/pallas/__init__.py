"""Blockwise Pallas kernels of the Sinkhorn tail-refinement operator (``impl="pallas"``).

:func:`tail_operator` has the signature of :func:`sinkalign.sinkhorn.core.tail_operator`
(which dispatches here for ``SinkhornConfig(impl="pallas")``) and computes the same
operator with the exact R = 2 one-reference backward, in O(L W) time per sweep and O(L)
extra memory; :func:`sinkhorn_attention_pallas` is the convenience entry point with tile
and interpreter control; :class:`BlockSizes` sets the tiles.

Lowerings run for real so far: the Pallas interpreter (``interpret=True``) on CPU only.
Native lowering (Triton on NVIDIA GPUs, Mosaic on TPUs) is written for but unverified
on hardware; see ``sinkalign validate kernels`` and ``tests/test_pallas_kernels.py``.
"""

from sinkalign.kernels.pallas.kernels import BlockSizes
from sinkalign.kernels.pallas.op import sinkhorn_attention_pallas, tail_duals, tail_operator

__all__ = ["BlockSizes", "sinkhorn_attention_pallas", "tail_duals", "tail_operator"]
