"""The Pallas tail-refinement operator: ``backend="pallas"`` of :func:`sinkalign.sinkhorn.core.tail_operator`.

Same operator, conventions and gradient as the JAX reference (``../design/sinkhorn_tail.md``):
a stopped, centered base solve of T full steps from ``v = 0``, two raw tail steps, output
``O = P^(2,2) V``; the backward is the exact one-reference R = 2 adjoint (Proposition 2)
generalised to marginals a, b (every plan meets a cotangent divided by its mass). The forward
stores only q, k, v, the masks, the log marginals and the float32 dual vectors
``v^(0), u^(1), v^(1), u^(2), v^(2)``: O(L d + L) memory. With ``cache_scores`` (the default
for float32 inputs with exact dots on a GPU or in the interpreter, :mod:`sinkalign.kernels.cache`)
every sweep reads its score tiles from a float32 cache of the band's scores built once for the
forward's duals, once for its output and once for the backward (O(L W) memory while a pass
runs; nothing more is kept between forward and backward); without it (TF32 or half-type dots,
the TPU target, or ``cache_scores=False``) every sweep recomputes them from q and k.

Backward sweeps (``P = P^(2,2)``, ``Z = G V^T``, ``alpha = exp(u1 - u2)``,
``beta = exp(v1 - v2)``, ``delta = exp(v0 - v2)``; row owners and column owners each write
their own outputs, so there are no atomics):

1. column owner: ``g_v = f22 colsum(P * Z)``, ``dV = f22 P^T G``, and ``colsum(P)``,
   ``colsum(alpha_i P)``;                                       ``w2 = g_v / b``, ``f22``, ``bc11``
2. row owner:    ``ubar2 = rowsum(P * f22_j (Z - w2_j))``, and ``rowsum(P beta_j)``,
   ``rowsum(P delta_j)``;                                       ``x2 = r21 ubar2 / a``, ``r21``, ``ar10``
3. column owner: ``vbar1 = -beta * P^T x2``;                          ``c3 = bc11 vbar1 / b``
4. row owner:    ``ubar1 = -alpha * P c3`` then, in the same program, ``x1 = ar10 ubar1 / a``
   and ``dQ = Sbar K / (sqrt(d) eps)``
5. column owner: ``dK = Sbar^T Q / (sqrt(d) eps)``

with ``Sbar = P * (f22_j (Z - w2_j) - beta_j x2_i - alpha_i c3_j - delta_j x1_i)``. The factors
bring each tail plan rebuilt from float32 duals back to its half-step's sums, as the reference
does (:func:`sinkalign.sinkhorn.core._adjoint`): ``f22`` the columns of P^(2,2) to b, ``r21``
the rows of P^(2,1) = P beta_j to a, ``bc11`` the columns of P^(1,1) (= beta in exact arithmetic),
``ar10`` the rows of P^(1,0) (= alpha); each sum rides along a sweep that precedes its use.

Supports. The largest piece of the :class:`~sinkalign.sinkhorn.support.Support` (the band,
or the single dense piece of the balanced problem and of the ``paper`` dustbin variant, a
length-1 problem included) runs through the Pallas kernels. Every other piece must be one
row or one column wide: the banded dustbin variant's always-active dustbin column and row.
Those are computed with plain jnp as dense ``[BH, L, 1]`` / ``[BH, 1, L]`` pieces (O(L d)
work) and combined with the kernel results between sweeps: log-sum-exps by ``logaddexp``,
sums by addition; the dQ sweep receives their share of ``P c3`` as an extra row vector, so
``ubar1`` is complete before ``Sbar`` is formed.

Batching: under ``jax.vmap`` the mapped axis is merged into the kernels' batch-heads
(``jax.custom_batching.custom_vmap``), so one launch serves every slice and the default score
cache is decided for the whole batch.

Lowerings: ``interpret=True`` (the default whenever JAX's default backend is the CPU) runs
the kernels in the Pallas interpreter. ``interpret=False`` lowers them for the default
backend: Triton on NVIDIA GPUs (``target="gpu"``, head dims zero-padded to a power of two >=
16; compiled and checked against the float64 reference on an H100 and an H200), Mosaic on
TPUs (``target="tpu"``, head dims padded to 128 lanes). :func:`lower_native` lowers the whole
forward + backward program for 'cuda' or 'tpu' from a CPU process (Pallas -> Triton IR,
Pallas -> Mosaic MLIR); the TPU path has only been lowered, never compiled or run. On a TPU
the whole other-side ``[L, d]`` slice of a batch-head sits in VMEM, which bounds L.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.experimental import pallas as pl

from sinkalign.kernels.cache import resolve_cache_scores
from sinkalign.kernels.pallas import kernels as K
from sinkalign.kernels.pallas.kernels import BlockSizes, Launch
from sinkalign.sinkhorn.checks import check_f32_dots, check_shapes
from sinkalign.sinkhorn.config import SinkhornConfig
from sinkalign.sinkhorn.core import normalising_factor
from sinkalign.sinkhorn.support import Piece, Support

__all__ = ["lower_native", "native_target", "sinkhorn_attention_pallas", "tail_duals", "tail_operator"]

log = logging.getLogger(__name__)

_KERNEL_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
_NEG_INF = float("-inf")
_F32 = jnp.float32
_HI = jax.lax.Precision.HIGHEST


# --------------------------------------------------------------------------- static plan


@dataclass(frozen=True)
class _Static:
    """Everything static about one call (hashable: the jit / custom_vjp key)."""

    support: Support
    main: int  # index of the kernel piece
    eps: float
    n_iters: int
    blocks: BlockSizes
    target: str  # kernels.TARGETS
    f32_dot: str = "ieee"  # sinkalign.sinkhorn.checks.F32_DOTS
    cache_scores: bool = False  # each program of sweeps reads S from one cache (kernels.scores)
    cache_rule: bool = False  # cache_scores is the default rule's: decided again for the whole batch under vmap

    @property
    def piece(self) -> Piece:
        return self.support.pieces[self.main]

    @property
    def thin(self) -> tuple[Piece, ...]:
        return tuple(p for i, p in enumerate(self.support.pieces) if i != self.main)

    def launch(self, d: int, low: bool) -> Launch:
        p = self.piece
        bq, bk = self.blocks.effective(p.nr, p.nc)
        return Launch(bq, bk, -(-p.nr // bq), -(-p.nc // bk), p.band, 1.0 / (math.sqrt(d) * self.eps), low,
                      self.target, self.f32_dot, self.blocks.num_warps, self.blocks.num_stages,
                      "row" if self.cache_scores else None)

    def cache_floats(self, bh: int) -> int:
        """Float32 values in the score cache of ``bh`` batch-heads."""
        ln = self.launch(1, low=False)
        return bh * ln.nx * ln.cache_slots() * ln.bx * ln.by

    def for_batch(self, bh: int) -> _Static:
        """This call's static part for ``bh`` batch-heads: the default rule's cache decided for them."""
        if not self.cache_rule:
            return self
        return dataclasses.replace(self, cache_scores=resolve_cache_scores(None, exact_f32=True,
                                                                          floats=self.cache_floats(bh)))

    def feature_pad(self, n: int) -> int:
        """Head dims are zero-padded natively: a power of two >= 16 (Triton dots), 128 lanes (TPU)."""
        if self.target == "gpu":
            return max(16, pl.next_power_of_2(n))
        if self.target == "tpu":
            return -(-n // 128) * 128
        return n


def _choose_main(support: Support) -> int:
    sizes = [p.nr * p.nc for p in support.pieces]
    main = int(np.argmax(sizes))
    for i, p in enumerate(support.pieces):
        if i != main and p.nr != 1 and p.nc != 1:
            raise ValueError(
                f"support piece {p} is neither the kernel piece nor one row/column wide; the Pallas operator runs "
                "one band/dense piece in its kernels plus dustbin rows/columns (use backend='reference' for others)"
            )
    return main


# --------------------------------------------------------------------------- helpers


def _window_count(m, n_self: int, band: int | None):
    """For each of n_self positions, the number of True entries of m [BH, n] within the band."""
    m = m.astype(jnp.int32)
    if band is None:
        return jnp.broadcast_to(m.sum(-1, keepdims=True, dtype=jnp.int32), m.shape[:-1] + (n_self,))
    cs = jnp.concatenate([jnp.zeros(m.shape[:-1] + (1,), jnp.int32), jnp.cumsum(m, -1, dtype=jnp.int32)], -1)
    pos = np.arange(n_self)
    lo = np.clip(pos - band, 0, m.shape[-1])
    hi = np.clip(pos + band + 1, 0, m.shape[-1])
    return cs[..., hi] - cs[..., lo]


def _activity(support: Support, qv, kv):
    """Rows / columns with at least one active entry: (row_active [BH, Lq], col_active [BH, Lk])."""
    rows = jnp.zeros(qv.shape, jnp.int32)
    cols = jnp.zeros(kv.shape, jnp.int32)
    for p in support.pieces:
        qm, km = qv[:, p.r0 : p.r0 + p.nr], kv[:, p.c0 : p.c0 + p.nc]
        rc = qm * _window_count(km, p.nr, p.band)
        cc = km * _window_count(qm, p.nc, p.band)
        rows = rows.at[:, p.r0 : p.r0 + p.nr].add(rc)
        cols = cols.at[:, p.c0 : p.c0 + p.nc].add(cc)
    return rows > 0, cols > 0


def _place(part, start: int, length: int, fill=0.0):
    """[BH, n] piece-local -> [BH, length] with the piece at [start, start + n)."""
    n = part.shape[1]
    widths = [(0, 0), (start, length - start - n)] + [(0, 0)] * (part.ndim - 2)
    return jnp.pad(part, widths, constant_values=fill)


def _logaddexp(a, b):
    m = jnp.maximum(a, b)
    m_safe = jnp.where(m == _NEG_INF, 0.0, m)
    s = jnp.exp(a - m_safe) + jnp.exp(b - m_safe)
    return jnp.where(s > 0, m_safe + jnp.log(jnp.where(s > 0, s, 1.0)), _NEG_INF)


def _masked_lse(z, axis):
    m = z.max(axis)
    m_safe = jnp.where(m == _NEG_INF, 0.0, m)
    s = jnp.exp(z - jnp.expand_dims(m_safe, axis)).sum(axis)
    return jnp.where(s > 0, m_safe + jnp.log(jnp.where(s > 0, s, 1.0)), _NEG_INF)


class _Main:
    """The kernel piece: padded piece-local tokens and masks, and the sweeps over it."""

    def __init__(self, st: _Static, q, k, v, qv, kv, g=None):
        # v (values) and g (output cotangent) are optional: the dual sweeps need neither.
        p = self.p = st.piece
        low = q.dtype != jnp.float32
        self.ln = st.launch(q.shape[-1], low)
        self.lq_pad, self.lk_pad = self.ln.nx * self.ln.bx, self.ln.ny * self.ln.by
        fpad = st.feature_pad
        self.q = self._tok(q[:, p.r0 : p.r0 + p.nr], self.lq_pad, fpad)
        self.k = self._tok(k[:, p.c0 : p.c0 + p.nc], self.lk_pad, fpad)
        self.v = None if v is None else self._tok(v[:, p.c0 : p.c0 + p.nc], self.lk_pad, fpad)
        self.g = None if g is None else self._tok(g[:, p.r0 : p.r0 + p.nr].astype(q.dtype), self.lq_pad, fpad)
        self.mq = self.rows(qv.astype(_F32))
        self.mk = self.cols(kv.astype(_F32))
        self.cache = K.scores(self.ln, self.q, self.k) if st.cache_scores else None

    @staticmethod
    def _tok(x, length, fpad):
        return jnp.pad(x, [(0, 0), (0, length - x.shape[1]), (0, fpad(x.shape[2]) - x.shape[2])])

    def rows(self, x):
        """Full [BH, Lq] -> piece-local padded [BH, lq_pad]."""
        part = x[:, self.p.r0 : self.p.r0 + self.p.nr]
        return jnp.pad(part, [(0, 0), (0, self.lq_pad - self.p.nr)])

    def cols(self, x):
        part = x[:, self.p.c0 : self.p.c0 + self.p.nc]
        return jnp.pad(part, [(0, 0), (0, self.lk_pad - self.p.nc)])

    def put_rows(self, x, lq, fill=0.0):
        return _place(x[:, : self.p.nr], self.p.r0, lq, fill)

    def put_cols(self, x, lk, fill=0.0):
        return _place(x[:, : self.p.nc], self.p.c0, lk, fill)

    def qvec(self, *xs):
        return jnp.stack([self.mq] + [self.rows(x) for x in xs], 1)  # [BH, n, lq_pad]

    def kvec(self, *xs):
        return jnp.stack([self.mk] + [self.cols(x) for x in xs], 1)  # [BH, n, lk_pad]

    # ---- sweeps (full-length float32 vectors in, piece-local padded results out) ----
    def row_lse(self, v):
        return K.lse(self.ln, self.q, self.qvec(), self.k, self.kvec(v), self.cache)

    def col_lse(self, u):
        return K.lse(self.ln.swap(), self.k, self.kvec(), self.q, self.qvec(u), self.cache)

    def output(self, u, v):
        return K.output(self.ln, self.q, self.qvec(u), self.k, self.kvec(v), self.v, self.cache)

    def gv_dv(self, u, v, alpha):
        return K.col_gv_dv(self.ln.swap(), self.k, self.kvec(v), self.v, self.q, self.qvec(u, alpha), self.g,
                           self.cache)

    def ubar2(self, u, v, w2, f22, beta, delta):
        return K.row_ubar2(self.ln, self.q, self.qvec(u), self.g, self.k, self.kvec(v, w2, f22, beta, delta), self.v,
                           self.cache)

    def col_matvec(self, u, v, x):
        return K.matvec(self.ln.swap(), self.k, self.kvec(v), self.q, self.qvec(u, x), self.cache)

    def dq(self, u, v, x2, alpha, ar_inv_a, extra, w2, beta, c3, delta, f22):
        return K.row_dq(self.ln, self.q, self.qvec(u, x2, alpha, ar_inv_a, extra), self.g, self.k,
                        self.kvec(v, w2, beta, c3, delta, f22), self.v, self.cache)

    def dk(self, u, v, x2, alpha, x1, w2, beta, c3, delta, f22):
        return K.col_dk(self.ln.swap(), self.k, self.kvec(v, w2, beta, c3, delta, f22), self.v, self.q,
                        self.qvec(u, x2, alpha, x1), self.g, self.cache)


class _Thin:
    """A one-row / one-column piece (a dustbin), dense in plain jnp: O(L d) work."""

    def __init__(self, p: Piece, q, k, qv, kv, scale):
        self.p = p
        self.qs = q[:, p.r0 : p.r0 + p.nr].astype(_F32)  # [BH, nr, d]
        self.ks = k[:, p.c0 : p.c0 + p.nc].astype(_F32)  # [BH, nc, d]
        self.s = jnp.einsum("hid,hjd->hij", self.qs, self.ks, precision=_HI) * scale
        mask = qv[:, p.r0 : p.r0 + p.nr, None] & kv[:, None, p.c0 : p.c0 + p.nc]
        if p.band is not None:
            i, j = np.arange(p.nr)[:, None], np.arange(p.nc)[None, :]
            mask = mask & jnp.asarray(np.abs(i - j) <= p.band)
        self.mask = mask

    def r(self, x):  # full row vector -> [BH, nr, 1]
        return x[:, self.p.r0 : self.p.r0 + self.p.nr, None]

    def c(self, x):  # full column vector -> [BH, 1, nc]
        return x[:, None, self.p.c0 : self.p.c0 + self.p.nc]

    def row_lse(self, v, lq):
        z = jnp.where(self.mask, self.s + self.c(v), _NEG_INF)
        return _place(_masked_lse(z, 2), self.p.r0, lq, _NEG_INF)

    def col_lse(self, u, lk):
        z = jnp.where(self.mask, self.s + self.r(u), _NEG_INF)
        return _place(_masked_lse(z, 1), self.p.c0, lk, _NEG_INF)

    def plan(self, u, v):
        return jnp.exp(jnp.where(self.mask, self.s + self.r(u) + self.c(v), _NEG_INF))

    def rowsum(self, x, lq):
        return _place(x.sum(2), self.p.r0, lq)

    def colsum(self, x, lk):
        return _place(x.sum(1), self.p.c0, lk)


# --------------------------------------------------------------------------- forward


def _forward_duals(st: _Static, q, k, qv, kv, la, lb):
    """Base solve then two raw tail steps. Returns (v0, u1, v1, u2, v2), float32 [BH, L]."""
    lq, lk = q.shape[1], k.shape[1]
    row_active, col_active = _activity(st.support, qv, kv)
    main = _Main(st, q, k, None, qv, kv)
    thin = [_Thin(p, q, k, qv, kv, main.ln.scale) for p in st.thin]
    la, lb = la.astype(_F32), lb.astype(_F32)

    def row_step(v):
        lse = main.put_rows(main.row_lse(v), lq, _NEG_INF)
        for t in thin:
            lse = _logaddexp(lse, t.row_lse(v, lq))
        return jnp.where(row_active, la - lse, 0.0)

    def col_step(u):
        lse = main.put_cols(main.col_lse(u), lk, _NEG_INF)
        for t in thin:
            lse = _logaddexp(lse, t.col_lse(u, lk))
        return jnp.where(col_active, lb - lse, 0.0)

    n_rows = jnp.maximum(row_active.sum(-1, keepdims=True), 1).astype(_F32)
    T = st.n_iters

    def step(uv, i):
        # Steps 0..T-1 are the centered base; steps T, T+1 the raw tail (c = 0 leaves u_raw,
        # v_raw unchanged: both are already 0 off the active rows / columns). One scan keeps
        # a single copy of each kernel in the compiled program.
        v_in = uv[1]
        u_raw = row_step(v_in)
        v_raw = col_step(u_raw)
        c = jnp.sum(jnp.where(row_active, u_raw, 0.0), -1, keepdims=True) / n_rows
        c = jnp.where(i < T, c, 0.0)
        uv = jnp.where(row_active, u_raw - c, 0.0), jnp.where(col_active, v_raw + c, 0.0)
        return uv, (v_in, u_raw, v_raw)

    zeros = (jnp.zeros((q.shape[0], lq), _F32), jnp.zeros((q.shape[0], lk), _F32))
    _, (v_in, u_raw, v_raw) = jax.lax.scan(step, zeros, jnp.arange(T + 2))
    v0, u1, v1, u2, v2 = v_in[T], u_raw[T], v_raw[T], u_raw[T + 1], v_raw[T + 1]
    return v0, u1, v1, u2, v2


def _output(st: _Static, q, k, v, qv, kv, u2, v2):
    lq, dv = q.shape[1], v.shape[2]
    main = _Main(st, q, k, v, qv, kv)
    out = main.put_rows(main.output(u2, v2)[..., :dv], lq)
    for p in st.thin:
        t = _Thin(p, q, k, qv, kv, main.ln.scale)
        part = jnp.einsum("hij,hje->hie", t.plan(u2, v2), v[:, p.c0 : p.c0 + p.nc].astype(_F32), precision=_HI)
        out = out + _place(part, p.r0, lq)
    return out.astype(v.dtype)


# --------------------------------------------------------------------------- backward


def _backward(st: _Static, q, k, v, qv, kv, la, lb, duals, g):
    v0, u1, v1, u2, v2 = duals
    lq, lk, d, dv = q.shape[1], k.shape[1], q.shape[2], v.shape[2]
    row_active, col_active = _activity(st.support, qv, kv)
    a = jnp.where(row_active, jnp.exp(la.astype(_F32)), 0.0)
    b = jnp.where(col_active, jnp.exp(lb.astype(_F32)), 0.0)
    inv_a = jnp.where(row_active, jnp.exp(-la.astype(_F32)), 0.0)
    inv_b = jnp.where(col_active, jnp.exp(-lb.astype(_F32)), 0.0)
    alpha, beta, delta = jnp.exp(u1 - u2), jnp.exp(v1 - v2), jnp.exp(v0 - v2)
    main = _Main(st, q, k, v, qv, kv, g)
    thin = []
    for p in st.thin:
        t = _Thin(p, q, k, qv, kv, main.ln.scale)
        gt = g[:, p.r0 : p.r0 + p.nr].astype(_F32)
        vt = v[:, p.c0 : p.c0 + p.nc].astype(_F32)
        thin.append((t, t.plan(u2, v2), jnp.einsum("hie,hje->hij", gt, vt, precision=_HI), gt))

    to = normalising_factor
    # Each tail plan is brought back to its half-step's sums (rows to a, columns to b), as in
    # sinkalign.sinkhorn.core._adjoint: P^(2,2) by f22 (columns), P^(2,1) = P beta_j by r21
    # (rows), P^(1,1) = P alpha_i beta_j by bc11 / beta_j (columns), P^(1,0) = P alpha_i delta_j
    # by ar10 / alpha_i (rows). The sums ride along the sweeps that precede their use.
    # 1. g_v = f22 colsum(P * Z), dV = f22 P^T G; colsum(P) and colsum(alpha_i P)
    gv_m, dv_m, cs_m, csa_m = main.gv_dv(u2, v2, alpha)
    g_v = main.put_cols(gv_m, lk)
    d_v = main.put_cols(dv_m[..., :dv], lk)
    cs, csa = main.put_cols(cs_m, lk), main.put_cols(csa_m, lk)
    for t, P, Z, gt in thin:
        g_v = g_v + t.colsum(P * Z, lk)
        d_v = d_v + _place(jnp.einsum("hij,hie->hje", P, gt, precision=_HI), t.p.c0, lk)
        cs, csa = cs + t.colsum(P, lk), csa + t.colsum(P * t.r(alpha), lk)
    f22, bc11 = to(b, cs), to(b, csa)
    g_v, d_v = f22 * g_v, f22[..., None] * d_v
    w2 = inv_b * g_v
    # 2. ubar2 = rowsum(P * f22_j (Z - w2_j)); rowsum(P beta_j) and rowsum(P delta_j)
    ub2_m, rb_m, rd_m = main.ubar2(u2, v2, w2, f22, beta, delta)
    ubar2, rb, rd = (main.put_rows(x, lq) for x in (ub2_m, rb_m, rd_m))
    for t, P, Z, _ in thin:
        ubar2 = ubar2 + t.rowsum(P * t.c(f22) * (Z - t.c(w2)), lq)
        rb, rd = rb + t.rowsum(P * t.c(beta), lq), rd + t.rowsum(P * t.c(delta), lq)
    r21, ar10 = to(a, rb), to(a, rd)
    x2 = r21 * inv_a * ubar2
    # 3. vbar1 = -beta * P^T x2
    pt_x2 = main.put_cols(main.col_matvec(u2, v2, x2), lk)
    for t, P, _, _ in thin:
        pt_x2 = pt_x2 + t.colsum(P * t.r(x2), lk)
    c3 = bc11 * inv_b * (-beta * pt_x2)
    # 4. ubar1 = -alpha * P c3 (dustbin share passed in as `extra`), then dQ
    extra = jnp.zeros_like(u2)
    for t, P, _, _ in thin:
        extra = extra + t.rowsum(P * t.c(c3), lq)
    dq_m, ub1_m = main.dq(u2, v2, x2, alpha, ar10 * inv_a, extra, w2, beta, c3, delta, f22)
    in_main = np.zeros(lq, bool)
    in_main[main.p.r0 : main.p.r0 + main.p.nr] = True
    ubar1 = jnp.where(jnp.asarray(in_main), main.put_rows(ub1_m, lq), -alpha * extra)
    x1 = ar10 * inv_a * ubar1
    d_q = main.put_rows(dq_m[..., :d], lq)
    # 5. dK
    d_k = main.put_cols(main.dk(u2, v2, x2, alpha, x1, w2, beta, c3, delta, f22)[..., :d], lk)
    for t, P, Z, _ in thin:
        sbar = P * (t.c(f22) * (Z - t.c(w2)) - t.c(beta) * t.r(x2) - t.r(alpha) * t.c(c3) - t.c(delta) * t.r(x1))
        d_q = d_q + _place(jnp.einsum("hij,hjd->hid", sbar, t.ks, precision=_HI) * main.ln.scale, t.p.r0, lq)
        d_k = d_k + _place(jnp.einsum("hij,hid->hjd", sbar, t.qs, precision=_HI) * main.ln.scale, t.p.c0, lk)
    # the log marginals: each tail step adds log a (log b) to its duals on the active rows (columns)
    d_la = jnp.where(row_active, ubar1 + ubar2, 0.0)
    d_lb = jnp.where(col_active, g_v - beta * pt_x2, 0.0)
    return (d_q.astype(q.dtype), d_k.astype(k.dtype), d_v.astype(v.dtype), d_la.astype(la.dtype),
            d_lb.astype(lb.dtype))


# --------------------------------------------------------------------------- batching


def _whole_batch(fn):
    """``fn(st, *arrays)``, each array's leading axis the batch-heads, batched by merging the
    mapped axis into that leading axis: under ``jax.vmap`` the kernels then run on the whole
    batch at once and the default rule's score cache is decided for all of it (a plain vmap of
    the launches would size it for one slice and build one per slice). Unmapped arrays are
    broadcast; nested vmaps merge one axis each."""

    @functools.cache
    def for_static(st: _Static):
        f = custom_vmap(functools.partial(fn, st))

        @f.def_vmap
        def rule(axis_size, in_batched, *arrays):
            arrays = [x if mapped else jnp.broadcast_to(x, (axis_size,) + x.shape)
                      for x, mapped in zip(arrays, in_batched)]
            bh = arrays[0].shape[1]
            out = for_static(st.for_batch(axis_size * bh))(*(x.reshape((-1,) + x.shape[2:]) for x in arrays))
            out = jax.tree.map(lambda y: y.reshape((axis_size, bh) + y.shape[1:]), out)
            return out, jax.tree.map(lambda _: True, out)

        return f

    @functools.wraps(fn)
    def call(st: _Static, *arrays):
        return for_static(st)(*arrays)

    return call


@_whole_batch
def _forward(st: _Static, q, k, v, qv, kv, la, lb):
    """``(O, duals)``: the duals of :func:`_forward_duals` and the output ``P^(2,2) V``."""
    duals = _forward_duals(st, q, k, qv, kv, la, lb)
    return _output(st, q, k, v, qv, kv, duals[3], duals[4]), duals


@_whole_batch
def _backward_kernels(st: _Static, q, k, v, qv, kv, la, lb, v0, u1, v1, u2, v2, g):
    return _backward(st, q, k, v, qv, kv, la, lb, (v0, u1, v1, u2, v2), g)


# --------------------------------------------------------------------------- custom_vjp


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _op(q, k, v, qv, kv, la, lb, st):
    return _forward(st, q, k, v, qv, kv, la, lb)[0]


def _op_fwd(q, k, v, qv, kv, la, lb, st):
    out, duals = _first_order_forward(st, q, k, v, qv, kv, la, lb)
    # Residuals: O(L d) inputs and five O(L) float32 dual vectors; no plan is stored.
    return out, (q, k, v, qv, kv, la, lb, duals)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _first_order_forward(st, q, k, v, qv, kv, la, lb):
    """The forward pass of :func:`_op`'s VJP: differentiated only under a second derivative,
    which is refused (:func:`_no_second_order`)."""
    return _forward(st, q, k, v, qv, kv, la, lb)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _first_order_backward(st, q, k, v, qv, kv, la, lb, duals, g):
    """:func:`_backward`, refusing to be differentiated: ``pallas_call``s have no derivative rule
    here (JAX failed with a bare AssertionError on grad of grad)."""
    return _backward_kernels(st, q, k, v, qv, kv, la, lb, *duals, g)


def _no_second_order(st, primals, tangents):
    raise NotImplementedError("the Pallas kernels cannot be differentiated twice: second-order gradients "
                              "(grad of grad, a gradient penalty) need backend='reference'")


_first_order_forward.defjvp(_no_second_order)
_first_order_backward.defjvp(_no_second_order)


def _op_bwd(st, res, g):
    q, k, v, qv, kv, la, lb, duals = res
    dq, dk, dv, dla, dlb = _first_order_backward(st, q, k, v, qv, kv, la, lb, duals, g)
    return dq, dk, dv, None, None, dla, dlb


_op.defvjp(_op_fwd, _op_bwd)
_op_jit = jax.jit(_op, static_argnums=(7,))
_duals_jit = jax.jit(_forward_duals, static_argnums=(0,))


# --------------------------------------------------------------------------- public boundary


def _check(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg) -> None:
    if not isinstance(cfg, SinkhornConfig):
        raise ValueError(f"cfg must be a SinkhornConfig, got {type(cfg).__name__}")
    if cfg.tail != 2:
        raise ValueError(f"tail={cfg.tail}: the Pallas operator implements the R = 2 one-reference backward only; "
                         "use backend='reference' for other tail depths")
    if cfg.backward != "one_reference":
        raise ValueError(f"backward={cfg.backward!r}: the Pallas operator implements backward='one_reference' "
                         "only; use backend='reference' for the other modes")
    if not isinstance(support, Support):
        raise ValueError(f"support must be a Support, got {type(support).__name__}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape [..., L, d], got {tuple(x.shape)}")
    check_shapes(q.shape, k.shape, v.shape)
    if (support.lq, support.lk) != (q.shape[-2], k.shape[-2]):
        raise ValueError(f"support is {support.lq} x {support.lk} but q, k have lengths {q.shape[-2]}, {k.shape[-2]}")
    dts = {jnp.dtype(x.dtype) for x in (q, k, v)}
    if len(dts) != 1:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    (dt,) = dts
    if dt not in _KERNEL_DTYPES:
        raise ValueError(f"dtype {dt} is not supported by the Pallas kernels (valid: float32, bfloat16, float16); "
                         "use backend='reference' for float64")
    batch = q.shape[:-2]
    for name, x, n in (("q_valid", q_valid, q.shape[-2]), ("k_valid", k_valid, k.shape[-2])):
        if tuple(x.shape) != batch + (n,) or x.dtype != jnp.bool_:
            raise ValueError(f"{name} must be a bool array of shape {batch + (n,)}, got {x.dtype}{tuple(x.shape)}")
    for name, x, n in (("log_a", log_a, q.shape[-2]), ("log_b", log_b, k.shape[-2])):
        if tuple(x.shape) != batch + (n,):
            raise ValueError(f"{name} must have shape {batch + (n,)}, got {tuple(x.shape)}")


def native_target(platform: str | None = None) -> str:
    """The kernel target for a JAX platform (default: the default backend): ``gpu`` (Triton
    lowering) for cuda/rocm/gpu, ``tpu`` (Mosaic); ValueError for the CPU."""
    platform = platform or jax.default_backend()
    if platform in ("gpu", "cuda", "rocm"):
        return "gpu"
    if platform == "tpu":
        return "tpu"
    raise ValueError(f"native Pallas kernels need a GPU or TPU, and the platform is {platform!r}; "
                     "pass interpret=True to run them in the Pallas interpreter")


def _static(support, cfg, block_sizes, interpret, target=None, precision="ieee", cache_scores=None, dtype=None,
            bh: int = 1) -> _Static:
    """The call's static part; ``cache_scores`` None resolved (:mod:`sinkalign.kernels.cache`) for
    ``bh`` batch-heads of ``dtype`` inputs: cached with exact float32 dots on a GPU or in the
    interpreter (the TPU target is untimed: it recomputes)."""
    if interpret is None:
        interpret = jax.default_backend() == "cpu"
    if not isinstance(interpret, bool):
        raise ValueError(f"interpret={interpret!r} must be True, False or None (auto: True on CPU)")
    if target is None:
        target = "interpret" if interpret else native_target()
    if block_sizes is None:
        block_sizes = BlockSizes.get_default(target)
    if not isinstance(block_sizes, BlockSizes):
        raise ValueError(f"block_sizes must be a BlockSizes, got {type(block_sizes).__name__}")
    check_f32_dots(precision, native=target == "gpu", needs="the native GPU target", here=f"the {target} target")
    st = _Static(support, _choose_main(support), float(cfg.eps), cfg.n_iters, block_sizes, target, precision)
    dtype = jnp.float32 if dtype is None else dtype
    exact = target in ("gpu", "interpret") and precision == "ieee" and jnp.dtype(dtype) == jnp.float32
    resolved = resolve_cache_scores(cache_scores, exact_f32=exact, floats=lambda: st.cache_floats(bh))
    return dataclasses.replace(st, cache_scores=resolved, cache_rule=cache_scores is None and exact)


def _flat(x, n_tail):
    return x.reshape((-1,) + x.shape[x.ndim - n_tail :])


def tail_operator(q, k, v, q_valid, k_valid, log_a, log_b, support: Support, cfg: SinkhornConfig, *,
                  block_sizes: BlockSizes | None = None, interpret: bool | None = None, precision: str = "ieee",
                  cache_scores: bool | None = None):
    """O = P^(2,2) V on an explicit support, computed by the Pallas kernels.

    Args:
        q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv]: one dtype among float32, bfloat16,
            float16 (accumulation is float32); leading dims are flattened into one batch.
        q_valid [..., Lq], k_valid [..., Lk]: bool, True = real token.
        log_a [..., Lq], log_b [..., Lk]: log marginals.
        support: the active support (one band/dense piece plus optional dustbin rows/columns).
        cfg: needs ``tail == 2`` and ``backward == 'one_reference'``; uses ``eps`` and ``n_iters``.
        block_sizes: kernel tile sizes (default :meth:`BlockSizes.get_default`).
        interpret: run the Pallas interpreter; None = when JAX's default backend is the CPU.
        precision: float32 dots at full precision (``ieee``, the default), or, natively on a
            GPU, as three (``tf32x3``, close to float32 and several times faster) or one
            (``tf32``, about 1e-3 relative) TF32 tensor-core passes. Half types ignore it.
        cache_scores: compute the band's scores ``S = Q K^T / (sqrt(d) eps)`` once per pass
            of the forward (duals, output) and once for the backward, into a float32 cache of
            the band's tiles (:func:`sinkalign.kernels.pallas.kernels.scores`: ``Lq (bx + 2W +
            by)`` floats per batch-head, ~140 MB at Lq = 16,384, W = 1,024; a dense piece:
            ``Lq Lk``), which every sweep reads instead of recomputing its tiles' dots (2 (T + R)
            + 1 sweeps in the forward, 6 in the backward). The same plans up to the rounding of
            the dots (a column sweep reads the row sweeps' tiles transposed instead of its own
            products). None (the default): cached with exact float32 dots (float32 inputs,
            ``precision="ieee"``) on a GPU or in the interpreter while the cache takes at
            most 2 GiB (:mod:`sinkalign.kernels.cache`: 4-5x faster forward + backward on an
            H200); not with TF32 or half-type dots, where it did not pay, nor on a TPU (untimed).
            The 2 GiB counts the whole batch, ``jax.vmap``'s mapped axes included: a vmap runs the
            kernels once on the mapped slices merged into the batch, and decides for all of them.

    Returns O [..., Lq, dv] in v's dtype. Differentiable in q, k, v and the log marginals (not in masks).
    Inputs are expected validated (see :func:`sinkalign.sinkhorn.core.prepare`); shapes,
    dtypes and the configuration are checked here, before any tracing.
    """
    q, k, v = (jnp.asarray(x) for x in (q, k, v))
    q_valid, k_valid, log_a, log_b = (jnp.asarray(x) for x in (q_valid, k_valid, log_a, log_b))
    _check(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)
    st = _static(support, cfg, block_sizes, interpret, precision=precision, cache_scores=cache_scores, dtype=q.dtype,
                 bh=math.prod(q.shape[:-2]))
    log.debug("pallas tail_operator q%s k%s support=%s blocks=%s target=%s cache_scores=%s", q.shape, k.shape,
              support.pieces, st.blocks, st.target, st.cache_scores)
    batch, lq, dv = q.shape[:-2], q.shape[-2], v.shape[-1]
    out = _op_jit(_flat(q, 2), _flat(k, 2), _flat(v, 2), _flat(q_valid, 1), _flat(k_valid, 1), _flat(log_a, 1),
                  _flat(log_b, 1), st)
    return out.reshape(batch + (lq, dv))


def tail_duals(q, k, v, q_valid, k_valid, log_a, log_b, support: Support, cfg: SinkhornConfig, *,
               block_sizes: BlockSizes | None = None, interpret: bool | None = None, precision: str = "ieee",
               cache_scores: bool | None = None) -> dict:
    """The kernels' dual vectors ``{"v0", "u1", "v1", "u2", "v2"}`` (float32 [..., L]), for checks."""
    q, k, v = (jnp.asarray(x) for x in (q, k, v))
    q_valid, k_valid, log_a, log_b = (jnp.asarray(x) for x in (q_valid, k_valid, log_a, log_b))
    _check(q, k, v, q_valid, k_valid, log_a, log_b, support, cfg)
    st = _static(support, cfg, block_sizes, interpret, precision=precision, cache_scores=cache_scores, dtype=q.dtype,
                 bh=math.prod(q.shape[:-2]))
    duals = _duals_jit(st, _flat(q, 2), _flat(k, 2), _flat(q_valid, 1), _flat(k_valid, 1), _flat(log_a, 1),
                       _flat(log_b, 1))
    batch = q.shape[:-2]
    names = ("v0", "u1", "v1", "u2", "v2")
    return {n: x.reshape(batch + x.shape[1:]) for n, x in zip(names, duals)}


