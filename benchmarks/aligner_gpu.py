"""The aligner on an accelerator: batched throughput against the CPU, and training steps/s.

Two parts, in one process, each against a CPU baseline run in the same process:

* **Throughput.** For synthetic homologous pairs (``aligner_throughput.homologous_pairs``) of
  each ``--lengths`` it times ``Aligner.align_many`` end to end (features, the batched Sinkhorn
  solve, the copy of the plans back and the MEA decoding on the host) with the ``jax`` engine
  on JAX's default backend, for each ``--batch-sizes`` (a batch is also capped by the engine's
  cell budget, :data:`sinkalign.align.aligner.JAX_BATCH_CELLS`), and the solve alone (the
  jitted forward pass on one padded batch, synchronised). Against: the ``numpy`` engine on all
  CPU threads of the machine and on one, and parasail Needleman-Wunsch / Smith-Waterman
  (BLOSUM62, 11/1, traceback, one thread). Models: ``--models`` (shipped names or paths).
  With ``--processes N``, both engines again with the host's share on N worker processes
  (``Aligner(processes=N)``) at the last batch size. Pairs the band policy puts on a corridor
  (length 3,000: past 1024 x 1024 residue pairs) are solved on the host by both engines
  (``banded_pairs`` in a row); ``--jax-dense`` also times the jax engine with every pair dense.
* **Training.** ``--train-steps`` optimiser steps of the learned model's architecture
  (``learned``) on a fixed padded batch of ``--train-batch`` pairs of ``--train-length``
  residues (the training recipe's crop length), timed after compilation, on the default
  backend and on the CPU (``jax.default_device``; a smaller batch, ``--cpu-train-batch``, since
  a CPU step takes tens of seconds: compare pairs/s), the same jitted step as
  :func:`sinkalign.align.train.train`.

Times are the best of ``--repeats`` runs after a warm-up (wall clock; device work is
synchronised by converting results to NumPy). parasail runs first (cheap, and the baseline),
then each model; the JSON is written after every row, and with ``--deadline-s`` no measurement
starts past that time (the ones left are listed under ``skipped``), so a run that a device
session's time limit cuts short keeps what it measured. Prints a table and writes JSON.

    python benchmarks/aligner_gpu.py --json benchmarks/results/aligner_gpu.json
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import machine, write_json
from aligner_throughput import cold, homologous_pairs, timed

from sinkalign.align import model as M
from sinkalign.align.aligner import Aligner, resolve_model
from sinkalign.align.baselines import align_pairs
from sinkalign.align.checkpoints import load_checkpoint

DEFAULT_PAIRS = {300: 1024, 3000: 64}


def best_of(fn, repeats: int) -> float:
    """Best wall time (s) of ``fn()`` over ``repeats`` runs after a warm-up."""
    return timed(fn, repeats)["wall_s"]


def items_of(pairs):
    return [(f"q{i}", q, f"t{i}", t) for i, (q, t) in enumerate(pairs)]


def record(rows, save, label: str, **row) -> None:
    """Keep one measured row, print it (``label`` then pairs/s) and write the JSON."""
    rows.append(row)
    print(f"{label} {row['pairs_per_s']:10.1f} pairs/s", flush=True)
    save()


def parasail_rows(args, rows, save):
    """parasail NW and SW once per length (they do not depend on the model), first: cheap, and
    the baseline every other row is read against."""
    for L in args.lengths:
        pairs = homologous_pairs(L, args.pairs or DEFAULT_PAIRS.get(L, 64))
        for method in ("nw", "sw"):
            if not save.time_left(f"parasail {method.upper()} at length {L}"):
                return
            t = best_of(lambda m=method, p=pairs: align_pairs(p, m), args.repeats)
            name = f"parasail {method.upper()}, 1 CPU thread"
            record(rows, save, f"{'-':8s} L={L:5d} {name:40s}", part="throughput", model=None, length=L,
                   pairs=len(pairs), method=name, wall_s=t, pairs_per_s=len(pairs) / t)


def throughput(args, rows, save):
    parasail_rows(args, rows, save)
    for model in args.models:
        jax_aligner = Aligner.load(model, engine="jax")
        jax_dense = Aligner.load(model, engine="jax", band="dense") if args.jax_dense else None
        cpu_all = Aligner.load(model, workers=os.cpu_count())
        cpu_one = Aligner.load(model, workers=1)
        for L in args.lengths:
            pairs = homologous_pairs(L, args.pairs or DEFAULT_PAIRS.get(L, 64))
            items = items_of(pairs)
            n = len(items)

            def add(method, seconds, **extra):
                record(rows, save, f"{model:8s} L={L:5d} {method:40s}", part="throughput", model=model, length=L,
                       pairs=n, method=method, wall_s=seconds, pairs_per_s=n / seconds, **extra)

            ref = None
            for bs in args.batch_sizes:
                if not save.time_left(f"{model} at length {L}, jax engine batch {bs}"):
                    break
                got = []

                def run(bs=bs, got=got):
                    got[:] = [r.alignment.pairs for r in jax_aligner.align_many(items, batch_size=bs)]

                t = best_of(run, args.repeats)
                banded = sum(map(jax_aligner._banded, items))  # solved on the host, as the numpy engine does
                add(f"jax engine, {jax.default_backend()}, batch {bs}", t, batch_size=bs, banded_pairs=banded)
                measured = len(rows) - 1
                # the solve alone: one full padded batch of the first bs dense pairs, synchronised
                dense = [item for item in items if not jax_aligner._banded(item)]
                if dense:
                    chunk = next(iter(jax_aligner._jax_batches(dense[:bs], bs)))
                    rows_fn = jax_aligner._jax_dispatch
                    t_solve = best_of(lambda chunk=chunk: np.asarray(rows_fn(chunk)), args.repeats)
                    record(rows, save, f"{model:8s} L={L:5d} {'  solve only, batch ' + str(len(chunk)):40s}",
                           part="solve", model=model, length=L, batch_size=len(chunk),
                           method=f"jax solve only, {jax.default_backend()}", wall_s=t_solve,
                           pairs_per_s=len(chunk) / t_solve)
                # the numpy engine's alignments, once per length (the same corridors and boxes)
                if cpu_all.engine == "numpy" and ref is None:
                    ref = [r.alignment.pairs for r in cpu_all.align_many(items)]
                if ref is not None:
                    rows[measured]["identical_to_numpy"] = sum(np.array_equal(a, b) for a, b in zip(got, ref))
                if jax_dense is not None and banded and save.time_left(f"{model} at length {L}, dense, batch {bs}"):
                    # every pair in the batches, as the jax engine did before it took corridors
                    add(f"jax engine, {jax.default_backend()}, batch {bs}, band dense",
                        best_of(lambda bs=bs: list(jax_dense.align_many(items, batch_size=bs)), args.repeats),
                        batch_size=bs, band="dense")
            if args.processes and save.time_left(f"{model} at length {L}, jax engine on {args.processes} processes"):
                bs = args.batch_sizes[-1]
                with Aligner.load(model, engine="jax", processes=args.processes) as procs:
                    t = best_of(lambda bs=bs: list(procs.align_many(items, batch_size=bs)), args.repeats)
                add(f"jax engine, {jax.default_backend()}, batch {bs}, {args.processes} processes", t,
                    batch_size=bs, processes=args.processes)
                if cpu_all.engine == "numpy" and save.time_left(f"{model} at length {L}, numpy engine on processes"):
                    with Aligner.load(model, processes=args.processes) as procs:
                        add(f"numpy engine, {args.processes} processes",
                            best_of(lambda: list(procs.align_many(items)), args.repeats), processes=args.processes)
            if cpu_all.engine == "numpy" and save.time_left(f"{model} at length {L}, numpy engine"):
                add(f"numpy engine, {cpu_all.workers} CPU threads",
                    best_of(lambda: cold(cpu_all) or list(cpu_all.align_many(items)), args.repeats))
                sub = items[: max(8, n // 8)]
                t1 = best_of(lambda sub=sub: cold(cpu_one) or list(cpu_one.align_many(sub)), 1)
                add("numpy engine, 1 CPU thread", t1 * n / len(sub), timed_pairs=len(sub))


def training(args, rows, save):
    params, state, _ = load_checkpoint(resolve_model("learned"))
    config = M.AlignerConfig.from_dict(state["model"])
    L = args.train_length

    def make(size):
        items = []
        for q, t in homologous_pairs(L - 8, size, seed=7):
            m = min(len(q), len(t))
            ref = np.stack([np.arange(m), np.arange(m)], 1)  # a reference alignment of the right form
            items.append((q[:L], t[:L], None, None, ref, None))
        return M.make_batch(items, config, L, L)

    tx = optax.adamw(1e-3, weight_decay=1e-4)

    def step_fn(params, opt_state, batch):
        (loss, _), grads = jax.value_and_grad(M.loss_fn, has_aux=True)(params, batch, config)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for where in (jax.default_backend(), "cpu") if jax.default_backend() != "cpu" else ("cpu",):
        device = jax.devices(where)[0]
        with jax.default_device(device):
            p = jax.device_put(jax.tree_util.tree_map(jnp.asarray, params), device)
            size = args.train_batch if where != "cpu" else args.cpu_train_batch
            b = jax.device_put(make(size), device)
            opt = tx.init(p)
            step = jax.jit(step_fn)
            t0 = time.perf_counter()
            p, opt, loss = step(p, opt, b)
            float(loss)
            compile_s = time.perf_counter() - t0
            n = args.train_steps if where != "cpu" else args.cpu_train_steps
            t0 = time.perf_counter()
            for _ in range(n):
                p, opt, loss = step(p, opt, b)
            final = float(loss)
            dt = time.perf_counter() - t0
        rows.append({"part": "training", "device": where, "batch": size, "length": L, "steps": n,
                     "steps_per_s": n / dt, "pairs_per_s": n * size / dt, "first_step_s": compile_s,
                     "final_loss": final, "finite": bool(np.isfinite(final))})
        print(f"train {where:5s} batch {size} x {L}: {n / dt:8.3f} steps/s "
              f"({n * size / dt:8.2f} pairs/s; first step {compile_s:.1f} s; loss {final:.4f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["blosum", "learned"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[300, 3000])
    ap.add_argument("--pairs", type=int, default=None, help="pairs per length (default 1024 at 300, 64 at 3000)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--train-steps", type=int, default=50)
    ap.add_argument("--train-batch", type=int, default=32)
    ap.add_argument("--train-length", type=int, default=512)
    ap.add_argument("--cpu-train-batch", type=int, default=2, help="the CPU's batch (pairs/s are compared)")
    ap.add_argument("--cpu-train-steps", type=int, default=2)
    ap.add_argument("--processes", type=int, default=0,
                    help="also time both engines with the host's share on this many worker processes "
                         "(Aligner(processes=N)) at the last batch size")
    ap.add_argument("--jax-dense", action="store_true",
                    help="also time the jax engine with band='dense' where the default puts pairs on a corridor "
                         "or in a box (every pair in the batches, as before 2026-11-27)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["throughput", "training"])
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no measurement after this many seconds (the rest is listed as skipped)")
    ap.add_argument("--json", default="benchmarks/results/aligner_gpu.json")
    args = ap.parse_args()
    rows: list[dict] = []
    payload = {"benchmark": "aligner_gpu", "date": datetime.date.today().isoformat(), "machine": machine(),
               "args": vars(args), "rows": rows, "skipped": []}
    save = Saver(args.json, payload, args.deadline_s)
    for part, fn in (("training", training), ("throughput", throughput)):
        if part not in args.skip:
            fn(args, rows, save)
            save()
    print(f"wrote {args.json} ({time.perf_counter() - save.t0:.0f} s)")


class Saver:
    """Writes the JSON after every row (a run cut off by its time limit keeps what it measured)
    and answers whether there is time left before ``deadline_s`` to start a measurement (a
    skipped one is named in the JSON's ``skipped``)."""

    def __init__(self, path, payload: dict, deadline_s: float | None) -> None:
        self.path, self.payload, self.deadline_s = path, payload, deadline_s
        self.t0 = time.perf_counter()

    def __call__(self) -> None:
        self.payload["wall_s"] = time.perf_counter() - self.t0
        write_json(self.path, self.payload)

    def time_left(self, what: str) -> bool:
        if self.deadline_s is None or time.perf_counter() - self.t0 < self.deadline_s:
            return True
        self.payload["skipped"].append(what)
        print(f"skipped (past --deadline-s {self.deadline_s:.0f}): {what}", flush=True)
        return False


if __name__ == "__main__":
    main()
