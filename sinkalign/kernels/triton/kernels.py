"""Blockwise Triton kernels for banded, masked, log-domain Sinkhorn attention (R = 2 tail).

Every kernel is a grid ``(cdiv(L_own, BLOCK_OWN), B * H)``: one program owns a block of
rows (queries) or columns (keys) of one (batch, head) and loops over the tiles of the other
side that intersect the band ``|i - j| <= W``; the score tile ``S = Q K^T / (sqrt(d) eps)``
is recomputed from Q and K in every sweep, so nothing of size [Lq, Lk] is ever stored (the
optional score cache holds the band's tiles, O(L W), while one pass runs).
For an owned block ``[x0, x0 + BLOCK_X)`` the loop runs over
``[floor(max(0, x0 - W) / BLOCK_Y) * BLOCK_Y, min(Ly, min(Lx, x0 + BLOCK_X) + W))``; a dense
problem passes ``W >= max(Lq, Lk)``. Lengths that are not block multiples are masked, the
head dimension is padded to ``BLOCK_D`` (power of two >= 16) with zeros, and all
accumulation is float32. Inputs may be float32 (dots at ``PREC="ieee"``) or bfloat16 /
float16: then plan and cotangent tiles are rounded to the input type before their dots and
every dot accumulates in float32, as in flash attention. Token tiles are cast to ``DOT_T``
after loading: the input type natively (a no-op), float32 in the interpreter, whose
``tl.dot`` mishandles bfloat16 (it multiplies the raw uint16 storage); since a product of two
bfloat16 numbers is exact in float32 the two give the same result up to summation order.

Tensors are contiguous: tokens [B*H, L, D], dual/cotangent vectors [B*H, L] float32,
masks [B, L] int8 (1 = real token), log marginals [B, L] float32. The support is
``mask_i & mask_j & |i - j| <= W`` and is applied *after* adding potentials
(``where(active, s + pot, -inf)``), never via a sentinel. Index arithmetic is int64 (large
B*H*L*D is safe, and the interpreter skips its per-op int32 overflow checks). The pieces the
kernels share (tile and vector loads and stores, the band bounds, the support and the plan tile)
are small ``@triton.jit`` helpers, which Triton inlines: they compile to the code written out.

Interpreter: Triton decides between native compilation and its CPU interpreter once, when
it is first imported (``TRITON_INTERPRET=1`` in the environment before ``import triton``);
:func:`interpreter_mode` reports the mode this process runs in.

Kernels:

* :func:`scores_kernel` -- with ``cache_scores``: the band's score tiles of each query block,
  ``Q K^T * scale``, written once per pass into a float32 cache ``[BH, NMB, SLOTS, BM, BN]``
  (query block, slot = key tile - the block's first band tile). Every sweep below then takes
  ``CACHED=True`` and reads its tiles there (:func:`_cached_scores`; column sweeps the row
  tiles transposed) instead of loading the other side's tokens for ``Q K^T``.
* :func:`half_step_kernel` -- ``out_x = logm_x - LSE_y (S_xy + pot_y)`` with an online LSE
  (0 on rows with no active entry). Row half-step: X = Q, Y = K; column half-step: X = K,
  Y = Q (``S^T = K Q^T * scale``). With ``RAW=True`` it stores ``LSE_y`` itself (``-inf``
  on rows with no active entry), for callers that merge other support pieces (dustbins).
  With ``ROW_DOT=True`` a column half-step forms ``S^T`` as ``(Q K^T)^T``, the row half-step's
  product: the interpreter's dot (NumPy's) sums ``K Q^T`` in another order, and with scores of
  ~1,000 the two half-steps' last-bit differences (~1e-4) make the duals drift ~5e-5 an
  iteration (the output erred up to 9.4x float32's). Natively ``K Q^T`` is already the same
  number: Triton's float32 FMA dot sums each entry's products in k order in either orientation,
  and the transposition would cost the kernel register spills (``benchmarks/kernel_registers.py
  --row-dot``), so only the interpreter sets it.
* :func:`output_kernel` -- ``O = P V`` with ``P = exp(S + u_i + v_j)`` on the support.
* :func:`plan_matvec_kernel` -- ``out_x = sum_y P_xy w_y`` (either orientation).
* :func:`bwd_col_gv_dv_kernel` -- column owner: ``g_v = colsum(P * Z)``, ``dV = P^T G``, and
  ``colsum(P)``, ``colsum(alpha_i P)``.
* :func:`bwd_row_ubar2_kernel` -- row owner: ``ubar2 = rowsum(P * f_j (Z - w2_j))``, and
  ``rowsum(P beta_j)``, ``rowsum(P delta_j)``.
* :func:`bwd_row_dq_kernel` -- row owner: ``ubar1`` and ``dQ`` in one sweep; an extra row
  vector (``EXTRA``, zeros without dustbins) is added to ``P (beta w1)`` before ``x1`` is formed.
* :func:`bwd_col_dk_kernel` -- column owner: ``dK = Sbar^T Q``.

Here ``P = P^(2,2)`` (the one reference tile), ``Z = G V^T`` and
``Sbar = P * (f_j (Z - w2_j) - beta_j x2_i - alpha_i c3_j - ar_i delta_j x1_i)`` (``f``, ``c3``,
``ar`` carry the plans' normalisations: each rebuilt tail plan brought back to its half-step's
sums, as in :func:`sinkalign.sinkhorn.core._adjoint`);
see :mod:`sinkalign.kernels.triton.op` for the vector recurrences between the sweeps.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

__all__ = [
    "bwd_col_dk_kernel",
    "bwd_col_gv_dv_kernel",
    "bwd_row_dq_kernel",
    "bwd_row_ubar2_kernel",
    "compile_native",
    "default_launch",
    "half_step_kernel",
    "interpreter_mode",
    "kernel_resources",
    "output_kernel",
    "plan_matvec_kernel",
]


# --------------------------------------------------------------------------- helpers (inlined by triton)


@triton.jit
def _owned_block(H, BLOCK: tl.constexpr):
    """This program's (batch * head) ``bh``, batch ``b``, and the start and int64 offsets of the block it owns."""
    pid = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    x0 = pid * BLOCK
    offs = (x0 + tl.arange(0, BLOCK)).to(tl.int64)
    return bh, b, x0, offs