def sinkhorn_attention_pallas(q, k, v, *, q_mask=None, k_mask=None, log_a=None, log_b=None,
                              config: SinkhornConfig | None = None, block_sizes: BlockSizes | None = None,
                              interpret: bool | None = None, precision: str = "ieee",
                              cache_scores: bool | None = None, **overrides):
    """:func:`sinkalign.sinkhorn.sinkhorn_attention` on the Pallas kernels, with tile/interpret control.

    Same arguments as the reference (``q`` [..., Lq, d], ``k`` [..., Lk, d], ``v`` [..., Lk, dv],
    masks and log marginals broadcastable to [..., L]); validation is the reference's
    :func:`~sinkalign.sinkhorn.core.prepare` (which computes in float32 unless an input is
    float64). To run bfloat16 tiles call :func:`tail_operator` with bfloat16 arrays.
    """
    from sinkalign.sinkhorn import core

    cfg = (config or SinkhornConfig()).replace(backend="pallas", **overrides)
    q, k, v, qv, kv, la, lb = core.prepare(q, k, v, q_mask, k_mask, log_a, log_b, band=cfg.band)
    support = Support.single(q.shape[-2], k.shape[-2], cfg.band, cfg.block)
    return tail_operator(q, k, v, qv, kv, la, lb, support, cfg, block_sizes=block_sizes, interpret=interpret,
                         precision=precision, cache_scores=cache_scores)


