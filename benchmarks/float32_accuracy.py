"""Float32 gradients of the operator against the float64 truth, per backward mode.

``sinkalign validate exactness --dtype float32`` compares each custom backward mode with
float32 ``autodiff``: two float32 computations, so its figure is their disagreement, not either
one's error. This script takes the float32 inputs, computes the gradients of <O, G> in float32
by every mode, and measures each against float64 ``autodiff`` of the same inputs (the truth, to
1e-14):

* the exactness sweep's problems (``sinkalign.sinkhorn.validation.EXACTNESS_CASES``, R in
  {1, 2, 4}, T = 15, eps = 1): max abs error over every gradient (q, k, v, the dustbin tokens,
  the log marginals);
* heterogeneous problems whose token norms span ``--spreads`` x (L = 96, d = 16, band 12,
  eps = 1, R = 2; max|S| grows with the spread): max error of dQ, dK and dV relative to the
  gradient's largest entry.

With ``--kernels`` it also measures the kernels in their interpreters (the tests'
heterogeneous problem: L = 64, d = 16, band 10, eps = 1, token norms spread over ``--kernel-spreads``):
the Pallas and Triton backwards against float64, beside float32 autodiff (JAX) and autograd
(the Triton family's torch reference).

With ``--triton-drift`` it measures why Triton's interpreted forward once erred more than the
float32 reference at large scores (seeds 0-5, 30x spread): the base solve's duals with the
column half-step's tiles formed as ``K Q^T`` (the native kernels' form) and as ``(Q K^T)^T``
(``ROW_DOT``, the interpreter's form since the eighth session), against float64, per iteration,
beside the float32 reference; and the share of a tile's entries where NumPy's two products differ.

Prints tables and writes JSON. A copy of this script in another checkout's ``benchmarks/``
measures that checkout's operator, for a before/after (``_common`` puts the script's own checkout
first on ``sys.path``, ahead of ``PYTHONPATH``).

    python benchmarks/float32_accuracy.py --json benchmarks/results/float32_accuracy.json
"""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, write_json

from sinkalign.sinkhorn import SinkhornConfig, sinkhorn_attention
from sinkalign.sinkhorn.validation import EXACTNESS_CASES, MODES_FOR_DEPTH, _case_inputs, _loss_fn

jax.config.update("jax_enable_x64", True)
RESULTS = Path(__file__).resolve().parent / "results" / "float32_accuracy.json"


def sweep(rows: list) -> None:
    print(f"{'problem':52s} {'R':>2s} {'mode':14s} {'max abs error vs float64':>25s}")
    for case in EXACTNESS_CASES:
        x32, g32, qm, km = _case_inputs(case, jnp.float32)
        x64 = {n: jnp.asarray(np.asarray(a), jnp.float64) for n, a in x32.items()}
        g64 = jnp.asarray(np.asarray(g32), jnp.float64)
        for r in (1, 2, 4):
            cfg = SinkhornConfig(eps=1.0, n_iters=15, tail=r, band=case.band, backward="autodiff")
            _, truth = _loss_fn(case, cfg, qm, km)(x64, g64)
            for mode in ("autodiff", *MODES_FOR_DEPTH[r]):
                _, got = _loss_fn(case, cfg.replace(backward=mode), qm, km)(x32, g32)
                err = max(float(np.abs(np.asarray(got[n], np.float64) - np.asarray(truth[n])).max()) for n in got)
                rows.append({"problem": case.name, "R": r, "mode": mode, "max_abs_error": err})
                print(f"{case.name[:52]:52s} {r:2d} {mode:14s} {err:25.2e}", flush=True)


def heterogeneous(spread: float, seed: int = 1, L: int = 96, d: int = 16):
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, 1, L, d)) * np.exp(rng.uniform(0, np.log(spread), size=(2, 1, L, 1)))
    v, g = rng.normal(size=(2, 1, L, 8))
    return [np.asarray(np.asarray(a, np.float32), np.float64) for a in (q, k, v)], g


