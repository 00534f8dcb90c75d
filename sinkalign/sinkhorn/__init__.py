"""The Sinkhorn tail-refinement operator in JAX (reference implementation)."""
from sinkalign.sinkhorn.config import BACKWARD_MODES, DustbinConfig, SinkhornConfig
from sinkalign.sinkhorn.core import (
    SinkhornResult,
    TailAdjoint,
    sinkhorn_attention,
    sinkhorn_solve,
    tail_adjoint,
    tail_operator,
    transport_plan,
)
from sinkalign.sinkhorn.support import Piece, Support

__all__ = [
    "BACKWARD_MODES",
    "DustbinConfig",
    "Piece",
    "SinkhornConfig",
    "SinkhornResult",
    "Support",
    "TailAdjoint",
    "sinkhorn_attention",
    "sinkhorn_solve",
    "tail_adjoint",
    "tail_operator",
    "transport_plan",
]