def lower_native(platform: str, *, dtype=jnp.bfloat16, lq: int = 300, lk: int = 257, d: int = 64, dv: int = 64,
                 band: int | None = 64, dustbin: bool = False, block_sizes: BlockSizes | None = None,
                 cache_scores: bool = False) -> dict:
    """Lower the forward + backward program for ``platform`` ('cuda' -> Triton, 'tpu' -> Mosaic)
    without that hardware, and count the kernel custom calls in the result.

    This runs the Pallas lowering of every kernel (jaxpr -> Triton IR / Mosaic MLIR) on any
    machine; it does not run the backend compilers (Triton -> PTX inside XLA:GPU, Mosaic in
    libtpu), so a kernel that lowers may still fail to compile on the device. TPU lowering
    uses an abstract 'TPU v5 lite' device. ``dustbin=True`` uses the banded dustbin support
    (band + dustbin row and column). Returns {'platform', 'target', 'kernels', 'hlo_chars',
    'launches'}: the last the sorted distinct ``(num_warps, num_stages)`` of the Triton calls
    (empty on TPUs).
    """
    target = native_target(platform)
    if dustbin:
        support = Support(lq + 1, lk + 1, (Piece(0, lq, 0, lk, band), Piece(0, lq + 1, lk, 1, None),
                                           Piece(lq, 1, 0, lk, None)))
    else:
        support = Support.single(lq, lk, band)
    lq_, lk_ = support.lq, support.lk
    st = _Static(support, _choose_main(support), 1.0, 15, block_sizes or BlockSizes.get_default(target), target,
                 cache_scores=cache_scores)
    bh = 2
    q = jnp.zeros((bh, lq_, d), dtype)
    k = jnp.zeros((bh, lk_, d), dtype)
    v = jnp.zeros((bh, lk_, dv), dtype)
    qv, kv = jnp.ones((bh, lq_), bool), jnp.ones((bh, lk_), bool)
    la, lb = jnp.zeros((bh, lq_), _F32), jnp.zeros((bh, lk_), _F32)

    def loss(q, k, v):
        return jnp.sum(_op(q, k, v, qv, kv, la, lb, st).astype(_F32))

    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    if target == "tpu":
        device = jax.sharding.AbstractDevice(device_kind="TPU v5 lite", num_cores=1, platform="tpu")
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)):
            text = fn.trace(q, k, v).lower(lowering_platforms=("tpu",)).as_text()
        marker = "tpu_custom_call"
    else:
        text = fn.trace(q, k, v).lower(lowering_platforms=(platform,)).as_text()
        marker = "xla.gpu.triton"
    # the Triton calls' launches, as the custom calls carry them
    launches = sorted(set(zip(map(int, re.findall(r"num_warps = (\d+)", text)),
                              map(int, re.findall(r"num_stages = (\d+)", text)))))
    return {"platform": platform, "target": target, "kernels": text.count(marker), "hlo_chars": len(text),
            "launches": launches}
