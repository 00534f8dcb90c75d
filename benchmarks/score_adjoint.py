"""The paper's Table 5: direct four-plan vs one-reference R = 2 score adjoint (dense, CPU).

Isolates the backward stage after the base and tail potentials are available: the
direct baseline forms P^(2,2), P^(2,1), P^(1,1), P^(1,0) as separate arrays; the
one-reference schedule forms only P^(2,2) and rescales rows/columns. Reports the
logical plan-factor storage (exactly 4x smaller), XLA's temporary memory for the
compiled adjoint, and mean post-compilation time over 20 repetitions.

    python benchmarks/score_adjoint.py [--sizes 256 512 1024] [--json benchmarks/results/score_adjoint.json]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, mib, time_fn, write_json, xla_memory

from sinkalign.sinkhorn import SinkhornConfig, core
from sinkalign.sinkhorn.support import Support


def run(sizes, d, reps, dtype):
    rows = []
    for L in sizes:
        rng = np.random.default_rng(L)
        q, k, v, g = (jnp.asarray(rng.normal(size=(1, L, d)), dtype) for _ in range(4))
        q, k, v, qv, kv, la, lb = core.prepare(q, k, v)
        support = Support.single(L, L, None)
        cfg = SinkhornConfig(n_iters=15, tail=2)
        _, (us, vs) = core._forward(q, k, v, qv, kv, la, lb, support, cfg)
        row = {"L": L, "d": d, "dtype": str(np.dtype(dtype))}
        outs = {}
        for mode in ("direct", "one_reference"):
            def adjoint(q, k, v, g, us, vs, mode=mode):
                prob = core._problem(support, qv, kv, la, lb, q.dtype)
                a = core._adjoint(q, k, v, prob, us, vs, g, support, cfg, mode)
                return a.dq, a.dk, a.dv

            fn = jax.jit(adjoint)
            outs[mode] = fn(q, k, v, g, us, vs)
            t = time_fn(fn, q, k, v, g, us, vs, reps=reps)
            mem = xla_memory(fn, q, k, v, g, us, vs)
            n_plans = 4 if mode == "direct" else 1
            row[f"{mode}_plan_bytes"] = n_plans * L * L * np.dtype(dtype).itemsize
            row[f"{mode}_temp_bytes"] = mem.get("temp_bytes")
            row[f"{mode}_ms"] = 1e3 * t["mean_s"]
        row["max_abs_difference"] = max(float(jnp.abs(a - b).max()) for a, b in zip(outs["direct"], outs["one_reference"]))
        row["storage_ratio"] = row["direct_plan_bytes"] / row["one_reference_plan_bytes"]
        row["speedup"] = row["direct_ms"] / row["one_reference_ms"]
        rows.append(row)
        print(f"L={L:5d}  plan storage {mib(row['direct_plan_bytes'])} / {mib(row['one_reference_plan_bytes'])} MiB "
              f"(x{row['storage_ratio']:.0f})  XLA temp {mib(row['direct_temp_bytes'])} / "
              f"{mib(row['one_reference_temp_bytes'])} MiB  time {row['direct_ms']:.2f} / "
              f"{row['one_reference_ms']:.2f} ms (x{row['speedup']:.2f})  |diff| {row['max_abs_difference']:.1e}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="benchmarks/results/score_adjoint.json")
    args = ap.parse_args()
    print("direct four-plan / one-reference R=2 score adjoint (dense, float32)")
    rows = run(args.sizes, args.d, args.reps, jnp.float32)
    write_json(args.json, {"benchmark": "score_adjoint", "machine": machine(), "rows": rows})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
