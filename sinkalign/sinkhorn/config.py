"""Typed configuration of the Sinkhorn tail-refinement operator."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sinkalign.errors import InputError
from sinkalign.sinkhorn.checks import check_settings

__all__ = ["BACKWARD_MODES", "DUSTBIN_VARIANTS", "DUSTBIN_MASSES", "BACKENDS", "SinkhornConfig", "DustbinConfig"]

BACKWARD_MODES = ("one_reference", "staircase", "direct", "autodiff")
BACKENDS = ("reference", "pallas")
DUSTBIN_VARIANTS = ("paper", "banded")
DUSTBIN_MASSES = ("unit", "length")

# Backward modes and the tail depths they implement.
_MODE_DEPTHS = {"one_reference": (2,), "staircase": None, "direct": None, "autodiff": None}


@dataclass(frozen=True, kw_only=True)
class SinkhornConfig:
    """Settings of the stopped-base, fixed-depth tail-refinement Sinkhorn operator.

    Attributes:
        eps: entropic temperature; scores are ``<q_i, k_j> / (sqrt(d) * eps)``.
        n_iters: T, full Sinkhorn steps (row then column half-step, then centering)
            of the stopped base solve, started from ``v = 0``.
        tail: R, differentiable full steps recomputed from the stopped base duals.
        band: half-width W of the band: key j is active for query i iff
            ``|i - j| <= band`` (a row has up to ``2W + 1`` keys). ``None`` is dense.
        backward: ``one_reference`` (Proposition 2, R = 2 only), ``staircase``
            (Proposition 1, any R), ``direct`` (all 2R staircase plans materialised,
            the paper's baseline) or ``autodiff`` (JAX differentiation of the unrolled
            surrogate: the ground truth).
        block: query rows per block of the blockwise layout.
        backend: ``reference`` (pure JAX) or the name of a registered kernel backend (``pallas``:
            see :mod:`sinkalign.sinkhorn.backends`).
    """

    eps: float = 1.0
    n_iters: int = 15
    tail: int = 2
    band: int | None = None
    backward: str = "one_reference"
    block: int = 128
    backend: str = "reference"

    def __post_init__(self) -> None:
        check_settings(eps=self.eps, n_iters=self.n_iters, tail=self.tail, band=self.band)
        if self.backward not in BACKWARD_MODES:
            raise InputError(f"backward={self.backward!r} is not one of {BACKWARD_MODES}")
        depths = _MODE_DEPTHS[self.backward]
        if depths is not None and self.tail not in depths:
            raise InputError(
                f"backward={self.backward!r} supports tail (R) in {depths}, got tail={self.tail}; "
                "use backward='staircase' for other depths"
            )
        if not isinstance(self.block, int) or self.block < 1:
            raise InputError(f"block={self.block!r} must be a positive integer")
        if self.backend not in BACKENDS:
            raise InputError(f"backend={self.backend!r} is not one of {BACKENDS}")

    def replace(self, **changes) -> SinkhornConfig:
        return replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class DustbinConfig:
    """How learned dustbin tokens are attached (Proposition 3 and a band-preserving variant).

    Attributes:
        variant: ``paper`` appends one active dustbin token plus ``filler - 1``
            inactive fillers per side, unit mass everywhere, and runs the solver with
            band ``max(W, Lq, Lk)`` (dense): exactly the paper's augmentation.
            ``banded`` keeps the band and adds one always-active dustbin row and
            column (every valid token reaches the other side's dustbin): O(L W).
        mass: dustbin marginal for ``banded``: ``unit`` (1) or ``length`` (the number
            of valid tokens on the other side, SuperGlue-style, so a dustbin can
            absorb every residue of the other sequence). ``paper`` requires ``unit``.
        filler: the paper's dustbin block size B (1 active + B-1 fillers).
    """

    variant: str = "banded"
    mass: str = "length"
    filler: int = 128

    def __post_init__(self) -> None:
        if self.variant not in DUSTBIN_VARIANTS:
            raise InputError(f"variant={self.variant!r} is not one of {DUSTBIN_VARIANTS}")
        if self.mass not in DUSTBIN_MASSES:
            raise InputError(f"mass={self.mass!r} is not one of {DUSTBIN_MASSES}")
        if self.variant == "paper" and self.mass != "unit":
            raise InputError("variant='paper' uses unit dustbin mass; set mass='unit'")
        if not isinstance(self.filler, int) or self.filler < 1:
            raise InputError(f"filler={self.filler!r} must be a positive integer")
