"""Banded plans against dense ones: accuracy and time, on validation pairs and on long pairs.

``Aligner(band=R)`` (``sinkalign align --band R``) solves each pair on a corridor of ``R``
residues around its Needleman-Wunsch and Smith-Waterman alignments (:mod:`sinkalign.align.band`);
by default a pair past ``AUTO_BAND_CELLS`` residue pairs gets ``LONG_BAND``. This script aligns
the same pairs densely (``band="dense"``), as the default aligner does, and at each radius of
``--radii``, in one process, one thread each (``workers=1``), and prints micro precision /
recall / F1 on trusted (core) residues at the model's own threshold (and the F1 with every MEA
column kept, and the mean column confidence), with Needleman-Wunsch and Smith-Waterman
(parasail, BLOSUM62 11/1) on the same pairs, and the time per pair.

Three sets:

* ``pairs``: validation pairs as they are (``--max-pairs``, seed 0).
* ``long``: long pairs made of ``--concat`` validation pairs end to end (queries joined, targets
  joined, the references shifted): a multi-domain protein against a homologue with the same
  domains in the same order. ``--long-pairs`` of them, from distinct pairs (seed 1).
* ``long <20%``: the same from structural pairs below 20% identity only (remote homologues,
  where the classical guides are least reliable).
* ``past the limit`` (``--past-limit N``): ``N`` pairs joined from as many validation pairs as
  make them longer than the dense limit (``MAX_CELLS``, 8192 x 8192 residue pairs), which the
  aligner solves on a ``LONG_BAND`` corridor; no dense row, and the peak memory of the process.
* ``null`` (``--null N``): ``N`` long pairs as in ``long`` (seed 5) with the target shuffled
  (the kind of pair the E-value null was fitted on, but long): the share of them with an E-value
  at most 0.01, 0.1 and 1, dense and by default (a calibrated E-value is at most ``x`` in about
  a share ``1 - exp(-x)`` of such pairs), and the share of the same pairs unshuffled at E <= 1e-3.

    python benchmarks/banded_pairs.py --shards SHARDS --split valid \\
        --json benchmarks/results/banded_pairs_valid.json
"""

from __future__ import annotations

import argparse
import time
from datetime import date
from pathlib import Path

import numpy as np
from _common import machine, pair_groups, write_json
from aligner_learned import source_of

from sinkalign.align.aligner import AUTO_BAND_CELLS, LONG_BAND, MAX_CELLS, Aligner
from sinkalign.align.band import guide_corridor
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.metrics import core_pair_scores, micro_average
from sinkalign.io.alignments import ReferencePair, percent_identity

RESULTS = Path(__file__).resolve().parent / "results"
RADII = (16, 32, 64, 128, 256)


def concatenated(parts: list) -> ReferencePair:
    """One reference pair of ``parts`` end to end (cores kept; a part without one all trusted)."""
    pairs, qcore, tcore = [], [], []
    dq = dt = 0
    for p in parts:
        pairs.append(np.asarray(p.pairs, np.int64) + [dq, dt])
        qcore.append(np.ones(len(p.query_seq), bool) if p.query_core is None else p.query_core)
        tcore.append(np.ones(len(p.target_seq), bool) if p.target_core is None else p.target_core)
        dq, dt = dq + len(p.query_seq), dt + len(p.target_seq)
    return ReferencePair("+".join(p.query_id for p in parts), "+".join(p.target_id for p in parts),
                         "".join(p.query_seq for p in parts), "".join(p.target_seq for p in parts),
                         np.concatenate(pairs).astype(np.int32), source="concatenated",
                         query_core=np.concatenate(qcore), target_core=np.concatenate(tcore))


def long_pairs(pool: list, count: int, size: int, seed: int) -> list:
    """``count`` concatenations of ``size`` distinct pairs of ``pool`` (fewer when it runs out)."""
    order = np.random.default_rng(seed).permutation(len(pool))
    return [concatenated([pool[k] for k in order[s : s + size]])
            for s in range(0, min(len(order), count * size) - size + 1, size)]


