"""The paper's validation harness as library functions (used by ``sinkalign validate``).

Each function returns a JSON-ready dict with a ``rows`` list (one dict per table row)
and the headline figure under the key the CLI documents. Synthetic problems draw
q, k, v and the output cotangent G i.i.d. from N(0, 1); see each function.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from sinkalign.sinkhorn import certificates as cert
from sinkalign.sinkhorn import core
from sinkalign.sinkhorn.config import DustbinConfig, SinkhornConfig
from sinkalign.sinkhorn.dustbin import augment
from sinkalign.sinkhorn.support import Support

__all__ = ["ExactnessCase", "EXACTNESS_CASES", "exactness", "tail_depth", "certificate", "orbit", "contraction"]


def _dtype(name: str):
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype={name!r} must be 'float32' or 'float64'")
    if name == "float64" and not jax.config.jax_enable_x64:
        raise ValueError("float64 needs jax_enable_x64 (jax.config.update('jax_enable_x64', True))")
    return jnp.float64 if name == "float64" else jnp.float32


@dataclass(frozen=True)
class ExactnessCase:
    """One synthetic problem of the exactness sweep: batch [2, 2], d = 8, dv = 4."""

    name: str
    lq: int
    lk: int
    band: int | None
    pad_q: int = 0  # padded trailing queries of batch element 0
    pad_k: int = 0  # padded trailing keys of batch element 1
    dustbin: DustbinConfig | None = None
    marginals: bool = False  # random (non-uniform) log marginals


EXACTNESS_CASES = (
    ExactnessCase("dense 97x97", 97, 97, None),
    ExactnessCase("dense 97x257 padded", 97, 257, None, 5, 20),
    ExactnessCase("dense 1x1", 1, 1, None),
    ExactnessCase("dense 1x17", 1, 17, None),
    ExactnessCase("band 16, 257x257 padded", 257, 257, 16, 7, 9),
    ExactnessCase("band 32, 97x120 padded", 97, 120, 32, 3, 4),
    ExactnessCase("band 16, 97x97, random marginals", 97, 97, 16, marginals=True),
    ExactnessCase("dustbin paper (B=128), band 16, 97x61 padded", 97, 61, 16, 4, 3,
                  DustbinConfig(variant="paper", mass="unit")),
    ExactnessCase("dustbin banded unit, band 16, 257x200", 257, 200, 16, 0, 0,
                  DustbinConfig(variant="banded", mass="unit")),
    ExactnessCase("dustbin banded length, band 8, 97x130 padded", 97, 130, 8, 4, 6,
                  DustbinConfig(variant="banded", mass="length")),
)

MODES_FOR_DEPTH = {1: ("staircase", "direct"), 2: ("one_reference", "staircase", "direct"),
                   4: ("staircase", "direct")}


def _case_inputs(case: ExactnessCase, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    b, h, d, dv = 2, 2, 8, 4
    x = {
        "q": rng.normal(size=(b, h, case.lq, d)),
        "k": rng.normal(size=(b, h, case.lk, d)),
        "v": rng.normal(size=(b, h, case.lk, dv)),
        "qd": rng.normal(size=(d,)),
        "kd": rng.normal(size=(d,)),
        "vd": rng.normal(size=(dv,)),
    }
    g = rng.normal(size=(b, h, case.lq, dv))
    qm = np.ones((b, case.lq), bool)
    km = np.ones((b, case.lk), bool)
    if case.pad_q:
        qm[0, -case.pad_q :] = False
    if case.pad_k:
        km[1, -case.pad_k :] = False
    if case.marginals:  # differentiated too: "la", "lb" among the inputs
        x["la"] = rng.uniform(-0.5, 0.5, size=(b, 1, case.lq))
        x["lb"] = rng.uniform(-0.5, 0.5, size=(b, 1, case.lk))
    x = {k_: jnp.asarray(v_, dtype) for k_, v_ in x.items()}
    return x, jnp.asarray(g, dtype), qm, km


def _loss_fn(case: ExactnessCase, cfg: SinkhornConfig, qm, km):
    def loss(x, g):
        if case.dustbin is None:
            qq, kk, vv, qv, kv, la_, lb_ = core.prepare(x["q"], x["k"], x["v"], qm, km, x.get("la"), x.get("lb"),
                                                        band=cfg.band)
            support = Support.single(case.lq, case.lk, cfg.band, cfg.block)
            out = core.tail_operator(qq, kk, vv, qv, kv, la_, lb_, support, cfg)
        else:
            aug = augment(x["q"], x["k"], x["v"], x["qd"], x["kd"], x["vd"], q_mask=qm, k_mask=km,
                          config=cfg, dustbin=case.dustbin)
            out = core.tail_operator(aug.q, aug.k, aug.v, aug.q_valid, aug.k_valid, aug.log_a, aug.log_b,
                                     aug.support, aug.config)[..., : case.lq, :]
        return jnp.sum(out * g), out

    return jax.jit(jax.value_and_grad(loss, has_aux=True))


def exactness(dtype: str = "float64", *, cases=EXACTNESS_CASES, depths=(1, 2, 4), n_iters: int = 15,
              eps: float = 1.0, progress=None) -> dict:
    """Every backward mode against ``autodiff`` of the same centered surrogate.

    For each case and depth R, the loss <O, G> is differentiated w.r.t. q, k, v (and the
    dustbin tokens, and the log marginals of a case with marginals) by ``autodiff`` and by
    each custom mode; the deviation is the max absolute difference over all gradient entries
    (and the forward outputs).
    """
    dt = _dtype(dtype)
    rows = []
    # Check the sweep's inputs once, outside tracing (masks, emptiness, finiteness).
    for case in cases:
        x, g, qm, km = _case_inputs(case, dt)
        if case.dustbin is None:
            core.prepare(x["q"], x["k"], x["v"], qm, km, x.get("la"), x.get("lb"), band=case.band)
        for r in depths:
            base = SinkhornConfig(eps=eps, n_iters=n_iters, tail=r, band=case.band, backward="autodiff")
            (_, out_ref), grad_ref = _loss_fn(case, base, qm, km)(x, g)
            scale = max(float(jnp.abs(a).max()) for a in jax.tree_util.tree_leaves(grad_ref))
            for mode in MODES_FOR_DEPTH[r]:
                t0 = time.perf_counter()
                (_, out), grads = _loss_fn(case, base.replace(backward=mode), qm, km)(x, g)
                devs = {name: float(jnp.abs(grads[name] - grad_ref[name]).max()) for name in grads}
                used = ("q", "k", "v") + (("qd", "kd", "vd") if case.dustbin else ()) + (
                    ("la", "lb") if case.marginals else ())
                row = {
                    "case": case.name, "R": r, "mode": mode,
                    "dq": devs["q"], "dk": devs["k"], "dv": devs["v"],
                    "d_dustbin": max(devs[n] for n in ("qd", "kd", "vd")) if case.dustbin else None,
                    "d_marginals": max(devs["la"], devs["lb"]) if case.marginals else None,
                    "forward": float(jnp.abs(out - out_ref).max()),
                    "max_abs_deviation": max(devs[n] for n in used),
                    "grad_scale": scale,
                    "seconds": time.perf_counter() - t0,
                }
                rows.append(row)
                if progress:
                    progress(row)
    worst = max(r["max_abs_deviation"] for r in rows)
    return {"check": "exactness", "dtype": dtype, "n_iters": n_iters, "eps": eps, "batch": [2, 2], "d": 8,
            "dv": 4, "distribution": "q, k, v, G, dustbin tokens i.i.d. N(0, 1)",
            "rows": rows, "max_abs_deviation": worst}


def _synthetic(seed, L, d, dtype, pad, qk_std=1.0):
    rng = np.random.default_rng(seed)
    q, k, v, g = (rng.normal(size=(1, L, d)) for _ in range(4))
    q, k, v, g = (jnp.asarray(x, dtype) for x in (q * qk_std, k * qk_std, v, g))
    qm = np.ones((1, L), bool)
    km = np.ones((1, L), bool)
    if pad:
        qm[0, -pad:] = False
        km[0, -pad:] = False
    return q, k, v, g, qm, km


_SYNTH = ("q, k i.i.d. N(0, {std}^2), v and G i.i.d. N(0, 1) per entry; batch 1; "
          "the last {pad} queries and keys padded")


def tail_depth(dtype: str = "float64", *, L=512, d=8, T=15, W=256, eps=1.0, seeds=(0, 1, 2),
               depths=(0, 1, 2, 4), pad=32, qk_std=1.0) -> dict:
    """Stopped-base surrogate gradient vs full backprop through the T-step base."""
    dt = _dtype(dtype)
    rows = []
    for r in depths:
        worst = 0.0
        per_seed = []
        for seed in seeds:
            q, k, v, g, qm, km = _synthetic(seed, L, d, dt, pad, qk_std)
            q, k, v, qv, kv, la, lb = core.prepare(q, k, v, qm, km, band=W)
            support = Support.single(L, L, W)
            cfg = SinkhornConfig(eps=eps, n_iters=T, tail=r, band=W,
                                 backward="one_reference" if r == 2 else "staircase")
            surr = core.tail_adjoint(q, k, v, qv, kv, la, lb, g, support, cfg)
            full = cert.full_gradient(q, k, v, qv, kv, la, lb, g, support, cfg)
            gap = max(float(jnp.abs(a - b).max()) for a, b in zip(full, (surr.dq, surr.dk, surr.dv)))
            per_seed.append(gap)
            worst = max(worst, gap)
        rows.append({"R": r, "worst_max_abs_gap": worst, "per_seed": per_seed})
    paper = {0: 1.49e-4, 1: 1.63e-5, 2: 1.42e-5, 4: 1.42e-5}
    for row in rows:
        row["paper"] = paper.get(row["R"])
    return {"check": "tail-depth", "dtype": dtype, "L": L, "d": d, "T": T, "W": W, "eps": eps,
            "seeds": list(seeds), "qk_std": qk_std, "distribution": _SYNTH.format(pad=pad, std=qk_std), "rows": rows}


def certificate(dtype: str = "float64", *, L=128, d=8, T=15, W=128, eps=1.0, seeds=(0, 1, 2),
                depths=(0, 1, 2, 4), tau=1e-5, pad=8, qk_std=1.0) -> dict:
    """Proposition 5 residual |(full - surrogate) - D_x z_T^T eta| and Corollary 2's depth."""
    dt = _dtype(dtype)
    rows, selections = [], []
    for seed in seeds:
        q, k, v, g, qm, km = _synthetic(seed, L, d, dt, pad, qk_std)
        q, k, v, qv, kv, la, lb = core.prepare(q, k, v, qm, km, band=W)
        support = Support.single(L, L, W)
        for r in depths:
            cfg = SinkhornConfig(eps=eps, n_iters=T, tail=r, band=W, backward="staircase")
            c = cert.bias_certificate(q, k, v, qv, kv, la, lb, g, support, cfg)
            full = cert.full_gradient(q, k, v, qv, kv, la, lb, g, support, cfg)
            gaps = [f - s for f, s in zip(full, c.surrogate)]
            residual = max(
                float(jnp.abs(gaps[0] - c.certificate[0]).max()),
                float(jnp.abs(gaps[1] - c.certificate[1]).max()),
                float(jnp.abs(gaps[2]).max()),  # V does not enter the base solve
            )
            rows.append({"seed": seed, "R": r, "gap": max(float(jnp.abs(x).max()) for x in gaps),
                         "certificate_norm": c.norm, "eta_norm": c.eta_norm, "residual": residual})
        cfg = SinkhornConfig(eps=eps, n_iters=T, band=W, backward="staircase")
        sel = cert.select_tail_depth(q, k, v, qv, kv, la, lb, g, support, cfg, tau=tau, r_max=max(depths))
        selections.append({"seed": seed, "selected_R": sel.depth, "norms": {str(a): b for a, b in sel.norms.items()}})
    return {"check": "certificate", "dtype": dtype, "L": L, "d": d, "T": T, "W": W, "eps": eps, "tau": tau,
            "qk_std": qk_std, "distribution": _SYNTH.format(pad=pad, std=qk_std), "rows": rows, "selection": selections,
            "max_residual": max(r["residual"] for r in rows)}