@triton.jit
def _band(x0, Lx, Ly, W, BLOCK_X: tl.constexpr, BLOCK_Y: tl.constexpr):
    """Bounds ``[lo, hi)`` of the tiles of the other side (length Ly) meeting the band of block ``x0``."""
    lo = tl.maximum(x0 - W, 0) // BLOCK_Y * BLOCK_Y
    hi = tl.minimum(tl.minimum(x0 + BLOCK_X, Lx) + W, Ly)
    return lo, hi


@triton.jit
def _load_mask(MASK, b, L, offs, in_range):
    """Token mask ``MASK[b, offs] != 0`` of an int8 [B, L] array; False outside ``in_range``."""
    return tl.load(_vec_ptrs(MASK, b, L, offs), mask=in_range, other=0) != 0


@triton.jit
def _vec_ptrs(PTR, row, L, offs):
    """Pointers to ``PTR[row, offs]`` of a [*, L] array."""
    return PTR + row * L + offs


@triton.jit
def _load_vec(PTR, row, L, offs, in_range):
    """Entries ``PTR[row, offs]`` of a float32 [*, L] array; 0 outside ``in_range``."""
    return tl.load(_vec_ptrs(PTR, row, L, offs), mask=in_range, other=0.0)


@triton.jit
def _store_vec(PTR, row, L, offs, in_range, val):
    """``PTR[row, offs] = val`` for a [*, L] array, inside ``in_range``."""
    tl.store(_vec_ptrs(PTR, row, L, offs), val, mask=in_range)


@triton.jit
def _tile_ptrs(PTR, bh, L, offs, offs_c, C: tl.constexpr):
    """Pointers to the tile ``PTR[bh, offs, offs_c]`` of a [BH, L, C] array."""
    return PTR + bh * L * C + offs[:, None] * C + offs_c[None, :]


@triton.jit
def _tile_mask(in_range, offs_c, C: tl.constexpr):
    """In-range rows and the first C (unpadded) columns of a tile."""
    return in_range[:, None] & (offs_c[None, :] < C)


@triton.jit
def _load_tile(PTR, bh, L, offs, in_range, offs_c, C: tl.constexpr, DOT_T: tl.constexpr):
    """Token tile ``PTR[bh, offs, offs_c]`` of a [BH, L, C] array as ``DOT_T``; 0 outside the rows and C."""
    return tl.load(_tile_ptrs(PTR, bh, L, offs, offs_c, C), mask=_tile_mask(in_range, offs_c, C), other=0.0).to(DOT_T)


@triton.jit
def _store_tile(PTR, bh, L, offs, in_range, offs_c, C: tl.constexpr, val):
    """``PTR[bh, offs, offs_c] = val`` (rounded to PTR's type) for a [BH, L, C] array, inside the rows and C."""
    tl.store(_tile_ptrs(PTR, bh, L, offs, offs_c, C), val.to(PTR.dtype.element_ty),
             mask=_tile_mask(in_range, offs_c, C))


@triton.jit
def _support(offs_x, offs_y, mx, my, W):
    """Active entries of an [X, Y] tile: both tokens real and ``|x - y| <= W``."""
    diff = offs_x[:, None] - offs_y[None, :]
    return mx[:, None] & my[None, :] & (tl.abs(diff) <= W)


