"""Pallas kernels for the banded, masked, log-domain Sinkhorn tail-refinement operator.

Every kernel is a ``pl.pallas_call`` over the grid ``(B*H, n_x)``: program ``(h, i)`` owns
the ``i``-th block of ``bx`` rows of one side (queries for row-owner kernels, keys for
column-owner kernels) of batch-head ``h``, and loops with ``lax.fori_loop`` over the tiles
of ``by`` positions of the other side that intersect the band ``|i - j| <= W``:
``[max(0, x0 - W) // by, min((x0 + bx - 1 + W) // by + 1, n_y))`` (all tiles when dense).
Each tile recomputes ``S = X Y^T * scale`` from the token tiles, so nothing of size
``Lx x Ly`` is ever stored: a sweep costs O(L W d) time and O(L d) memory. Or, with a launch's
``cache`` set, the tiles are read from a score cache that :func:`scores` computed once (the
band's tiles per row block, O(L W) float32 memory): a sweep then reads 4 bytes a score instead
of ``2d`` FLOPs, which on GPUs whose float32 dots are slow (exact ``ieee`` FMA dots) or whose
memory is fast is the cheaper side of the roofline. In the interpreter a column owner forms
its recomputed tiles as the row owners' product transposed, ``(X_rows Y_cols^T)^T``, behind an
``optimization_barrier``: XLA's CPU dot sums ``K Q^T`` in another order than ``Q K^T`` (63% of a
16 x 32 tile's entries differ in the last bit on an Intel Xeon; without the barrier XLA folds the
transpose back into the dot), and with scores of ~500 the row and column sweeps then solve
slightly different problems, which cost dQ 11x float32 autodiff's error instead of 2.2x (the
cached tiles are consistent by construction). Natively the float32 FMA dot sums each entry in k
order either way, as the Triton kernels' ``ROW_DOT`` note says, so compiled kernels are unchanged.
Accumulation is float32; float32 dots run at ``Precision.HIGHEST``, bfloat16 dots take bfloat16 operands
(plan/cotangent tiles are rounded to the input type before their dot, as in flash
attention) and accumulate in float32.

Layout (prepared by :mod:`sinkalign.kernels.pallas.op`): tokens ``[BH, L, e]`` with L a
multiple of the block; per-position vectors stacked as ``[BH, n, L]`` float32 (slot 0 is the
validity mask as 1.0 / 0.0, slot 1 the dual potential, further slots kernel-specific);
padded positions have mask 0. The support is ``mask_x & mask_y & |i - j| <= W`` and is
applied *after* adding potentials (``where(active, s + pot, -inf)``), never via a sentinel.
Vector outputs are ``[BH, 1, L]``: every vector block is ``(n, bx)`` with ``n`` the full
stack height, as Mosaic (TPU) requires (``bx`` a multiple of 128 or the whole length).
Vector slots are loaded row by row from the refs (``ref[slot, tile]``): the Triton lowering
has no ``slice`` of a loaded value.

The owned side's block arrives through a BlockSpec; the other side is passed whole for
each batch-head (block = full length, like the key/value blocks of Pallas' GPU flash
attention), and the kernel slices the tiles it needs with ``pl.ds``. On a TPU this keeps a
whole ``[L, d]`` slice in VMEM, which limits L per call; on GPUs it is a pointer.

Kernels (``P = exp(S + pot_x + pot_y)`` on the support; ``Z_xy = <G_x, V_y>``):

* :func:`lse`       x-owner: ``LSE_y (S_xy + pot_y)`` (-inf for empty rows), online LSE.
* :func:`output`    row owner: ``O = P V``.
* :func:`matvec`    x-owner: ``sum_y P_xy w_y`` (either orientation).
* :func:`col_gv_dv` column owner: ``g_v = colsum(P * Z)``, ``dV = P^T G``.
* :func:`row_ubar2` row owner: ``rowsum(P * (Z - w2_y))``.
* :func:`row_dq`    row owner, two passes: ``ubar1 = -alpha (P (beta w1) + extra)``, then
  ``dQ = Sbar K * scale``.
* :func:`col_dk`    column owner: ``dK = Sbar^T Q * scale``.

with ``Sbar = P * (Z - c1_j - c2_j r1_i - r2_i c3_j - c4_j r3_i)``; see :mod:`.op` for the
vector recurrences between the sweeps.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from sinkalign.kernels.cache import band_tile_slots

__all__ = [
    "TARGETS",
    "BlockSizes",
    "Launch",
    "col_dk",
    "col_gv_dv",
    "lse",
    "matvec",
    "output",
    "row_dq",
    "row_ubar2",
    "scores",
]

_NEG_INF = float("-inf")

# Where a pallas_call runs: the Pallas interpreter (any backend), Triton on NVIDIA GPUs,
# Mosaic on TPUs.
TARGETS = ("interpret", "gpu", "tpu")

# Vector-stack slots (see the module docstring).
MASK, POT = 0, 1


@dataclass(frozen=True, kw_only=True)
class BlockSizes:
    """Tile sizes of the Pallas kernels (like ``pallas.ops.gpu.attention.BlockSizes``).

    Attributes:
        block_q: queries per tile (rows owned by a row-owner program, rows per inner
            tile of a column-owner program).
        block_k: keys per tile (likewise for keys).

        num_warps, num_stages: the Triton launch of each kernel on a GPU (warps per program,
            software-pipelining stages); the interpreter and TPUs ignore them.

    Block sizes must be powers of two >= 8. Sequences are padded to block multiples; a block
    larger than the (padded to a power of two, at least 16) length is shrunk to it.
    ``num_warps`` is a power of two from 1 to 32, ``num_stages`` at least 1.
    """

    block_q: int = 128
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in ("block_q", "block_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 8 or value & (value - 1):
                raise ValueError(f"{name}={value!r} must be a power of two >= 8")
        if (isinstance(self.num_warps, bool) or not isinstance(self.num_warps, int) or not 1 <= self.num_warps <= 32
                or self.num_warps & (self.num_warps - 1)):
            raise ValueError(f"num_warps={self.num_warps!r} must be a power of two from 1 to 32")
        if isinstance(self.num_stages, bool) or not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"num_stages={self.num_stages!r} must be an integer >= 1")

    @classmethod
    def get_default(cls, target: str = "interpret") -> BlockSizes:
        """64 x 64 on GPUs (registers / shared memory); 128 x 128 in the interpreter (fewer grid
        steps) and on TPUs (vector blocks need 128 lanes)."""
        if target not in TARGETS:
            raise ValueError(f"target={target!r} is not one of {TARGETS}")
        return cls(block_q=64, block_k=64) if target == "gpu" else cls(block_q=128, block_k=128)

    def effective(self, lq: int, lk: int) -> tuple[int, int]:
        """The tile sizes used for lengths (lq, lk): each shrunk to max(16, next_pow2(L))."""
        return (min(self.block_q, max(16, pl.next_power_of_2(lq))),
                min(self.block_k, max(16, pl.next_power_of_2(lk))))


@dataclass(frozen=True)
class Launch:
    """Static description of one orientation of a sweep.

    ``bx``/``by``: owned / looped tile sizes; ``nx``/``ny``: tile counts of the padded
    lengths; ``band``: half-width W or None (dense); ``scale``: ``1 / (sqrt(d) eps)``;
    ``low``: inputs are a low-precision type (bfloat16 / float16); ``target``: one of
    :data:`TARGETS`; ``f32_dot``: precision of float32 dots, one of
    :data:`sinkalign.sinkhorn.checks.F32_DOTS` (other than ``ieee`` on the GPU target only).
    """

    bx: int
    by: int
    nx: int
    ny: int
    band: int | None
    scale: float
    low: bool
    target: str
    f32_dot: str = "ieee"
    num_warps: int = 4
    num_stages: int = 2
    cache: str | None = None  # None: recompute S per tile; "row" / "col": read it from a score cache (:func:`scores`)
    cols: bool = False  # a column owner's launch (x = keys, y = queries): :meth:`swap` of a row one

    def swap(self) -> Launch:
        return dataclasses.replace(self, bx=self.by, by=self.bx, nx=self.ny, ny=self.nx,
                                   cache={"row": "col", "col": "row"}.get(self.cache), cols=not self.cols)

    def cache_slots(self) -> int:
        """Score tiles a row block's band holds at most: the cache's second axis (row launch)."""
        return band_tile_slots(self.nx * self.bx, self.bx, self.ny * self.by, self.by, self.band)

    def compiler_params(self):
        if self.target == "gpu":
            from jax.experimental.pallas import triton as plgpu

            return plgpu.CompilerParams(num_warps=self.num_warps, num_stages=self.num_stages)
        if self.target == "tpu":
            from jax.experimental.pallas import tpu as pltpu

            return pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))
        return None

    @property
    def precision(self):
        """Dot precision: the input type's for bfloat16 / float16 tiles; for float32 tiles full
        float32 (``ieee``), or on the GPU target three (``tf32x3``) or one (``tf32``) TF32
        tensor-core passes."""
        if self.low:
            return lax.Precision.DEFAULT
        if self.f32_dot == "ieee":
            return lax.Precision.HIGHEST
        return {"tf32x3": lax.DotAlgorithmPreset.TF32_TF32_F32_X3, "tf32": lax.DotAlgorithmPreset.TF32_TF32_F32}[
            self.f32_dot]


# --------------------------------------------------------------------------- tile helpers


def _dot_nt(a, b, ln: Launch):
    """a [m, e] . b [n, e]^T -> [m, n] float32."""
    return lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32,
                           precision=ln.precision)


def _dot_nn(a, b, ln: Launch):
    """a [m, n] @ b [n, e] -> [m, e] float32 (a is rounded to b's type first)."""
    return lax.dot_general(a.astype(b.dtype), b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32,
                           precision=ln.precision)


def _dot_tn(a, b, ln: Launch):
    """a [n, m]^T @ b [n, e] -> [m, e] float32 (a is rounded to b's type first)."""
    return lax.dot_general(a.astype(b.dtype), b, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32,
                           precision=ln.precision)


def _tile_range(ln: Launch, x0):
    """First and one-past-last y tile that intersects the band of the x block starting at x0."""
    if ln.band is None:
        return 0, ln.ny
    lo = jnp.maximum(x0 - ln.band, 0) // ln.by
    hi = jnp.minimum((x0 + ln.bx - 1 + ln.band) // ln.by + 1, ln.ny)
    return lo, hi


class _Slots:
    """Rows of a vector-stack ref, each loaded on access (``ref[slot, sl]``, 1-D): indexing a
    loaded 2-D value instead would need a ``slice`` that the Triton lowering lacks."""

    def __init__(self, ref, sl=None):
        self.ref, self.sl = ref, sl

    def __getitem__(self, slot):
        return self.ref[slot, :] if self.sl is None else self.ref[slot, self.sl]


class _Tile:
    """One (x block, y tile) pair: scores (recomputed from the tokens, or read from the score
    cache ``s_ref``), support and plan."""

    def __init__(self, ln: Launch, x0, t, x, xv, y_ref, yv_ref, s_ref=None):
        self.y0 = pl.multiple_of(t * ln.by, ln.by)
        self.sl = pl.ds(self.y0, ln.by)
        self.yv = _Slots(yv_ref, self.sl)  # slot -> [by]
        if ln.cache is None and ln.cols and ln.target == "interpret":  # the row owners' product, transposed
            self.s = lax.optimization_barrier(_dot_nt(y_ref[self.sl, :], x, ln)).T * ln.scale  # [bx, by]
        elif ln.cache is None:
            self.s = _dot_nt(x, y_ref[self.sl, :], ln) * ln.scale  # [bx, by]
        elif ln.cache == "row":  # this row block's tile t, at its slot
            self.s = s_ref[x0 // ln.bx, t - _tile_range(ln, x0)[0], :, :]
        else:  # column owner: the row block t's tile of this column block, transposed
            self.s = s_ref[t, x0 // ln.bx - _tile_range(ln.swap(), self.y0)[0], :, :].T
        xi = x0 + lax.broadcasted_iota(jnp.int32, (ln.bx, ln.by), 0)
        yi = self.y0 + lax.broadcasted_iota(jnp.int32, (ln.bx, ln.by), 1)
        active = (xv[MASK][:, None] > 0) & (self.yv[MASK][None, :] > 0)
        if ln.band is not None:
            active = active & (jnp.abs(xi - yi) <= ln.band)
        self.active = active

    def logits(self, pot_x=None):
        z = self.s + self.yv[POT][None, :]
        if pot_x is not None:
            z = z + pot_x[:, None]
        return jnp.where(self.active, z, _NEG_INF)  # mask after adding the potentials

    def plan(self, pot_x):
        return jnp.exp(self.logits(pot_x))  # [bx, by], 0 off the support


# --------------------------------------------------------------------------- kernel bodies


def _lse_kernel(x_ref, xv_ref, y_ref, yv_ref, out_ref, *, ln: Launch, s_ref=None):
    x, xv = x_ref[...], _Slots(xv_ref)
    x0 = pl.program_id(1) * ln.bx  # program_id at kernel top level (not inside loops)

    def body(t, carry):
        m, l = carry
        z = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref).logits()
        m_new = jnp.maximum(m, z.max(axis=1))
        m_safe = jnp.where(m_new == _NEG_INF, 0.0, m_new)
        l = l * jnp.exp(m - m_safe) + jnp.exp(z - m_safe[:, None]).sum(axis=1)
        return m_new, l

    init = (jnp.full((ln.bx,), _NEG_INF, jnp.float32), jnp.zeros((ln.bx,), jnp.float32))
    m, l = lax.fori_loop(*_tile_range(ln, x0), body, init)
    on = l > 0
    out_ref[0, :] = jnp.where(on, m + jnp.log(jnp.where(on, l, 1.0)), _NEG_INF)


def _output_kernel(x_ref, xv_ref, y_ref, yv_ref, val_ref, out_ref, *, ln: Launch, s_ref=None):
    x, xv = x_ref[...], _Slots(xv_ref)
    x0 = pl.program_id(1) * ln.bx  # program_id at kernel top level (not inside loops)

    def body(t, acc):
        tile = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref)
        return acc + _dot_nn(tile.plan(xv[POT]), val_ref[tile.sl, :], ln)  # [bx, e]

    out_ref[...] = lax.fori_loop(*_tile_range(ln, x0), body, jnp.zeros(out_ref.shape, jnp.float32))


W_SLOT = 2  # matvec: y-side weights


def _matvec_kernel(x_ref, xv_ref, y_ref, yv_ref, out_ref, *, ln: Launch, s_ref=None):
    x, xv = x_ref[...], _Slots(xv_ref)
    x0 = pl.program_id(1) * ln.bx  # program_id at kernel top level (not inside loops)

    def body(t, acc):
        tile = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref)
        return acc + (tile.plan(xv[POT]) * tile.yv[W_SLOT][None, :]).sum(axis=1)

    out_ref[0, :] = lax.fori_loop(*_tile_range(ln, x0), body, jnp.zeros((ln.bx,), jnp.float32))


ALPHA_Y = 2  # col_gv_dv: the query side's alpha


def _col_gv_dv_kernel(x_ref, xv_ref, xm_ref, y_ref, yv_ref, ym_ref, gv_ref, dv_ref, cs_ref, csa_ref, *,
                      ln: Launch, s_ref=None):
    # x = keys (own V block in xm), y = queries (G in ym): P^T tile, Z^T = V_x G_y^T; also the
    # column sums of P and of alpha_i P, for the normalisation of P^(2,2) and P^(1,1).
    x, xv, xm = x_ref[...], _Slots(xv_ref), xm_ref[...]
    x0 = pl.program_id(1) * ln.bx

    def body(t, carry):
        gv, dv, cs, csa = carry
        tile = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref)
        p = tile.plan(xv[POT])  # [bk, bq]
        gy = ym_ref[tile.sl, :]  # [bq, e]
        z = _dot_nt(xm, gy, ln)  # [bk, bq]
        return (gv + (p * z).sum(axis=1), dv + _dot_nn(p, gy, ln), cs + p.sum(axis=1),
                csa + (p * tile.yv[ALPHA_Y][None, :]).sum(axis=1))

    zeros = jnp.zeros((ln.bx,), jnp.float32)
    init = (zeros, jnp.zeros(dv_ref.shape, jnp.float32), zeros, zeros)
    gv, dv, cs, csa = lax.fori_loop(*_tile_range(ln, x0), body, init)
    gv_ref[0, :] = gv
    dv_ref[...] = dv
    cs_ref[0, :] = cs
    csa_ref[0, :] = csa


