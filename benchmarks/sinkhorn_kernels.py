"""Sinkhorn tail-refinement operator: forward + backward time and peak memory vs L, W.

Methods, all on the same scores S = Q K^T / sqrt(d) (eps = 1), band |i - j| <= W, unit
masses, T = 15 base steps, R = 2 tail steps, gradient of <O, G> w.r.t. Q, K, V:

* ``blockwise``      the JAX reference operator (``backend="reference"``), banded block layout,
                     one-reference R = 2 backward: O(L W) time and memory.
* ``direct``         the same layout with the paper's ``direct`` backward (four plans formed).
* ``dense_autodiff`` plain dense JAX (all L x L scores, band as a mask) differentiated by
                     autodiff through all T + R steps: memory ~ L^2 (T + R).
* ``ott``            OTT-JAX ``Sinkhorn`` (T + R = 17 iterations, implicit differentiation) on
                     the dense geometry with cost -S, marginals 1/L, *without* the band: with
                     the band imposed as a large off-band cost (1e4 or 50) its implicit linear
                     solve (lineax) returns NaN at L >= 2048, W = 256, both after 17 iterations
                     and after converging to 1e-5 (OTT 0.6; passing another ``solver`` hits an
                     unbound-variable bug in ``ImplicitDiff.solve``).
* ``pallas``         the Pallas kernels recomputing their score tiles in every sweep
                     (``cache_scores=False``), native lowering (GPU only; the interpreter is far
                     too slow to benchmark and is skipped on CPU).
* ``pallas_cached``  the same with ``cache_scores=True``: the band's scores computed once into a
                     float32 cache that every sweep reads (O(L W) memory; GPU only). The kernels'
                     default for exact float32 dots (``sinkalign.kernels.cache``), not for tf32x3 or
                     bfloat16.
* ``triton``         the Triton kernels, recomputing (``cache_scores=False``; CUDA only).
* ``triton_cached``  the same with ``cache_scores=True`` (CUDA only), likewise the default for exact
                     float32 dots.

Peak memory of JAX programs is XLA's buffer assignment of the compiled fwd+bwd program
(``memory_analysis()``: temporaries + arguments + outputs); for Triton it is
``torch.cuda.max_memory_allocated``. Times are post-compilation minima over ``--reps`` runs
(the minimum is the robust statistic on a machine shared with other jobs).
Ratios are taken within this run. ``--roofline h100|h200`` derives a roofline for one
half-step and for the whole fwd+bwd (tensor-core FLOPs, exp throughput, HBM bytes) and, on a
GPU, the fraction of it that the kernels reach.

    python benchmarks/sinkhorn_kernels.py [--lengths 512 1024 2048 4096] [--bands 256 1024]
        [--dense-max 4096] [--reps 3] [--roofline h100] [--json benchmarks/results/sinkhorn_kernels.json]
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, mib, time_fn, write_json, xla_memory

from sinkalign.sinkhorn import SinkhornConfig, core
from sinkalign.sinkhorn.support import Support

ON_GPU = jax.default_backend() == "gpu"
JAX_METHODS = ("blockwise", "direct", "dense_autodiff", "ott")
GPU_METHODS = ("pallas", "pallas_cached", "triton", "triton_cached")
CACHED_METHODS = ("pallas_cached", "triton_cached")

# Peak rates per GPU (dense, no sparsity). MUFU exp throughput from the FlashAttention-3 paper
# (H100 SXM5: 989 TFLOPS FP16/BF16 matmul, 3.9 TFLOPS special functions); H200 has the H100
# compute die with faster, larger HBM3e.
GPUS = {
    "h100": {"name": "H100 SXM5 80GB", "bf16_flops": 989e12, "tf32_flops": 495e12, "fp32_flops": 67e12,
             "exp_per_s": 3.9e12, "hbm_bytes_per_s": 3.35e12},
    "h200": {"name": "H200 SXM 141GB", "bf16_flops": 989e12, "tf32_flops": 495e12, "fp32_flops": 67e12,
             "exp_per_s": 3.9e12, "hbm_bytes_per_s": 4.8e12},
}


# --------------------------------------------------------------------------- methods


def _inputs(L, d, seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=(1, L, d)), dtype) for _ in range(4))  # q, k, v, g


def blockwise_loss(L, W, T, R, backward):
    cfg = SinkhornConfig(n_iters=T, tail=R, band=W, backward=backward, block=128)
    support = Support.single(L, L, W, cfg.block)
    qv, kv = jnp.ones((1, L), bool), jnp.ones((1, L), bool)
    la, lb = jnp.zeros((1, L), jnp.float32), jnp.zeros((1, L), jnp.float32)

    def out(q, k, v):
        return core.tail_operator(q, k, v, qv, kv, la, lb, support, cfg)

    return out


def _band_mask(L, W):
    idx = jnp.arange(L)
    return jnp.abs(idx[:, None] - idx[None, :]) <= W


def dense_autodiff_loss(L, W, T, R):
    """Dense masked log-domain Sinkhorn, differentiated through every one of the T + R steps."""

    def out(q, k, v):
        q, k, v = q[0], k[0], v[0]
        mask = _band_mask(L, W)
        S = q @ k.T / math.sqrt(q.shape[-1])

        def row(vv):
            return -jax.nn.logsumexp(jnp.where(mask, S + vv[None, :], -jnp.inf), axis=1)

        def col(u):
            return -jax.nn.logsumexp(jnp.where(mask, S + u[:, None], -jnp.inf), axis=0)

        def step(uv, _):
            u = row(uv[1])
            vv = col(u)
            c = u.mean()
            return (u - c, vv + c), None

        (u, vv), _ = jax.lax.scan(step, (jnp.zeros(L), jnp.zeros(L)), None, length=T)
        for _ in range(R):
            u = row(vv)
            vv = col(u)
        P = jnp.exp(jnp.where(mask, S + u[:, None] + vv[None, :], -jnp.inf))
        return (P @ v)[None]

    return out


def ott_loss(L, W, T, R):
    from ott.geometry import geometry
    from ott.problems.linear import linear_problem
    from ott.solvers.linear import implicit_differentiation, sinkhorn

    solver = sinkhorn.Sinkhorn(threshold=-1.0, min_iterations=T + R, max_iterations=T + R, inner_iterations=1,
                               implicit_diff=implicit_differentiation.ImplicitDiff())

    def out(q, k, v):  # W is not used: see the module docstring
        q, k, v = q[0], k[0], v[0]
        S = q @ k.T / math.sqrt(q.shape[-1])
        geom = geometry.Geometry(cost_matrix=-S, epsilon=1.0)
        prob = linear_problem.LinearProblem(geom, a=jnp.full(L, 1.0 / L), b=jnp.full(L, 1.0 / L))
        return ((solver(prob).matrix * L) @ v)[None]

    return out


def pallas_loss(L, W, T, R, precision="ieee", block_sizes=None, cache_scores=False):
    from sinkalign.kernels import pallas

    cfg = SinkhornConfig(n_iters=T, tail=R, band=W, backend="pallas")
    support = Support.single(L, L, W, cfg.block)
    qv, kv = jnp.ones((1, L), bool), jnp.ones((1, L), bool)
    la, lb = jnp.zeros((1, L), jnp.float32), jnp.zeros((1, L), jnp.float32)

    def out(q, k, v):
        return pallas.tail_operator(q, k, v, qv, kv, la, lb, support, cfg, interpret=False, precision=precision,
                                    block_sizes=block_sizes, cache_scores=cache_scores)

    return out


def _jax_method(name, L, W, T, R, precision="ieee", block_sizes=None):
    if name in ("blockwise", "direct"):
        return blockwise_loss(L, W, T, R, "one_reference" if name == "blockwise" else "direct")
    if name == "dense_autodiff":
        return dense_autodiff_loss(L, W, T, R)
    if name == "ott":
        return ott_loss(L, W, T, R)
    if name in ("pallas", "pallas_cached"):
        return pallas_loss(L, W, T, R, precision, block_sizes, cache_scores=name == "pallas_cached")
    raise ValueError(name)


def _best(fn, *args, reps):
    """Minimum wall time (s) of fn(*args) over reps runs after one warm-up."""
    return time_fn(fn, *args, reps=reps)["min_s"]


def bench_jax(name, L, W, d, T, R, reps, dtype="float32", precision="ieee", block_sizes=None):
    """``block_sizes``: the Pallas kernels' tiles and launch (``pallas.BlockSizes``; None: the default)."""
    q, k, v, g = _inputs(L, d, dtype=dtype)
    out = _jax_method(name, L, W, T, R, precision, block_sizes)
    fwd = jax.jit(out)
    fwd_bwd = jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(out(q, k, v) * g), argnums=(0, 1, 2)))
    t0 = time.perf_counter()
    o = jax.block_until_ready(fwd(q, k, v))
    compile_s = time.perf_counter() - t0
    row = {"method": name, "dtype": dtype, "precision": precision, "L": L, "W": W,
           "forward_ms": 1e3 * _best(fwd, q, k, v, reps=reps),
           "fwd_bwd_ms": 1e3 * _best(fwd_bwd, q, k, v, reps=reps), "first_call_s": compile_s}
    mem = xla_memory(fwd_bwd, q, k, v)
    row["temp_bytes"], row["peak_bytes"] = mem.get("temp_bytes"), mem.get("peak_bytes")
    return row, np.asarray(o, np.float32)


