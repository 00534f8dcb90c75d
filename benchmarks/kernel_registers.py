"""Registers, spills and shared memory of every Triton kernel per launch, from ptxas: no GPU needed.

For each ``--dtypes`` entry (``fp32:ieee``, ``fp32:tf32x3``, ``bf16``, ...), tile size
``--blocks``, ``--warps`` and ``--stages`` it compiles the seven kernels (and the half-step's
``RAW`` variant) for ``--capability`` (90 = H100, 80 = A100) at head dimension ``--head-dim``
and reads ``ptxas -v``'s report (:func:`sinkalign.kernels.triton.kernels.kernel_resources`):
registers per thread, bytes spilled to local memory per thread (stores / loads) and shared
memory. A kernel that spills kilobytes per thread runs from local memory (L1/L2) instead of
registers; this is the check that found the float32 backward's 14-26 KB spills at the old
default launch. Prints one row per configuration (the worst kernel's figures, and the
kernels that spill) and writes every kernel's figures as JSON. Times nothing: a
configuration free of spills still has to be timed on a GPU (``gpu_session.sh kernels``).

    python benchmarks/kernel_registers.py --dtypes fp32:ieee fp32:tf32x3 bf16 --blocks 32 64 --warps 4 8
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # native compilation (before triton is imported)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default; set, so it does not warn

import triton
from _common import write_json

from sinkalign.kernels.triton.kernels import default_launch, kernel_resources

RESULTS = Path(__file__).resolve().parent / "results" / "kernel_registers.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capability", type=int, default=90)
    ap.add_argument("--dtypes", nargs="+", default=["fp32:ieee", "fp32:tf32x3", "bf16"],
                    help="token type[:float32 dot precision]")
    ap.add_argument("--blocks", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--stages", type=int, nargs="+", default=[3])
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--row-dot", action="store_true",
                    help="also the half-step with ROW_DOT=True (the interpreter's column half-step), natively")
    ap.add_argument("--cached", action="store_true",
                    help="also the score cache's kernels (cache_scores=True: scores_kernel, each sweep [cached])")
    ap.add_argument("--json", type=Path, default=RESULTS)
    args = ap.parse_args()

    rows = []
    print(f"sm_{args.capability}, d = dv = {args.head_dim}; * = the default launch\n")
    print(f"{'dtype':12s} {'block':>5s} {'warps':>5s} {'stages':>6s} {'max regs':>8s} {'max spill':>9s} "
          f"{'max smem KB':>11s}  kernels that spill (bytes stored)")
    for spec in args.dtypes:
        dtype, _, precision = spec.partition(":")
        precision = precision or ("ieee" if dtype == "fp32" else "tf32")
        default = default_launch(dtype, precision, args.head_dim)
        for block in args.blocks:
            for warps in args.warps:
                for stages in args.stages:
                    res = kernel_resources(args.capability, dtype, block=block, head_dim=args.head_dim,
                                           precision=precision, num_warps=warps, num_stages=stages,
                                           row_dot=args.row_dot, cached=args.cached)
                    is_default = (block, warps, stages) == (default["block"], default["num_warps"],
                                                            default["num_stages"])
                    rows.append({"dtype": dtype, "precision": precision, "block": block, "num_warps": warps,
                                 "num_stages": stages, "default": is_default, "kernels": res})
                    spilling = {k.replace("_kernel", ""): r["spill_stores"] for k, r in res.items()
                                if r["spill_stores"]}
                    print(f"{spec:12s} {block:5d} {warps:5d} {stages:6d} "
                          f"{max(r['registers'] for r in res.values()):8d} "
                          f"{max(r['spill_stores'] for r in res.values()):9d} "
                          f"{max(r['shared'] for r in res.values()) / 1024:11.1f}{' *' if is_default else '  '}"
                          f"{' ' + ', '.join(f'{k} {v}' for k, v in spilling.items()) if spilling else ''}",
                          flush=True)
    write_json(args.json, {"script": "benchmarks/kernel_registers.py", "date": datetime.date.today().isoformat(),
                           "machine": platform.node(), "triton": triton.__version__,
                           "capability": args.capability, "head_dim": args.head_dim, "rows": rows})


if __name__ == "__main__":
    main()
