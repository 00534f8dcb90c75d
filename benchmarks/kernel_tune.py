"""Tile sizes and launches of the Pallas and Triton kernels on a GPU: fwd+bwd time per launch.

At one problem (``--length`` L, ``--band`` W, d = 64, T = 15, R = 2, batch 1, as
``sinkhorn_kernels.py``) it times, in this one process, each kernel family (``--methods``) at
each input type / float32 dot precision (``--dtypes``: ``float32:ieee``, ``float32:tf32x3``,
``bfloat16``) for each launch of ``--launches`` (``BLOCK:WARPS:STAGES``; ``BLOCK`` is one tile
size or ``ROWSxCOLS``, query rows x key columns; ``default`` = the operator's own default, see
``sinkalign.kernels.triton.kernels.default_launch`` and
``sinkalign.kernels.pallas.BlockSizes.get_default``): forward and forward + backward (best of
``--reps`` after compilation), the output's largest deviation from the same family's default
launch in the same run (a launch must not change the result beyond float32 summation order;
a failing launch, e.g. one out of shared memory, is a row with its error), and the fraction
of the roofline ``sinkhorn_kernels.py --roofline`` derives (the lower of its recomputed- and
cached-score algorithms'; ``--methods pallas_cached triton_cached`` time ``cache_scores=True``). Prints the table, then
the best
launch per (family, type), and writes JSON.

GPU only (``gpu_session.sh tune``). ``benchmarks/kernel_registers.py`` ranks the Triton
launches by their register spills without a GPU.

    python benchmarks/kernel_tune.py --length 16384 --band 1024 --roofline h100 \
        --launches default 32:4:3 32:8:3 64:4:3 64:8:3 128:8:2
"""

from __future__ import annotations

import argparse
import datetime
import time

import jax
import numpy as np
from _common import machine, write_json
from sinkhorn_kernels import GPUS, ON_GPU, _gpu_name, _release_memory, bench_jax, bench_triton, roofline

ROOF_DTYPE = {("float32", "ieee"): "float32", ("float32", "tf32x3"): "tf32x3", ("bfloat16", "ieee"): "bfloat16"}


def parse_launch(text: str):
    """``default`` -> None; ``BLOCK:WARPS[:STAGES]`` -> (block, warps, stages or None), where
    ``BLOCK`` is one tile size or ``ROWSxCOLS`` (query rows x key columns: a (rows, cols) pair)."""
    if text == "default":
        return None
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        tiles = tuple(int(x) for x in parts[0].split("x"))
        if len(tiles) not in (1, 2):
            raise ValueError
        rest = [int(x) for x in parts[1:]]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give BLOCK:WARPS or BLOCK:WARPS:STAGES (BLOCK: N or "
                                         "ROWSxCOLS), or default") from None
    return (tiles[0] if len(tiles) == 1 else tiles, rest[0], rest[1] if len(rest) == 2 else None)


def _tiles(block) -> tuple[int, int]:
    return block if isinstance(block, tuple) else (block, block)


