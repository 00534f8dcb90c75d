"""Plain PyTorch reference of banded, masked, log-domain balanced Sinkhorn attention.

This is the ground truth that the Triton kernels in :mod:`sinkalign.kernels.triton.kernels`
are tested against, and the PyTorch twin of the JAX operator :mod:`sinkalign.sinkhorn`.
Everything here is dense ([B, H, Lq, Lk] score tensors) and works in any floating dtype,
float64 included; it is meant for small problems and tests, not for long sequences.

Operator (``shared/design/sinkhorn_tail.md``):

* active support ``Omega_ij = q_mask_i & k_mask_j & |i - j| <= band`` (``band`` is the
  half-width; ``None`` means dense), shared by all heads;
* scores ``S_ij = <q_i, k_j> / (sqrt(d) * eps)``;
* row half-step ``u_i = log a_i - LSE_{j in Omega_i} (S_ij + v_j)``, column half-step
  ``v_j = log b_j - LSE_{i in Omega_j} (S_ij + u_i)``, masked *after* adding the potential;
  inactive rows / columns get ``u = 0`` / ``v = 0``;
* base: ``n_iters`` full steps from ``v = 0`` (u then v), each followed by centering
  ``c = mean of u over valid queries; u -= c; v += c``, all under ``torch.no_grad``;
* tail: ``tail`` raw steps ``u^(t) = row(v^(t-1)), v^(t) = col(u^(t))`` from the stopped
  ``v^(0)``, differentiable;
* output ``O = P^(R,R) V`` with ``P^(a,b)_ij = exp(S_ij + u^(a)_i + v^(b)_j)`` on ``Omega``;
* inputs (:func:`prepare_inputs`): a NaN or infinity is refused at valid positions only;
  padded rows of q, k, v and padded log masses are zeroed before the solve, so what they
  hold reaches neither O nor a gradient (0 there), as in ``sinkalign.sinkhorn.core.prepare``.

Dustbins: :func:`sinkhorn_dustbin_attention_ref` runs the same dense solve on the augmented
support of ``sinkalign.sinkhorn.dustbin`` (:func:`prepare_dustbin` builds the augmented
tokens, masks and marginals, :func:`dustbin_support` the support): ``paper`` (dense, unit
masses, fillers) or ``banded`` (band plus an always-active dustbin row and column, dustbin
mass 1 or the other side's number of valid tokens).

Besides the autograd path, :func:`direct_backward_ref` (Proposition 1, any R, four
separately formed plans for R = 2) and :func:`one_reference_backward_ref` (Proposition 2,
R = 2, only ``P^(2,2)`` formed) give the explicit surrogate backward in dense torch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from sinkalign.sinkhorn import checks
from sinkalign.sinkhorn.config import DustbinConfig, SinkhornConfig

__all__ = [
    "DustbinProblem",
    "OneReferenceGrads",
    "PreparedInputs",
    "TailDuals",
    "band_support",
    "check_dustbin_options",
    "check_support",
    "direct_backward_ref",
    "dustbin_support",
    "one_reference_backward_ref",
    "prepare_dustbin",
    "prepare_inputs",
    "sinkhorn_attention_ref",
    "sinkhorn_dustbin_attention_ref",
    "sinkhorn_tail_duals_ref",
]


class TailDuals(NamedTuple):
    """Dual potentials of one solve.

    ``u[t]`` is ``u^(t)`` [B, H, Lq] and ``v[t]`` is ``v^(t)`` [B, H, Lk] for ``t = 0..R``;
    ``(u[0], v[0])`` is the centered stopped base pair, the rest are raw tail iterates.
    ``support`` is the active support [B, 1, Lq, Lk] (bool) and ``scores`` the scaled
    scores ``S`` [B, H, Lq, Lk].
    """

    u: list[torch.Tensor]
    v: list[torch.Tensor]
    support: torch.Tensor
    scores: torch.Tensor


class OneReferenceGrads(NamedTuple):
    """Explicit backward of the R-step surrogate.

    ``dq`` [B, H, Lq, d], ``dk`` [B, H, Lk, d], ``dv`` [B, H, Lk, dv]; the vector
    cotangents ``ubar[t]`` [B, H, Lq] and ``vbar[t]`` [B, H, Lk] for ``t = 0..R``
    (``ubar[0]`` is unused and zero; ``vbar[0]`` is ``eta``, the cotangent the
    stop-gradient discards, Proposition 5); ``g_u``/``g_v`` are the row/column sums of
    ``P^(R,R) * Z``.
    """

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    ubar: list[torch.Tensor]
    vbar: list[torch.Tensor]
    g_u: torch.Tensor
    g_v: torch.Tensor


# --------------------------------------------------------------------------- validation


_check_int = checks.check_int


def _check_mask(name: str, mask, batch: int, length: int, device) -> torch.Tensor:
    if mask is None:
        return torch.ones(batch, length, dtype=torch.bool, device=device)
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape [{batch}, {length}], got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must have dtype torch.bool, got {mask.dtype}")
    if tuple(mask.shape) != (batch, length):
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected [B, L] = [{batch}, {length}]")
    if mask.device != device:
        raise ValueError(f"{name} is on {mask.device}, expected {device} like q")
    return mask


def _check_log_marginal(name: str, log_m, mask: torch.Tensor, device) -> torch.Tensor:
    batch, length = mask.shape
    if log_m is None:
        return torch.zeros(batch, length, dtype=torch.float32, device=device)
    if not isinstance(log_m, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape [{batch}, {length}], got {type(log_m).__name__}")
    if not log_m.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got {log_m.dtype}")
    if tuple(log_m.shape) != (batch, length):
        raise ValueError(f"{name} has shape {tuple(log_m.shape)}, expected [B, L] = [{batch}, {length}]")
    if log_m.device != device:
        raise ValueError(f"{name} is on {log_m.device}, expected {device} like q")
    bad = mask & ~torch.isfinite(log_m)
    refused, dirty = torch.stack([bad.any(), ((log_m != 0) & ~mask).any()]).tolist()
    if refused:
        b, i = (int(x) for x in bad.nonzero()[0])
        raise ValueError(f"{name} is not finite at batch {b}, position {i} ({float(log_m[b, i])}); "
                         "valid positions need finite log masses")
    return torch.where(mask, log_m, 0) if dirty else log_m  # padding zeroed, as q, k, v (_zero_padding)


def check_support(q_mask: torch.Tensor, k_mask: torch.Tensor, band: int | None) -> None:
    """Raise ``ValueError`` if a valid query row or key column has no active partner: the check
    (and message) every backend shares, :func:`sinkalign.sinkhorn.checks.check_support`, on
    the [B, L] masks (copied to the host: a few bytes per token)."""
    checks.check_support(_host(q_mask), _host(k_mask), band)


def active_transforms() -> list[str]:
    """The ``torch.func`` transforms around this call, outermost first (``"Vmap"``, ``"Grad"``,
    ``"Jvp"``, ``"Functionalize"``); empty outside them."""
    from torch._C import _functorch  # torch.func's own record of its transforms; no public accessor

    return [level.key().name for level in _functorch.get_interpreter_stack() or ()]


def refuse_vmap(op: str) -> None:
    """``ValueError`` under ``torch.func.vmap``: the operators check each problem's values on the
    host (masks, finiteness, an empty band row) and launch per problem, which a batched tensor
    cannot give; their own batch axis B is the way to run many problems at once."""
    if "Vmap" in active_transforms():
        raise ValueError(f"{op} has no torch.func.vmap rule: put the mapped axis into the batch axis B instead "
                         "(q [B, H, L, d] with [B, L] masks; reshape a mapped [N, B, ...] to [N * B, ...] and back)")


def _host(t: torch.Tensor):
    """``t`` as a NumPy array on the host, also inside ``torch.func``'s transforms (grad, jacrev,
    jvp), whose wrapped tensors have no storage to read: for the checks only, never for the maths."""
    with torch._C._DisableFuncTorch():  # what torch.func itself uses to step outside its transforms
        return t.detach().cpu().numpy()


def _zero_padding(name: str, t: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """``t`` [B, H, L, E] with its padded rows (``valid`` [B, L] False) zeroed, after refusing a
    NaN or infinity at a valid position (:func:`~sinkalign.sinkhorn.checks.nonfinite`: the
    tensor's name and the first such index).

    The solve then sees exactly what the JAX operator sees (``core.prepare`` zeroes padding),
    whatever the padding held, and the gradient at padded rows is 0 (``torch.where``'s). It is
    the inputs that are zeroed, not only the masked scores: a masked score built from a NaN key
    still reaches dq through the matmul's backward (dq = Sbar k, 0 * NaN = NaN), and a finite but
    huge padded value (a ``finfo.max`` sentinel) overflows ``Z = G V^T`` to inf in the Triton
    backward, where ``Sbar = P * (Z - ...)`` gives 0 * inf = NaN.

    ``valid`` ``None`` (no mask given): nothing is padded; every value is checked, in one pass.
    Fast path: ``t`` itself, no copy, when its padding is already zero (or there is none), the
    usual case, where zeroing would change nothing. Finding out costs one more elementwise
    reduction beside the finiteness check, in the same host sync.
    """
    if valid is None:  # no mask given: no padding, every position checked (one pass, as before the rule)
        finite = torch.isfinite(t)
        if not bool(finite.all()):
            raise checks.nonfinite(name, (~finite).nonzero()[0].tolist())
        return t
    valid = valid[:, None, :, None]  # [B, 1, L, 1]
    nonfinite = ~torch.isfinite(t)
    refused, dirty = torch.stack([(nonfinite & valid).any(), ((t != 0) & ~valid).any()]).tolist()  # NaN != 0
    if refused:
        raise checks.nonfinite(name, (nonfinite & valid).nonzero()[0].tolist())
    return torch.where(valid, t, 0) if dirty else t


class PreparedInputs(NamedTuple):
    """The operator's inputs, checked and filled in (:func:`prepare_inputs`).

    ``q`` [B, H, Lq, d], ``k`` [B, H, Lk, d], ``v`` [B, H, Lk, dv] with their padded rows zeroed
    (the tensors given where those already were zero); ``q_mask`` [B, Lq], ``k_mask`` [B, Lk]
    (bool; all True where none was given); ``log_a`` [B, Lq], ``log_b`` [B, Lk] (zeros, float32,
    where none was given), padded entries zeroed likewise.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_mask: torch.Tensor
    k_mask: torch.Tensor
    log_a: torch.Tensor
    log_b: torch.Tensor


@torch.compiler.disable  # host-side checks: under torch.compile they run eagerly (one graph break)
def prepare_inputs(q, k, v, *, q_mask, k_mask, log_a, log_b, eps, n_iters, tail, band,
                   check_empty=True) -> PreparedInputs:
    """Validate the operator's inputs; return them as :class:`PreparedInputs`, filled in.

    Shapes: q [B, H, Lq, d], k [B, H, Lk, d], v [B, H, Lk, dv], q_mask/log_a [B, Lq],
    k_mask/log_b [B, Lk]. Missing masks become all-True, missing log marginals zeros
    (float32). Raises ``ValueError`` naming the bad value; nothing is computed before.
    A NaN or infinity is refused at valid positions only (naming the tensor and the index);
    padded positions are not checked but zeroed in the returned q, k, v, log_a, log_b, so
    what they held (NaN, infinity, a huge sentinel) reaches neither the output nor any
    gradient, and the gradient there is 0: the rule of the JAX operator
    (``sinkalign.sinkhorn.core.prepare``; under ``jax.jit`` nothing can be checked). Every
    computation must use the returned tensors, not the ones given.
    ``check_empty=False`` skips :func:`check_support` (the dustbin problems, where every
    valid token reaches the other side's dustbin whatever the band).
    """
    refuse_vmap("the PyTorch Sinkhorn operator (reference and Triton)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(f"{name} must have shape [B, H, L, d], got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor, got {t.dtype}")
    checks.check_shapes(q.shape, k.shape, v.shape)
    batch, heads, lq, dim = q.shape
    lk = k.shape[2]
    if min(batch, heads, lq, lk, dim, v.shape[3]) == 0:
        raise ValueError(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    checks.check_settings(eps=eps, n_iters=n_iters, tail=tail, band=band)
    given_q, given_k = q_mask, k_mask
    q_mask = _check_mask("q_mask", q_mask, batch, lq, q.device)
    k_mask = _check_mask("k_mask", k_mask, batch, lk, q.device)
    q = _zero_padding("q", q, None if given_q is None else q_mask)  # no mask given: nothing padded
    k = _zero_padding("k", k, None if given_k is None else k_mask)
    v = _zero_padding("v", v, None if given_k is None else k_mask)
    log_a = _check_log_marginal("log_a", log_a, q_mask, q.device)
    log_b = _check_log_marginal("log_b", log_b, k_mask, q.device)
    if check_empty:
        check_support(q_mask, k_mask, band)
    return PreparedInputs(q, k, v, q_mask, k_mask, log_a, log_b)


# --------------------------------------------------------------------------- operator


def band_support(q_mask: torch.Tensor, k_mask: torch.Tensor, band: int | None) -> torch.Tensor:
    """Dense active support [B, 1, Lq, Lk] (bool): band AND q_mask AND k_mask."""
    lq, lk = q_mask.shape[1], k_mask.shape[1]
    support = q_mask[:, None, :, None] & k_mask[:, None, None, :]
    if band is not None:
        i = torch.arange(lq, device=q_mask.device)[:, None]
        j = torch.arange(lk, device=q_mask.device)[None, :]
        support = support & ((i - j).abs() <= band)
    return support


def _row_step(scores, v, support, row_on, log_a):
    """u_i = log a_i - LSE_j over the support of (S_ij + v_j); 0 on inactive rows. [B, H, Lq]"""
    x = torch.where(support, scores + v[..., None, :], float("-inf"))
    x = torch.where(row_on[..., None], x, 0.0)  # all -inf rows would give NaN gradients
    return torch.where(row_on, log_a[:, None, :].to(scores.dtype) - torch.logsumexp(x, dim=-1), 0.0)


def _col_step(scores, u, support, col_on, log_b):
    """v_j = log b_j - LSE_i over the support of (S_ij + u_i); 0 on inactive columns. [B, H, Lk]"""
    x = torch.where(support, scores + u[..., :, None], float("-inf"))
    x = torch.where(col_on[..., None, :], x, 0.0)
    return torch.where(col_on, log_b[:, None, :].to(scores.dtype) - torch.logsumexp(x, dim=-2), 0.0)


def sinkhorn_tail_duals_ref(q, k, *, q_mask=None, k_mask=None, log_a=None, log_b=None, eps=1.0, n_iters=15,
                            tail=2, band=None, _validated=False) -> TailDuals:
    """Base solve (stopped) plus ``tail`` raw steps; differentiable through the tail only.

    q [B, H, Lq, d], k [B, H, Lk, d]; computes in q's dtype. See the module docstring for
    the recurrences and :class:`TailDuals` for the result.
    """
    if not _validated:
        v_dummy = k[..., :1]
        q, k, _, q_mask, k_mask, log_a, log_b = prepare_inputs(q, k, v_dummy, q_mask=q_mask, k_mask=k_mask,
                                                               log_a=log_a, log_b=log_b, eps=eps, n_iters=n_iters,
                                                               tail=tail, band=band)
    return _duals_on(q, k, band_support(q_mask, k_mask, band), log_a, log_b, eps, n_iters, tail)


def _duals_on(q, k, support, log_a, log_b, eps, n_iters, tail) -> TailDuals:
    """:func:`sinkhorn_tail_duals_ref` on an explicit dense support [B, 1, Lq, Lk] (bool)."""
    dim = q.shape[-1]
    row_on = support.any(-1)  # [B, 1, Lq]
    col_on = support.any(-2)  # [B, 1, Lk]
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / (math.sqrt(dim) * eps)
    n_rows = row_on.sum(-1, keepdim=True).clamp(min=1).to(scores.dtype)  # [B, 1, 1]
    with torch.no_grad():
        s0 = scores.detach()
        u = torch.zeros(q.shape[:3], dtype=q.dtype, device=q.device)
        v = torch.zeros(k.shape[:3], dtype=q.dtype, device=q.device)
        for _ in range(n_iters):
            u = _row_step(s0, v, support, row_on, log_a)
            v = _col_step(s0, u, support, col_on, log_b)
            c = u.sum(-1, keepdim=True) / n_rows  # [B, H, 1]
            u = torch.where(row_on, u - c, 0.0)
            v = torch.where(col_on, v + c, 0.0)
    us, vs = [u], [v]
    for _ in range(tail):
        us.append(_row_step(scores, vs[-1], support, row_on, log_a))
        vs.append(_col_step(scores, us[-1], support, col_on, log_b))
    return TailDuals(us, vs, support, scores)


def _plan(duals: TailDuals, a: int, b: int) -> torch.Tensor:
    """P^(a,b) [B, H, Lq, Lk] = exp(S + u^(a) + v^(b)) on the support, 0 elsewhere."""
    x = duals.scores + duals.u[a][..., :, None] + duals.v[b][..., None, :]
    return torch.exp(torch.where(duals.support, x, float("-inf")))


_UNSET = object()  # a keyword not passed: its value comes from the config (or the config's default)


def _from_config(config, cls, given: dict) -> dict:
    """The operator settings: from ``config`` (a ``cls``: SinkhornConfig / DustbinConfig, the
    configuration the JAX and Pallas operators take too) or from keywords, whose defaults are
    ``cls()``'s; passing a setting both ways is an error."""
    if config is None:
        defaults = cls()
        return {name: getattr(defaults, name) if value is _UNSET else value for name, value in given.items()}
    if not isinstance(config, cls):
        raise ValueError(f"config must be a {cls.__name__}, got {type(config).__name__}")
    twice = [name for name, value in given.items() if value is not _UNSET]
    if twice:
        raise ValueError(f"{', '.join(twice)} given both in the {cls.__name__} and as keywords; pass one")
    return {name: getattr(config, name) for name in given}


def sinkhorn_attention_ref(q, k, v, *, q_mask=None, k_mask=None, log_a=None, log_b=None, config=None, eps=_UNSET,
                           n_iters=_UNSET, tail=_UNSET, band=_UNSET) -> torch.Tensor:
    """Reference operator ``O = P^(R,R) V`` [B, H, Lq, dv], differentiable in q, k, v.

    q [B, H, Lq, d], k [B, H, Lk, d], v [B, H, Lk, dv]; q_mask [B, Lq], k_mask [B, Lk]
    (bool, True = real token); log_a [B, Lq], log_b [B, Lk] log marginals (default 0);
    ``config``: a :class:`~sinkalign.sinkhorn.SinkhornConfig` (its eps, n_iters, tail, band;
    any backward mode gives autograd's gradient here), or those four as keywords, defaulting to
    ``SinkhornConfig()``'s (eps 1, 15 steps, tail 2, dense); not both. ``band`` is the
    half-width W (key j active for query i iff |i - j| <= W), ``None`` for dense. Computes in
    the inputs' dtype. Inactive query rows of O are 0. Raises ``ValueError`` on bad input,
    including a valid row/column with no active entry.
    """
    eps, n_iters, tail, band = _from_config(config, SinkhornConfig, {"eps": eps, "n_iters": n_iters, "tail": tail,
                                                                     "band": band}).values()
    q, k, v, q_mask, k_mask, log_a, log_b = prepare_inputs(q, k, v, q_mask=q_mask, k_mask=k_mask, log_a=log_a,
                                                           log_b=log_b, eps=eps, n_iters=n_iters, tail=tail, band=band)
    duals = sinkhorn_tail_duals_ref(q, k, q_mask=q_mask, k_mask=k_mask, log_a=log_a, log_b=log_b, eps=eps,
                                    n_iters=n_iters, tail=tail, band=band, _validated=True)
    return _plan(duals, tail, tail) @ v


# --------------------------------------------------------------------------- dustbins


class DustbinProblem(NamedTuple):
    """The dustbin-augmented problem (the torch twin of ``sinkalign.sinkhorn.dustbin.augment``).

    ``q`` [B, H, Lq', d], ``k`` [B, H, Lk', d], ``v`` [B, H, Lk', dv]: the real tokens with the
    dustbin token appended at row ``lq`` / column ``lk`` (then ``filler - 1`` zero fillers for
    ``paper``), differentiable in the real and dustbin tokens. ``q_valid`` [B, Lq'], ``k_valid``
    [B, Lk'] (bool: the dustbins are active, fillers not); ``log_a`` [B, Lq'], ``log_b`` [B, Lk']
    log marginals (float64 for float64 tokens, else float32); ``band``: the half-width to use on
    the augmented problem (``paper``: ``max(W, Lq, Lk)``; ``banded``: W on the real tokens only,
    plus the dustbin row and column).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_valid: torch.Tensor
    k_valid: torch.Tensor
    log_a: torch.Tensor
    log_b: torch.Tensor
    variant: str
    band: int | None
    lq: int
    lk: int


def check_dustbin_options(variant, mass, filler) -> None:
    """ValueError unless ``DustbinConfig(variant=..., mass=..., filler=...)`` accepts the options
    (and ``filler`` is not a bool)."""
    DustbinConfig(variant=variant, mass=mass, filler=filler)
    if isinstance(filler, bool):
        raise ValueError(f"filler={filler!r} must be a positive integer")


def _dustbin_token(name: str, x, ref: torch.Tensor, dim: int) -> torch.Tensor:
    """A dustbin token [dim] (or broadcastable to [B, H, dim]) -> [B, H, 1, dim] in ref's dtype."""
    batch, heads = ref.shape[:2]
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape [{dim}] (or broadcastable to "
                         f"[{batch}, {heads}, {dim}]), got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] != dim:
        raise ValueError(f"{name} must have last dimension {dim}, got shape {tuple(x.shape)}")
    if x.device != ref.device:
        raise ValueError(f"{name} is on {x.device}, expected {ref.device} like q")
    try:
        fits = x.ndim <= 3 and tuple(torch.broadcast_shapes(x.shape, (batch, heads, dim))) == (batch, heads, dim)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name} of shape {tuple(x.shape)} does not broadcast to {(batch, heads, dim)}")
    finite = torch.isfinite(x.detach())
    if not bool(finite.all()):
        raise checks.nonfinite(name, (~finite).nonzero()[0].tolist())
    return x.to(ref.dtype).broadcast_to(batch, heads, dim)[:, :, None, :]


def prepare_dustbin(q, k, v, q_dustbin, k_dustbin, v_dustbin=None, *, q_mask=None, k_mask=None, eps=1.0,
                    n_iters=15, tail=2, band=None, variant="banded", mass="length", filler=128) -> DustbinProblem:
    """Validate the dustbin operator's inputs and build the augmented problem (``augment``).

    Raises ``ValueError`` on bad options, shapes, dtypes, devices or a non-finite value in a
    dustbin token (always valid) or at a valid position of q, k, v; padded rows of q, k, v go
    into the augmented problem zeroed (:func:`prepare_inputs`), so what they held reaches
    nothing. A valid token whose band holds no partner is allowed: it still reaches the dustbin.
    """
    check_dustbin_options(variant, mass, filler)
    q, k, v, q_mask, k_mask, _, _ = prepare_inputs(q, k, v, q_mask=q_mask, k_mask=k_mask, log_a=None, log_b=None,
                                                   eps=eps, n_iters=n_iters, tail=tail, band=band, check_empty=False)
    batch, heads, lq, dim = q.shape
    lk, dv = k.shape[2], v.shape[3]
    qd = _dustbin_token("q_dustbin", q_dustbin, q, dim)
    kd = _dustbin_token("k_dustbin", k_dustbin, q, dim)
    vd = (torch.zeros(batch, heads, 1, dv, dtype=q.dtype, device=q.device) if v_dustbin is None
          else _dustbin_token("v_dustbin", v_dustbin, q, dv))
    mdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    true1 = torch.ones(batch, 1, dtype=torch.bool, device=q.device)
    if variant == "paper":
        n_fill = filler - 1

        def pad(x, tok):
            return torch.cat([x, tok, x.new_zeros(batch, heads, n_fill, x.shape[-1])], 2)

        fill = torch.zeros(batch, n_fill, dtype=torch.bool, device=q.device)
        qa, ka, va = pad(q, qd), pad(k, kd), pad(v, vd)
        qva, kva = torch.cat([q_mask, true1, fill], 1), torch.cat([k_mask, true1, fill], 1)
        la = torch.zeros(batch, lq + filler, dtype=mdt, device=q.device)
        lb = torch.zeros(batch, lk + filler, dtype=mdt, device=q.device)
        aug_band = None if band is None else max(int(band), lq, lk)
    else:
        qa, ka, va = torch.cat([q, qd], 2), torch.cat([k, kd], 2), torch.cat([v, vd], 2)
        qva, kva = torch.cat([q_mask, true1], 1), torch.cat([k_mask, true1], 1)
        if mass == "unit":
            m_q = m_k = torch.zeros(batch, 1, dtype=mdt, device=q.device)
        else:  # the dustbin of one side can absorb every valid token of the other side
            m_q = torch.log(k_mask.sum(1, keepdim=True).clamp(min=1).to(mdt))
            m_k = torch.log(q_mask.sum(1, keepdim=True).clamp(min=1).to(mdt))
        la = torch.cat([torch.zeros(batch, lq, dtype=mdt, device=q.device), m_q], 1)
        lb = torch.cat([torch.zeros(batch, lk, dtype=mdt, device=q.device), m_k], 1)
        aug_band = band
    return DustbinProblem(qa, ka, va, qva, kva, la, lb, variant, aug_band, lq, lk)


def dustbin_support(prob: DustbinProblem) -> torch.Tensor:
    """Dense active support [B, 1, Lq', Lk'] (bool) of an augmented problem.

    ``paper``: the band ``max(W, Lq, Lk)`` on the augmented masks. ``banded``: the band on the
    real tokens, the dustbin column (rows ``0..lq``, the corner included) and the dustbin row
    (columns ``0..lk - 1``), each masked by validity.
    """
    if prob.variant == "paper":
        return band_support(prob.q_valid, prob.k_valid, prob.band)
    lq, lk = prob.lq, prob.lk
    support = band_support(prob.q_valid, prob.k_valid, None).clone()  # [B, 1, lq + 1, lk + 1]
    support[..., :lq, :lk] &= band_support(prob.q_valid[:, :lq], prob.k_valid[:, :lk], prob.band)
    return support  # the dustbin row and column are all valid x valid pairs


def sinkhorn_dustbin_attention_ref(q, k, v, q_dustbin, k_dustbin, v_dustbin=None, *, q_mask=None, k_mask=None,
                                   config=None, dustbin=None, eps=_UNSET, n_iters=_UNSET, tail=_UNSET, band=_UNSET,
                                   variant=_UNSET, mass=_UNSET, filler=_UNSET) -> torch.Tensor:
    """Reference Sinkhorn attention with learned dustbins: O [B, H, Lq, dv] of the real queries.

    The torch twin of ``sinkalign.sinkhorn.dustbin.dustbin_attention`` (same augmentation, same
    defaults as ``DustbinConfig``): q [B, H, Lq, d], k [B, H, Lk, d], v [B, H, Lk, dv];
    ``q_dustbin`` / ``k_dustbin`` [d] and ``v_dustbin`` [dv] (default 0), or broadcastable to
    [B, H, .], cast to q's dtype; masks [B, L] bool. ``variant`` ``paper`` (dense, unit mass,
    ``filler - 1`` inactive fillers) or ``banded`` (band W plus an always-active dustbin row and
    column; ``mass`` ``unit`` = 1 or ``length`` = number of valid tokens on the other side).
    Dense [B, H, Lq', Lk'] computation in the inputs' dtype (float64 included), any ``tail``;
    differentiable by autograd in q, k, v and the three dustbin tokens. ``config`` and
    ``dustbin`` (a :class:`~sinkalign.sinkhorn.SinkhornConfig` and a
    :class:`~sinkalign.sinkhorn.DustbinConfig`, as the JAX operator takes them) or the settings
    as keywords; not both.
    """
    eps, n_iters, tail, band = _from_config(config, SinkhornConfig, {"eps": eps, "n_iters": n_iters, "tail": tail,
                                                                     "band": band}).values()
    variant, mass, filler = _from_config(dustbin, DustbinConfig, {"variant": variant, "mass": mass,
                                                                  "filler": filler}).values()
    prob = prepare_dustbin(q, k, v, q_dustbin, k_dustbin, v_dustbin, q_mask=q_mask, k_mask=k_mask, eps=eps,
                           n_iters=n_iters, tail=tail, band=band, variant=variant, mass=mass, filler=filler)
    duals = _duals_on(prob.q, prob.k, dustbin_support(prob), prob.log_a, prob.log_b, eps, n_iters, tail)
    return (_plan(duals, tail, tail) @ prob.v)[:, :, : prob.lq]


# --------------------------------------------------------------------------- explicit backward


def _inverse_mass(log_m, mask, dtype):
    """1 / a (or 1 / b) on valid positions, 0 elsewhere, broadcast over heads: [B, 1, L]."""
    return torch.where(mask, torch.exp(-log_m.to(dtype)), 0.0)[:, None, :]


def _vjp_scores(sbar, q, k, eps):
    scale = 1.0 / (math.sqrt(q.shape[-1]) * eps)
    return sbar @ k * scale, sbar.transpose(-1, -2) @ q * scale


def direct_backward_ref(q, k, v, grad_out, *, q_mask=None, k_mask=None, log_a=None, log_b=None, eps=1.0,
                        n_iters=15, tail=2, band=None) -> OneReferenceGrads:
    """Proposition 1: exact backward of the R-step surrogate, every staircase plan formed.

    ``grad_out`` [B, H, Lq, dv] is dL/dO. Plans meet cotangents divided by the marginals
    (``vbar / b``, ``ubar / a``; see :func:`one_reference_backward_ref`). Returns dq, dk, dv
    and the vector cotangents.
    """
    q, k, v, q_mask, k_mask, log_a, log_b = prepare_inputs(q, k, v, q_mask=q_mask, k_mask=k_mask, log_a=log_a,
                                                           log_b=log_b, eps=eps, n_iters=n_iters, tail=tail, band=band)
    with torch.no_grad():
        d = sinkhorn_tail_duals_ref(q, k, q_mask=q_mask, k_mask=k_mask, log_a=log_a, log_b=log_b, eps=eps,
                                    n_iters=n_iters, tail=tail, band=band, _validated=True)
        inv_a, inv_b = _inverse_mass(log_a, q_mask, q.dtype), _inverse_mass(log_b, k_mask, q.dtype)
        r = tail
        p_rr = _plan(d, r, r)
        pz = p_rr * (grad_out @ v.transpose(-1, -2))  # P^(R,R) * Z
        g_u, g_v = pz.sum(-1), pz.sum(-2)
        ubar = [torch.zeros_like(g_u) for _ in range(r + 1)]
        vbar = [torch.zeros_like(g_v) for _ in range(r + 1)]
        if r > 0:
            vbar[r] = g_v
            ubar[r] = g_u - (p_rr @ (vbar[r] * inv_b)[..., None])[..., 0]
            for t in range(r, 0, -1):
                vbar[t - 1] = -(_plan(d, t, t - 1).transpose(-1, -2) @ (ubar[t] * inv_a)[..., None])[..., 0]
                if t >= 2:
                    ubar[t - 1] = -(_plan(d, t - 1, t - 1) @ (vbar[t - 1] * inv_b)[..., None])[..., 0]
        sbar = pz.clone()
        for t in range(1, r + 1):
            sbar -= (_plan(d, t, t) * (vbar[t] * inv_b)[..., None, :]
                     + _plan(d, t, t - 1) * (ubar[t] * inv_a)[..., :, None])
        dq, dk = _vjp_scores(sbar, q, k, eps)
        dv = p_rr.transpose(-1, -2) @ grad_out
    return OneReferenceGrads(dq, dk, dv, ubar, vbar, g_u, g_v)


def one_reference_backward_ref(q, k, v, grad_out, *, q_mask=None, k_mask=None, log_a=None, log_b=None, eps=1.0,
                               n_iters=15, band=None) -> OneReferenceGrads:
    """Proposition 2: the R = 2 backward with only ``P^(2,2)`` formed (dense torch).

    ``alpha = exp(u1 - u2)``, ``beta = exp(v1 - v2)``, ``delta = exp(v0 - v2)``. With
    marginals a, b the half-step Jacobians are ``-P / a_i`` (row) and ``-P / b_j`` (column),
    so every plan meets a cotangent divided by its marginal: ``w = vbar / b``, ``x = ubar / a``,
    ``ubar2 = g_u - P22 w2``, ``vbar1 = -beta P22^T x2``, ``ubar1 = -alpha P22 (beta w1)``,
    ``Sbar = P22 * (Z - w2_j - beta_j x2_i - alpha_i beta_j w1_j - alpha_i delta_j x1_i)``
    (the design note's formulas are the unit-mass case a = b = 1).
    ``grad_out`` [B, H, Lq, dv]. Returns dq, dk, dv and the vector cotangents.
    """
    q, k, v, q_mask, k_mask, log_a, log_b = prepare_inputs(q, k, v, q_mask=q_mask, k_mask=k_mask, log_a=log_a,
                                                           log_b=log_b, eps=eps, n_iters=n_iters, tail=2, band=band)
    with torch.no_grad():
        d = sinkhorn_tail_duals_ref(q, k, q_mask=q_mask, k_mask=k_mask, log_a=log_a, log_b=log_b, eps=eps,
                                    n_iters=n_iters, tail=2, band=band, _validated=True)
        (_, u1, u2), (v0, v1, v2) = d.u, d.v
        inv_a, inv_b = _inverse_mass(log_a, q_mask, q.dtype), _inverse_mass(log_b, k_mask, q.dtype)
        p22 = _plan(d, 2, 2)  # the one reference tile
        z = grad_out @ v.transpose(-1, -2)  # [B, H, Lq, Lk]
        pz = p22 * z
        g_u, g_v = pz.sum(-1), pz.sum(-2)
        alpha, beta, delta = torch.exp(u1 - u2), torch.exp(v1 - v2), torch.exp(v0 - v2)

        def rowsum(w_col):  # sum_j P22_ij w_j  [B, H, Lq]
            return (p22 @ w_col[..., None])[..., 0]

        def colsum(w_row):  # sum_i P22_ij w_i  [B, H, Lk]
            return (p22.transpose(-1, -2) @ w_row[..., None])[..., 0]

        vbar2 = g_v
        w2 = vbar2 * inv_b
        ubar2 = g_u - rowsum(w2)
        x2 = ubar2 * inv_a
        vbar1 = -beta * colsum(x2)
        w1 = vbar1 * inv_b
        ubar1 = -alpha * rowsum(beta * w1)
        x1 = ubar1 * inv_a
        vbar0 = -delta * colsum(alpha * x1)
        sbar = p22 * (z - w2[..., None, :] - beta[..., None, :] * x2[..., :, None]
                      - alpha[..., :, None] * (beta * w1)[..., None, :]
                      - alpha[..., :, None] * delta[..., None, :] * x1[..., :, None])
        dq, dk = _vjp_scores(sbar, q, k, eps)
        dv = p22.transpose(-1, -2) @ grad_out
    return OneReferenceGrads(dq, dk, dv, [torch.zeros_like(ubar1), ubar1, ubar2], [vbar0, vbar1, vbar2], g_u, g_v)
