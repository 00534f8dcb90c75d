"""Training throughput, peak memory and cached generation cost of every LM attention vs RoPE.

For each attention type and each sequence length L, one fresh subprocess builds the same
small model (``--d-model``, ``--n-layers``, ``--n-heads``, max_train_len = L) and measures

* training tokens/s: from the median time of ``--train-steps`` AdamW steps (forward +
  backward) on random tokens ``[batch, L]`` after one warm-up step. Time on the CPU is the
  process's own CPU time (``time.process_time``; with ``--threads 1`` it equals the
  compute time and is insensitive to other load on a shared machine; the median wall time
  is stored too); on CUDA it is wall time after ``torch.cuda.synchronize``;
* training peak memory: on CUDA ``torch.cuda.max_memory_allocated`` over the timed steps;
  on CPU the growth of the process's peak resident set size (``resource.getrusage``
  ``ru_maxrss``) from just before the first training step to after the last one. The
  subprocess is fresh, so the figure is this run's own peak (allocator caching included),
  not tracemalloc's Python-heap view, which cannot see tensor memory;
* generation ms/token: a prompt of ``L - gen_tokens`` bases is prefilled (not timed),
  then ``--gen-tokens`` single-token ``model.step`` calls with the KV cache / recurrent
  state are timed one by one (one warm-up step first, same clock as training) and the
  median is reported, so the decode position runs up to L. For contrast, the cost of the
  same next token without a cache (one forward over the ``L - 1`` positions so far) is
  measured too. With a cache the per-token cost is a constant (projections, MLP, cache
  append: amortised O(1), see :class:`sinkalign.lm.attention.KVCache`) plus, for softmax
  attention, one read of the ``L`` cached keys and values; SLA's state has constant size.

Ratios are against RoPE measured in the same run (tokens/s: attention / RoPE, higher is
faster; memory and ms/token: attention / RoPE, lower is better). Prints a table and
writes ``benchmarks/results/lm_attention.json``.

    python benchmarks/lm_attention.py [--lengths 1024 2048 4096 8192] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import write_json

ATTENTIONS = ("rope", "goat", "bam", "sla", "alibi", "nope")


def worker(args: argparse.Namespace) -> dict:
    import torch

    from sinkalign.lm import DNALanguageModel, LMConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    L = args.length
    cfg = LMConfig(vocab_size=8, d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                   attention=args.attention, max_train_len=L)
    model = DNALanguageModel(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 4, (args.batch_size, L + 1), device=dev)

    def train_step() -> None:
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss = model.loss(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    train_step()  # warm-up (allocates optimizer state, compiles FlexAttention on CUDA)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step_s, step_cpu = [], []
    for _ in range(args.train_steps):
        t0, c0 = time.perf_counter(), time.process_time()
        train_step()
        step_s.append(time.perf_counter() - t0)
        step_cpu.append(time.process_time() - c0)
    # on the CPU the process's own CPU time is the measure (the machine may be shared and
    # loaded; wall time is kept for reference); on CUDA, wall time after synchronize
    train_s = statistics.median(step_cpu if dev.type == "cpu" else step_s)
    if dev.type == "cuda":
        peak_bytes, peak_kind = torch.cuda.max_memory_allocated(), "cuda_max_memory_allocated"
    else:
        peak_bytes = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024  # Linux: KiB
        peak_kind = "ru_maxrss_growth"
    opt = None  # frees the optimizer state before generation (train_step is not called again)
    model.eval()
    gen = args.gen_tokens
    prompt = torch.randint(0, 4, (1, L - gen - 1), device=dev)
    with torch.inference_mode():
        logits, cache = model.step(prompt)
        nxt = logits[:, -1:].argmax(-1)
        logits, cache = model.step(nxt, cache)  # warm-up single-token step
        tok_ms, tok_cpu_ms = [], []
        for _ in range(gen):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            nxt = logits[:, -1:, :4].argmax(-1)
            logits, cache = model.step(nxt, cache)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            tok_ms.append((time.perf_counter() - t0) * 1e3)
            tok_cpu_ms.append((time.process_time() - c0) * 1e3)
        gen_ms = statistics.median(tok_cpu_ms if dev.type == "cpu" else tok_ms)
        # the same next token without a cache: one forward over all L - 1 positions so far
        full = torch.randint(0, 4, (1, L - 1), device=dev)
        model(full)  # warm-up
        nocache = []
        for _ in range(3):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            model(full)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            nocache.append((time.process_time() - c0 if dev.type == "cpu" else time.perf_counter() - t0) * 1e3)
    return {"attention": args.attention, "length": L, "train_tokens_per_s": args.batch_size * L / train_s,
            "train_step_s": train_s,
            "train_step_wall_s_median": statistics.median(step_s), "timing": "process_cpu_time" if dev.type == "cpu"
            else "wall_after_synchronize", "peak_bytes": int(peak_bytes), "peak_kind": peak_kind,
            "train_steps_timed": len(step_s),
            "gen_ms_per_token": gen_ms, "nocache_ms_per_token": statistics.median(nocache),
            "gen_wall_ms_per_token_median": statistics.median(tok_ms), "final_cache_offset": int(cache.offset)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--attentions", nargs="+", default=list(ATTENTIONS), choices=ATTENTIONS)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--n-layers", type=int, default=2)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent / "results" / "lm_attention.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--attention", help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return
    if "rope" not in args.attentions:
        args.attentions = ["rope", *args.attentions]
    rows = []
    t_all = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    for att in args.attentions:
        for L in args.lengths:
            cmd = [sys.executable, __file__, "--worker", "--attention", att, "--length", str(L),
                   "--d-model", str(args.d_model), "--n-layers", str(args.n_layers), "--n-heads", str(args.n_heads),
                   "--batch-size", str(args.batch_size), "--train-steps", str(args.train_steps),
                   "--gen-tokens", str(args.gen_tokens), "--threads", str(args.threads), "--device", args.device]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"worker {att} L={L} failed:\n{out.stderr}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"  {att:6s} L={L:5d}: {r['train_tokens_per_s']:9.0f} tok/s, {r['peak_bytes'] / 2**20:8.1f} MiB, "
                  f"{r['gen_ms_per_token']:7.2f} ms/token", file=sys.stderr, flush=True)
    rope = {r["length"]: r for r in rows if r["attention"] == "rope"}
    for r in rows:
        base = rope[r["length"]]
        r["train_tokens_per_s_vs_rope"] = r["train_tokens_per_s"] / base["train_tokens_per_s"]
        r["peak_memory_vs_rope"] = r["peak_bytes"] / base["peak_bytes"] if base["peak_bytes"] > 0 else None
        r["gen_ms_per_token_vs_rope"] = r["gen_ms_per_token"] / base["gen_ms_per_token"]
    # flatness of decode cost: ms/token at the longest length / at the shortest, per attention
    flat, flat_nocache = {}, {}
    for att in args.attentions:
        by_len = {r["length"]: r for r in rows if r["attention"] == att}
        lo, hi = by_len[min(by_len)], by_len[max(by_len)]
        flat[att] = hi["gen_ms_per_token"] / lo["gen_ms_per_token"]
        flat_nocache[att] = hi["nocache_ms_per_token"] / lo["nocache_ms_per_token"]
    mem_kind = rows[0]["peak_kind"]
    print(f"\nLM attention benchmark: d_model {args.d_model}, {args.n_layers} layers, {args.n_heads} heads, batch "
          f"{args.batch_size}, {args.device}, {args.threads} thread(s); time = {rows[0]['timing']}; "
          f"memory = {mem_kind}; ratios vs RoPE")
    print(f"{'attention':9s} {'L':>5s} {'train tok/s':>11s} {'x RoPE':>7s} {'peak MiB':>9s} {'x RoPE':>7s} "
          f"{'gen ms/tok':>10s} {'x RoPE':>7s}")
    for r in rows:
        mem = "-" if r["peak_memory_vs_rope"] is None else f"{r['peak_memory_vs_rope']:.2f}"
        print(f"{r['attention']:9s} {r['length']:5d} {r['train_tokens_per_s']:11.0f} "
              f"{r['train_tokens_per_s_vs_rope']:7.2f} {r['peak_bytes'] / 2**20:9.1f} {mem:>7s} "
              f"{r['gen_ms_per_token']:10.2f} {r['gen_ms_per_token_vs_rope']:7.2f}")
    ratios = ", ".join(f"{a} {v:.2f} ({flat_nocache[a]:.1f})" for a, v in flat.items())
    print(f"decode ms/token at L={max(args.lengths)} / at L={min(args.lengths)}, cached (uncached): {ratios}")
    import torch

    write_json(args.json, {
        "benchmark": "lm_attention",
        "settings": {k: v for k, v in vars(args).items() if k not in ("worker", "attention", "length", "json")},
        "memory_measure": mem_kind,
        "time_measure": rows[0]["timing"],
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "cuda_device": torch.cuda.get_device_name() if args.device == "cuda" else None,
                    "load_average_at_end": os.getloadavg()},
        "rows": rows,
        "decode_cost_ratio_longest_vs_shortest": flat,
        "uncached_cost_ratio_longest_vs_shortest": flat_nocache,
        "wall_s": time.perf_counter() - t_all,
    })
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