def spreads(values, rows: list) -> None:
    print(f"\n{'spread':>6s} {'max|S|':>8s} {'mode':14s} {'dQ':>9s} {'dK':>9s} {'dV':>9s}  (relative to the largest entry)")
    for spread in values:
        (q, k, v), g = heterogeneous(spread)
        max_s = float(np.abs(q[0] @ k[0].T).max() / 4)

        def grads(backward, dtype):
            cfg = SinkhornConfig(eps=1.0, n_iters=15, band=12, backward=backward)
            fn = jax.grad(lambda *x: jnp.sum(sinkhorn_attention(*x, config=cfg) * g.astype(dtype)), argnums=(0, 1, 2))
            return [np.asarray(x, np.float64) for x in fn(*(jnp.asarray(a, dtype) for a in (q, k, v)))]

        truth = grads("autodiff", jnp.float64)
        for mode in ("autodiff", "one_reference", "staircase", "direct"):
            errs = [float(np.abs(x - t).max() / np.abs(t).max()) for x, t in zip(grads(mode, jnp.float32), truth)]
            rows.append({"spread": spread, "max_abs_score": max_s, "mode": mode, "dq": errs[0], "dk": errs[1],
                         "dv": errs[2]})
            print(f"{spread:6g} {max_s:8.0f} {mode:14s} {errs[0]:9.1e} {errs[1]:9.1e} {errs[2]:9.1e}", flush=True)


def kernels(values, rows: list) -> None:
    """The Pallas and Triton kernels (interpreters) on the heterogeneous problem of their tests."""
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    import torch

    from sinkalign.kernels import pallas
    from sinkalign.kernels.triton import sinkhorn_attention_ref, sinkhorn_attention_triton

    print(f"\n{'spread':>6s} {'max|S|':>8s} {'method (float32)':22s} {'dQ':>9s} {'dK':>9s} {'dV':>9s}")
    for spread in values:
        (q, k, v), g = heterogeneous(spread, seed=2, L=64, d=16)
        q, k, v, g = (a[None] for a in (q, k, v, g))  # [B, H, L, *] = [1, 1, 64, *]
        max_s = float(np.abs(q[0, 0] @ k[0, 0].T).max() / 4)
        kw = {"eps": 1.0, "n_iters": 15, "tail": 2, "band": 10}

        def torch_grads(fn, dtype, **extra):
            leaves = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v)]
            out = fn(*leaves, **kw, **extra)
            return [x.detach().double().numpy() for x in torch.autograd.grad(out, leaves,
                                                                             torch.tensor(g, dtype=out.dtype))]

        def jax_grads(dtype, run):
            f = lambda *x: jnp.sum(run(*x) * g.astype(dtype))  # noqa: E731
            return [np.asarray(x, np.float64) for x in jax.grad(f, argnums=(0, 1, 2))(
                *(jnp.asarray(a, dtype) for a in (q, k, v)))]

        cfg = SinkhornConfig(eps=1.0, n_iters=15, band=10)
        truth = torch_grads(sinkhorn_attention_ref, torch.float64)
        blocks = pallas.BlockSizes(block_q=16, block_k=32)
        methods = {
            "torch autograd": lambda: torch_grads(sinkhorn_attention_ref, torch.float32),
            "triton (interpreter)": lambda: torch_grads(sinkhorn_attention_triton, torch.float32, block_m=16,
                                                        block_n=16, cache_scores=False),
            "triton cached": lambda: torch_grads(sinkhorn_attention_triton, torch.float32, block_m=16, block_n=16,
                                                 cache_scores=True),
            "jax autodiff": lambda: jax_grads(jnp.float32, lambda *x: sinkhorn_attention(
                *x, config=cfg.replace(backward="autodiff"))),
            "pallas (interpreter)": lambda: jax_grads(jnp.float32, lambda *x: pallas.sinkhorn_attention_pallas(
                *x, config=cfg, block_sizes=blocks, interpret=True, cache_scores=False)),
            "pallas cached": lambda: jax_grads(jnp.float32, lambda *x: pallas.sinkhorn_attention_pallas(
                *x, config=cfg, block_sizes=blocks, interpret=True, cache_scores=True)),
        }
        for name, run in methods.items():
            errs = [float(np.abs(x - t).max() / np.abs(t).max()) for x, t in zip(run(), truth)]
            rows.append({"spread": spread, "max_abs_score": max_s, "method": name, "dq": errs[0], "dk": errs[1],
                         "dv": errs[2]})
            print(f"{spread:6g} {max_s:8.0f} {name:22s} {errs[0]:9.1e} {errs[1]:9.1e} {errs[2]:9.1e}", flush=True)


