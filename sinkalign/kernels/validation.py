"""Kernel validation (``sinkalign validate kernels``): Pallas / Triton against the JAX reference.

:func:`kernels` runs a named shape sweep (:data:`KERNEL_CASES`: Lq != Lk, length 1,
lengths that are not block multiples, padding, band and dense, B*H > 1, random marginals,
both dustbin variants) through one backend in float32 and compares the output O and the
gradients dQ, dK, dV (and the dustbin tokens) of ``<O, G>`` with the JAX reference in
float64, differentiated by ``backward="autodiff"`` (JAX autodiff of the unrolled
surrogate: the ground truth). Both sides see the same float32-rounded inputs.

:func:`long_forward` checks forward agreement at long lengths (up to L = 16384 on a CPU):
the blockwise JAX reference and the Pallas kernels against a plain dense computation (all
Lq x Lk scores of every half-step, in row/column chunks, with the band as a mask).

Inputs are i.i.d. N(0, 1) (q, k, v, G, dustbin tokens); random log marginals are
U(-0.5, 0.5). Both functions return JSON-ready dicts with a ``rows`` list.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from sinkalign.errors import InputError
from sinkalign.kernels import cache
from sinkalign.sinkhorn.checks import check_bool
from sinkalign.sinkhorn.config import DustbinConfig, SinkhornConfig

__all__ = ["KERNEL_CASES", "KernelCase", "check_backend", "dense_forward", "kernels", "long_forward"]

log = logging.getLogger(__name__)

BACKENDS = ("pallas", "triton")


@dataclass(frozen=True)
class KernelCase:
    """One problem of the sweep. ``pad``: batch element 1 loses 3 queries and 2 keys at the end."""

    name: str
    B: int
    H: int
    lq: int
    lk: int
    band: int | None
    d: int = 8
    dv: int = 4
    n_iters: int = 4
    eps: float = 1.0
    pad: bool = False
    marginals: bool = False
    dustbin: DustbinConfig | None = None


KERNEL_CASES = (
    KernelCase("band 20, 33x17, padded, marginals", 2, 1, 33, 17, 20, pad=True, marginals=True),
    KernelCase("dense 50x50, B*H=4, padded", 2, 2, 50, 50, None, d=16, pad=True),
    KernelCase("dense 1x17", 2, 1, 1, 17, None),
    KernelCase("band 1, 50x49, eps 0.5", 1, 2, 50, 49, 1, d=16, dv=16, eps=0.5),
    KernelCase("band 24, 97x120, padded", 2, 2, 97, 120, 24, pad=True),
    KernelCase("dense 64x90, d=12, dv=20, padded, T=0", 1, 3, 64, 90, None, d=12, dv=20, n_iters=0, pad=True),
    KernelCase("dustbin banded length, band 6, 33x20, padded", 2, 2, 33, 20, 6, pad=True,
               dustbin=DustbinConfig(variant="banded", mass="length")),
    KernelCase("dustbin banded unit, band 30, 17x40", 2, 1, 17, 40, 30, dustbin=DustbinConfig(variant="banded",
                                                                                              mass="unit")),
    KernelCase("dustbin paper (B=16), band 6, 20x17, padded", 2, 1, 20, 17, 6, pad=True,
               dustbin=DustbinConfig(variant="paper", mass="unit", filler=16)),
)


def _inputs(case: KernelCase, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731  (both sides see float32-rounded values)
    x = {
        "q": f32(rng.normal(size=(case.B, case.H, case.lq, case.d))),
        "k": f32(rng.normal(size=(case.B, case.H, case.lk, case.d))),
        "v": f32(rng.normal(size=(case.B, case.H, case.lk, case.dv))),
        "qd": f32(rng.normal(size=(case.d,))),
        "kd": f32(rng.normal(size=(case.d,))),
        "vd": f32(rng.normal(size=(case.dv,))),
    }
    g = f32(rng.normal(size=(case.B, case.H, case.lq, case.dv)))
    qm = np.ones((case.B, case.lq), bool)
    km = np.ones((case.B, case.lk), bool)
    if case.pad and case.B > 1:
        qm[1, -3:] = False
        km[1, -2:] = False
    la = lb = None
    if case.marginals:
        la = f32(rng.uniform(-0.5, 0.5, size=(case.B, case.lq)))
        lb = f32(rng.uniform(-0.5, 0.5, size=(case.B, case.lk)))
    return {"x": x, "g": g, "qm": qm, "km": km, "la": la, "lb": lb}


def _cfg(case: KernelCase, **kw):
    return SinkhornConfig(eps=case.eps, n_iters=case.n_iters, tail=2, band=case.band, **kw)


def _jax_grads(case: KernelCase, inp: dict, *, backend: str, dtype, blocks=None, interpret=None, operator=None,
               backward: str = "autodiff", precision: str = "ieee", cache_scores: bool | None = None) -> dict:
    """O and the gradients of <O, G> w.r.t. every token input, as float64 numpy arrays.

    ``backend`` ``reference`` runs the JAX operator with ``backward`` (default autodiff, the
    ground truth), ``pallas`` the kernels; ``operator(q, k, v, q_valid, k_valid, log_a, log_b,
    support, config)`` replaces either (a test's own reference, say)."""
    import jax
    import jax.numpy as jnp

    from sinkalign.kernels import pallas
    from sinkalign.sinkhorn import core
    from sinkalign.sinkhorn.dustbin import augment
    from sinkalign.sinkhorn.support import Support

    cfg = _cfg(case, backward=backward) if backend == "reference" else _cfg(case, backend="pallas")
    qm, km, la, lb = inp["qm"], inp["km"], inp["la"], inp["lb"]

    def op(q, k, v, qv, kv, la_, lb_, support, c):
        if operator is not None:
            return operator(q, k, v, qv, kv, la_, lb_, support, c)
        if backend == "reference":
            return core.tail_operator(q, k, v, qv, kv, la_, lb_, support, c)
        return pallas.tail_operator(q, k, v, qv, kv, la_, lb_, support, c, block_sizes=blocks, interpret=interpret,
                                    precision=precision, cache_scores=cache_scores)

    def loss(x, g):
        if case.dustbin is None:
            q, k, v, qv, kv, la_, lb_ = core.prepare(x["q"], x["k"], x["v"], qm, km, x.get("la", la), x.get("lb", lb),
                                                     band=case.band)
            out = op(q, k, v, qv, kv, la_, lb_, Support.single(case.lq, case.lk, case.band, cfg.block), cfg)
        else:
            a = augment(x["q"], x["k"], x["v"], x["qd"], x["kd"], x["vd"], q_mask=qm, k_mask=km, config=cfg,
                        dustbin=case.dustbin)
            out = op(a.q, a.k, a.v, a.q_valid, a.k_valid, a.log_a, a.log_b, a.support, a.config)[..., : case.lq, :]
        return jnp.sum(out * g), out

    names = ("q", "k", "v") + (("qd", "kd", "vd") if case.dustbin else ())
    x = {n: jnp.asarray(inp["x"][n], dtype) for n in names}
    if case.marginals and case.dustbin is None:  # the log marginals' gradients too
        x.update(la=jnp.asarray(la, dtype), lb=jnp.asarray(lb, dtype))
        names = names + ("la", "lb")
    if case.dustbin is None:  # validate once outside tracing (under jit the emptiness check cannot run)
        core.prepare(x["q"], x["k"], x["v"], qm, km, la, lb, band=case.band)
    (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(x, jnp.asarray(inp["g"], dtype))
    res = {"O": out, **{f"d{n}": grads[n] for n in names}}
    return {n: np.asarray(a, np.float64) for n, a in res.items()}


def _triton_grads(case: KernelCase, inp: dict, *, interpret: bool, block: int | None, precision: str = "ieee",
                  cache_scores: bool | None = None) -> dict:
    import torch

    from sinkalign.kernels.triton import (
        sinkhorn_attention_triton,
        sinkhorn_dustbin_attention_triton,
    )

    device = "cpu" if interpret else "cuda"
    names = ("q", "k", "v") + (("qd", "kd", "vd") if case.dustbin else ())
    leaves = [torch.tensor(inp["x"][n], device=device, requires_grad=True) for n in names]
    config = _cfg(case)  # the configuration the JAX operators of this check take
    common = dict(q_mask=torch.tensor(inp["qm"], device=device), k_mask=torch.tensor(inp["km"], device=device),
                  config=config, interpret=interpret, block_m=block, block_n=block, precision=precision,
                  cache_scores=cache_scores)
    if case.dustbin is None:
        kw = {}
        for name, key in (("log_a", "la"), ("log_b", "lb")):
            if inp[key] is not None:
                kw[name] = torch.tensor(inp[key], device=device, requires_grad=case.marginals)
        out = sinkhorn_attention_triton(*leaves, **common, **kw)
        if case.marginals:  # the log marginals' gradients too
            names = names + ("la", "lb")
            leaves = leaves + [kw["log_a"], kw["log_b"]]
    else:
        out = sinkhorn_dustbin_attention_triton(*leaves, dustbin=case.dustbin, **common)
    grads = torch.autograd.grad(out, leaves, torch.tensor(inp["g"], device=device))
    res = {"O": out, **{f"d{n}": g for n, g in zip(names, grads)}}
    return {n: t.detach().to("cpu", torch.float64).numpy() for n, t in res.items()}


def _prepare_triton(interpret: bool) -> None:
    """Select Triton's interpreter before triton is imported (it reads TRITON_INTERPRET once)."""
    if interpret and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    from sinkalign.kernels.triton.kernels import interpreter_mode

    mode = interpreter_mode()
    if mode != interpret:
        raise InputError(
            f"interpret={interpret} but triton was already imported with interpreter={mode} in this process; "
            "set TRITON_INTERPRET=1 (or unset it) in the environment before anything imports triton"
        )


def check_backend(backend: str, interpret: bool) -> None:
    """Raise unless ``backend`` can run in the requested mode (Triton: selects its interpreter).

    An unknown backend, or a mode this machine cannot run (native kernels without a GPU, a
    Triton already imported in the other mode), is an :class:`~sinkalign.errors.InputError`
    (a ValueError) saying what to change; a non-bool ``interpret`` is a plain ValueError.
    """
    if backend not in BACKENDS:
        raise InputError(f"backend={backend!r} is not one of {BACKENDS}")
    check_bool("interpret", interpret)
    if backend == "pallas" and not interpret:
        import jax

        if jax.default_backend() == "cpu":
            raise InputError("native Pallas kernels need a GPU or TPU backend, and JAX's default backend is the CPU; "
                             "use interpret=True (--interpret)")
    if backend == "triton":
        _prepare_triton(interpret)
        if not interpret:
            import torch

            if not torch.cuda.is_available():
                raise InputError("native Triton kernels need a CUDA GPU; use interpret=True (--interpret)")


def kernels(backend: str = "pallas", interpret: bool = True, *, cases=KERNEL_CASES, block: int | None = None,
            progress=None, precision: str = "ieee", cache_scores: bool | None = None) -> dict:
    """Max abs deviation of a kernel backend from the float64 JAX reference over a shape sweep.

    Args:
        backend: ``pallas`` or ``triton``.
        interpret: run the Pallas / Triton interpreter on the CPU (Triton: sets
            ``TRITON_INTERPRET=1`` before triton is imported); False runs natively (GPU/TPU).
        cases: the sweep (default :data:`KERNEL_CASES`). Both backends run the dustbin cases
            (Triton through :func:`~sinkalign.kernels.triton.sinkhorn_dustbin_attention_triton`).
        block: tile size (query and key); default 16 in the interpreter (several tiles per
            row even on small shapes), the backend's default natively.
        progress: optional callable receiving each finished row.
        precision: the kernels' float32 dots (``ieee``, or natively ``tf32x3`` / ``tf32``).
        cache_scores: the kernels' score cache (:mod:`sinkalign.kernels.cache`): None, their
            default (cached with exact float32 dots), True or False.

    Returns a dict with ``rows`` (per case: deviations of O, dq, dk, dv, d_dustbin, d_marginals
    (the log marginals' gradients, in the cases with marginals) and their scales, seconds) and
    the headline ``max_abs_deviation`` (float32 kernel vs float64 reference, max over every case
    and output).
    """
    check_backend(backend, interpret)
    cache.check_cache_scores(cache_scores)
    import jax
    import jax.numpy as jnp

    if not jax.config.jax_enable_x64:
        raise ValueError("the float64 reference needs jax_enable_x64 (jax.config.update('jax_enable_x64', True))")
    if block is None and interpret:
        block = 16
    blocks = None
    if backend == "pallas" and block is not None:
        from sinkalign.kernels.pallas import BlockSizes

        blocks = BlockSizes(block_q=block, block_k=block)
    rows = []
    for case in cases:
        inp = _inputs(case)
        t0 = time.perf_counter()
        ref = _jax_grads(case, inp, backend="reference", dtype=jnp.float64)
        if backend == "pallas":
            got = _jax_grads(case, inp, backend="pallas", dtype=jnp.float32, blocks=blocks, interpret=interpret,
                             precision=precision, cache_scores=cache_scores)
        else:
            got = _triton_grads(case, inp, interpret=interpret, block=block, precision=precision,
                                cache_scores=cache_scores)
        row = {"case": case.name, "B": case.B, "H": case.H, "Lq": case.lq, "Lk": case.lk, "band": case.band}
        for name in ("O", "dq", "dk", "dv"):
            row[name] = float(np.abs(got[name] - ref[name]).max())
            row[f"{name}_scale"] = float(np.abs(ref[name]).max())
        row["d_dustbin"] = (max(float(np.abs(got[n] - ref[n]).max()) for n in ("dqd", "dkd", "dvd"))
                            if case.dustbin else None)
        row["d_marginals"] = (max(float(np.abs(got[n] - ref[n]).max()) for n in ("dla", "dlb"))
                              if "dla" in ref else None)
        row["max_abs_deviation"] = max(v for k, v in row.items()
                                       if k in ("O", "dq", "dk", "dv", "d_dustbin", "d_marginals") and v is not None)
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        if progress:
            progress(row)
    return {
        "check": "kernels", "backend": backend, "interpret": interpret, "dtype": "float32", "precision": precision,
        "cache_scores": cache.choice(cache_scores),
        "reference": "JAX reference (backend='reference', backward='autodiff'), float64",
        "block": block, "distribution": "q, k, v, G, dustbin tokens i.i.d. N(0, 1); log marginals U(-0.5, 0.5)",
        "rows": rows,
        "max_abs_deviation": max(r["max_abs_deviation"] for r in rows),
    }


# --------------------------------------------------------------------------- long lengths


def dense_forward(q, k, v, *, band: int | None, eps: float, n_iters: int, chunk: int = 1024):
    """The operator's forward by plain dense computation: every half-step forms all
    ``Lq x Lk`` scores (``chunk`` rows or columns at a time, to bound memory), masks the band
    ``|i - j| <= band`` and takes a log-sum-exp; unit marginals, no padding.

    q [Lq, d], k [Lk, d], v [Lk, dv] -> O [Lq, dv] (in the inputs' dtype).
    """
    import jax
    import jax.numpy as jnp

    lq, lk, d = q.shape[0], k.shape[0], q.shape[1]
    scale = 1.0 / (math.sqrt(d) * eps)

    def chunks(x, n):
        pad = (-x.shape[0]) % n
        xp = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
        return xp.reshape((-1, n) + x.shape[1:]), x.shape[0]

    def lse_over(x, y, pot_y):
        """For each x: LSE_y (scale <x, y> + pot_y) over the band, in chunks of x."""
        xc, n = chunks(x, chunk)
        idx = jnp.arange(xc.shape[0] * chunk).reshape(xc.shape[0], chunk)
        yi = jnp.arange(y.shape[0])

        def one(args):
            xb, ib = args
            z = (xb @ y.T) * scale + pot_y[None, :]
            if band is not None:
                z = jnp.where(jnp.abs(ib[:, None] - yi[None, :]) <= band, z, -jnp.inf)
            return jax.nn.logsumexp(z, axis=1)

        return jax.lax.map(one, (xc, idx)).reshape(-1)[:n]

    def solve(q, k, v):
        def step(_, uv):
            u = -lse_over(q, k, uv[1])
            vv = -lse_over(k, q, u)
            c = u.mean()
            return u - c, vv + c

        zeros = (jnp.zeros(lq, q.dtype), jnp.zeros(lk, q.dtype))
        _, v0 = jax.lax.fori_loop(0, n_iters, step, zeros)
        u1 = -lse_over(q, k, v0)
        v1 = -lse_over(k, q, u1)
        u2 = -lse_over(q, k, v1)
        v2 = -lse_over(k, q, u2)
        qc, n = chunks(q, chunk)
        idx = jnp.arange(qc.shape[0] * chunk).reshape(qc.shape[0], chunk)
        u2c, _ = chunks(u2, chunk)
        ki = jnp.arange(lk)

        def out(args):
            qb, ib, ub = args
            z = (qb @ k.T) * scale + ub[:, None] + v2[None, :]
            if band is not None:
                z = jnp.where(jnp.abs(ib[:, None] - ki[None, :]) <= band, z, -jnp.inf)
            return jnp.exp(z) @ v

        return jax.lax.map(out, (qc, idx, u2c)).reshape(-1, v.shape[1])[:n]

    return jax.jit(solve)(q, k, v)


def long_forward(lengths=(512, 2048, 8192, 16384), *, band: int | None = 256, d: int = 16, dv: int = 16,
                 n_iters: int = 15, eps: float = 1.0, kernel: bool = True, kernel_max_length: int | None = None,
                 interpret: bool = True, dense_dtype: str = "float64", seed: int = 0, progress=None,
                 cache_scores: bool | None = None) -> dict:
    """Forward agreement at long lengths: blockwise JAX reference and Pallas kernels (float32)
    against :func:`dense_forward` (``dense_dtype``), one batch element, Lq = Lk = L.

    ``kernel=False`` skips the Pallas kernels; ``kernel_max_length`` caps the lengths they run at;
    ``cache_scores``: the kernels' score cache (None: their default).
    Returns ``rows`` (per L: max |O - O_dense| of each, seconds) and ``max_abs_deviation``.
    """
    import jax
    import jax.numpy as jnp

    from sinkalign.kernels import pallas
    from sinkalign.sinkhorn import core
    from sinkalign.sinkhorn.support import Support

    cache.check_cache_scores(cache_scores)
    if dense_dtype not in ("float32", "float64"):
        raise ValueError(f"dense_dtype={dense_dtype!r} must be 'float32' or 'float64'")
    if dense_dtype == "float64" and not jax.config.jax_enable_x64:
        raise ValueError("dense_dtype='float64' needs jax_enable_x64")
    for L in lengths:
        if not isinstance(L, int) or L < 1:
            raise ValueError(f"length {L!r} must be a positive integer")
    ddt = jnp.float64 if dense_dtype == "float64" else jnp.float32
    rows = []
    for L in lengths:
        rng = np.random.default_rng(seed + L)
        q, k, v = (np.asarray(rng.normal(size=(1, L, n)), np.float32) for n in (d, d, dv))
        row = {"L": L, "band": band, "d": d}
        t0 = time.perf_counter()
        dense = np.asarray(dense_forward(jnp.asarray(q[0], ddt), jnp.asarray(k[0], ddt), jnp.asarray(v[0], ddt),
                                         band=band, eps=eps, n_iters=n_iters), np.float64)
        row["dense_seconds"] = time.perf_counter() - t0
        row["scale"] = float(np.abs(dense).max())
        cfg = SinkhornConfig(eps=eps, n_iters=n_iters, tail=2, band=band)
        qq, kk, vv, qv, kv, la, lb = core.prepare(q, k, v, band=band)
        support = Support.single(L, L, band, cfg.block)
        t0 = time.perf_counter()
        ref = np.asarray(core.tail_operator(qq, kk, vv, qv, kv, la, lb, support, cfg), np.float64)[0]
        row["reference_seconds"] = time.perf_counter() - t0
        row["reference_vs_dense"] = float(np.abs(ref - dense).max())
        row["kernel_vs_dense"] = None
        if kernel and (kernel_max_length is None or L <= kernel_max_length):
            t0 = time.perf_counter()
            got = pallas.tail_operator(qq, kk, vv, qv, kv, la, lb, support, cfg.replace(backend="pallas"),
                                       interpret=interpret, cache_scores=cache_scores)
            got = np.asarray(jax.block_until_ready(got), np.float64)[0]
            row["kernel_seconds"] = time.perf_counter() - t0
            row["kernel_vs_dense"] = float(np.abs(got - dense).max())
            row["kernel_vs_reference"] = float(np.abs(got - ref).max())
        rows.append(row)
        if progress:
            progress(row)
    devs = [r[key] for r in rows for key in ("reference_vs_dense", "kernel_vs_dense") if r.get(key) is not None]
    return {"check": "kernels-long", "dtype": "float32", "dense_dtype": dense_dtype, "band": band, "d": d, "dv": dv,
            "n_iters": n_iters, "eps": eps, "interpret": interpret,
            "cache_scores": cache.choice(cache_scores),
            "distribution": "q, k, v i.i.d. N(0, 1), batch 1, no padding, unit marginals",
            "rows": rows, "max_abs_deviation": max(devs)}