def bench_triton(L, W, d, T, R, reps, dtype="float32", precision="ieee", launch=None, cache_scores=False):
    """``launch``: ``block_m``, ``block_n``, ``num_warps``, ``num_stages`` for the operator (None: its
    default); ``cache_scores``: the operator's score cache (method ``triton_cached``)."""
    import torch

    from sinkalign.kernels.triton import sinkhorn_attention_triton

    launch = {**(launch or {}), "cache_scores": cache_scores}
    rng = np.random.default_rng(0)
    q, k, v, g = (torch.tensor(rng.normal(size=(1, 1, L, d)), dtype=getattr(torch, dtype), device="cuda")
                  for _ in range(4))
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()

    def fwd():
        with torch.no_grad():
            return sinkhorn_attention_triton(q, k, v, n_iters=T, tail=R, band=W, precision=precision, **launch)

    def fwd_bwd():
        o = sinkhorn_attention_triton(q, k, v, n_iters=T, tail=R, band=W, precision=precision, **launch)
        return torch.autograd.grad((o * g).sum(), (q, k, v))

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return 1e3 * min(times)

    row = {"method": "triton_cached" if cache_scores else "triton", "dtype": dtype, "precision": precision, "L": L,
           "W": W, "forward_ms": timed(fwd)}
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    row["fwd_bwd_ms"] = timed(fwd_bwd)
    row["peak_bytes"] = int(torch.cuda.max_memory_allocated())
    row["temp_bytes"] = int(torch.cuda.max_memory_allocated() - base)
    return row, fwd()[0].float().cpu().numpy()