@triton.jit
def _cached_scores(S, bh, NMB, SLOTS, x0, y0, lo, Ly, W, BLOCK_X: tl.constexpr, BLOCK_Y: tl.constexpr,
                   COLS: tl.constexpr):
    """Score tile [BLOCK_X, BLOCK_Y] of owned block ``x0`` and loop tile ``y0`` read from the cache
    ``S`` [BH, NMB, SLOTS, BM, BN] of :func:`scores_kernel`. Row sweeps (x = queries): slot
    ``(y0 - lo) / BLOCK_Y`` of query block ``x0``, ``lo`` its band's first key. ``COLS`` (x =
    keys, y = queries of length ``Ly``): query block ``y0``'s tile, transposed, or 0 where that
    block's band stops short of these keys (a tile with no active entry, never written)."""
    ax = tl.arange(0, BLOCK_X).to(tl.int64)
    ay = tl.arange(0, BLOCK_Y).to(tl.int64)
    if COLS:
        slot = (x0 - tl.maximum(y0 - W, 0) // BLOCK_X * BLOCK_X) // BLOCK_X
        base = S + ((bh * NMB + y0 // BLOCK_Y) * SLOTS + slot) * (BLOCK_X * BLOCK_Y)
        written = (x0 + 0 * ax[:, None] + 0 * ay[None, :]) < tl.minimum(y0 + BLOCK_Y, Ly) + W  # [BX, BY]
        s = tl.load(base + ay[None, :] * BLOCK_X + ax[:, None], mask=written, other=0.0)
    else:
        base = S + ((bh * NMB + x0 // BLOCK_X) * SLOTS + (y0 - lo) // BLOCK_Y) * (BLOCK_X * BLOCK_Y)
        s = tl.load(base + ax[:, None] * BLOCK_Y + ay[None, :])
    return s


@triton.jit
def _plan(s, pot_x, pot_y, offs_x, offs_y, mx, my, W):
    """Plan tile ``exp(s + pot_x_i + pot_y_j)`` on the support, 0 off it."""
    active = _support(offs_x, offs_y, mx, my, W)
    return tl.exp(tl.where(active, s + pot_x[:, None] + pot_y[None, :], float("-inf")))


@triton.jit
def _dot_rounded(p, y, Y, PREC: tl.constexpr, DOT_T: tl.constexpr):
    """``p @ y`` accumulated in float32, the float32 tile ``p`` first rounded to the token type of ``Y``."""
    return tl.dot(p.to(Y.dtype.element_ty).to(DOT_T), y, input_precision=PREC)


# --------------------------------------------------------------------------- kernels


@triton.jit
def scores_kernel(
    Q, K, S,  # Q [BH, Lq, D], K [BH, Lk, D], S [BH, NMB, SLOTS, BLOCK_M, BLOCK_N] float32
    Lq, Lk, H, W, scale, NMB, SLOTS,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr,
    DOT_T: tl.constexpr,
):
    bh, b, m0, offs_m = _owned_block(H, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    q = _load_tile(Q, bh, Lq, offs_m, offs_m < Lq, offs_d, D, DOT_T)  # [BM, BD]
    ar_m = tl.arange(0, BLOCK_M).to(tl.int64)
    ar_n = tl.arange(0, BLOCK_N).to(tl.int64)
    lo, hi = _band(m0, Lq, Lk, W, BLOCK_M, BLOCK_N)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + ar_n
        k = _load_tile(K, bh, Lk, offs_n, offs_n < Lk, offs_d, D, DOT_T)  # [BN, BD]
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [BM, BN]
        base = S + ((bh * NMB + m0 // BLOCK_M) * SLOTS + (n0 - lo) // BLOCK_N) * (BLOCK_M * BLOCK_N)
        tl.store(base + ar_m[:, None] * BLOCK_N + ar_n[None, :], s)


@triton.jit
def half_step_kernel(
    X, Y, POT_Y, MASK_X, MASK_Y, LOGM_X, OUT,  # X [BH, Lx, D], Y [BH, Ly, D], POT_Y [BH, Ly], OUT [BH, Lx]
    Lx, Ly, H, W, scale, S, NMB, SLOTS,  # S: the score cache (CACHED), read transposed with COLS
    D: tl.constexpr, BLOCK_X: tl.constexpr, BLOCK_Y: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr,
    DOT_T: tl.constexpr, RAW: tl.constexpr = False, ROW_DOT: tl.constexpr = False, CACHED: tl.constexpr = False,
    COLS: tl.constexpr = False,
):
    bh, b, x0, offs_x = _owned_block(H, BLOCK_X)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    in_x = offs_x < Lx
    mx = _load_mask(MASK_X, b, Lx, offs_x, in_x)
    x = _load_tile(X, bh, Lx, offs_x, in_x, offs_d, D, DOT_T)  # [BX, BD]
    m_run = tl.full([BLOCK_X], float("-inf"), tl.float32)
    l_run = tl.zeros([BLOCK_X], tl.float32)
    ar_y = tl.arange(0, BLOCK_Y).to(tl.int64)
    lo, hi = _band(x0, Lx, Ly, W, BLOCK_X, BLOCK_Y)
    for y0 in range(lo, hi, BLOCK_Y):
        offs_y = y0 + ar_y
        in_y = offs_y < Ly
        my = _load_mask(MASK_Y, b, Ly, offs_y, in_y)
        pot = _load_vec(POT_Y, bh, Ly, offs_y, in_y)  # [BY]
        if CACHED:
            s = _cached_scores(S, bh, NMB, SLOTS, x0, y0, lo, Ly, W, BLOCK_X, BLOCK_Y, COLS)  # [BX, BY]
        else:
            y = _load_tile(Y, bh, Ly, offs_y, in_y, offs_d, D, DOT_T)  # [BY, BD]
            if ROW_DOT:  # a column half-step's tile as the row half-step's product, transposed
                s = tl.trans(tl.dot(y, tl.trans(x), input_precision=PREC)) * scale  # [BX, BY]
            else:
                s = tl.dot(x, tl.trans(y), input_precision=PREC) * scale  # [BX, BY]
        z = tl.where(_support(offs_x, offs_y, mx, my, W), s + pot[None, :], float("-inf"))
        m_new = tl.maximum(m_run, tl.max(z, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_run = l_run * tl.exp(m_run - m_safe) + tl.sum(tl.exp(z - m_safe[:, None]), axis=1)
        m_run = m_new
    on = l_run > 0.0
    lse = tl.where(on, m_run, 0.0) + tl.log(tl.where(on, l_run, 1.0))
    # tl.store, not _store_vec: the value is formed after the pointers, which keeps the compiled instruction order
    if RAW:  # the LSE itself, -inf where the row has no active entry (merged with dustbin terms outside)
        tl.store(_vec_ptrs(OUT, bh, Lx, offs_x), tl.where(on, lse, float("-inf")), mask=in_x)
    else:
        logm = _load_vec(LOGM_X, b, Lx, offs_x, in_x)
        tl.store(_vec_ptrs(OUT, bh, Lx, offs_x), tl.where(on, logm - lse, 0.0), mask=in_x)


@triton.jit
def output_kernel(
    Q, K, V, U, VP, QM, KM, O,  # Q [BH, Lq, D], K [BH, Lk, D], V [BH, Lk, DV], U [BH, Lq], VP [BH, Lk], O [BH, Lq, DV]
    Lq, Lk, H, W, scale, S, NMB, SLOTS,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PREC: tl.constexpr, DOT_T: tl.constexpr, CACHED: tl.constexpr = False,
):
    bh, b, m0, offs_m = _owned_block(H, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_DV).to(tl.int64)
    in_m = offs_m < Lq
    qm = _load_mask(QM, b, Lq, offs_m, in_m)
    q = _load_tile(Q, bh, Lq, offs_m, in_m, offs_d, D, DOT_T)  # [BM, BD]
    u = _load_vec(U, bh, Lq, offs_m, in_m)  # [BM]
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    ar_n = tl.arange(0, BLOCK_N).to(tl.int64)
    lo, hi = _band(m0, Lq, Lk, W, BLOCK_M, BLOCK_N)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + ar_n
        in_n = offs_n < Lk
        km = _load_mask(KM, b, Lk, offs_n, in_n)
        val = _load_tile(V, bh, Lk, offs_n, in_n, offs_e, DV, DOT_T)  # [BN, BDV]
        vp = _load_vec(VP, bh, Lk, offs_n, in_n)  # [BN]
        if CACHED:
            s = _cached_scores(S, bh, NMB, SLOTS, m0, n0, lo, Lk, W, BLOCK_M, BLOCK_N, False)  # [BM, BN]
        else:
            k = _load_tile(K, bh, Lk, offs_n, in_n, offs_d, D, DOT_T)  # [BN, BD]
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [BM, BN]
        p = _plan(s, u, vp, offs_m, offs_n, qm, km, W)  # P^(2,2) tile
        acc += _dot_rounded(p, val, V, PREC, DOT_T)
    _store_tile(O, bh, Lq, offs_m, in_m, offs_e, DV, acc)


@triton.jit
def plan_matvec_kernel(
    X, Y, PX, PY, WY, MASK_X, MASK_Y, OUT,  # X [BH, Lx, D], Y [BH, Ly, D], PX [BH, Lx], PY/WY [BH, Ly], OUT [BH, Lx]
    Lx, Ly, H, W, scale, S, NMB, SLOTS,
    D: tl.constexpr, BLOCK_X: tl.constexpr, BLOCK_Y: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr,
    DOT_T: tl.constexpr, CACHED: tl.constexpr = False, COLS: tl.constexpr = False,
):
    bh, b, x0, offs_x = _owned_block(H, BLOCK_X)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    in_x = offs_x < Lx
    mx = _load_mask(MASK_X, b, Lx, offs_x, in_x)
    x = _load_tile(X, bh, Lx, offs_x, in_x, offs_d, D, DOT_T)  # [BX, BD]
    px = _load_vec(PX, bh, Lx, offs_x, in_x)
    acc = tl.zeros([BLOCK_X], tl.float32)
    ar_y = tl.arange(0, BLOCK_Y).to(tl.int64)
    lo, hi = _band(x0, Lx, Ly, W, BLOCK_X, BLOCK_Y)
    for y0 in range(lo, hi, BLOCK_Y):
        offs_y = y0 + ar_y
        in_y = offs_y < Ly
        my = _load_mask(MASK_Y, b, Ly, offs_y, in_y)
        py = _load_vec(PY, bh, Ly, offs_y, in_y)
        wy = _load_vec(WY, bh, Ly, offs_y, in_y)
        if CACHED:
            s = _cached_scores(S, bh, NMB, SLOTS, x0, y0, lo, Ly, W, BLOCK_X, BLOCK_Y, COLS)  # [BX, BY]
        else:
            y = _load_tile(Y, bh, Ly, offs_y, in_y, offs_d, D, DOT_T)  # [BY, BD]
            s = tl.dot(x, tl.trans(y), input_precision=PREC) * scale  # [BX, BY]
        p = _plan(s, px, py, offs_x, offs_y, mx, my, W)
        acc += tl.sum(p * wy[None, :], axis=1)
    _store_vec(OUT, bh, Lx, offs_x, in_x, acc)


@triton.jit
def bwd_col_gv_dv_kernel(
    Q, K, V, G, U2, V2, ALPHA, QM, KM, GV, DVAL, CS, CSA,
    # G [BH, Lq, DV]; ALPHA [BH, Lq]; GV, CS (colsum P), CSA (colsum alpha_i P) [BH, Lk] fp32; DVAL [BH, Lk, DV]
    Lq, Lk, H, W, scale, S, NMB, SLOTS,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PREC: tl.constexpr, DOT_T: tl.constexpr, CACHED: tl.constexpr = False,
):
    bh, b, n0, offs_n = _owned_block(H, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_DV).to(tl.int64)
    in_n = offs_n < Lk
    km = _load_mask(KM, b, Lk, offs_n, in_n)
    k = _load_tile(K, bh, Lk, offs_n, in_n, offs_d, D, DOT_T)  # [BN, BD]
    val = _load_tile(V, bh, Lk, offs_n, in_n, offs_e, DV, DOT_T)  # [BN, BDV]
    v2 = _load_vec(V2, bh, Lk, offs_n, in_n)
    gv = tl.zeros([BLOCK_N], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    cs = tl.zeros([BLOCK_N], tl.float32)
    csa = tl.zeros([BLOCK_N], tl.float32)
    ar_m = tl.arange(0, BLOCK_M).to(tl.int64)
    lo, hi = _band(n0, Lk, Lq, W, BLOCK_N, BLOCK_M)
    for m0 in range(lo, hi, BLOCK_M):
        offs_m = m0 + ar_m
        in_m = offs_m < Lq
        qm = _load_mask(QM, b, Lq, offs_m, in_m)
        g = _load_tile(G, bh, Lq, offs_m, in_m, offs_e, DV, DOT_T)  # [BM, BDV]
        u2 = _load_vec(U2, bh, Lq, offs_m, in_m)
        alpha = _load_vec(ALPHA, bh, Lq, offs_m, in_m)
        if CACHED:  # query block m0's tile, transposed
            st = _cached_scores(S, bh, NMB, SLOTS, n0, m0, lo, Lq, W, BLOCK_N, BLOCK_M, True)  # [BN, BM]
        else:
            q = _load_tile(Q, bh, Lq, offs_m, in_m, offs_d, D, DOT_T)  # [BM, BD]
            st = tl.dot(k, tl.trans(q), input_precision=PREC) * scale  # [BN, BM] = S^T tile
        pt = _plan(st, v2, u2, offs_n, offs_m, km, qm, W)  # P^T
        zt = tl.dot(val, tl.trans(g), input_precision=PREC)  # [BN, BM] = Z^T
        gv += tl.sum(pt * zt, axis=1)
        dv += _dot_rounded(pt, g, G, PREC, DOT_T)
        cs += tl.sum(pt, axis=1)
        csa += tl.sum(pt * alpha[None, :], axis=1)
    _store_vec(GV, bh, Lk, offs_n, in_n, gv)
    _store_tile(DVAL, bh, Lk, offs_n, in_n, offs_e, DV, dv)
    _store_vec(CS, bh, Lk, offs_n, in_n, cs)
    _store_vec(CSA, bh, Lk, offs_n, in_n, csa)


@triton.jit
def bwd_row_ubar2_kernel(
    Q, K, V, G, U2, V2, W2, F, BETA, DELTA, QM, KM, UBAR2, RB, RD,
    # W2 [BH, Lk] = vbar2 / b, F = f22, BETA, DELTA [BH, Lk]; UBAR2, RB (rowsum P beta_j), RD (P delta_j) [BH, Lq]
    Lq, Lk, H, W, scale, S, NMB, SLOTS,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PREC: tl.constexpr, DOT_T: tl.constexpr, CACHED: tl.constexpr = False,
):
    bh, b, m0, offs_m = _owned_block(H, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_DV).to(tl.int64)
    in_m = offs_m < Lq
    qm = _load_mask(QM, b, Lq, offs_m, in_m)
    q = _load_tile(Q, bh, Lq, offs_m, in_m, offs_d, D, DOT_T)  # [BM, BD]
    g = _load_tile(G, bh, Lq, offs_m, in_m, offs_e, DV, DOT_T)  # [BM, BDV]
    u2 = _load_vec(U2, bh, Lq, offs_m, in_m)
    acc = tl.zeros([BLOCK_M], tl.float32)
    rb = tl.zeros([BLOCK_M], tl.float32)
    rd = tl.zeros([BLOCK_M], tl.float32)
    ar_n = tl.arange(0, BLOCK_N).to(tl.int64)
    lo, hi = _band(m0, Lq, Lk, W, BLOCK_M, BLOCK_N)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + ar_n
        in_n = offs_n < Lk
        km = _load_mask(KM, b, Lk, offs_n, in_n)
        val = _load_tile(V, bh, Lk, offs_n, in_n, offs_e, DV, DOT_T)  # [BN, BDV]
        v2 = _load_vec(V2, bh, Lk, offs_n, in_n)
        w2 = _load_vec(W2, bh, Lk, offs_n, in_n)
        f = _load_vec(F, bh, Lk, offs_n, in_n)
        beta = _load_vec(BETA, bh, Lk, offs_n, in_n)
        delta = _load_vec(DELTA, bh, Lk, offs_n, in_n)
        if CACHED:
            s = _cached_scores(S, bh, NMB, SLOTS, m0, n0, lo, Lk, W, BLOCK_M, BLOCK_N, False)  # [BM, BN]
        else:
            k = _load_tile(K, bh, Lk, offs_n, in_n, offs_d, D, DOT_T)  # [BN, BD]
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [BM, BN]
        p = _plan(s, u2, v2, offs_m, offs_n, qm, km, W)
        z = tl.dot(g, tl.trans(val), input_precision=PREC)  # [BM, BN]
        acc += tl.sum(p * (f[None, :] * (z - w2[None, :])), axis=1)
        rb += tl.sum(p * beta[None, :], axis=1)
        rd += tl.sum(p * delta[None, :], axis=1)
    _store_vec(UBAR2, bh, Lq, offs_m, in_m, acc)
    _store_vec(RB, bh, Lq, offs_m, in_m, rb)
    _store_vec(RD, bh, Lq, offs_m, in_m, rd)


@triton.jit
def bwd_row_dq_kernel(
    Q, K, V, G, U2, V2, W2, ALPHA, X2, BETA, C3, DELTA, F, AR, INV_A, EXTRA, QM, KM, X1, DQ,
    # ALPHA/X2/AR/X1/EXTRA [BH, Lq]; V2/W2/BETA/C3/DELTA/F [BH, Lk]; INV_A [B, Lq]; DQ [BH, Lq, D]
    # (C3 = bc11 vbar1 / b, F = f22, AR = ar10: the plans' normalisations, see op.py)
    Lq, Lk, H, W, scale, S, NMB, SLOTS,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PREC: tl.constexpr, DOT_T: tl.constexpr, CACHED: tl.constexpr = False,
):
    bh, b, m0, offs_m = _owned_block(H, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_DV).to(tl.int64)
    in_m = offs_m < Lq
    qm = _load_mask(QM, b, Lq, offs_m, in_m)
    q = _load_tile(Q, bh, Lq, offs_m, in_m, offs_d, D, DOT_T)  # [BM, BD]
    g = _load_tile(G, bh, Lq, offs_m, in_m, offs_e, DV, DOT_T)  # [BM, BDV]
    u2 = _load_vec(U2, bh, Lq, offs_m, in_m)
    alpha = _load_vec(ALPHA, bh, Lq, offs_m, in_m)
    x2 = _load_vec(X2, bh, Lq, offs_m, in_m)
    ar = _load_vec(AR, bh, Lq, offs_m, in_m)
    # sum_j P_ij c3_j, started from EXTRA: the share of support pieces outside the kernel
    # (dustbin columns), so that x1 is complete before Sbar is formed below (0 without them)
    r = _load_vec(EXTRA, bh, Lq, offs_m, in_m)
    acc_a = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # sum_j P_ij (f_j (Z_ij - w2_j) - beta_j x2_i - alpha_i c3_j) K_j
    acc_c = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # sum_j P_ij delta_j K_j
    ar_n = tl.arange(0, BLOCK_N).to(tl.int64)
    lo, hi = _band(m0, Lq, Lk, W, BLOCK_M, BLOCK_N)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + ar_n
        in_n = offs_n < Lk
        km = _load_mask(KM, b, Lk, offs_n, in_n)
        k = _load_tile(K, bh, Lk, offs_n, in_n, offs_d, D, DOT_T)  # [BN, BD]
        val = _load_tile(V, bh, Lk, offs_n, in_n, offs_e, DV, DOT_T)  # [BN, BDV]
        v2 = _load_vec(V2, bh, Lk, offs_n, in_n)
        w2 = _load_vec(W2, bh, Lk, offs_n, in_n)
        beta = _load_vec(BETA, bh, Lk, offs_n, in_n)
        c3 = _load_vec(C3, bh, Lk, offs_n, in_n)
        delta = _load_vec(DELTA, bh, Lk, offs_n, in_n)
        f = _load_vec(F, bh, Lk, offs_n, in_n)
        if CACHED:
            s = _cached_scores(S, bh, NMB, SLOTS, m0, n0, lo, Lk, W, BLOCK_M, BLOCK_N, False)  # [BM, BN]
        else:
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale  # [BM, BN]
        p = _plan(s, u2, v2, offs_m, offs_n, qm, km, W)
        z = tl.dot(g, tl.trans(val), input_precision=PREC)  # [BM, BN]
        r += tl.sum(p * c3[None, :], axis=1)
        sb = p * (f[None, :] * (z - w2[None, :]) - x2[:, None] * beta[None, :] - alpha[:, None] * c3[None, :])
        acc_a += _dot_rounded(sb, k, K, PREC, DOT_T)
        acc_c += _dot_rounded(p * delta[None, :], k, K, PREC, DOT_T)
    inv_a = _load_vec(INV_A, b, Lq, offs_m, in_m)
    x1 = -alpha * r * inv_a  # ubar1 / a
    dq = (acc_a - (ar * x1)[:, None] * acc_c) * scale
    _store_vec(X1, bh, Lq, offs_m, in_m, x1)
    _store_tile(DQ, bh, Lq, offs_m, in_m, offs_d, D, dq)


@triton.jit
def bwd_col_dk_kernel(
    Q, K, V, G, U2, V2, W2, ALPHA, X2, BETA, C3, DELTA, F, AR, X1, QM, KM, DK,  # DK [BH, Lk, D]
    Lq, Lk, H, W, scale, S, NMB, SLOTS,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PREC: tl.constexpr, DOT_T: tl.constexpr, CACHED: tl.constexpr = False,
):
    bh, b, n0, offs_n = _owned_block(H, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D).to(tl.int64)
    offs_e = tl.arange(0, BLOCK_DV).to(tl.int64)
    in_n = offs_n < Lk
    km = _load_mask(KM, b, Lk, offs_n, in_n)
    k = _load_tile(K, bh, Lk, offs_n, in_n, offs_d, D, DOT_T)  # [BN, BD]
    val = _load_tile(V, bh, Lk, offs_n, in_n, offs_e, DV, DOT_T)  # [BN, BDV]
    v2 = _load_vec(V2, bh, Lk, offs_n, in_n)
    w2 = _load_vec(W2, bh, Lk, offs_n, in_n)
    beta = _load_vec(BETA, bh, Lk, offs_n, in_n)
    c3 = _load_vec(C3, bh, Lk, offs_n, in_n)
    delta = _load_vec(DELTA, bh, Lk, offs_n, in_n)
    f = _load_vec(F, bh, Lk, offs_n, in_n)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    ar_m = tl.arange(0, BLOCK_M).to(tl.int64)
    lo, hi = _band(n0, Lk, Lq, W, BLOCK_N, BLOCK_M)
    for m0 in range(lo, hi, BLOCK_M):
        offs_m = m0 + ar_m
        in_m = offs_m < Lq
        qm = _load_mask(QM, b, Lq, offs_m, in_m)
        q = _load_tile(Q, bh, Lq, offs_m, in_m, offs_d, D, DOT_T)  # [BM, BD]
        g = _load_tile(G, bh, Lq, offs_m, in_m, offs_e, DV, DOT_T)  # [BM, BDV]
        u2 = _load_vec(U2, bh, Lq, offs_m, in_m)
        alpha = _load_vec(ALPHA, bh, Lq, offs_m, in_m)
        x2 = _load_vec(X2, bh, Lq, offs_m, in_m)
        x1 = _load_vec(X1, bh, Lq, offs_m, in_m)
        ar = _load_vec(AR, bh, Lq, offs_m, in_m)
        if CACHED:  # query block m0's tile, transposed
            st = _cached_scores(S, bh, NMB, SLOTS, n0, m0, lo, Lq, W, BLOCK_N, BLOCK_M, True)  # [BN, BM]
        else:
            st = tl.dot(k, tl.trans(q), input_precision=PREC) * scale  # [BN, BM]
        pt = _plan(st, v2, u2, offs_n, offs_m, km, qm, W)
        zt = tl.dot(val, tl.trans(g), input_precision=PREC)  # [BN, BM]
        sbt = pt * (f[:, None] * (zt - w2[:, None]) - beta[:, None] * x2[None, :] - c3[:, None] * alpha[None, :]
                    - delta[:, None] * (ar * x1)[None, :])
        dk += _dot_rounded(sbt, q, Q, PREC, DOT_T)
    # tl.store, not _store_tile: dk * scale is formed after the pointers, which keeps the compiled instruction order
    tl.store(_tile_ptrs(DK, bh, Lk, offs_n, offs_d, D), (dk * scale).to(DK.dtype.element_ty),
             mask=_tile_mask(in_n, offs_d, D))


def interpreter_mode() -> bool:
    """True if these kernels run in the Triton interpreter, False if they compile natively.

    Triton fixes the mode when it is imported (``TRITON_INTERPRET=1`` in the environment
    before ``import triton``): the ``@triton.jit`` functions of ``triton.language`` itself are
    built for one mode only. Raises ``RuntimeError`` if this module and ``triton.language``
    were imported under different settings (the environment variable was changed in between).
    """
    from triton.runtime.interpreter import InterpretedFunction

    ours = isinstance(half_step_kernel, InterpretedFunction)
    lang = isinstance(tl.zeros, InterpretedFunction)
    if ours != lang:
        raise RuntimeError(
            f"triton.language was imported with interpreter={lang} but {__name__} with interpreter={ours}: "
            "set TRITON_INTERPRET before the first `import triton` and do not change it afterwards")
    return ours


_KERNELS = ("half_step_kernel", "output_kernel", "plan_matvec_kernel", "bwd_col_gv_dv_kernel",
            "bwd_row_ubar2_kernel", "bwd_row_dq_kernel", "bwd_col_dk_kernel")
# with the score cache: its kernel, and each sweep reading it (the half-step in both orientations)
_CACHED_VARIANTS = ([("scores_kernel", "scores_kernel", {})]
                    + [(f"{name}[cached]", name, {"CACHED": True}) for name in _KERNELS]
                    + [("half_step_kernel[cached,cols]", "half_step_kernel", {"CACHED": True, "COLS": True})])
_TOKEN_PTRS = {"X", "Y", "Q", "K", "V", "G", "O", "DVAL", "DQ", "DK"}
_MASK_PTRS = {"MASK_X", "MASK_Y", "QM", "KM"}
_INT_ARGS = {"Lx", "Ly", "Lq", "Lk", "H", "W", "NMB", "SLOTS"}


def default_launch(dtype: str, precision: str = "ieee", head_dim: int = 64) -> dict:
    """The native launch the operator takes unless told otherwise: ``{"block", "num_warps",
    "num_stages"}`` for token type ``dtype`` (``"fp32"``, ``"bf16"``, ``"fp16"``), float32 dot
    ``precision`` and head dimension ``max(d, dv)``.

    * float32 with exact dots (``"ieee"``: FMA loops, no tensor cores): 32-row tiles, 4 warps,
      3 stages. At 64 rows and 4 warps (Triton's default, this operator's until 2026-11-27)
      ptxas spills 14-26 KB per thread in the output and every backward kernel (sm_90, d = 64,
      ``benchmarks/kernel_registers.py``), and forward + backward took 109 ms at L = 16,384,
      W = 1,024 on an H200 (``benchmarks/kernel_tune.py``, 2026-11-27); 32 x 4 took 32.3 ms
      (``bwd_row_dq`` spills 344 bytes there), 32 x 8 (no spill above 60 bytes) 55.7 ms: its
      forward is 1.7x slower.
    * otherwise 64-row tiles (32 for float32 with d or dv > 64: ~215 KB of shared memory at
      64, too much for sm_80), 4 warps, 3 stages (Triton's defaults).
    """
    if dtype not in _DTYPES:
        raise ValueError(f"{dtype=} must be one of {sorted(_DTYPES)}")
    narrow = dtype == "fp32" and (precision == "ieee" or head_dim > 64)
    return {"block": 32 if narrow else 64, "num_warps": 4, "num_stages": 3}


_DTYPES = {"fp32": tl.float32, "bf16": tl.bfloat16, "fp16": tl.float16}


def _compiled(capability: int, dtype: str, block, head_dim: int, precision, num_warps, num_stages, row_dot=False,
              cached=False):
    """``(label, compiled kernel)`` of every kernel variant asked for (see :func:`compile_native`)."""
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if interpreter_mode():
        raise RuntimeError("compiling natively needs triton in native mode (TRITON_INTERPRET unset)")
    precision = ("ieee" if precision is None else precision) if dtype == "fp32" else "tf32"
    launch = default_launch(dtype, precision, head_dim)  # checks dtype
    block = launch["block"] if block is None else block
    options = {"num_warps": launch["num_warps"] if num_warps is None else num_warps,
               "num_stages": launch["num_stages"] if num_stages is None else num_stages}
    pad_d = max(16, 1 << (head_dim - 1).bit_length())
    variants = [(name, name, {}) for name in _KERNELS] + [("half_step_kernel[raw]", "half_step_kernel",
                                                           {"RAW": True})]
    if row_dot:  # the interpreter's column half-step, compiled natively to see what it would cost
        variants.append(("half_step_kernel[row_dot]", "half_step_kernel", {"ROW_DOT": True}))
    if cached:
        variants += _CACHED_VARIANTS
    for label, name, extra in variants:
        fn = globals()[name]
        signature, constants = {}, {}
        for arg in inspect.signature(fn.fn).parameters:
            if arg in _TOKEN_PTRS:
                signature[arg] = "*" + dtype
            elif arg in _MASK_PTRS:
                signature[arg] = "*i8"
            elif arg in _INT_ARGS:
                signature[arg] = "i32"
            elif arg == "scale":
                signature[arg] = "fp32"
            elif arg in ("D", "DV", "BLOCK_D", "BLOCK_DV", "BLOCK_X", "BLOCK_Y", "BLOCK_M", "BLOCK_N", "PREC",
                         "DOT_T"):
                signature[arg] = "constexpr"
                constants[arg] = {"D": head_dim, "DV": head_dim, "BLOCK_D": pad_d, "BLOCK_DV": pad_d,
                                  "PREC": precision, "DOT_T": _DTYPES[dtype]}.get(arg, block)
            elif arg in ("RAW", "ROW_DOT", "CACHED", "COLS"):  # ROW_DOT: the interpreter's only
                signature[arg] = "constexpr"
                constants[arg] = extra.get(arg, False)
            else:
                signature[arg] = "*fp32"  # dual and cotangent vectors, log marginals
        names = list(signature)
        src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(k),): v for k, v in constants.items()})
        yield label, triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)


def compile_native(capability: int = 90, dtype: str = "bf16", *, block: int | None = None, head_dim: int = 64,
                   precision: str | None = None, num_warps: int | None = None,
                   num_stages: int | None = None, cached: bool = False) -> dict:
    """Compile every kernel ahead of time for an NVIDIA target; no GPU needed (ptxas only).

    ``capability`` is the SM version (80 = A100, 90 = H100), ``dtype`` the token type
    (``"fp32"``, ``"bf16"`` or ``"fp16"``), ``head_dim`` d = dv, ``precision`` the float32
    dots (``"ieee"`` default, ``"tf32x3"``, ``"tf32"``; half types take ``"tf32"``), and
    ``block``, ``num_warps``, ``num_stages`` the launch (None: :func:`default_launch`'s).
    Returns ``{kernel name: shared memory bytes}`` (the half-step twice: ``half_step_kernel`` and
    ``half_step_kernel[raw]``, its ``RAW=True`` variant); raises on a compilation error.
    ``cached``: also ``scores_kernel`` and every sweep reading the score cache (``[cached]``; the
    half-step in both orientations). Needs a process where triton is not in interpreter mode.
    """
    return {label: kernel.metadata.shared
            for label, kernel in _compiled(capability, dtype, block, head_dim, precision, num_warps, num_stages,
                                           cached=cached)}


def kernel_resources(capability: int = 90, dtype: str = "bf16", *, block: int | None = None, head_dim: int = 64,
                     precision: str | None = None, num_warps: int | None = None,
                     num_stages: int | None = None, row_dot: bool = False, cached: bool = False) -> dict:
    """:func:`compile_native`, and what ptxas reports for each kernel's PTX (``ptxas -v``, the
    ptxas Triton ships): ``{kernel name: {"shared", "registers", "spill_stores",
    "spill_loads"}}`` (registers per thread; spilled bytes per thread). No GPU needed.
    ``row_dot``: also ``half_step_kernel[row_dot]``, the half-step with ``ROW_DOT=True`` (which
    only the interpreter launches); ``cached``: also the score cache's kernels (:func:`compile_native`)."""
    import re
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    ptxas = get_ptxas(capability).path
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, kernel in _compiled(capability, dtype, block, head_dim, precision, num_warps, num_stages,
                                       row_dot, cached):
            ptx = os.path.join(tmp, "kernel.ptx")
            with open(ptx, "w") as fh:
                fh.write(kernel.asm["ptx"])
            res = subprocess.run([ptxas, "-v", "--gpu-name", arch, ptx, "-o", os.path.join(tmp, "kernel.o")],
                                 capture_output=True, text=True, check=True)
            report = res.stdout + res.stderr
            regs = re.search(r"Used (\d+) registers", report)
            spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
            if regs is None or spills is None:
                raise RuntimeError(f"ptxas -v printed no register report for {label}:\n{report}")
            out[label] = {"shared": kernel.metadata.shared, "registers": int(regs.group(1)),
                          "spill_stores": int(spills.group(1)), "spill_loads": int(spills.group(2))}
    return out