def run(method, launch, dtype, precision, args):
    if method in ("triton", "triton_cached"):
        opts = None
        if launch is not None:
            block, warps, stages = launch
            rows, cols = _tiles(block)
            opts = {"block_m": rows, "block_n": cols, "num_warps": warps, "num_stages": stages}
        return bench_triton(args.length, args.band, args.d, args.T, args.R, args.reps, dtype, precision, opts,
                            cache_scores=method == "triton_cached")
    blocks = None
    if launch is not None:
        from sinkalign.kernels.pallas import BlockSizes

        block, warps, stages = launch
        rows, cols = _tiles(block)
        blocks = BlockSizes(block_q=rows, block_k=cols, num_warps=warps,
                            **({} if stages is None else {"num_stages": stages}))
    return bench_jax(method, args.length, args.band, args.d, args.T, args.R, args.reps, dtype, precision, blocks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=16384)
    ap.add_argument("--band", type=int, default=1024)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--T", type=int, default=15)
    ap.add_argument("--R", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--methods", nargs="+", default=["pallas", "triton"],
                    choices=["pallas", "pallas_cached", "triton", "triton_cached"],
                    help="pallas_cached, triton_cached: the kernels with cache_scores=True")
    ap.add_argument("--dtypes", nargs="+", default=["float32:ieee", "float32:tf32x3", "bfloat16"])
    ap.add_argument("--launches", nargs="+", type=parse_launch,
                    default=[None, (32, 4, None), (32, 8, None), (64, 4, None), (64, 8, None)])
    ap.add_argument("--roofline", choices=sorted(GPUS), default=None)
    ap.add_argument("--time-budget", type=float, default=None, help="seconds: start no launch after this")
    ap.add_argument("--json", default="benchmarks/results/kernel_tune.json")
    args = ap.parse_args()
    if not ON_GPU:
        raise SystemExit("kernel_tune.py times native kernels: it needs a GPU (JAX's default backend is "
                         f"{jax.default_backend()!r})")

    rows, t0 = [], time.perf_counter()
    payload = {"benchmark": "kernel_tune", "date": datetime.date.today().isoformat(), "machine": machine(),
               "gpu": _gpu_name(), "L": args.length, "W": args.band, "d": args.d, "T": args.T, "R": args.R,
               "rows": rows, "skipped": []}
    print(f"L={args.length} W={args.band} d={args.d} T={args.T} R={args.R}")
    for spec in args.dtypes:
        dtype, _, precision = spec.partition(":")
        precision = precision or "ieee"
        roof = None
        if args.roofline and (dtype, precision) in ROOF_DTYPE:
            roof = min(roofline(args.length, args.band, args.d, args.T, args.R, args.roofline,
                                dtype=ROOF_DTYPE[(dtype, precision)], cached=cached)["fwd_bwd_s"]
                       for cached in (False, True))  # the operator's: the lower of the two algorithms
        for method in args.methods:
            ref = None
            for launch in args.launches:
                label = "default" if launch is None else ":".join(
                    "-" if x is None else "x".join(map(str, x)) if isinstance(x, tuple) else str(x) for x in launch)
                if args.time_budget is not None and time.perf_counter() - t0 > args.time_budget:
                    payload["skipped"].append(f"{method} {spec} {label}")
                    continue
                row = {"method": method, "dtype": dtype, "precision": precision, "launch": label}
                try:
                    timing, out = run(method, launch, dtype, precision, args)
                    row.update({k: timing[k] for k in ("forward_ms", "fwd_bwd_ms") if k in timing})
                    row["peak_bytes"] = timing.get("peak_bytes")
                    if ref is None and launch is None:
                        ref = out
                    elif ref is not None:
                        row["max_dev_vs_default"] = float(np.abs(out - ref).max())
                    if roof is not None:
                        row["fraction_of_roofline"] = 1e3 * roof / row["fwd_bwd_ms"]
                    print(f"{method:13s} {spec:15s} {label:9s} fwd {row['forward_ms']:9.2f} ms  fwd+bwd "
                          f"{row['fwd_bwd_ms']:9.2f} ms"
                          + (f"  {100 * row['fraction_of_roofline']:5.1f}% of roofline" if roof else "")
                          + (f"  |dO| vs default {row['max_dev_vs_default']:.1e}"
                             if "max_dev_vs_default" in row else ""), flush=True)
                except Exception as exc:  # a launch out of shared memory or registers is a result too
                    row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                    print(f"{method:13s} {spec:15s} {label:9s} FAILED {row['error']}", flush=True)
                rows.append(row)
                payload["wall_s"] = time.perf_counter() - t0
                write_json(args.json, payload)
                _release_memory()
    print("\nbest launch per family and type (fwd+bwd):")
    for spec in args.dtypes:
        dtype, _, precision = spec.partition(":")
        for method in args.methods:
            ok = [r for r in rows if r["method"] == method and r["dtype"] == dtype
                  and r["precision"] == (precision or "ieee") and "error" not in r]
            if ok:
                best = min(ok, key=lambda r: r["fwd_bwd_ms"])
                default = next((r for r in ok if r["launch"] == "default"), None)
                print(f"  {method:7s} {spec:15s} {best['launch']:9s} {best['fwd_bwd_ms']:9.2f} ms"
                      + (f"  (default {default['fwd_bwd_ms']:.2f} ms: x{default['fwd_bwd_ms'] / best['fwd_bwd_ms']:.2f})"
                         if default else ""))
    write_json(args.json, payload)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