def triton_drift(seeds, rows: list, spread: float = 30.0, iters: int = 15) -> None:
    """Base-solve duals (15 centered iterations from v = 0, as the operator's forward) by the
    Triton half-step kernel (interpreter) with ``ROW_DOT`` off and on, and by the float32 torch
    reference, each against float64: max |v - v64| after iterations 1, 5, 10 and 15; and the
    operator's output the same three ways."""
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    import torch

    from sinkalign.kernels.triton import kernels as K
    from sinkalign.kernels.triton import op
    from sinkalign.kernels.triton.ref import _col_step, _row_step, band_support

    tile = np.random.default_rng(0).normal(size=(2, 16, 16)).astype(np.float32) * 30
    differ = float(np.mean(tile[0] @ tile[1].T != (tile[1] @ tile[0].T).T))
    print(f"\nNumPy float32 16 x 16 x 16 products: Q K^T and (K Q^T)^T differ in {differ:.0%} of entries")
    print(f"{'seed':>4s} {'max|S|':>7s} {'duals':22s} " + " ".join(f"{'it ' + str(i):>8s}" for i in (1, 5, 10, 15))
          + f" {'output':>9s}  (duals: max abs error; output: relative to its largest entry)")
    for seed in seeds:
        L, d, band = 64, 16, 10
        (q, k, v), _ = heterogeneous(spread, seed, L=L, d=d)
        q32, k32, v_tok = (torch.tensor(a[None], dtype=torch.float32) for a in (q, k, v))  # [1, 1, L, *]
        mask = torch.ones(1, L, dtype=torch.bool)
        sup = band_support(mask, mask, band)  # [1, 1, L, L]
        zero = torch.zeros(1, L, dtype=torch.float64)

        def torch_duals(dtype):
            s = (q32.to(dtype) @ k32.to(dtype).transpose(-1, -2)) / np.sqrt(d)
            u = v = torch.zeros(1, 1, L, dtype=dtype)
            out = []
            for _ in range(iters):
                u = _row_step(s, v, sup, mask[:, None], zero.to(dtype))
                v = _col_step(s, u, sup, mask[:, None], zero.to(dtype))
                c = u.sum(-1, keepdim=True) / L
                v = v + c
                out.append(v[0, 0].double())
            return out

        lc = op._Launch(q32, k32, k32, band, 1.0, True, 16, 16, cache_scores=False)
        qf, kf = q32.reshape(1, L, d).contiguous(), k32.reshape(1, L, d).contiguous()
        m8 = torch.ones(1, L, dtype=torch.int8)
        logm = torch.zeros(1, L)

        def triton_duals(row_dot):
            v, out = torch.zeros(1, L), []
            for _ in range(iters):
                u = lc.half_step(qf, kf, v, m8, m8, logm, L, L, 16, 16)
                v = torch.empty(1, L)
                K.half_step_kernel[(L // 16, 1)](kf, qf, u, m8, m8, logm, v, L, L, 1, band, lc.scale,
                                                 *lc.cache_args(), D=d, BLOCK_X=16, BLOCK_Y=16, BLOCK_D=lc.BD,
                                                 PREC=lc.prec, DOT_T=lc.dot_t, ROW_DOT=row_dot)
                v = v + u.sum(-1, keepdim=True) / L
                out.append(v[0].double())
            return out

        # the operator's output (L = 64, dv = 8) with the column half-steps' tiles formed each way
        from sinkalign.kernels.triton import sinkhorn_attention_ref, sinkhorn_attention_triton

        kw = {"eps": 1.0, "n_iters": iters, "tail": 2, "band": band, "cache_scores": False}  # sweeps form their tiles
        ref_kw = {name: x for name, x in kw.items() if name != "cache_scores"}
        out64 = sinkhorn_attention_ref(q32.double(), k32.double(), v_tok.double(), **ref_kw)
        scale = float(out64.abs().max())
        out_err = {"float32 reference": sinkhorn_attention_ref(q32, k32, v_tok, **ref_kw)}
        half_step = op._Launch.half_step
        try:  # the native form in the interpreter: the column half-steps without ROW_DOT
            op._Launch.half_step = lambda self, *a, cols=False, **k_: half_step(self, *a, **k_)
            out_err["triton K Q^T"] = sinkhorn_attention_triton(q32, k32, v_tok, block_m=16, block_n=16, **kw)
        finally:
            op._Launch.half_step = half_step
        out_err["triton (Q K^T)^T"] = sinkhorn_attention_triton(q32, k32, v_tok, block_m=16, block_n=16, **kw)
        out_err = {name: float((o.double() - out64).abs().max()) / scale for name, o in out_err.items()}
        exact = torch_duals(torch.float64)
        max_s = float((q32[0, 0].double() @ k32[0, 0].double().T).abs().max()) / np.sqrt(d)
        for name, got in (("float32 reference", torch_duals(torch.float32)),
                          ("triton K Q^T", triton_duals(False)), ("triton (Q K^T)^T", triton_duals(True))):
            errs = [float((g - e).abs().max()) for g, e in zip(got, exact)]
            rows.append({"seed": seed, "spread": spread, "max_abs_score": max_s, "duals": name, "max_abs_error": errs,
                         "output_error": out_err[name]})
            print(f"{seed:4d} {max_s:7.0f} {name:22s} " + " ".join(f"{errs[i - 1]:8.1e}" for i in (1, 5, 10, 15))
                  + f" {out_err[name]:9.1e}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spreads", type=float, nargs="+", default=[1, 10, 30, 100])
    ap.add_argument("--no-sweep", action="store_true", help="only the heterogeneous problems")
    ap.add_argument("--kernels", action="store_true", help="also the Pallas and Triton kernels (interpreters)")
    ap.add_argument("--kernel-spreads", type=float, nargs="+", default=[30, 100])
    ap.add_argument("--triton-drift", action="store_true",
                    help="also the base-solve duals of Triton's interpreted half-steps, per iteration")
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args()
    sweep_rows, spread_rows = [], []
    payload = {"benchmark": "float32_accuracy", "date": datetime.date.today().isoformat(), "machine": machine(),
               "sweep": sweep_rows, "heterogeneous": spread_rows}
    if not args.no_sweep:
        sweep(sweep_rows)
        by_mode = {}
        for r in sweep_rows:
            by_mode[r["mode"]] = max(by_mode.get(r["mode"], 0.0), r["max_abs_error"])
        print("worst per mode:", {m: f"{e:.2e}" for m, e in by_mode.items()})
        payload["worst_per_mode"] = by_mode
    spreads(args.spreads, spread_rows)
    if args.kernels:
        payload["kernels"] = kernel_rows = []
        kernels(args.kernel_spreads, kernel_rows)
    if args.triton_drift:
        payload["triton_drift"] = drift_rows = []
        triton_drift(range(6), drift_rows)
    write_json(args.json, payload)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
