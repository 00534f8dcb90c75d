"""``sinkhorn_attention_triton``: the blockwise Triton operator with the R = 2 backward.

Same operator and conventions as :func:`sinkalign.kernels.triton.ref.sinkhorn_attention_ref`
(and the JAX ``sinkalign.sinkhorn``), computed in O(B H (Lq + Lk) W) time per sweep and
O(B H L) extra memory: the forward stores only q, k, v, the masks, the log marginals and
the float32 dual vectors ``v^(0), u^(1), v^(1), u^(2), v^(2)``; the backward recomputes
every score tile from q and k.

Backward (Proposition 2 of the paper, generalised to non-unit marginals a, b): with
``P = P^(2,2)``, ``Z = G V^T``, ``alpha = exp(u1 - u2)``, ``beta = exp(v1 - v2)``,
``delta = exp(v0 - v2)``, the five sweeps are

1. column owner: ``g_v = colsum(P * Z)`` and ``dV = P^T G``;  ``w2 = g_v / b``
2. row owner:    ``ubar2 = rowsum(P * (Z - w2_j))`` (= g_u - P w2);  ``x2 = ubar2 / a``
3. column owner: ``vbar1 = -beta * P^T x2``;  ``w1 = vbar1 / b``
4. row owner:    ``ubar1 = -alpha * P (beta w1)``, ``x1 = ubar1 / a`` and, in the same pass,
   ``dQ = Sbar K / (sqrt(d) eps)``
5. column owner: ``dK = Sbar^T Q / (sqrt(d) eps)``

with ``Sbar = P * (Z - w2_j - beta_j x2_i - alpha_i beta_j w1_j - alpha_i delta_j x1_i)``.
Row-owner and column-owner programs each write their own outputs: no atomics.

Interpreter: Triton chooses between native compilation and its CPU interpreter once per
process, when ``triton`` is first imported, from ``TRITON_INTERPRET``. To run on CPU tensors
set ``TRITON_INTERPRET=1`` in the environment (shell, or ``os.environ`` before anything
imports ``triton``; importing :mod:`sinkalign.kernels.triton` does not import ``triton``,
the first call does). Native kernels need CUDA tensors and a process without the variable.
"""

from __future__ import annotations

import logging
import math
import numbers

import torch

from sinkalign.kernels.triton.ref import prepare_inputs

__all__ = ["sinkhorn_attention_triton"]

log = logging.getLogger(__name__)