# --------------------------------------------------------------------------- roofline


def roofline(L, W, d, T, R, gpu: str, dtype="bfloat16", block=64, cached=False) -> dict:
    """Roofline of the blockwise operator (fwd + bwd) on ``gpu``, from one half-step.

    A half-step is one pass over the band: each program (``block`` rows) recomputes its score
    tiles from Q and K over a key window of ``min(L, block + 2W)`` columns, so a pass visits
    ``n = L * min(L, block + 2W)`` scores. Per score: ``2d`` matmul FLOPs (QK^T; tensor cores
    for bfloat16, and at a third of the TF32 rate for ``tf32x3``; FP32 units for float32),
    ``ALU`` ~ 6 FP32 ops (scale, add potential, mask, running max, subtract, accumulate) and one
    exp (MUFU). Ideal HBM traffic (band tiles re-read from L2, not HBM): Q and K once, O(L)
    vectors in and out. The ceiling of a pass is
    ``max(matmul, alu, exp, memory)`` (the units overlap); float32 matmul and ALU share the
    FP32 units. Passes: forward ``2 (T + R)`` half-steps + 1 output pass (+ ``2 dv`` per
    score for P V, V read once); backward 6 passes (5 sweeps, the dQ sweep makes two) with
    ``2 dv`` for Z = G V^T where needed and ``2 d``/``2 dv`` for the dQ, dK, dV products.

    ``cached``: the algorithm of ``cache_scores=True``. One pass in the forward and one in the
    backward computes the scores (``2d`` FLOPs each) and writes them (4 bytes each); every
    sweep then reads them (4 bytes a score from HBM) instead of the ``2d`` FLOPs of QK^T. The
    operator's roofline is the lower of the two algorithms'.
    """
    spec = GPUS[gpu]
    low = dtype in ("bfloat16", "tf32x3")  # matmuls on the tensor cores
    esize = 2 if dtype == "bfloat16" else 4
    mm_rate = {"bfloat16": spec["bf16_flops"], "tf32x3": spec["tf32_flops"] / 3}.get(dtype, spec["fp32_flops"])
    dv = d
    window = min(L, block + 2 * W)
    scores = L * window
    ALU = 6

    def pass_time(mm_per_score, alu_per_score, n_tokens, exps=1, score_bytes=0):
        t_mm = scores * mm_per_score / mm_rate
        t_alu = scores * (alu_per_score + (0 if low else mm_per_score)) / spec["fp32_flops"]
        t_exp = exps * scores / spec["exp_per_s"]
        t_mem = (n_tokens * L * d * esize + 8 * 4 * L + score_bytes * scores) / spec["hbm_bytes_per_s"]
        parts = ({"tensor_core": t_mm, "fp32_alu": t_alu} if low else {"fp32_units": t_alu}) | {"exp": t_exp,
                                                                                               "memory": t_mem}
        return max(parts.values()), parts

    # QK^T per score in a sweep: its 2d FLOPs, or (cached) none and the score read from HBM
    qk, read = (0, 4) if cached else (2 * d, 0)
    build = pass_time(2 * d, 1, 2, exps=0, score_bytes=4)[0] if cached else 0.0  # S = Q K^T * scale, written
    half, parts = pass_time(qk, ALU, 2, score_bytes=read)
    fwd = build + 2 * (T + R) * half + pass_time(qk + 2 * dv, ALU, 3, score_bytes=read)[0]
    bwd = (build + pass_time(qk + 4 * dv, ALU + 2, 5, score_bytes=read)[0]  # g_v, dV   (reads Q K V G, writes dV)
           + pass_time(qk + 2 * dv, ALU + 2, 4, score_bytes=read)[0]  # ubar2
           + pass_time(qk, ALU + 1, 2, score_bytes=read)[0]  # vbar1
           + pass_time(qk, ALU + 1, 2, score_bytes=read)[0]
           + pass_time(qk + 2 * d + 2 * dv, ALU + 8, 5, score_bytes=read)[0]  # ubar1, dQ
           + pass_time(qk + 2 * d + 2 * dv, ALU + 8, 5, score_bytes=read)[0])  # dK
    return {"gpu": spec["name"], "dtype": dtype, "cached": cached, "L": L, "W": W, "d": d, "block": block,
            "scores_per_pass": scores, "half_step_flops": scores * (qk + ALU), "half_step_exps": scores,
            "half_step_hbm_bytes": 2 * L * d * esize + 32 * L + read * scores, "half_step_s": half,
            "half_step_bound": max(parts, key=parts.get), "half_step_parts_s": parts, "score_pass_s": build,
            "forward_s": fwd, "fwd_bwd_s": fwd + bwd}