C1 = 2  # row_ubar2 and the Sbar vectors: y-side w2
U2_F, U2_BETA, U2_DELTA = 3, 4, 5  # row_ubar2: y-side f22, beta, delta


def _row_ubar2_kernel(x_ref, xv_ref, xm_ref, y_ref, yv_ref, ym_ref, out_ref, rb_ref, rd_ref, *, ln: Launch,
                      s_ref=None):
    # x = queries (own G block in xm), y = keys (V in ym): rowsum(P f22_j (Z - w2_j)), and the
    # row sums of P beta_j and P delta_j, for the normalisation of P^(2,1) and P^(1,0).
    x, xv, xm = x_ref[...], _Slots(xv_ref), xm_ref[...]
    x0 = pl.program_id(1) * ln.bx

    def body(t, carry):
        acc, rb, rd = carry
        tile = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref)
        z = _dot_nt(xm, ym_ref[tile.sl, :], ln)  # [bq, bk]
        p = tile.plan(xv[POT])
        return (acc + (p * (tile.yv[U2_F][None, :] * (z - tile.yv[C1][None, :]))).sum(axis=1),
                rb + (p * tile.yv[U2_BETA][None, :]).sum(axis=1), rd + (p * tile.yv[U2_DELTA][None, :]).sum(axis=1))

    zeros = jnp.zeros((ln.bx,), jnp.float32)
    acc, rb, rd = lax.fori_loop(*_tile_range(ln, x0), body, (zeros, zeros, zeros))
    out_ref[0, :] = acc
    rb_ref[0, :] = rb
    rd_ref[0, :] = rd


