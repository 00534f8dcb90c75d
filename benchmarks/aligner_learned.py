"""The learned aligner against Needleman-Wunsch, Smith-Waterman, the pair-HMM and the BLOSUM window.

(Results written before 2026-11-23 call the BLOSUM window ``shipped``: it was the default then.)

One run over one split of the mixed shards (structure-based pairs of HOMSTRAD, SABRE, PREFAB
and OXBench split by ``data_manifests/structural_split.json``, plus the Pfam families of the
project's evaluation split) and, with ``--split test --tmalign FILE``, the TM-align pairs with
min TM >= 0.5 (the manifest pins them to the test split, so a validation run leaves them out). F1 of aligned residue
pairs, micro-averaged, on trusted (core) residues for the bench1.0 sets
(:func:`sinkalign.align.metrics.core_pair_scores`), per source and per identity bin of the
reference (<20, 20-30, 30-40, >=40 %).

    python benchmarks/aligner_learned.py --shards SHARDS --model runs/learned/best \\
        --tmalign ../shared/data/tmalign_pairs/valid.tsv --split test

``SHARDS`` is ``sinkalign shards build ../shared/data/structural/{homstrad,sabre,prefab,oxbench}
../shared/data/pfam_seed --alphabet protein --split-manifest data_manifests/structural_split.json
--max-pairs-per-family 300``. ``--decode`` adds the gap-structured decoding of the learned model
(its plan posteriors as match evidence in the affine-gap pair-HMM) with the given settings.
Tables go to stdout, everything to ``benchmarks/results/aligner_learned_<split>.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.decode import mea_from_posteriors, plan_posteriors
from sinkalign.align.evaluate import load_reference_set, reference_source
from sinkalign.align.metrics import core_pair_scores, micro_average
from sinkalign.align.pairhmm import match_posteriors, pairhmm_align
from sinkalign.io.alignments import percent_identity, read_tmalign_pairs

BINS = ((0, 20, "<20"), (20, 30, "20-30"), (30, 40, "30-40"), (40, 101, ">=40"))
RESULTS = Path(__file__).resolve().parent / "results"


def source_of(pair) -> str:
    """The structural collection of a pair (:func:`~sinkalign.align.evaluate.reference_source`,
    the library's rule), every Pfam family pooled as ``"pfam"``."""
    return reference_source(pair) if "/" in (pair.family or "") else "pfam"


def posterior_hmm_align(plan, *, weight: float, gap_open: float, gap_extend: float, floor: float = 1e-4):
    """Decode a transport plan with gap structure: ``weight * log(max(P_ij, floor) / floor)`` as
    the match score of the affine-gap pair-HMM (temperature 1), then MEA of its posteriors."""
    post = plan_posteriors(plan)
    scores = weight * np.log(np.maximum(post.match, floor) / floor)
    pm = match_posteriors(scores, gap_open * weight, gap_extend * weight)
    m, n = pm.shape
    return mea_from_posteriors(pm, np.clip(1 - pm.sum(1), 0, 1), np.clip(1 - pm.sum(0), 0, 1), gap_weight=0.0).pairs


def predict(method: str, pairs, aligners: dict, args) -> tuple[list, float]:
    t0 = time.perf_counter()
    if method in ("learned", "blosum", "learned-all-columns"):
        aligner = aligners[method]
        preds = [r.alignment.pairs for r in aligner.align_many(
            (p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs)]
    elif method == "learned+pairHMM":
        preds = [posterior_hmm_align(r.plan, weight=args.decode[0], gap_open=args.decode[1],
                                     gap_extend=args.decode[2])
                 for r in aligners["learned"].align_many(
                     ((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs), keep_plan=True)]
    elif method in ("pairHMM", "pairHMM-mac"):
        lam, go, ge = args.pairhmm
        scoring = Scoring.protein(int(go), int(ge))
        tau = args.pairhmm_mac if method == "pairHMM-mac" else 0.0
        preds = [pairhmm_align(p.query_seq, p.target_seq, scoring=scoring, lam=lam, threshold=tau).pairs
                 for p in pairs]
    else:
        preds = [align_pair(p.query_seq, p.target_seq, method.lower(), scoring=Scoring.protein()).pairs for p in pairs]
    return preds, time.perf_counter() - t0


def table(pairs, preds_by_method: dict) -> dict:
    ident = np.array([percent_identity(p) for p in pairs])
    out = {}
    for method, preds in preds_by_method.items():
        scores = [core_pair_scores(a, p) for a, p in zip(preds, pairs)]
        row = {"all": micro_average(scores)}
        for lo, hi, label in BINS:
            idx = [i for i, x in enumerate(ident) if lo <= x < hi]
            row[label] = micro_average([scores[i] for i in idx])
        out[method] = row
    return out


def show(name: str, tab: dict) -> None:
    labels = ["all"] + [b[2] for b in BINS]
    first = next(iter(tab.values()))
    print(f"\n{name}: pairs " + ", ".join(f"{k} {first[k]['n']}" for k in labels))
    print("| method | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for method, row in tab.items():
        print(f"| {method} | " + " | ".join("-" if row[k]["n"] == 0 else f"{row[k]['f1']:.3f}" for k in labels) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--model", required=True, help="the learned model (a run's best/ or a model directory)")
    ap.add_argument("--tmalign", default=None,
                    help="DeepBLAST's TM-align pairs (min TM >= 0.5 kept); pinned to the test split by "
                         "data_manifests/structural_split.json, so only with --split test")
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    ap.add_argument("--pairhmm", type=float, nargs=3, default=(0.2, 24, 2), metavar=("LAM", "OPEN", "EXTEND"),
                    help="pair-HMM settings (BENCHMARKS.md: chosen on the Pfam training families)")
    ap.add_argument("--decode", type=float, nargs=3, default=None, metavar=("WEIGHT", "OPEN", "EXTEND"),
                    help="also decode the learned plans through the pair-HMM with these settings")
    ap.add_argument("--pairhmm-mac", type=float, default=0.4,
                    help="posterior threshold of the pairHMM-mac method (chosen on the validation split)")
    ap.add_argument("--methods", default="learned,learned-all-columns,blosum,NW,SW,pairHMM,pairHMM-mac",
                    help="learned: the model as it aligns by default (its calibration's min_confidence); "
                         "learned-all-columns: every MEA column kept (min_confidence 0)")
    ap.add_argument("--max-pairs", type=int, default=None, help="subsample each set (seed 0)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--alpha", type=float, default=None,
                    help="shrink the learned model towards its initialisation (model.shrink_params) first")
    ap.add_argument("--temperature", type=float, default=None,
                    help="with --export: decode at this temperature (the model's eps times it)")
    ap.add_argument("--symmetric", action="store_true",
                    help="with --export: score each pair as the mean of its two directions (AlignerConfig.symmetric)")
    ap.add_argument("--export", default=None, help="write the (shrunk) learned model to this directory and stop")
    args = ap.parse_args()

    if args.tmalign and args.split != "test":
        ap.error("--tmalign pairs (min TM >= 0.5) are pinned to the test split "
                 "(data_manifests/structural_split.json, 'pinned_test'): use them only with --split test")
    if (args.alpha is not None or args.temperature is not None or args.symmetric) and not args.export:
        ap.error("--alpha, --temperature and --symmetric go with --export (evaluate the exported model with --model)")
    if args.export:
        from sinkalign.align import model as M
        from sinkalign.align.train import export_model, load_checkpoint

        params, state, _ = load_checkpoint(args.model)
        cfg = M.AlignerConfig.from_dict(state["model"])
        alpha = 1.0 if args.alpha is None else args.alpha
        params = M.shrink_params(params, cfg, alpha)
        if args.temperature is not None:
            cfg = cfg.replace(eps=cfg.sinkhorn.eps * args.temperature)
        if args.symmetric:
            cfg = cfg.replace(symmetric=True)
        cal = Aligner.load(args.model).calibration
        export_model(args.export, params, cfg, calibration=None if cal is None else cal.to_dict(),
                     provenance=f"issue 14 learned aligner: {args.model} (step {state.get('step')}, validation "
                                f"F1 {state.get('val_f1')}) shrunk towards its BLOSUM-window initialisation "
                                f"with alpha {alpha} (chosen on the validation split)"
                                + (f", decoded at temperature {args.temperature}" if args.temperature else "")
                                + ("; symmetric" if args.symmetric else "") + "; trained with "
                                "`sinkalign train` on the mixed structural + Pfam shards "
                                "(data_manifests/structural.md).")
        print(f"wrote {args.export}")
        return

    methods = args.methods.split(",") + (["learned+pairHMM"] if args.decode else [])
    aligners = {"learned": Aligner.load(args.model), "blosum": Aligner.load("blosum"),
                "learned-all-columns": Aligner.load(args.model, min_confidence=0.0)}
    pairs = load_reference_set(args.shards, split=args.split, max_pairs=args.max_pairs)
    sets = {"structural": [p for p in pairs if source_of(p) != "pfam"],
            f"pfam {args.split} families": [p for p in pairs if source_of(p) == "pfam"]}
    if args.tmalign:
        sets["TM-align min TM >= 0.5"] = list(read_tmalign_pairs(args.tmalign, min_tm=0.5))
    result = {"machine": machine(), "split": args.split, "model": args.model, "pairhmm": list(args.pairhmm),
              "pairhmm_mac": args.pairhmm_mac,
              "decode": args.decode,
              "learned_min_confidence": aligners["learned"].min_confidence, "sets": {}}
    for name, ps in sets.items():
        preds, secs = {}, {}
        for method in methods:
            preds[method], secs[method] = predict(method, ps, aligners, args)
            print(f"{name} / {method}: {len(ps) / secs[method]:.1f} pairs/s", flush=True)
        entry = {"n_pairs": len(ps), "pairs_per_s": {m: len(ps) / s for m, s in secs.items()},
                 "overall": table(ps, preds)}
        show(name, entry["overall"])
        if name == "structural":
            entry["by_source"] = {}
            for src in ("homstrad", "sabre", "prefab", "oxbench"):
                idx = [i for i, p in enumerate(ps) if source_of(p) == src]
                if idx:
                    sub = [ps[i] for i in idx]
                    entry["by_source"][src] = table(sub, {m: [v[i] for i in idx] for m, v in preds.items()})
                    show(f"  {src}", entry["by_source"][src])
        result["sets"][name] = entry
    out = Path(args.out) if args.out else RESULTS / f"aligner_learned_{args.split}.json"
    write_json(out, result)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