def past_limit(pool: list, count: int, seed: int) -> list:
    """``count`` concatenations of distinct pairs of ``pool``, each long enough to pass MAX_CELLS."""
    order = iter(np.random.default_rng(seed).permutation(len(pool)))
    out = []
    for _ in range(count):
        parts: list = []
        while sum(len(p.query_seq) for p in parts) * sum(len(p.target_seq) for p in parts) <= 1.1 * MAX_CELLS:
            k = next(order, None)
            if k is None:
                return out
            parts.append(pool[k])
        out.append(concatenated(parts))
    return out


def null_check(count: int, pool: list, dense: Aligner, default: Aligner) -> dict:
    """E-values of long pairs with the target shuffled, and of the same pairs as they are."""
    from sinkalign.align.significance import shuffled

    joined = long_pairs(pool, count, 10, 5)
    rng = np.random.default_rng(0)
    null = [(p.query_id, p.query_seq, "shuffled", shuffled(p.target_seq, rng)) for p in joined]
    real = [(p.query_id, p.query_seq, p.target_id, p.target_seq) for p in joined]
    out = {"pairs": len(joined), "mean_length": float(np.mean([len(p.query_seq) for p in joined]))}
    print(f"\nnull: {len(joined)} long pairs (mean query length {out['mean_length']:.0f}) with the target shuffled")
    print("| plans | E <= 0.01 | E <= 0.1 | E <= 1 | the pairs unshuffled at E <= 1e-3 |\n|---|---|---|---|---|")
    for label, aligner in (("dense", dense), ("default", default)):
        ev = np.array([r.evalue for r in aligner.align_many(null)])
        hits = np.array([r.evalue for r in aligner.align_many(real)])
        row = {f"E<={x:g}": float((ev <= x).mean()) for x in (0.01, 0.1, 1.0)}
        row["homologs_E<=1e-3"] = float((hits <= 1e-3).mean())
        out[label] = row
        print(f"| {label} | " + " | ".join(f"{v:.3f}" for v in row.values()) + " |")
    return out


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(aligner: Aligner, pairs: list, groups: dict, threshold: float) -> dict:
    """Scores of ``aligner`` (every MEA column kept) on ``pairs``: its columns at or above
    ``threshold`` (what ``--min-confidence threshold`` writes) and every column, the mean
    column confidence and the seconds per pair."""
    items = [(p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs]
    t0 = time.perf_counter()
    alns = [r.alignment for r in aligner.align_many(items)]
    secs = (time.perf_counter() - t0) / max(1, len(pairs))
    kept = [a.pairs[a.match_posterior >= threshold] for a in alns]
    confidence = np.concatenate([a.match_posterior for a in alns])
    return {"scores": scores(kept, pairs, groups), "every_column": scores([a.pairs for a in alns], pairs, groups),
            "mean_confidence": float(confidence.mean()) if confidence.size else None, "sec_per_pair": secs}


def scores(preds, pairs, groups) -> dict:
    per_pair = [core_pair_scores(a, p) for a, p in zip(preds, pairs)]
    return {g: micro_average([per_pair[i] for i in idx]) for g, idx in groups.items() if idx}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--split", default="valid", choices=["valid", "test"],
                    help="choose on valid; test only for a release check written down before the look")
    ap.add_argument("--model", default="learned")
    ap.add_argument("--radii", default=",".join(map(str, RADII)))
    ap.add_argument("--max-pairs", type=int, default=400, help="validation pairs as they are (0: none)")
    ap.add_argument("--concat", type=int, default=10, help="validation pairs per long pair")
    ap.add_argument("--long-pairs", type=int, default=20, help="long pairs per long set")
    ap.add_argument("--past-limit", type=int, default=2, help="pairs past the dense limit (0: none)")
    ap.add_argument("--null", type=int, default=0, help="shuffled long pairs for the E-values (0: none)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    radii = [int(r) for r in args.radii.split(",")]

    every = load_reference_set(args.shards, split=args.split)
    ident = [percent_identity(p) for p in every]
    remote = [p for p, i in zip(every, ident) if source_of(p) != "pfam" and i < 20]
    rng = np.random.default_rng(0)
    some = [every[k] for k in sorted(rng.choice(len(every), min(args.max_pairs, len(every)), replace=False))]
    sets = {"pairs": some, "long": long_pairs(every, args.long_pairs, args.concat, 1),
            "long <20%": long_pairs(remote, args.long_pairs, args.concat, 2),
            "past the limit": past_limit(every, args.past_limit, 3)}
    threshold = Aligner.load(args.model).min_confidence
    default = Aligner.load(args.model, workers=1, min_confidence=0.0)
    dense = Aligner.load(args.model, workers=1, min_confidence=0.0, band="dense")
    banded = {r: Aligner.load(args.model, workers=1, band=r, min_confidence=0.0) for r in radii}
    payload = {"machine": machine(), "date": str(date.today()), "model": args.model, "split": args.split,
               "threshold": threshold, "long_band": LONG_BAND, "sets": {}}
    protein = Scoring.protein()
    for name, pairs in sets.items():
        if not pairs:
            continue
        if name == "pairs":
            groups = pair_groups([source_of(p) for p in pairs], [percent_identity(p) for p in pairs])
        else:
            groups = {"all": list(range(len(pairs)))}
        lengths = [(len(p.query_seq), len(p.target_seq)) for p in pairs]
        cells = [m * n for m, n in lengths]
        huge = name == "past the limit"
        set_radii = [LONG_BAND] if huge else radii
        corridor = {r: sum(int((hi - lo).sum()) for lo, hi in (guide_corridor(p.query_seq, p.target_seq, r)
                                                                 for p in pairs)) / sum(cells) for r in set_radii}
        rows = {}
        if huge:  # past the dense limit: the default aligner takes them on LONG_BAND corridors
            rows[f"default (band {LONG_BAND})"] = {**run(default, pairs, groups, threshold),
                                                   "corridor_share": corridor[LONG_BAND],
                                                   "peak_rss_mib": peak_rss_mib()}
        else:
            rows["dense"] = run(dense, pairs, groups, threshold)
            banded_by_default = sum(c > AUTO_BAND_CELLS for c in cells)
            rows[f"default ({banded_by_default} of {len(pairs)} banded)"] = run(default, pairs, groups, threshold)
        for r in [] if huge else radii:
            rows[f"band {r}"] = {**run(banded[r], pairs, groups, threshold), "corridor_share": corridor[r]}
        for method in ("NW", "SW"):
            t0 = time.perf_counter()
            preds = [align_pair(p.query_seq, p.target_seq, method.lower(), scoring=protein).pairs for p in pairs]
            rows[method] = {"scores": scores(preds, pairs, groups), "sec_per_pair": (time.perf_counter() - t0) / len(pairs)}
        payload["sets"][name] = {"pairs": len(pairs), "mean_length": float(np.mean(lengths)),
                                 "max_cells": max(cells), "past_dense_limit": sum(c > MAX_CELLS for c in cells),
                                 "groups": {g: len(idx) for g, idx in groups.items()}, "rows": rows}
        if huge:
            print(f"\npeak RSS of the process after the pairs past the limit: {peak_rss_mib():.0f} MiB")
        print(f"\n{name}: {len(pairs)} pairs, mean length {np.mean(lengths):.0f}, "
              + ", ".join(f"{g} {len(idx)}" for g, idx in groups.items()))
        names = [g for g in groups if groups[g]]
        print("| method | corridor share | s / pair | mean confidence | "
              + " | ".join(f"{g} P / R / F1 (F1, every column)" for g in names) + " |")
        print("|---" * (4 + len(names)) + "|")
        for label, row in rows.items():
            share = f"{row['corridor_share']:.3f}" if "corridor_share" in row else "-"
            conf = f"{row['mean_confidence']:.3f}" if row.get("mean_confidence") is not None else "-"
            every = row.get("every_column")
            cols = " | ".join("{precision:.3f} / {recall:.3f} / {f1:.3f}".format(**row["scores"][g])
                              + (f" ({every[g]['f1']:.3f})" if every else "") for g in names)
            print(f"| {label} | {share} | {row['sec_per_pair']:.3f} | {conf} | {cols} |")
    if args.null:
        payload["null"] = null_check(args.null, every, dense, default)
    if args.json:
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