# Slots of the Sbar vectors. Row side (queries): R1 = x2 = r21 ubar2 / a, R2 = alpha,
# R3 = ar10 ubar1 / a; dq kernel inputs AR_INV_A (= ar10 / a) and EXTRA in R3's and the next slot.
# Column side (keys): C1 = w2 = g_v / b, C2 = beta, C3 = bc11 vbar1 / b, C4 = delta, F = f22.
# (r21, bc11, ar10, f22: the plans' normalisations, see sinkalign.sinkhorn.core._adjoint.)
R1, R2, R3 = 2, 3, 4
AR_INV_A, EXTRA = 4, 5
C2, C3, C4, F = 3, 4, 5, 6


def _sbar(p, z, c, r):
    """P * (f_j (Z - c1_j) - c2_j r1_i - r2_i c3_j - c4_j r3_i) in the row-owner orientation;
    c: the column vector stack of the tile (slots C1..C4, F), r: (r1, r2, r3) each [bx]."""
    r1, r2, r3 = (x[:, None] for x in r)
    return p * (c[F][None, :] * (z - c[C1][None, :]) - c[C2][None, :] * r1 - r2 * c[C3][None, :]
                - c[C4][None, :] * r3)


def _row_dq_kernel(x_ref, xv_ref, xm_ref, y_ref, yv_ref, ym_ref, dq_ref, ub1_ref, *, ln: Launch, s_ref=None):
    # x = queries (G block in xm), y = keys (K in y_ref, V in ym).
    x, xv, xm = x_ref[...], _Slots(xv_ref), xm_ref[...]
    x0 = pl.program_id(1) * ln.bx
    lo, hi = _tile_range(ln, x0)

    def pass1(t, acc):  # P (beta w1), the band part of ubar1
        tile = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref)
        return acc + (tile.plan(xv[POT]) * tile.yv[C3][None, :]).sum(axis=1)

    t1 = lax.fori_loop(lo, hi, pass1, jnp.zeros((ln.bx,), jnp.float32))
    alpha = xv[R2]
    ubar1 = -alpha * (t1 + xv[EXTRA])
    r = (xv[R1], alpha, xv[AR_INV_A] * ubar1)

    def pass2(t, acc):
        tile = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref)
        z = _dot_nt(xm, ym_ref[tile.sl, :], ln)
        sbar = _sbar(tile.plan(xv[POT]), z, tile.yv, r)
        return acc + _dot_nn(sbar, y_ref[tile.sl, :], ln)

    dq = lax.fori_loop(lo, hi, pass2, jnp.zeros(dq_ref.shape, jnp.float32))
    dq_ref[...] = dq * ln.scale
    ub1_ref[0, :] = ubar1