_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _block(name: str, value, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 16 or value & (value - 1):
        raise ValueError(f"{name}={value!r} must be a power of two >= 16")
    return int(value)


class _Launch:
    """Grid and constexpr bookkeeping shared by the sweeps of one call."""

    def __init__(self, q, k, v, band, eps, interpret, block_m, block_n):
        self.B, self.H, self.Lq, self.D = q.shape
        self.Lk, self.DV = k.shape[2], v.shape[3]
        self.W = max(self.Lq, self.Lk) if band is None else int(band)
        self.scale = 1.0 / (math.sqrt(self.D) * eps)
        self.interpret = interpret
        self.BM, self.BN = block_m, block_n
        self.BD = max(16, 1 << (self.D - 1).bit_length())
        self.BDV = max(16, 1 << (self.DV - 1).bit_length())
        import triton.language as tl

        # Dot operand type: the input type natively; float32 in the interpreter, whose tl.dot
        # mishandles bfloat16 (see kernels.py). float32 dots run at full ("ieee") precision.
        native_t = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[q.dtype]
        self.dot_t = tl.float32 if interpret else native_t
        self.prec = "ieee" if self.dot_t == tl.float32 else "tf32"

    def kernel(self, name):
        from sinkalign.kernels.triton import kernels

        return getattr(kernels, f"{name}_kernel")

    def rows(self, block):
        return (-(-self.Lq // block), self.B * self.H)

    def cols(self, block):
        return (-(-self.Lk // block), self.B * self.H)

    def half_step(self, x, y, pot_y, mask_x, mask_y, logm_x, lx, ly, bx, by):
        out = torch.empty(self.B * self.H, lx, dtype=torch.float32, device=x.device)
        grid = (-(-lx // bx), self.B * self.H)
        self.kernel("half_step")[grid](x, y, pot_y, mask_x, mask_y, logm_x, out, lx, ly, self.H, self.W, self.scale,
                                       D=self.D, BLOCK_X=bx, BLOCK_Y=by, BLOCK_D=self.BD, PREC=self.prec,
                                       DOT_T=self.dot_t)
        return out

    def dims(self):
        return dict(D=self.D, DV=self.DV, BLOCK_M=self.BM, BLOCK_N=self.BN, BLOCK_D=self.BD, BLOCK_DV=self.BDV,
                    PREC=self.prec, DOT_T=self.dot_t)

    def sizes(self):
        return (self.Lq, self.Lk, self.H, self.W, self.scale)


def _forward_duals(lc: _Launch, q, k, qm, km, log_a, log_b, n_iters):
    """Base solve (centered) then two raw tail steps; returns (v0, u1, v1, u2, v2), fp32 [BH, L]."""
    bh = lc.B * lc.H
    n_rows = qm.sum(-1).clamp(min=1).to(torch.float32).repeat_interleave(lc.H)[:, None]  # [BH, 1]
    col_on = km.bool().repeat_interleave(lc.H, dim=0)  # [BH, Lk]

    def row(v):
        return lc.half_step(q, k, v, qm, km, log_a, lc.Lq, lc.Lk, lc.BM, lc.BN)

    def col(u):
        return lc.half_step(k, q, u, km, qm, log_b, lc.Lk, lc.Lq, lc.BN, lc.BM)

    v = torch.zeros(bh, lc.Lk, dtype=torch.float32, device=q.device)
    for _ in range(n_iters):
        u = row(v)
        v = col(u)
        c = u.sum(-1, keepdim=True) / n_rows  # u is 0 on padded rows
        v = torch.where(col_on, v + c, 0.0)
    u1 = row(v)
    v1 = col(u1)
    u2 = row(v1)
    v2 = col(u2)
    return v, u1, v1, u2, v2


class _SinkhornTail2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, qm, km, log_a, log_b, lc, n_iters):
        v0, u1, v1, u2, v2 = _forward_duals(lc, q, k, qm, km, log_a, log_b, n_iters)
        out = torch.empty(lc.B, lc.H, lc.Lq, lc.DV, dtype=v.dtype, device=v.device)
        lc.kernel("output")[lc.rows(lc.BM)](q, k, v, u2, v2, qm, km, out, *lc.sizes(), **lc.dims())
        ctx.save_for_backward(q, k, v, qm, km, log_a, log_b, v0, u1, v1, u2, v2)
        ctx.lc = lc
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, qm, km, log_a, log_b, v0, u1, v1, u2, v2 = ctx.saved_tensors
        lc: _Launch = ctx.lc
        g = grad_out.to(v.dtype).contiguous()
        sizes, dims = lc.sizes(), lc.dims()
        inv_a = torch.where(qm.bool(), torch.exp(-log_a), 0.0)  # [B, Lq]
        inv_b = torch.where(km.bool(), torch.exp(-log_b), 0.0).repeat_interleave(lc.H, dim=0)  # [BH, Lk]
        inv_a_bh = inv_a.repeat_interleave(lc.H, dim=0)  # [BH, Lq]
        alpha, beta, delta = torch.exp(u1 - u2), torch.exp(v1 - v2), torch.exp(v0 - v2)

        g_v = torch.empty_like(v2)
        dv = torch.empty_like(v)
        lc.kernel("bwd_col_gv_dv")[lc.cols(lc.BN)](q, k, v, g, u2, v2, qm, km, g_v, dv, *sizes, **dims)
        w2 = g_v * inv_b
        ubar2 = torch.empty_like(u2)
        lc.kernel("bwd_row_ubar2")[lc.rows(lc.BM)](q, k, v, g, u2, v2, w2, qm, km, ubar2, *sizes, **dims)
        x2 = ubar2 * inv_a_bh
        p_t_x2 = torch.empty_like(v2)
        lc.kernel("plan_matvec")[lc.cols(lc.BN)](k, q, v2, u2, x2, km, qm, p_t_x2, lc.Lk, lc.Lq, lc.H, lc.W,
                                                 lc.scale, D=lc.D, BLOCK_X=lc.BN, BLOCK_Y=lc.BM, BLOCK_D=lc.BD,
                                                 PREC=lc.prec, DOT_T=lc.dot_t)
        w1 = -beta * p_t_x2 * inv_b
        x1 = torch.empty_like(u2)
        dq = torch.empty_like(q)
        lc.kernel("bwd_row_dq")[lc.rows(lc.BM)](q, k, v, g, u2, v2, w2, alpha, x2, beta, w1, delta, inv_a, qm, km,
                                                x1, dq, *sizes, **dims)
        dk = torch.empty_like(k)
        lc.kernel("bwd_col_dk")[lc.cols(lc.BN)](q, k, v, g, u2, v2, w2, alpha, x2, beta, w1, delta, x1, qm, km,
                                                dk, *sizes, **dims)
        return dq, dk, dv, None, None, None, None, None, None


def sinkhorn_attention_triton(q, k, v, *, q_mask=None, k_mask=None, log_a=None, log_b=None, eps=1.0, n_iters=15,
                              tail=2, band=None, interpret=None, block_m=None, block_n=None) -> torch.Tensor:
    """Banded, masked, log-domain balanced Sinkhorn attention with an R = 2 tail (Triton).

    Args:
        q: queries [B, H, Lq, d]; k: keys [B, H, Lk, d]; v: values [B, H, Lk, dv]; one
            dtype among float32, bfloat16, float16 (use the reference for float64).
        q_mask: [B, Lq] bool, True = real token (default all True); k_mask: [B, Lk] likewise.
        log_a: [B, Lq] / log_b: [B, Lk] log marginals (default 0 = unit mass per token).
        eps: entropic temperature > 0; scores are ``<q_i, k_j> / (sqrt(d) eps)``.
        n_iters: base Sinkhorn steps T >= 0 (stopped, centered).
        tail: differentiable tail steps R; only 2 is implemented here.
        band: half-width W >= 1 (key j active for query i iff |i - j| <= W); None = dense.
        interpret: expected Triton mode; None accepts the process's mode (the interpreter iff
            TRITON_INTERPRET=1 was set before triton was imported), True/False assert it.
        block_m, block_n: query / key tile sizes (powers of two >= 16; default 16 in the
            interpreter; natively 64, or 32 for float32 with d or dv > 64).

    Returns:
        O = P^(2,2) V [B, H, Lq, dv] in v's dtype; rows of padded queries are 0.
        Differentiable in q, k, v (not in masks or marginals).

    Raises:
        ValueError: before any kernel launch, on bad shapes, dtypes, devices, eps, band,
            n_iters, tail != 2, non-finite inputs, or a valid query row / key column with no
            active entry (message names the batch index and position).
    """
    if tail != 2 or isinstance(tail, bool):
        raise ValueError(f"tail={tail!r}: the Triton operator implements the R = 2 one-reference backward only; "
                         "use sinkhorn_attention_ref for other tail depths")
    q_mask, k_mask, log_a, log_b = prepare_inputs(q, k, v, q_mask=q_mask, k_mask=k_mask, log_a=log_a, log_b=log_b,
                                                  eps=eps, n_iters=n_iters, tail=tail, band=band)
    if q.dtype not in _KERNEL_DTYPES:
        raise ValueError(f"q.dtype={q.dtype} is not supported by the Triton kernels (valid: "
                         f"{[str(t) for t in _KERNEL_DTYPES]}); use sinkhorn_attention_ref for float64")
    if interpret is not None and not isinstance(interpret, bool):
        raise ValueError(f"interpret={interpret!r} must be True, False or None")
    from sinkalign.kernels.triton.kernels import interpreter_mode  # first import of triton happens here

    mode = interpreter_mode()
    if interpret is not None and interpret != mode:
        raise ValueError(f"{interpret=} but this process runs Triton with interpreter={mode}: the mode is fixed "
                         "when triton is first imported; set TRITON_INTERPRET=1 (or leave it unset) in the "
                         "environment before that import")
    interpret = mode
    if not interpret and q.device.type != "cuda":
        raise ValueError(f"native Triton kernels need CUDA tensors, got device {q.device}; to run on CPU set "
                         "TRITON_INTERPRET=1 in the environment before triton is imported")
    if interpret:
        default_block = 16
    else:  # float32 tiles with a wide head need ~215 KB of shared memory at 64: too much for sm_80
        wide = max(q.shape[-1], v.shape[-1]) > 64 and q.dtype == torch.float32
        default_block = 32 if wide else 64
    block_m = _block("block_m", block_m, default_block)
    block_n = _block("block_n", block_n, default_block)
    lc = _Launch(q, k, v, band, float(eps), interpret, block_m, block_n)
    log.debug("sinkhorn_attention_triton B=%d H=%d Lq=%d Lk=%d d=%d W=%d blocks=%dx%d interpret=%s",
              lc.B, lc.H, lc.Lq, lc.Lk, lc.D, lc.W, block_m, block_n, interpret)
    qm = q_mask.to(torch.int8).contiguous()
    km = k_mask.to(torch.int8).contiguous()
    log_a = log_a.to(torch.float32).contiguous()
    log_b = log_b.to(torch.float32).contiguous()
    return _SinkhornTail2.apply(q.contiguous(), k.contiguous(), v.contiguous(), qm, km, log_a, log_b, lc,
                                int(n_iters))