# --------------------------------------------------------------------------- driver


def _label(dtype: str, precision: str | None) -> str:
    return dtype if precision in (None, "ieee") else f"{dtype}/{precision}"


def _gpu_name() -> str | None:
    if not ON_GPU:
        return None
    return getattr(jax.devices()[0], "device_kind", str(jax.devices()[0]))


def _release_memory() -> None:
    """Drop compiled programs and cached buffers between configurations (one big dense problem
    must not leave the next one short of device memory)."""
    jax.clear_caches()
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _slope(rows, key):
    pts = [(r["L"], r[key]) for r in rows if r.get(key)]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+",
                    default=([512, 1024, 2048, 4096, 8192, 16384, 32768, 65536] if ON_GPU
                             else [512, 1024, 2048, 4096, 8192, 16384]))
    ap.add_argument("--bands", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--T", type=int, default=15)
    ap.add_argument("--R", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dense-max", type=int, default=16384 if ON_GPU else 2048,
                    help="Largest L for the O(L^2) methods (dense_autodiff, ott).")
    ap.add_argument("--direct-max", type=int, default=None, help="Largest L for the direct backward.")
    ap.add_argument("--methods", nargs="+", default=list(JAX_METHODS + GPU_METHODS),
                    choices=list(JAX_METHODS + GPU_METHODS))
    ap.add_argument("--roofline", choices=sorted(GPUS), default=None)
    ap.add_argument("--low-precision", action="store_true",
                    help="Also time the GPU kernels (pallas, triton) on bfloat16 inputs.")
    ap.add_argument("--tf32x3", action="store_true",
                    help="Also time the GPU kernels on float32 inputs with precision='tf32x3' dots.")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="Seconds: start no new (method, L, W) once this much has passed (noted in the JSON).")
    ap.add_argument("--json", default="benchmarks/results/sinkhorn_kernels.json")
    args = ap.parse_args()

    notes = []
    methods = list(args.methods)
    if not ON_GPU:
        skipped = [m for m in methods if m in GPU_METHODS]
        methods = [m for m in methods if m not in GPU_METHODS]
        if skipped:
            notes.append(f"no GPU: skipped {skipped} (native Pallas/Triton need a GPU; the Pallas interpreter is "
                         "far too slow to benchmark, so the blockwise JAX reference stands in for the O(L W) path)")
    if any(m.startswith("triton") for m in methods):
        import torch

        if not torch.cuda.is_available():
            skipped = [m for m in methods if m.startswith("triton")]
            methods = [m for m in methods if not m.startswith("triton")]
            notes.append(f"torch has no CUDA: skipped {skipped}")
    for n in notes:
        print("NOTE:", n)
    print(f"d={args.d} T={args.T} R={args.R} float32, batch 1; backend {jax.default_backend()}")
    rows = []
    t_start = time.perf_counter()
    configs = []
    for W in args.bands:
        for L in args.lengths:
            for m in methods:
                if m in ("dense_autodiff", "ott") and L > args.dense_max:
                    continue
                if m == "direct" and args.direct_max is not None and L > args.direct_max:
                    continue
                configs.append((W, L, m, "float32", "ieee"))
            if args.tf32x3:
                configs += [(W, L, m, "float32", "tf32x3") for m in methods if m in GPU_METHODS]
            if args.low_precision:
                configs += [(W, L, m, "bfloat16", "ieee") for m in methods if m in GPU_METHODS]

    def payload(roof=None, growth=None):
        return {"benchmark": "sinkhorn_kernels", "date": datetime.date.today().isoformat(), "machine": machine(),
                "gpu": _gpu_name(), "d": args.d, "T": args.T, "R": args.R, "dtype": "float32", "methods": methods,
                "notes": notes, "rows": rows, "memory_growth": growth, "roofline": roof,
                "wall_s": time.perf_counter() - t_start}

    ref_out = {}
    for W, L, m, dtype, prec in configs:
        if args.time_budget is not None and time.perf_counter() - t_start > args.time_budget:
            notes.append(f"time budget {args.time_budget:.0f} s reached: skipped {m} {dtype}/{prec} L={L} W={W}")
            print("NOTE:", notes[-1], flush=True)
            continue
        try:
            if m.startswith("triton"):
                row, out = bench_triton(L, W, args.d, args.T, args.R, args.reps, dtype, prec,
                                        cache_scores=m == "triton_cached")
            else:
                row, out = bench_jax(m, L, W, args.d, args.T, args.R, args.reps, dtype, prec)
        except Exception as exc:  # an out-of-memory dense method or a failing kernel is a result too
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            rows.append({"method": m, "dtype": dtype, "precision": prec, "L": L, "W": W, "error": msg})
            print(f"W={W:5d} L={L:6d} {m:15s} {_label(dtype, prec):15s} FAILED {msg}", flush=True)
            _release_memory()
            write_json(args.json, payload())
            continue
        if m == "blockwise":
            ref_out[(L, W)] = out
        elif (L, W) in ref_out and m != "ott":  # ott solves a differently initialised problem
            row["forward_vs_blockwise"] = float(np.abs(out - ref_out[(L, W)]).max())
        rows.append(row)
        print(f"W={W:5d} L={L:6d} {m:15s} {_label(dtype, prec):15s} fwd {row['forward_ms']:10.2f} ms  "
              f"fwd+bwd {row['fwd_bwd_ms']:10.2f} ms"
              f"  peak {mib(row.get('peak_bytes')):>9s} MiB  temp {mib(row.get('temp_bytes')):>9s} MiB"
              + (f"  |dO| {row['forward_vs_blockwise']:.1e}" if "forward_vs_blockwise" in row else ""),
              flush=True)
        write_json(args.json, payload())
        _release_memory()
    # ratios within this run, against the blockwise one-reference operator at the same (L, W)
    base = {(r["L"], r["W"]): r for r in rows if r["method"] == "blockwise" and "error" not in r}
    dense = {(r["L"], r["W"]): r for r in rows if r["method"] == "dense_autodiff" and "error" not in r}
    for r in rows:
        b = base.get((r["L"], r["W"]))
        if "error" in r:
            continue
        if (r["L"], r["W"]) in dense and r["method"] != "dense_autodiff":
            r["speedup_vs_dense_autodiff"] = dense[(r["L"], r["W"])]["fwd_bwd_ms"] / r["fwd_bwd_ms"]
        if b is not None and r["method"] != "blockwise":
            r["time_ratio_vs_blockwise"] = r["fwd_bwd_ms"] / b["fwd_bwd_ms"]
            if r.get("temp_bytes") and b.get("temp_bytes"):
                r["temp_ratio_vs_blockwise"] = r["temp_bytes"] / b["temp_bytes"]
    growth = []
    for W in args.bands:
        for m in methods:
            sel = [r for r in rows if r["method"] == m and r["W"] == W and r["dtype"] == "float32"
                   and r["precision"] == "ieee" and "error" not in r]
            growth.append({"method": m, "W": W, "lengths": [r["L"] for r in sel],
                           "temp_bytes": [r.get("temp_bytes") for r in sel],
                           "loglog_slope_temp_vs_L": _slope(sel, "temp_bytes"),
                           "loglog_slope_temp_last_two": _slope(sel[-2:], "temp_bytes"),
                           "loglog_slope_time_vs_L": _slope(sel, "fwd_bwd_ms")})
    print("\nratios vs blockwise (fwd+bwd time, XLA temp memory):")
    for r in rows:
        if "time_ratio_vs_blockwise" in r:
            print(f"  W={r['W']:5d} L={r['L']:6d} {r['method']:15s} {_label(r['dtype'], r['precision']):15s} "
                  f"time x{r['time_ratio_vs_blockwise']:8.2f}"
                  + (f"  temp x{r['temp_ratio_vs_blockwise']:8.2f}" if "temp_ratio_vs_blockwise" in r else "")
                  + (f"  {r['speedup_vs_dense_autodiff']:.1f}x faster than dense autodiff"
                     if "speedup_vs_dense_autodiff" in r else ""))
    print("\nmemory growth vs L at fixed W (log-log slope of XLA temp bytes; 1 = linear, 2 = quadratic):")
    for gr in growth:
        if gr["loglog_slope_temp_vs_L"] is not None:
            print(f"  W={gr['W']:5d} {gr['method']:15s} slope {gr['loglog_slope_temp_vs_L']:.2f} "
                  f"(largest two L: {gr['loglog_slope_temp_last_two']:.2f})  "
                  f"temp MiB {[mib(x) for x in gr['temp_bytes']]}")
    roof = None
    if args.roofline:
        dtypes = ["float32", "bfloat16"] + (["tf32x3"] if args.tf32x3 else [])
        roof = [roofline(L, W, args.d, args.T, args.R, args.roofline, dtype=dt, cached=cached)
                for dt in dtypes for cached in (False, True) for W in args.bands for L in args.lengths]
        print(f"\nroofline ({GPUS[args.roofline]['name']}; recomputed scores, then cached scores; the operator's "
              "is the lower of the two, and each kernel's fraction is of the lower):")
        measured = {(r["method"], _label(r["dtype"], r["precision"]), r["L"], r["W"]): r for r in rows
                    if "error" not in r}
        best = {}
        for rf in roof:
            key = (rf["dtype"], rf["L"], rf["W"])
            best[key] = min(best.get(key, math.inf), rf["fwd_bwd_s"])
        for rf in roof:
            rf["operator_fwd_bwd_s"] = best[(rf["dtype"], rf["L"], rf["W"])]
            line = (f"  {rf['dtype']:8s} {'cached' if rf['cached'] else 'recomp':6s} W={rf['W']:5d} L={rf['L']:6d} "
                    f"half-step {1e6 * rf['half_step_s']:9.2f} us ({rf['half_step_bound']}-bound)  "
                    f"forward {1e3 * rf['forward_s']:8.3f} ms  fwd+bwd {1e3 * rf['fwd_bwd_s']:8.3f} ms")
            for m in GPU_METHODS:
                if (m in CACHED_METHODS) != rf["cached"]:
                    continue
                got = measured.get((m, {"tf32x3": "float32/tf32x3"}.get(rf["dtype"], rf["dtype"]), rf["L"], rf["W"]))
                if got is not None:
                    rf[f"{m}_fraction_of_roofline"] = 1e3 * rf["operator_fwd_bwd_s"] / got["fwd_bwd_ms"]
                    rf[f"{m}_fraction_of_own_algorithm"] = 1e3 * rf["fwd_bwd_s"] / got["fwd_bwd_ms"]
                    line += (f"  {m}: {100 * rf[f'{m}_fraction_of_roofline']:.1f}% of roofline "
                             f"({100 * rf[f'{m}_fraction_of_own_algorithm']:.1f}% of its algorithm's)")
            print(line)
        if not ON_GPU:
            print("  (derived only: no GPU in this run, so no fraction of the roofline was measured)")
    write_json(args.json, payload(roof, growth))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