def _col_dk_kernel(x_ref, xv_ref, xm_ref, y_ref, yv_ref, ym_ref, dk_ref, *, ln: Launch, s_ref=None):
    # x = keys (V block in xm; vector slots C1..C4), y = queries (G in ym; slots R1..R3).
    x, xv, xm = x_ref[...], _Slots(xv_ref), xm_ref[...]
    x0 = pl.program_id(1) * ln.bx

    def body(t, acc):
        tile = _Tile(ln, x0, t, x, xv, y_ref, yv_ref, s_ref)
        p = tile.plan(xv[POT])  # [bk, bq] = P^T
        z = _dot_nt(xm, ym_ref[tile.sl, :], ln)  # Z^T
        yv = tile.yv
        sbar_t = p * (xv[F][:, None] * (z - xv[C1][:, None]) - xv[C2][:, None] * yv[R1][None, :]
                      - yv[R2][None, :] * xv[C3][:, None] - xv[C4][:, None] * yv[R3][None, :])
        return acc + _dot_nn(sbar_t, y_ref[tile.sl, :], ln)

    dk_ref[...] = lax.fori_loop(*_tile_range(ln, x0), body, jnp.zeros(dk_ref.shape, jnp.float32)) * ln.scale


# --------------------------------------------------------------------------- launches