def orbit(dtype: str = "float32", *, L=128, d=8, T=15, R=2, W=None, eps=1.0, seeds=(0, 1, 2), pad=8,
          qk_std=1.0) -> dict:
    """Proposition 6: rebuild all 2(T+R) half-step plans from the final plan."""
    dt = _dtype(dtype)
    rows = []
    for seed in seeds:
        q, k, v, g, qm, km = _synthetic(seed, L, d, dt, pad, qk_std)
        q, k, v, qv, kv, la, lb = core.prepare(q, k, v, qm, km, band=W)
        support = Support.single(L, L, W)
        rec = cert.orbit_reconstruction(q, k, qv, kv, la, lb, support,
                                        SinkhornConfig(eps=eps, n_iters=T, tail=R, band=W))
        rows.append({"seed": seed, "n_plans": rec.n_plans, "max_log_error": rec.max_log_error})
    return {"check": "orbit", "dtype": dtype, "L": L, "d": d, "T": T, "R": R, "W": W, "eps": eps,
            "qk_std": qk_std, "distribution": _SYNTH.format(pad=pad, std=qk_std), "rows": rows,
            "max_log_error": max(r["max_log_error"] for r in rows), "paper": 1.91e-6}


def contraction(dtype: str = "float64", *, sizes=(16, 64), eps_values=(0.5, 1.0, 2.0), d=8, n_pairs=200,
                seed=0, block_L=1024, block_W=128) -> dict:
    """Proposition 4: the certificate bounds the observed contraction of the Sinkhorn step.

    Part 1, dense strictly positive problems: rho_H and rho_range against the largest
    observed ratio osc(Phi(v) - Phi(v')) / osc(v - v') over random pairs (v, v').
    Part 2, per-128-row-block certificates of a banded problem (median and max).
    """
    dt = _dtype(dtype)
    rng = np.random.default_rng(seed)
    rows = []
    for L in sizes:
        for eps in eps_values:
            q = jnp.asarray(rng.normal(size=(L, d)), dt)
            k = jnp.asarray(rng.normal(size=(L, d)), dt)
            q, k, _, qv, kv, la, lb = core.prepare(q, k, k, band=None)
            support = Support.single(L, L, None)
            cfg = SinkhornConfig(eps=eps)
            cc = cert.contraction_certificate(q, k, qv, kv, support, cfg, block_rows=L)
            S = support.scores(q, k, core._scale(d, eps))
            prob = core._problem(support, qv, kv, la, lb, q.dtype)
            step = jax.jit(lambda v_: cert.sinkhorn_step_map(support, S, prob, v_))
            v1 = jnp.asarray(rng.normal(scale=2.0, size=(n_pairs, L)), dt)
            v2 = jnp.asarray(rng.normal(scale=2.0, size=(n_pairs, L)), dt)
            osc = lambda x: x.max(-1) - x.min(-1)  # noqa: E731
            ratio = np.asarray(osc(jax.vmap(step)(v1) - jax.vmap(step)(v2)) / osc(v1 - v2))
            rows.append({"L": L, "eps": eps, "rho_h": float(cc.rho_h[0]), "rho_range": float(cc.rho_range[0]),
                         "max_observed_ratio": float(ratio.max()),
                         "bound_holds": bool(ratio.max() <= cc.rho_h[0] * (1 + 1e-9) + 1e-12)})
    q = jnp.asarray(rng.normal(size=(1, block_L, d)), dt)
    k = jnp.asarray(rng.normal(size=(1, block_L, d)), dt)
    q, k, _, qv, kv, la, lb = core.prepare(q, k, k, band=block_W)
    support = Support.single(block_L, block_L, block_W)
    cc = cert.contraction_certificate(q, k, qv, kv, support, SinkhornConfig(eps=1.0, band=block_W), block_rows=128)
    stat = lambda f, x: float(f(x)) if x.size else None  # noqa: E731
    blocks = {"L": block_L, "W": block_W, "eps": 1.0, "n_blocks": int(cc.rho_h.size),
              "median_rho_h": stat(np.median, cc.rho_h), "max_rho_h": stat(np.max, cc.rho_h),
              "median_rho_range": stat(np.median, cc.rho_range), "max_rho_range": stat(np.max, cc.rho_range),
              "median_block_cols": stat(np.median, cc.cols)}
    return {"check": "contraction", "dtype": dtype, "d": d, "distribution": "q, k i.i.d. N(0, 1); v, v' ~ N(0, 4)",
            "rows": rows, "blocks": blocks, "all_bounds_hold": all(r["bound_holds"] for r in rows),
            "paper": {"median_rho_h": 0.081, "max_rho_h": 0.492, "note": "trained Pfam checkpoint, not synthetic"}}
