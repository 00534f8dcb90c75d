"""``sinkhorn_attention_triton`` and ``sinkhorn_dustbin_attention_triton``: the blockwise
Triton operator with the R = 2 backward, without and with learned dustbins.

Same operator and conventions as :func:`sinkalign.kernels.triton.ref.sinkhorn_attention_ref`
(and the JAX ``sinkalign.sinkhorn``), computed in O(B H (Lq + Lk) W) time per sweep and
O(B H L) extra memory: the forward stores only q, k, v, the masks, the log marginals and
the float32 dual vectors ``v^(0), u^(1), v^(1), u^(2), v^(2)``. With ``cache_scores`` (the
default for float32 inputs with exact dots, :mod:`sinkalign.kernels.cache`) each pass (the
forward; the backward) first writes the band's score tiles into a float32 cache
(``scores_kernel``, O(L W) while the pass runs, freed after it) that every sweep reads;
without it (TF32 or half-type dots, or ``cache_scores=False``) every sweep recomputes its score
tiles from q and k.

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

Supports: the band ``|i - j| <= W`` (or dense) on masked tokens, with any log marginals, and
both dustbin variants of ``sinkalign.sinkhorn.dustbin``:

* ``paper``: q, k, v are augmented in torch to ``L + filler`` (one active dustbin token,
  ``filler - 1`` inactive fillers), unit marginals, band ``max(W, Lq, Lk)`` (dense), and run
  through the operator above unchanged.
* ``banded``: the problem is augmented to ``(Lq + 1) x (Lk + 1)``; the kernels run the band
  on the real tokens (the dustbin row and column are masked out of their masks), while the
  always-active dustbin column (rows ``0..Lq``, the corner included) and dustbin row
  (columns ``0..Lk - 1``) are computed in plain float32 torch (:class:`_Thin`, O(L d)) and
  merged between the sweeps: the half-step kernel returns the raw band LSE (``-inf`` on rows
  without a band entry; ``RAW=True``), which is ``logaddexp``-ed with the dustbin LSE before
  ``u = where(active, log a - LSE, 0)``; row / column sums are added; in sweep 4 the dustbin
  share of ``P (beta w1)`` is passed into the kernel as an extra row vector, because ``x1``
  is used inside that same sweep. Token-shaped results (O, dQ, dK, dV) stay float32 until
  the dustbin parts are added, then take the input dtype. Dustbin masses: ``unit`` (log 1)
  or ``length`` (log of the number of valid tokens on the other side, at least 1).

Interpreter: Triton chooses between native compilation and its CPU interpreter once per
process, when ``triton`` is first imported, from ``TRITON_INTERPRET``. To run on CPU tensors
set ``TRITON_INTERPRET=1`` in the environment (shell, or ``os.environ`` before anything
imports ``triton``; importing :mod:`sinkalign.kernels.triton` does not import ``triton``,
the first call does). Native kernels need CUDA tensors and a process without the variable.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import numbers

import torch

from sinkalign.kernels.cache import band_tile_slots, check_cache_scores, resolve_cache_scores
from sinkalign.kernels.triton.ref import _UNSET, _from_config, active_transforms, prepare_dustbin, prepare_inputs
from sinkalign.sinkhorn.checks import check_f32_dots
from sinkalign.sinkhorn.config import DustbinConfig, SinkhornConfig

__all__ = ["sinkhorn_attention_triton", "sinkhorn_dustbin_attention_triton"]

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

    def __init__(self, q, k, v, band, eps, interpret, block_m, block_n, precision="ieee", num_warps=None,
                 num_stages=None, cache_scores=None):
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
        # mishandles bfloat16 (see kernels.py). float32 dots run at ``precision`` (default full
        # float32, "ieee"); half-type dots ignore it.
        native_t = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[q.dtype]
        self.dot_t = tl.float32 if interpret else native_t
        self.prec = precision if self.dot_t == tl.float32 else "tf32"
        # launch options of every kernel (Triton's defaults where None; the interpreter ignores them)
        self.opts = {name: value for name, value in (("num_warps", num_warps), ("num_stages", num_stages))
                     if value is not None}
        self.n_mb = -(-self.Lq // self.BM)  # query blocks
        # None: cached with exact float32 dots while the cache fits (sinkalign.kernels.cache); the
        # slot count (a Python loop over the query blocks) is computed at most once, where it is used
        exact = q.dtype == torch.float32 and precision == "ieee"
        slots = functools.cache(self._slots)
        self.cache_scores = resolve_cache_scores(
            cache_scores, exact_f32=exact, floats=lambda: self.B * self.H * self.n_mb * slots() * self.BM * self.BN)
        self.slots = slots() if self.cache_scores else 1
        self.cache = None  # the score cache while a pass runs (build_cache), else None
        self._none = torch.empty(1, dtype=torch.float32, device=q.device)  # S when there is no cache

    def _slots(self) -> int:
        """Key tiles the band of a query block meets at most: the cache's third axis (as ``_band``)."""
        return band_tile_slots(self.Lq, self.BM, self.Lk, self.BN, self.W)

    def build_cache(self, q, k):
        """Compute the band's score tiles once into ``self.cache`` [BH, NMB, SLOTS, BM, BN] float32
        (``cache_scores``); every sweep then reads them instead of recomputing. O(Lq (BM + 2W)) memory."""
        if not self.cache_scores:
            return
        self.cache = torch.empty(self.B * self.H, self.n_mb, self.slots, self.BM, self.BN, dtype=torch.float32,
                                 device=q.device)
        self.kernel("scores")[self.rows(self.BM)](q, k, self.cache, self.Lq, self.Lk, self.H, self.W, self.scale,
                                                  self.n_mb, self.slots, D=self.D, BLOCK_M=self.BM, BLOCK_N=self.BN,
                                                  BLOCK_D=self.BD, PREC=self.prec, DOT_T=self.dot_t, **self.opts)

    def free_cache(self):
        self.cache = None

    def cache_args(self):
        return (self._none if self.cache is None else self.cache, self.n_mb, self.slots)

    def kernel(self, name):
        from sinkalign.kernels.triton import kernels

        return getattr(kernels, f"{name}_kernel")

    def rows(self, block):
        return (-(-self.Lq // block), self.B * self.H)

    def cols(self, block):
        return (-(-self.Lk // block), self.B * self.H)

    def half_step(self, x, y, pot_y, mask_x, mask_y, logm_x, lx, ly, bx, by, raw=False, cols=False):
        """``logm_x - LSE`` (0 on rows with no active entry); ``raw=True``: the LSE (-inf there).
        ``cols``: x are the keys (a column half-step); in the interpreter its score tiles are then
        the row half-step's products transposed (``ROW_DOT``, see kernels.py)."""
        out = torch.empty(self.B * self.H, lx, dtype=torch.float32, device=x.device)
        grid = (-(-lx // bx), self.B * self.H)
        self.kernel("half_step")[grid](x, y, pot_y, mask_x, mask_y, logm_x, out, lx, ly, self.H, self.W, self.scale,
                                       *self.cache_args(), D=self.D, BLOCK_X=bx, BLOCK_Y=by, BLOCK_D=self.BD,
                                       PREC=self.prec, DOT_T=self.dot_t, RAW=raw, ROW_DOT=cols and self.interpret,
                                       CACHED=self.cache is not None, COLS=cols and self.cache is not None,
                                       **self.opts)
        return out

    def dims(self):
        return dict(D=self.D, DV=self.DV, BLOCK_M=self.BM, BLOCK_N=self.BN, BLOCK_D=self.BD, BLOCK_DV=self.BDV,
                    PREC=self.prec, DOT_T=self.dot_t, CACHED=self.cache is not None, **self.opts)

    def sizes(self):
        return (self.Lq, self.Lk, self.H, self.W, self.scale, *self.cache_args())


class _Thin:
    """A one-row / one-column support piece (a dustbin) in dense float32 torch: O(L d) work.

    Rows ``[r0, r0 + nr)`` x columns ``[c0, c0 + nc)`` of the (augmented) problem, active where
    both tokens are valid; one of ``nr``, ``nc`` is 1, so the products below (broadcast
    multiply and sum, no matmul: no TF32 on a GPU) are [BH, L, d] at most.
    """

    def __init__(self, piece, q, k, qv, kv, scale):
        # q [BH, Lq, D], k [BH, Lk, D] (kernel dtype); qv [BH, Lq], kv [BH, Lk] bool
        self.r0, self.nr, self.c0, self.nc = piece
        self.lq, self.lk = q.shape[1], k.shape[1]
        self.qs = q[:, self.r0 : self.r0 + self.nr].float()  # [BH, nr, D]
        self.ks = k[:, self.c0 : self.c0 + self.nc].float()  # [BH, nc, D]
        self.s = (self.qs[:, :, None, :] * self.ks[:, None, :, :]).sum(-1) * scale  # [BH, nr, nc]
        self.mask = qv[:, self.r0 : self.r0 + self.nr, None] & kv[:, None, self.c0 : self.c0 + self.nc]

    def r(self, x):  # full row vector [BH, Lq] -> [BH, nr, 1]
        return x[:, self.r0 : self.r0 + self.nr, None]

    def c(self, x):  # full column vector [BH, Lk] -> [BH, 1, nc]
        return x[:, None, self.c0 : self.c0 + self.nc]

    def _place(self, part, start, length, fill):
        out = part.new_full((part.shape[0], length), fill)
        out[:, start : start + part.shape[1]] = part
        return out

    def row_lse(self, v):
        z = torch.where(self.mask, self.s + self.c(v), float("-inf"))
        return self._place(torch.logsumexp(z, 2), self.r0, self.lq, float("-inf"))

    def col_lse(self, u):
        z = torch.where(self.mask, self.s + self.r(u), float("-inf"))
        return self._place(torch.logsumexp(z, 1), self.c0, self.lk, float("-inf"))

    def plan(self, u, v):
        return torch.exp(torch.where(self.mask, self.s + self.r(u) + self.c(v), float("-inf")))

    def rowsum(self, x):  # [BH, nr, nc] -> full [BH, Lq]
        return self._place(x.sum(2), self.r0, self.lq, 0.0)

    def colsum(self, x):
        return self._place(x.sum(1), self.c0, self.lk, 0.0)

    def add_rows(self, acc, x, y):  # acc[:, rows] += sum_j x_ij y_j; x [BH, nr, nc], y [BH, nc, E]
        acc[:, self.r0 : self.r0 + self.nr] += (x[..., None] * y[:, None, :, :]).sum(2)

    def add_cols(self, acc, x, y):  # acc[:, cols] += sum_i x_ij y_i; y [BH, nr, E]
        acc[:, self.c0 : self.c0 + self.nc] += (x[..., None] * y[:, :, None, :]).sum(1)


class _Dustbins:
    """The banded dustbin support outside the kernels: the dustbin column (rows ``0..lq``, the
    corner included) and row (columns ``0..lk - 1``) of a problem augmented to ``lq + 1`` x
    ``lk + 1``. The kernels run the band on the same augmented tensors with the dustbin row
    and column masked out. Every valid row and column is active (it reaches a dustbin)."""

    def __init__(self, q_valid, k_valid, heads):
        # q_valid [B, lq + 1], k_valid [B, lk + 1] bool (dustbins valid)
        lq, lk = q_valid.shape[1] - 1, k_valid.shape[1] - 1
        self.pieces = ((0, lq + 1, lk, 1), (lq, 1, 0, lk))
        self.row_on, self.col_on = q_valid, k_valid  # [B, L]
        self.row_on_bh = q_valid.repeat_interleave(heads, dim=0)  # [BH, L]
        self.col_on_bh = k_valid.repeat_interleave(heads, dim=0)

    def thin(self, q, k, scale):
        return [_Thin(p, q, k, self.row_on_bh, self.col_on_bh, scale) for p in self.pieces]


def _wrapped(t) -> bool:
    return isinstance(t, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(t)


def _unwrapped(t):
    """The plain tensor beneath ``torch.func``'s wrappers (``t`` itself outside them)."""
    while _wrapped(t):
        t = torch._C._functorch.get_unwrapped(t)
    return t


def _flat(x):
    """[B, H, L, E] -> [BH, L, E] view."""
    return x.view(-1, x.shape[2], x.shape[3])


def _forward_duals(lc: _Launch, q, k, qm, km, log_a, log_b, n_iters, db: _Dustbins | None = None):
    """Base solve (centered) then two raw tail steps; returns (v0, u1, v1, u2, v2), fp32 [BH, L].

    With dustbins (``db``) the kernels return raw band LSEs, merged with the dustbin pieces'
    LSEs by ``logaddexp`` before ``where(active, log m - LSE, 0)``.
    """
    bh = lc.B * lc.H
    if db is None:
        n_rows = qm.sum(-1).clamp(min=1).to(torch.float32).repeat_interleave(lc.H)[:, None]  # [BH, 1]
        col_on = km.bool().repeat_interleave(lc.H, dim=0)  # [BH, Lk]

        def row(v):
            return lc.half_step(q, k, v, qm, km, log_a, lc.Lq, lc.Lk, lc.BM, lc.BN)

        def col(u):
            return lc.half_step(k, q, u, km, qm, log_b, lc.Lk, lc.Lq, lc.BN, lc.BM, cols=True)
    else:
        thin = db.thin(_flat(q), _flat(k), lc.scale)
        row_on, col_on = db.row_on_bh, db.col_on_bh
        n_rows = row_on.sum(-1, keepdim=True).clamp(min=1).to(torch.float32)
        la, lb = log_a.repeat_interleave(lc.H, dim=0), log_b.repeat_interleave(lc.H, dim=0)

        def row(v):
            lse = lc.half_step(q, k, v, qm, km, log_a, lc.Lq, lc.Lk, lc.BM, lc.BN, raw=True)
            for t in thin:
                lse = torch.logaddexp(lse, t.row_lse(v))
            return torch.where(row_on, la - lse, 0.0)

        def col(u):
            lse = lc.half_step(k, q, u, km, qm, log_b, lc.Lk, lc.Lq, lc.BN, lc.BM, raw=True, cols=True)
            for t in thin:
                lse = torch.logaddexp(lse, t.col_lse(u))
            return torch.where(col_on, lb - lse, 0.0)

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


class _FirstOrderOnly(torch.autograd.Function):
    """``x`` (a gradient from the kernels) tied to the tensors it was computed from: taking its
    own derivative raises, where the kernels' untracked buffers would have given 0 silently."""

    @staticmethod
    def forward(x, *anchors):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError("the Triton kernels' backward cannot be differentiated (a second-order gradient, e.g. "
                           "a gradient penalty, through create_graph=True or nested torch.func.grad): use the "
                           "reference operator (sinkhorn_attention_ref, or backend='reference' in JAX)")


class _SinkhornTail2(torch.autograd.Function):
    """O = P^(2,2) V and the R = 2 one-reference backward; ``forward`` returns the output and
    the five float32 duals the backward reads (``.apply(...)[0]`` is the operator). Forward and
    context are separate (``setup_context``), so ``torch.func.grad`` and ``vjp`` run it too."""

    @staticmethod
    def forward(q, k, v, qm, km, log_a, log_b, lc, n_iters, db):
        lc.build_cache(q, k)  # with cache_scores: the band's scores, for the duals and the output
        try:
            v0, u1, v1, u2, v2 = _forward_duals(lc, q, k, qm, km, log_a, log_b, n_iters, db)
            # with dustbins the band part is kept in float32 until the dustbin part is added
            out = torch.empty(lc.B, lc.H, lc.Lq, lc.DV, dtype=v.dtype if db is None else torch.float32,
                              device=v.device)
            lc.kernel("output")[lc.rows(lc.BM)](q, k, v, u2, v2, qm, km, out, *lc.sizes(), **lc.dims())
        finally:
            lc.free_cache()  # not kept between forward and backward: O(L d) saved
        if db is not None:
            for t in db.thin(_flat(q), _flat(k), lc.scale):
                t.add_rows(_flat(out), t.plan(u2, v2), _flat(v)[:, t.c0 : t.c0 + t.nc].float())
            out = out.to(v.dtype)
        return out, v0, u1, v1, u2, v2

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, qm, km, log_a, log_b, lc, _, db = inputs
        duals = output[1:]
        ctx.mark_non_differentiable(*duals)
        ctx.save_for_backward(q, k, v, qm, km, log_a, log_b, *duals)
        ctx.lc, ctx.db = lc, db

    @staticmethod
    def jvp(ctx, *_):
        raise NotImplementedError("the Triton operator has no forward mode (torch.func.jvp, jacfwd, hessian): use "
                                  "sinkhorn_attention_ref, or reverse mode (loss.backward(), torch.func.grad)")

    @staticmethod
    def backward(ctx, grad_out, *_):  # the duals are not differentiable: their cotangents are None
        saved = ctx.saved_tensors
        levels = active_transforms()
        if levels not in ([], ["Grad"]):
            raise RuntimeError(
                f"the Triton operator's backward runs under torch.autograd, one torch.func.grad or torch.func.vjp, not "
                f"under {' > '.join(levels)} (jacrev, hessian, vmap of grad, nested grads): use the reference "
                "operator (sinkhorn_attention_ref) there")

        def differentiable(grad_out, saved):
            return [t for t in (grad_out, *saved[:3], *saved[5:7]) if t.requires_grad]

        anchors = differentiable(grad_out, saved)  # under torch.func.grad: at its level
        if levels or any(_wrapped(t) for t in (grad_out, *saved)):
            # torch.func.grad, or torch.func.vjp's function after its level ended: the kernels run on
            # the plain tensors beneath the wrappers
            grad_out, saved = _unwrapped(grad_out), tuple(_unwrapped(t) for t in saved)
            if not levels:
                anchors = differentiable(grad_out, saved)
        q, k, v, qm, km, log_a, log_b, v0, u1, v1, u2, v2 = saved
        lc: _Launch = ctx.lc
        # the kernels' results carry no graph, so neither does the torch around them (a second
        # derivative is refused below); under torch.func.grad new tensors would be wrapped at its
        # level: the sweeps step outside it
        with torch.no_grad(), torch._C._DisableFuncTorch() if levels else contextlib.nullcontext():
            lc.build_cache(q, k)  # rebuilt for the backward's five sweeps
            try:
                grads = _SinkhornTail2._backward(ctx, grad_out, q, k, v, qm, km, log_a, log_b, v0, u1, v1, u2, v2,
                                                 lc)
            finally:
                lc.free_cache()
        if torch.is_grad_enabled() and anchors:  # create_graph=True (torch.func.grad always asks for it): the
            # kernels wrote untracked buffers, so a second derivative through them would be silently 0; it
            # raises instead, when it is taken
            grads = tuple(None if g is None else _FirstOrderOnly.apply(g, *anchors) for g in grads)
        return grads

    @staticmethod
    def _backward(ctx, grad_out, q, k, v, qm, km, log_a, log_b, v0, u1, v1, u2, v2, lc):
        db: _Dustbins | None = ctx.db
        g = grad_out.to(v.dtype).contiguous()
        sizes, dims = lc.sizes(), lc.dims()
        row_on = qm.bool() if db is None else db.row_on  # [B, Lq]
        col_on = km.bool() if db is None else db.col_on  # [B, Lk]
        inv_a = torch.where(row_on, torch.exp(-log_a), 0.0)  # [B, Lq]
        inv_b = torch.where(col_on, torch.exp(-log_b), 0.0).repeat_interleave(lc.H, dim=0)  # [BH, Lk]
        inv_a_bh = inv_a.repeat_interleave(lc.H, dim=0)  # [BH, Lq]
        alpha, beta, delta = torch.exp(u1 - u2), torch.exp(v1 - v2), torch.exp(v0 - v2)
        # token-shaped results: in the input dtype, or float32 until the dustbin parts are added
        acc_t = None if db is None else torch.float32
        thin = []
        if db is not None:
            for t in db.thin(_flat(q), _flat(k), lc.scale):
                gt = _flat(g)[:, t.r0 : t.r0 + t.nr].float()  # [BH, nr, DV]
                vt = _flat(v)[:, t.c0 : t.c0 + t.nc].float()  # [BH, nc, DV]
                thin.append((t, t.plan(u2, v2), (gt[:, :, None, :] * vt[:, None, :, :]).sum(-1), gt))

        a_bh = torch.where(row_on, torch.exp(log_a), 0.0).repeat_interleave(lc.H, dim=0)  # [BH, Lq]
        b_bh = torch.where(col_on, torch.exp(log_b), 0.0).repeat_interleave(lc.H, dim=0)  # [BH, Lk]

        def to(mass, sums):  # the factor that brings sums to mass (0 on an empty row or column)
            return torch.where(sums > 0, mass / torch.where(sums > 0, sums, 1.0), 0.0)

        # Each tail plan is brought back to its half-step's sums (rows to a, columns to b), as in
        # sinkalign.sinkhorn.core._adjoint: P^(2,2) by f22 (columns), P^(2,1) = P beta_j by r21
        # (rows), P^(1,1) = P alpha_i beta_j by bc11 / beta_j (columns), P^(1,0) = P alpha_i delta_j
        # by ar10 / alpha_i (rows); the sums ride along the sweeps that precede their use.
        # 1. g_v = f22 colsum(P * Z), dV = f22 P^T G; colsum(P), colsum(alpha_i P)
        g_v, cs, csa = torch.empty_like(v2), torch.empty_like(v2), torch.empty_like(v2)
        dv = torch.empty_like(v, dtype=torch.float32)
        lc.kernel("bwd_col_gv_dv")[lc.cols(lc.BN)](q, k, v, g, u2, v2, alpha, qm, km, g_v, dv, cs, csa, *sizes,
                                                   **dims)
        for t, P, Z, gt in thin:
            g_v += t.colsum(P * Z)
            t.add_cols(_flat(dv), P, gt)
            cs += t.colsum(P)
            csa += t.colsum(P * t.r(alpha))
        f22, bc11 = to(b_bh, cs), to(b_bh, csa)
        g_v = g_v * f22
        dv = (_flat(dv) * f22[:, :, None]).view(dv.shape).to(v.dtype)  # complete: the dustbins' share is in
        w2 = g_v * inv_b
        # 2. ubar2 = rowsum(P * f22_j (Z - w2_j)); rowsum(P beta_j), rowsum(P delta_j)
        ubar2, rb, rd = torch.empty_like(u2), torch.empty_like(u2), torch.empty_like(u2)
        lc.kernel("bwd_row_ubar2")[lc.rows(lc.BM)](q, k, v, g, u2, v2, w2, f22, beta, delta, qm, km, ubar2, rb, rd,
                                                   *sizes, **dims)
        for t, P, Z, _ in thin:
            ubar2 += t.rowsum(P * t.c(f22) * (Z - t.c(w2)))
            rb += t.rowsum(P * t.c(beta))
            rd += t.rowsum(P * t.c(delta))
        r21, ar10 = to(a_bh, rb), to(a_bh, rd)
        x2 = r21 * ubar2 * inv_a_bh
        # 3. vbar1 = -beta * P^T x2
        p_t_x2 = torch.empty_like(v2)
        lc.kernel("plan_matvec")[lc.cols(lc.BN)](k, q, v2, u2, x2, km, qm, p_t_x2, lc.Lk, lc.Lq, lc.H, lc.W,
                                                 lc.scale, *lc.cache_args(), D=lc.D, BLOCK_X=lc.BN, BLOCK_Y=lc.BM,
                                                 BLOCK_D=lc.BD, PREC=lc.prec, DOT_T=lc.dot_t,
                                                 CACHED=lc.cache is not None, COLS=lc.cache is not None, **lc.opts)
        for t, P, _, _ in thin:
            p_t_x2 += t.colsum(P * t.r(x2))
        c3 = -bc11 * beta * p_t_x2 * inv_b  # bc11 vbar1 / b (beta vbar1 / b unnormalised)
        # 4. ubar1 = -alpha * P c3 -> x1 and dQ in one sweep; the dustbins' share of P c3 goes in
        #    as `extra` so that x1 is complete inside the sweep
        extra = torch.zeros_like(u2)
        for t, P, _, _ in thin:
            extra += t.rowsum(P * t.c(c3))
        x1 = torch.empty_like(u2)
        dq = torch.empty_like(q, dtype=acc_t)
        lc.kernel("bwd_row_dq")[lc.rows(lc.BM)](q, k, v, g, u2, v2, w2, alpha, x2, beta, c3, delta, f22, ar10, inv_a,
                                                extra, qm, km, x1, dq, *sizes, **dims)
        # 5. dK = Sbar^T Q
        dk = torch.empty_like(k, dtype=acc_t)
        lc.kernel("bwd_col_dk")[lc.cols(lc.BN)](q, k, v, g, u2, v2, w2, alpha, x2, beta, c3, delta, f22, ar10, x1,
                                                qm, km, dk, *sizes, **dims)
        if thin:
            for t, P, Z, _ in thin:
                sbar = P * (t.c(f22) * (Z - t.c(w2)) - t.c(beta) * t.r(x2) - t.r(alpha) * t.c(c3)
                            - t.r(ar10) * t.c(delta) * t.r(x1))
                t.add_rows(_flat(dq), sbar * lc.scale, t.ks)
                t.add_cols(_flat(dk), sbar * lc.scale, t.qs)
            dq, dk = dq.to(q.dtype), dk.to(k.dtype)
        d_log_a = d_log_b = None
        if ctx.needs_input_grad[5] or ctx.needs_input_grad[6]:
            # each tail step adds log a (log b) to its duals on the active rows (columns): the
            # marginals' cotangents are those of u1 + u2 (v1 + v2), summed over the heads
            row_bh = row_on.repeat_interleave(lc.H, dim=0)
            ubar1 = torch.where(row_bh, x1 * torch.exp(log_a).repeat_interleave(lc.H, dim=0), 0.0)  # x1 = ubar1 / a
            col_bh = col_on.repeat_interleave(lc.H, dim=0)
            d_log_a = torch.where(row_bh, ubar1 + ubar2, 0.0).view(-1, lc.H, ubar2.shape[-1]).sum(1)
            d_log_b = torch.where(col_bh, g_v - beta * p_t_x2, 0.0).view(-1, lc.H, g_v.shape[-1]).sum(1)
            d_log_a, d_log_b = d_log_a.to(log_a.dtype), d_log_b.to(log_b.dtype)
        return dq, dk, dv, None, None, d_log_a, d_log_b, None, None, None


def _solver(config, eps, n_iters, tail, band) -> dict:
    out = _from_config(config, SinkhornConfig, {"eps": eps, "n_iters": n_iters, "tail": tail, "band": band})
    if config is not None and config.backward != "one_reference":
        raise ValueError(f"backward={config.backward!r}: the Triton operator implements the R = 2 one-reference "
                         "backward only; use the JAX reference for other modes")
    return out


def _launch_option(name: str, value, low: int, high: int | None, power_of_two: bool) -> int | None:
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low
            or (high is not None and value > high) or (power_of_two and value & (value - 1))):
        what = f"a power of two from {low} to {high}" if power_of_two else f"an integer >= {low}"
        raise ValueError(f"{name}={value!r} must be {what} (or None: the default launch)")
    return int(value)


def _kernel_setup(q, v, interpret, block_m, block_n, ref_name, precision="ieee", num_warps=None, num_stages=None):
    """Kernel dtype, Triton mode, device, tile and launch checks; returns (interpret, block_m, block_n,
    num_warps, num_stages), the defaults (:func:`~sinkalign.kernels.triton.kernels.default_launch`)
    filled in."""
    num_warps = _launch_option("num_warps", num_warps, 1, 32, True)
    num_stages = _launch_option("num_stages", num_stages, 1, None, False)
    if q.dtype not in _KERNEL_DTYPES:
        raise ValueError(f"q.dtype={q.dtype} is not supported by the Triton kernels (valid: "
                         f"{[str(t) for t in _KERNEL_DTYPES]}); use {ref_name} for float64")
    if interpret is not None and not isinstance(interpret, bool):
        raise ValueError(f"interpret={interpret!r} must be True, False or None")
    from sinkalign.kernels.triton.kernels import interpreter_mode  # first import of triton happens here

    mode = interpreter_mode()
    if interpret is not None and interpret != mode:
        raise ValueError(f"{interpret=} but this process runs Triton with interpreter={mode}: the mode is fixed "
                         "when triton is first imported; set TRITON_INTERPRET=1 (or leave it unset) in the "
                         "environment before that import")
    interpret = mode
    check_f32_dots(precision, native=not interpret, needs="native kernels on a GPU", here="the interpreter")
    if not interpret and q.device.type != "cuda":
        raise ValueError(f"native Triton kernels need CUDA tensors, got device {q.device}; to run on CPU set "
                         "TRITON_INTERPRET=1 in the environment before triton is imported")
    if interpret:
        launch = {"block": 16, "num_warps": None, "num_stages": None}  # the interpreter has no launch options
    else:
        from sinkalign.kernels.triton.kernels import default_launch

        dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[q.dtype]
        launch = default_launch(dtype, precision, max(q.shape[-1], v.shape[-1]))
    return (interpret, _block("block_m", block_m, launch["block"]), _block("block_n", block_n, launch["block"]),
            launch["num_warps"] if num_warps is None else num_warps,
            launch["num_stages"] if num_stages is None else num_stages)


@torch.compiler.disable  # kernels launched eagerly: torch.compile breaks its graph around the operator
def sinkhorn_attention_triton(q, k, v, *, q_mask=None, k_mask=None, log_a=None, log_b=None, config=None, eps=_UNSET,
                              n_iters=_UNSET, tail=_UNSET, band=_UNSET, interpret=None, block_m=None, block_n=None,
                              precision="ieee", num_warps=None, num_stages=None,
                              cache_scores=None) -> torch.Tensor:
    """Banded, masked, log-domain balanced Sinkhorn attention with an R = 2 tail (Triton).

    Args:
        q: queries [B, H, Lq, d]; k: keys [B, H, Lk, d]; v: values [B, H, Lk, dv]; one
            dtype among float32, bfloat16, float16 (use the reference for float64).
        q_mask: [B, Lq] bool, True = real token (default all True); k_mask: [B, Lk] likewise.
        log_a: [B, Lq] / log_b: [B, Lk] log marginals (default 0 = unit mass per token).
        config: a :class:`~sinkalign.sinkhorn.SinkhornConfig`, as the JAX and Pallas operators
            take it (its eps, n_iters, tail, band; backward must be ``one_reference``); or the
            four as keywords below, defaulting to ``SinkhornConfig()``'s. Not both.
        eps: entropic temperature > 0; scores are ``<q_i, k_j> / (sqrt(d) eps)``.
        n_iters: base Sinkhorn steps T >= 0 (stopped, centered).
        tail: differentiable tail steps R; only 2 is implemented here.
        band: half-width W >= 1 (key j active for query i iff |i - j| <= W); None = dense.
        interpret: expected Triton mode; None accepts the process's mode (the interpreter iff
            TRITON_INTERPRET=1 was set before triton was imported), True/False assert it.
        block_m, block_n: query / key tile sizes (powers of two >= 16; default 16 in the
            interpreter; natively :func:`~sinkalign.kernels.triton.kernels.default_launch`'s:
            32 for float32 with exact dots, else 64, or 32 for float32 with d or dv > 64).
        precision: float32 dots at full precision (``"ieee"``, default), or natively as three
            (``"tf32x3"``, close to float32) or one (``"tf32"``, ~1e-3 relative) TF32
            tensor-core passes; bfloat16 / float16 inputs ignore it.
        num_warps, num_stages: launch options of every kernel (warps per program, a power of
            two from 1 to 32; software-pipelining stages >= 1); None = ``default_launch``'s (8
            warps for float32 with exact dots, else 4; 3 stages). Native only (the interpreter
            has none). For tuning: same results up to float32 summation order.
        cache_scores: compute the band's score tiles once per pass (forward; backward) into a
            float32 cache that every sweep reads, instead of recomputing ``Q K^T`` in each sweep
            (``scores_kernel``): fewer dots for O(Lq (block_m + 2 W)) float32 memory while a pass
            runs (~140 MB per batch-head at L = 16,384, W = 1,024); nothing more is kept between
            forward and backward. Same results up to float32 summation order (the column sweeps
            read the row sweeps' tiles transposed). None (the default): cached with exact
            float32 dots (float32 inputs, ``precision="ieee"``) while the cache takes at most
            2 GiB (:mod:`sinkalign.kernels.cache`: ~3x faster forward + backward on an H200);
            not with TF32 or half-type dots, where it did not pay.

    Returns:
        O = P^(2,2) V [B, H, Lq, dv] in v's dtype; rows of padded queries are 0.
        Differentiable in q, k, v and the log marginals (not in masks); the gradient is 0 at
        padded positions.

    Raises:
        ValueError: before any kernel launch, on bad shapes, dtypes, devices, eps, band,
            n_iters, tail != 2, a NaN or infinity at a valid position of q, k, v, log_a or log_b
            (message names the tensor and the index), or a valid query row / key column with no
            active entry (message names the batch index and position). What padded positions
            hold is not checked: they are zeroed before the solve, so a NaN or infinity there
            reaches neither the output nor any gradient (the rule of the JAX operator).
    """
    eps, n_iters, tail, band = _solver(config, eps, n_iters, tail, band).values()
    if tail != 2 or isinstance(tail, bool):
        raise ValueError(f"tail={tail!r}: the Triton operator implements the R = 2 one-reference backward only; "
                         "use sinkhorn_attention_ref for other tail depths")
    q, k, v, q_mask, k_mask, log_a, log_b = prepare_inputs(q, k, v, q_mask=q_mask, k_mask=k_mask, log_a=log_a,
                                                           log_b=log_b, eps=eps, n_iters=n_iters, tail=tail, band=band)
    interpret, block_m, block_n, num_warps, num_stages = _kernel_setup(
        q, v, interpret, block_m, block_n, "sinkhorn_attention_ref", precision, num_warps, num_stages)
    lc = _Launch(q, k, v, band, float(eps), interpret, block_m, block_n, precision, num_warps, num_stages,
                 cache_scores)
    log.debug("sinkhorn_attention_triton B=%d H=%d Lq=%d Lk=%d d=%d W=%d blocks=%dx%d interpret=%s",
              lc.B, lc.H, lc.Lq, lc.Lk, lc.D, lc.W, block_m, block_n, interpret)
    qm = q_mask.to(torch.int8).contiguous()
    km = k_mask.to(torch.int8).contiguous()
    log_a = log_a.to(torch.float32).contiguous()
    log_b = log_b.to(torch.float32).contiguous()
    return _SinkhornTail2.apply(q.contiguous(), k.contiguous(), v.contiguous(), qm, km, log_a, log_b, lc,
                                int(n_iters), None)[0]


@torch.compiler.disable  # kernels launched eagerly: torch.compile breaks its graph around the operator
def sinkhorn_dustbin_attention_triton(q, k, v, q_dustbin, k_dustbin, v_dustbin=None, *, q_mask=None, k_mask=None,
                                      config=None, dustbin=None, eps=_UNSET, n_iters=_UNSET, band=_UNSET,
                                      variant=_UNSET, mass=_UNSET, filler=_UNSET, interpret=None, block_m=None,
                                      block_n=None, precision="ieee", num_warps=None, num_stages=None,
                                      cache_scores=None) -> torch.Tensor:
    """Sinkhorn attention with learned dustbins (Triton, R = 2): O [B, H, Lq, dv] of the real queries.

    The operator of ``sinkalign.sinkhorn.dustbin.dustbin_attention`` (``backward`` R = 2
    one-reference; options and defaults of ``DustbinConfig``) and of
    :func:`~sinkalign.kernels.triton.ref.sinkhorn_dustbin_attention_ref`.

    Args:
        q [B, H, Lq, d], k [B, H, Lk, d], v [B, H, Lk, dv]: real tokens, one dtype among
            float32, bfloat16, float16 (use the reference for float64).
        q_dustbin, k_dustbin [d] and v_dustbin [dv] (default 0), or broadcastable to
            [B, H, d] / [B, H, dv]: the query-side dustbin (a row that absorbs unmatched keys),
            the key-side dustbin (a column that absorbs unmatched queries) and its value; cast
            to q's dtype.
        q_mask [B, Lq], k_mask [B, Lk]: bool, True = real token (default all True).
        config: a :class:`~sinkalign.sinkhorn.SinkhornConfig` (eps, n_iters, band; tail 2) or
            eps, n_iters, band as keywords, as :func:`sinkhorn_attention_triton` (band =
            half-width W on the real tokens; a valid token with no partner in its band is allowed).
        dustbin: a :class:`~sinkalign.sinkhorn.DustbinConfig` (variant, mass, filler), as
            ``sinkalign.sinkhorn.dustbin`` takes it; or those three as keywords (defaults
            ``DustbinConfig()``'s). Not both.
        variant: ``banded`` (O(L W): the band runs in the kernels; the always-active dustbin
            column and row, with the corner, are computed in plain torch, O(L d), and merged
            between the sweeps) or ``paper`` (tensors augmented to L + ``filler`` with one active
            dustbin and ``filler - 1`` inactive fillers, unit masses, band ``max(W, Lq, Lk)``,
            i.e. dense, through :func:`sinkhorn_attention_triton`).
        mass: dustbin marginal for ``banded``: ``unit`` (1) or ``length`` (the number of valid
            tokens on the other side, at least 1); ``paper`` requires ``unit``.
        filler: the paper's dustbin block size (>= 1).
        interpret, block_m, block_n, precision, num_warps, num_stages, cache_scores: as
            :func:`sinkhorn_attention_triton` (the cache holds the band's tiles).

    Returns:
        O [B, H, Lq, dv] in v's dtype (padded query rows 0), differentiable in q, k, v and the
        three dustbin tokens (the gradient is 0 at padded positions).

    Raises:
        ValueError: before any kernel launch, on bad options (variant, mass, filler), shapes,
            dtypes, devices, eps, band, n_iters, or a NaN or infinity in a dustbin token or at a
            valid position of q, k, v (message names the tensor and the index). Padded
            positions are not checked: they are zeroed before the solve, so a NaN or infinity
            there reaches nothing, as in :func:`sinkhorn_attention_triton`.
    """
    solver = _solver(config, eps, n_iters, _UNSET, band)
    if solver["tail"] != 2:
        raise ValueError(f"tail={solver['tail']!r}: the Triton operator implements the R = 2 one-reference "
                         "backward only; use sinkhorn_dustbin_attention_ref for other tail depths")
    eps, n_iters, band = solver["eps"], solver["n_iters"], solver["band"]
    variant, mass, filler = _from_config(dustbin, DustbinConfig, {"variant": variant, "mass": mass,
                                                                  "filler": filler}).values()
    prob = prepare_dustbin(q, k, v, q_dustbin, k_dustbin, v_dustbin, q_mask=q_mask, k_mask=k_mask, eps=eps,
                           n_iters=n_iters, tail=2, band=band, variant=variant, mass=mass, filler=filler)
    interpret, block_m, block_n, num_warps, num_stages = _kernel_setup(
        q, v, interpret, block_m, block_n, "sinkhorn_dustbin_attention_ref", precision, num_warps, num_stages)
    check_cache_scores(cache_scores)
    if variant == "paper":
        out = sinkhorn_attention_triton(prob.q, prob.k, prob.v, q_mask=prob.q_valid, k_mask=prob.k_valid,
                                        log_a=prob.log_a, log_b=prob.log_b, eps=eps, n_iters=n_iters, tail=2,
                                        band=prob.band, interpret=interpret, block_m=block_m, block_n=block_n,
                                        precision=precision, num_warps=num_warps, num_stages=num_stages,
                                        cache_scores=cache_scores)
        return out[:, :, : prob.lq]
    lc = _Launch(prob.q, prob.k, prob.v, band, float(eps), interpret, block_m, block_n, precision, num_warps,
                 num_stages, cache_scores)
    log.debug("sinkhorn_dustbin_attention_triton banded/%s B=%d H=%d Lq=%d Lk=%d d=%d W=%d blocks=%dx%d", mass,
              lc.B, lc.H, prob.lq, prob.lk, lc.D, lc.W, block_m, block_n)
    db = _Dustbins(prob.q_valid, prob.k_valid, lc.H)
    # the kernels see the augmented tensors with the dustbin row / column masked out (band only)
    qm = torch.cat([prob.q_valid[:, :-1], torch.zeros_like(prob.q_valid[:, :1])], 1).to(torch.int8).contiguous()
    km = torch.cat([prob.k_valid[:, :-1], torch.zeros_like(prob.k_valid[:, :1])], 1).to(torch.int8).contiguous()
    out = _SinkhornTail2.apply(prob.q.contiguous(), prob.k.contiguous(), prob.v.contiguous(), qm, km,
                               prob.log_a.to(torch.float32).contiguous(), prob.log_b.to(torch.float32).contiguous(),
                               lc, int(n_iters), db)[0]
    return out[:, :, : prob.lq]