def _own(block, width):
    return pl.BlockSpec((None, block, width), lambda h, i: (h, i, 0))


def _whole(length, width):
    return pl.BlockSpec((None, length, width), lambda h, i: (h, 0, 0))


def _own_vec(n, block):
    return pl.BlockSpec((None, n, block), lambda h, i: (h, 0, i))


def _whole_vec(n, length):
    return pl.BlockSpec((None, n, length), lambda h, i: (h, 0, 0))


def _call(body, ln: Launch, name: str, ins: list, outs: list, cache=None):
    """ins: (array, 'x'|'y', 'tok'|'vec'); outs: ('tok', width) [BH, Lx, width] or ('vec',) [BH, 1, Lx];
    cache: the score cache of :func:`scores` when ``ln.cache`` is set (whole per batch-head)."""
    if (cache is None) != (ln.cache is None):
        raise ValueError(f"launch cache={ln.cache!r} needs the score cache, and only it")
    bh = ins[0][0].shape[0]
    lx = ln.nx * ln.bx
    in_specs = []
    if cache is not None:
        kernel = functools.partial(body, ln=ln)
        body = lambda s_ref, *refs, ln: kernel(*refs, s_ref=s_ref)  # noqa: E731  (the cache comes first)
        in_specs.append(pl.BlockSpec((None, *cache.shape[1:]), lambda h, i: (h, 0, 0, 0, 0)))
    for arr, side, kind in ins:
        if kind == "tok":
            in_specs.append(_own(ln.bx, arr.shape[2]) if side == "x" else _whole(arr.shape[1], arr.shape[2]))
        else:
            in_specs.append(_own_vec(arr.shape[1], ln.bx) if side == "x" else _whole_vec(arr.shape[1], arr.shape[2]))
    out_specs, out_shape = [], []
    for out in outs:
        if out[0] == "tok":
            out_specs.append(_own(ln.bx, out[1]))
            out_shape.append(jax.ShapeDtypeStruct((bh, lx, out[1]), jnp.float32))
        else:
            out_specs.append(_own_vec(1, ln.bx))
            out_shape.append(jax.ShapeDtypeStruct((bh, 1, lx), jnp.float32))
    res = pl.pallas_call(
        functools.partial(body, ln=ln),
        grid=(bh, ln.nx),
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        interpret=ln.target == "interpret",
        compiler_params=ln.compiler_params(),
        name=f"sinkhorn_{name}",
    )(*([] if cache is None else [cache]), *(a for a, _, _ in ins))
    return res


