"""Blockwise Pallas kernels of the Sinkhorn tail-refinement operator (``backend="pallas"``).

:func:`tail_operator` has the signature of :func:`sinkalign.sinkhorn.core.tail_operator`
(importing this package registers it as the operator's ``backend="pallas"`` backend) and computes the same
operator with the exact R = 2 one-reference backward, in O(L W) time per sweep and O(L)
extra memory; :func:`sinkhorn_attention_pallas` is the convenience entry point with tile
and interpreter control; :class:`BlockSizes` sets the tiles.

What has run for real: the Pallas interpreter (``interpret=True``) on CPU, and the native GPU
kernels on lent H100 and H200 GPUs (``sinkalign validate kernels`` and the tests marked
``gpu``; BENCHMARKS.md, "On a GPU"). TPU lowering was checked without hardware only
(:func:`lower_native`: every kernel of the forward + backward program lowers to Mosaic MLIR
for 'tpu'); the TPU compiler and TPU execution are unverified.
"""

from sinkalign.kernels.pallas.kernels import BlockSizes
from sinkalign.kernels.pallas.op import (
    lower_native,
    native_target,
    sinkhorn_attention_pallas,
    tail_duals,
    tail_operator,
)
from sinkalign.sinkhorn.backends import register_tail_operator

register_tail_operator("pallas", tail_operator)

__all__ = ["BlockSizes", "lower_native", "native_target", "sinkhorn_attention_pallas", "tail_duals", "tail_operator"]
