"""How the box around a lopsided pair's local hit was chosen: its margin, the ratio that
triggers it, and a crop instead of a box (validation only).

On the flanked validation pairs of ``lopsided_pairs.py`` (the same 150 pairs, flanks and seeds;
random flanks), the shipped learned model as the default aligner runs it, with:

* each ``BOX_MARGIN`` of ``--margins`` (times the shorter side's length), at ratios 2-64;
* at ratios ``--low-ratios`` (below the trigger): every pair in the box
  (``LOPSIDED_RATIO = 1``) against every pair dense (``band="dense"``);
* a *crop*: the two sequences cut to the same box and aligned as a pair of their own (so the
  confidences read the crop's lengths), the pairs shifted back;
* the natural validation pairs (no flanks) whose lengths differ by ``LOPSIDED_RATIO`` or more,
  in the box against dense.

Printed: precision / recall / F1 on trusted (core) residues, all pairs and below 30% identity.

    python benchmarks/lopsided_box_sweep.py --shards SHARDS --json benchmarks/results/lopsided_box_sweep_valid.json
"""

from __future__ import annotations

import argparse
import math
from datetime import date

import numpy as np
from _common import machine, write_json
from lopsided_pairs import flanked, reference_cases, setting

import sinkalign.align.aligner as A
from sinkalign.align.aligner import Aligner
from sinkalign.align.band import classical_guides
from sinkalign.align.metrics import core_pair_scores, micro_average
from sinkalign.io.alignments import percent_identity


def scores(preds, cases, remote) -> dict:
    per = [core_pair_scores(a, p) for a, p in zip(preds, cases)]
    return {"all": micro_average(per), "<30% identity": micro_average([per[i] for i in remote])}


def crop_jobs(cases, margin: float):
    """Each case cut to the box around its Smith-Waterman hit when lopsided, and the offsets."""
    jobs, offsets = [], []
    for p in cases:
        q, t = p.query_seq, p.target_seq
        m, n = len(q), len(t)
        sw = classical_guides(q, t)["sw"]
        if A.lopsided(m, n) and len(sw):
            k = math.ceil(margin * min(m, n))
            q0, q1 = max(0, int(sw[0, 0]) - k), min(m, int(sw[-1, 0]) + 1 + k)
            t0, t1 = max(0, int(sw[0, 1]) - k), min(n, int(sw[-1, 1]) + 1 + k)
        else:
            q0, q1, t0, t1 = 0, m, 0, n
        jobs.append((p.query_id, q[q0:q1], p.target_id, t[t0:t1]))
        offsets.append(np.array([q0, t0]))
    return jobs, offsets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--model", default="learned")
    ap.add_argument("--pairs", type=int, default=150)
    ap.add_argument("--max-query", type=int, default=300)
    ap.add_argument("--ratios", default="2,4,16,64")
    ap.add_argument("--margins", default="0,0.05,0.1,0.25,0.5,1")
    ap.add_argument("--low-ratios", default="1.25,1.5,1.75")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    everything, letters, pairs, remote = reference_cases(args.shards, "valid", args.pairs, args.max_query)
    default = Aligner.load(args.model, strand="plus")
    dense = Aligner.load(args.model, strand="plus", band="dense")
    out = {"date": date.today().isoformat(), "machine": machine(), "model": args.model, "pairs": len(pairs),
           "remote": len(remote), "margins": {}, "low_ratios": {}, "crop": {}, "natural": {}}

    def run(aligner, cases):
        return [r.alignment.pairs for r in aligner.align_many((p.query_id, p.query_seq, p.target_id, p.target_seq)
                                                               for p in cases)]

    def show(label, s):
        a, b = s["all"], s["<30% identity"]
        print(f"| {label} | {a['precision']:.3f} / {a['recall']:.3f} / {a['f1']:.3f} | "
              f"{b['precision']:.3f} / {b['recall']:.3f} / {b['f1']:.3f} |", flush=True)

    print(f"{len(pairs)} validation pairs ({len(remote)} below 30% identity)\n| setting | all P / R / F1 | <30% P / R / F1 |")
    print("|---|---|---|")
    ratios = [float(r) for r in args.ratios.split(",")]
    flanks = {r: [flanked(p, r, letters, np.random.default_rng(int(r))) for p in pairs] for r in ratios}
    for margin in (float(x) for x in args.margins.split(",")):
        row = {}
        with setting("BOX_MARGIN", margin):
            for r, cases in flanks.items():
                row[f"R={r:g}"] = scores(run(default, cases), cases, remote)
                show(f"margin {margin:g}, {r:g}:1", row[f"R={r:g}"])
        row["mean_f1_all"] = float(np.mean([v["all"]["f1"] for v in row.values()]))
        print(f"| margin {margin:g}: mean F1 over the ratios | {row['mean_f1_all']:.3f} | |")
        out["margins"][f"{margin:g}"] = row
    for r in (float(x) for x in args.low_ratios.split(",")):
        cases = [flanked(p, r, letters, np.random.default_rng(int(round(100 * r)))) for p in pairs]
        with setting("LOPSIDED_RATIO", 1.0):
            boxed = scores(run(default, cases), cases, remote)
        whole = scores(run(dense, cases), cases, remote)
        out["low_ratios"][f"{r:g}"] = {"box": boxed, "dense": whole}
        show(f"{r:g}:1, every pair in the box", boxed)
        show(f"{r:g}:1, every pair dense", whole)
    for r, cases in flanks.items():
        jobs, offsets = crop_jobs(cases, A.BOX_MARGIN)
        preds = [res.alignment.pairs + off for res, off in zip(default.align_many(jobs), offsets)]
        out["crop"][f"R={r:g}"] = scores(preds, cases, remote)
        show(f"crop to the box, {r:g}:1", out["crop"][f"R={r:g}"])
    natural = [p for p in everything if A.lopsided(len(p.query_seq), len(p.target_seq))]
    nat_remote = [i for i, p in enumerate(natural) if percent_identity(p) < 30]
    out["natural"] = {"pairs": len(natural), "of": len(everything),
                      "box": scores(run(default, natural), natural, nat_remote),
                      "dense": scores(run(dense, natural), natural, nat_remote)}
    show(f"natural pairs of ratio >= {A.LOPSIDED_RATIO} ({len(natural)} of {len(everything)}), box",
         out["natural"]["box"])
    show("the same, dense", out["natural"]["dense"])
    if args.json:
        write_json(args.json, out)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