def scores(ln: Launch, q, k):
    """The score cache of a row launch ``ln`` (queries x keys): ``S = Q K^T * scale`` on the
    band's tiles, ``[BH, nx, slots, bx, by]`` float32, row block ``i``'s ``j``-th key tile at
    slot ``j - lo_i`` (``lo_i`` its first band tile; slots past its last are left unwritten and
    never read). The sweeps of a launch with ``cache="row"`` (and its ``swap()``, ``"col"``)
    read their tiles from it instead of recomputing them: one pass of dots instead of one per
    sweep, for O(Lq (bx + 2W)) float32 memory, O(L W) in all."""
    if ln.cache != "row":
        raise ValueError(f"scores() builds the cache of a row launch (cache='row'), not cache={ln.cache!r}")
    bh, slots = q.shape[0], ln.cache_slots()
    size = bh * ln.nx * slots * ln.bx * ln.by
    if size >= 2**31:  # block offsets come from int32 program ids: not trusted past 2^31 elements (not tried)
        raise ValueError(f"the score cache would hold {size:,} floats ({bh} batch-heads x {ln.nx * ln.bx} rows x "
                         f"{slots * ln.by} band columns), past the 2^31 that 32-bit offsets reach: use fewer "
                         "batch-heads per call, or cache_scores=False")

    def kernel(x_ref, y_ref, out_ref):
        x = x_ref[...]
        x0 = pl.program_id(1) * ln.bx  # program_id at kernel top level (not inside loops)
        lo, hi = _tile_range(ln, x0)

        def body(t, carry):
            y0 = pl.multiple_of(t * ln.by, ln.by)
            out_ref[t - lo, :, :] = _dot_nt(x, y_ref[pl.ds(y0, ln.by), :], ln) * ln.scale
            return carry

        lax.fori_loop(lo, hi, body, 0)

    return pl.pallas_call(
        kernel,
        grid=(bh, ln.nx),
        in_specs=[_own(ln.bx, q.shape[2]), _whole(k.shape[1], k.shape[2])],
        out_specs=pl.BlockSpec((None, None, slots, ln.bx, ln.by), lambda h, i: (h, i, 0, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((bh, ln.nx, slots, ln.bx, ln.by), jnp.float32),
        interpret=ln.target == "interpret",
        compiler_params=ln.compiler_params(),
        name="sinkhorn_scores",
    )(q, k)


def lse(ln: Launch, x, xv, y, yv, cache=None):
    """x [BH, Lx, d], xv [BH, >=1, Lx] (mask), y [BH, Ly, d], yv [BH, >=2, Ly] (mask, pot)
    -> LSE_y (S_xy + pot_y) [BH, Lx] (-inf where x has no active partner). ``cache``: the
    score cache (:func:`scores`) when ``ln.cache`` is set, here and in every sweep below."""
    (out,) = _call(_lse_kernel, ln, "lse", [(x, "x", "tok"), (xv, "x", "vec"), (y, "y", "tok"), (yv, "y", "vec")],
                   [("vec",)], cache)
    return out[:, 0]


def output(ln: Launch, q, qv, k, kv, v, cache=None):
    """O = P V, P = exp(S + u + v) on the support. qv [BH, 2, Lq] (mask, u), kv [BH, 2, Lk]
    (mask, v), v [BH, Lk, e] -> [BH, Lq, e] float32."""
    (out,) = _call(_output_kernel, ln, "output",
                   [(q, "x", "tok"), (qv, "x", "vec"), (k, "y", "tok"), (kv, "y", "vec"), (v, "y", "tok")],
                   [("tok", v.shape[2])], cache)
    return out


def matvec(ln: Launch, x, xv, y, yv, cache=None):
    """sum_y P_xy w_y. xv [BH, 2, Lx] (mask, pot), yv [BH, 3, Ly] (mask, pot, w) -> [BH, Lx]."""
    (out,) = _call(_matvec_kernel, ln, "matvec", [(x, "x", "tok"), (xv, "x", "vec"), (y, "y", "tok"),
                                                  (yv, "y", "vec")], [("vec",)], cache)
    return out[:, 0]


def col_gv_dv(ln: Launch, k, kv, v, q, qv, g, cache=None):
    """Column owner (ln oriented keys x queries). kv [BH, 2, Lk] (mask, v2), qv [BH, 3, Lq]
    (mask, u2, alpha), v [BH, Lk, e], g [BH, Lq, e] -> (g_v [BH, Lk], dV [BH, Lk, e], colsum(P)
    [BH, Lk], colsum(alpha_i P) [BH, Lk]) float32, all of the raw P = exp(S + u2 + v2)."""
    gv, dv, cs, csa = _call(_col_gv_dv_kernel, ln, "col_gv_dv",
                            [(k, "x", "tok"), (kv, "x", "vec"), (v, "x", "tok"), (q, "y", "tok"), (qv, "y", "vec"),
                             (g, "y", "tok")], [("vec",), ("tok", g.shape[2]), ("vec",), ("vec",)], cache)
    return gv[:, 0], dv, cs[:, 0], csa[:, 0]


def row_ubar2(ln: Launch, q, qv, g, k, kv, v, cache=None):
    """rowsum(P * f_j (Z - w2_j)), rowsum(P beta_j), rowsum(P delta_j). qv [BH, 2, Lq] (mask, u2),
    kv [BH, 6, Lk] (mask, v2, w2, f22, beta, delta) -> three [BH, Lq]."""
    out, rb, rd = _call(_row_ubar2_kernel, ln, "row_ubar2",
                        [(q, "x", "tok"), (qv, "x", "vec"), (g, "x", "tok"), (k, "y", "tok"), (kv, "y", "vec"),
                         (v, "y", "tok")], [("vec",), ("vec",), ("vec",)], cache)
    return out[:, 0], rb[:, 0], rd[:, 0]


def row_dq(ln: Launch, q, qv, g, k, kv, v, cache=None):
    """Row owner: ubar1 and dQ. qv [BH, 6, Lq] (mask, u2, x2, alpha, ar10/a, extra), kv [BH, 7, Lk]
    (mask, v2, w2, beta, c3, delta, f22) -> (dQ [BH, Lq, d] float32, ubar1 [BH, Lq])."""
    dq, ub1 = _call(_row_dq_kernel, ln, "row_dq",
                    [(q, "x", "tok"), (qv, "x", "vec"), (g, "x", "tok"), (k, "y", "tok"), (kv, "y", "vec"),
                     (v, "y", "tok")], [("tok", q.shape[2]), ("vec",)], cache)
    return dq, ub1[:, 0]


def col_dk(ln: Launch, k, kv, v, q, qv, g, cache=None):
    """Column owner: dK. kv [BH, 7, Lk] (mask, v2, w2, beta, c3, delta, f22), qv [BH, 5, Lq]
    (mask, u2, x2, alpha, x1) -> dK [BH, Lk, d] float32."""
    (dk,) = _call(_col_dk_kernel, ln, "col_dk",
                  [(k, "x", "tok"), (kv, "x", "vec"), (v, "x", "tok"), (q, "y", "tok"), (qv, "y", "vec"),
                   (g, "y", "tok")], [("tok", k.shape[2])], cache)
    return dk

