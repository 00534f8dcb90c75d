"""Forward + backward time and peak memory as L grows at fixed band W.

Compares the one-reference custom backward (stopped base, R = 2 tail, O(L) residuals)
against plain JAX autodiff through all T + R unrolled steps, both on the same blockwise
O(L W) band layout, and dense autodiff (the whole L x L matrix) at small L. Peak memory
is XLA's buffer assignment for the compiled forward+backward program (temporaries +
arguments + outputs), which is deterministic; time is the mean of post-compilation runs.

    python benchmarks/tail_scaling.py [--lengths 512 1024 2048 4096 8192] [--band 64]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, mib, time_fn, write_json, xla_memory

from sinkalign.sinkhorn import SinkhornConfig, core
from sinkalign.sinkhorn.support import Support


def fwd_bwd(L, band, mode, stop_base, d, T):
    support = Support.single(L, L, band)
    cfg = SinkhornConfig(n_iters=T, tail=2, band=band, backward=mode)
    ones = jnp.ones((1, L), bool)
    zeros = jnp.zeros((1, L), jnp.float32)

    def loss(q, k, v, g):
        if stop_base:
            out = core.tail_operator(q, k, v, ones, ones, zeros, zeros, support, cfg)
        else:  # autodiff through all T + R steps (no stop-gradient on the base)
            out = core._forward(q, k, v, ones, ones, zeros, zeros, support, cfg, stop_base=False)[0]
        return jnp.sum(out * g)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    ap.add_argument("--dense-lengths", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--band", type=int, default=64)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--T", type=int, default=15)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default="benchmarks/results/tail_scaling.json")
    args = ap.parse_args()
    variants = [
        ("one_reference (stopped base)", "one_reference", True, args.band, args.lengths),
        ("autodiff through T+R (band)", "autodiff", False, args.band, args.lengths),
        ("autodiff through T+R (dense)", "autodiff", False, None, args.dense_lengths),
    ]
    rows = []
    print(f"forward+backward, T={args.T}, R=2, d={args.d}, W={args.band}, float32, batch 1")
    print(f"{'variant':32s} {'L':>6s} {'time ms':>10s} {'peak MiB':>10s} {'temp MiB':>10s}")
    for name, mode, stop, band, lengths in variants:
        for L in lengths:
            rng = np.random.default_rng(L)
            q, k, v, g = (jnp.asarray(rng.normal(size=(1, L, args.d)), jnp.float32) for _ in range(4))
            fn = fwd_bwd(L, band, mode, stop, args.d, args.T)
            mem = xla_memory(fn, q, k, v, g)
            t = time_fn(fn, q, k, v, g, reps=args.reps)
            row = {"variant": name, "L": L, "band": band, "ms": 1e3 * t["mean_s"], **mem}
            rows.append(row)
            print(f"{name:32s} {L:6d} {row['ms']:10.1f} {mib(mem.get('peak_bytes')):>10s} {mib(mem.get('temp_bytes')):>10s}")
    # growth exponents: slope of log(peak) vs log(L) over the largest two lengths
    summary = {}
    for name, *_ in variants:
        pts = [(r["L"], r["peak_bytes"], r["ms"]) for r in rows if r["variant"] == name]
        if len(pts) >= 2:
            (l1, m1, t1), (l2, m2, t2) = pts[-2], pts[-1]
            summary[name] = {"memory_exponent": float(np.log(m2 / m1) / np.log(l2 / l1)),
                             "time_exponent": float(np.log(t2 / t1) / np.log(l2 / l1))}
    for r in rows:
        base = next((x for x in rows if x["variant"].startswith("one_reference") and x["L"] == r["L"]), None)
        if base:
            r["memory_ratio_vs_one_reference"] = r["peak_bytes"] / base["peak_bytes"]
            r["time_ratio_vs_one_reference"] = r["ms"] / base["ms"]
    print("growth exponents (last two lengths):", {k: {a: round(b, 2) for a, b in v.items()} for k, v in summary.items()})
    write_json(args.json, {"benchmark": "tail_scaling", "machine": machine(), "T": args.T, "R": 2, "d": args.d,
                           "band": args.band, "rows": rows, "growth": summary})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
