"""Confidences of close pairs: fit the calibration's close maps and check them on held-out pairs.

A pair whose plain decoding is at least 80% identical is decoded again with the identity
tie-break (``decode_identity_min``); its columns are right far more often than the same column
features say in the remote pairs the calibration was fitted on, so the column model's
probability of such a column maps too low and the threshold drops right columns next to gaps
and ends. The close maps (``Calibration.close``) are the same column model's probabilities,
mapped again (isotonically, match and gap) on close pairs.

Close pairs are simulated from real sequences of one split of the structural shards (60-600
residues, the standard amino acids): substitutions at a rate drawn uniformly in [0,
``--max-substitutions``], an indel of 1-5 residues every ~50 (insertion or deletion, as
``close_pairs.py``), the true alignment kept; only pairs whose plain decoding is at least
``--identity-min`` identical count (the ones the maps apply to). The split's families are cut in
two halves by a seeded shuffle: ``--half A`` fits, ``--half B`` checks (``all``: every family,
e.g. of the test split, for one look).

    python benchmarks/close_calibration.py fit --shards SHARDS --split valid --half A -o DIR
    python benchmarks/close_calibration.py check --shards SHARDS --split valid --half B --model DIR

``check`` prints, for the model's own maps and for its close maps on the same pairs: columns,
share right, mean confidence, expected calibration error (ten bins) and precision / recall / F1
at the model's threshold (and of every column), and writes JSON.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json

from sinkalign.align.aligner import Aligner, resolve_model
from sinkalign.align.calibration import calibration_samples, fit_from_samples
from sinkalign.align.decode import pair_identity, plan_posteriors
from sinkalign.align.evaluate import load_reference_set

AA = "ACDEFGHIKLMNPQRSTVWY"
RESULTS = Path(__file__).resolve().parent / "results"


def evolve_real(rng, seq: str, sub: float, indel_every: int = 50):
    """``(query, target, true pairs)``: ``seq`` (standard residues) and a copy evolved with
    substitutions at rate ``sub`` and an indel of 1-5 residues every ~``indel_every``."""
    letters = list(AA)
    anc = [c for c in seq.upper() if c in AA]
    target, truth, i = [], [], 0
    while i < len(anc):
        if rng.random() < 1 / indel_every:
            n = int(rng.integers(1, 6))
            if rng.random() < 0.5:
                i += n  # deleted from the copy
                continue
            target.extend(str(c) for c in rng.choice(letters, n))  # inserted into the copy
        c = anc[i]
        if rng.random() < sub:
            c = str(rng.choice([a for a in letters if a != c]))
        truth.append((i, len(target)))
        target.append(c)
        i += 1
    return "".join(anc), "".join(target), np.array(truth, np.int64).reshape(-1, 2)


def close_pairs(shards: str, split: str, half: str, max_sub: float, seed: int, identity_min: float,
                plain: Aligner) -> list[tuple[str, str, np.ndarray]]:
    """Simulated close pairs of the split's sequences in ``half`` of its families, each sequence
    once, kept where the plain decoding is at least ``identity_min`` identical."""
    seqs, family = {}, {}
    for p in load_reference_set(shards, split=split):
        for sid, s in ((p.query_id, p.query_seq), (p.target_id, p.target_seq)):
            if sid not in seqs and 60 <= len(s) <= 600:
                seqs[sid], family[sid] = s, p.family
    rng = np.random.default_rng(seed)
    families = sorted(set(family.values()))
    rng.shuffle(families)
    chosen = set(families if half == "all" else families[: len(families) // 2] if half == "A"
                 else families[len(families) // 2:])
    made = [evolve_real(rng, seqs[sid], float(rng.uniform(0.0, max_sub))) for sid in sorted(seqs)]
    keep = [family[sid] in chosen for sid in sorted(seqs)]
    made = [m for m, k in zip(made, keep) if k]
    plains = plain.align_pairs([(q, t) for q, t, _ in made])
    return [m for m, r in zip(made, plains) if pair_identity(m[0], m[1], r.alignment.pairs) >= identity_min]


def samples_of(model: str, pairs) -> list:
    """Calibration samples (column features, right?, gap posteriors, unaligned?) of each pair's
    raw alignment, decoded as the model decodes it (its tie-break included)."""
    raw = Aligner.load(model, calibration=None, min_confidence=0.0)
    out = []
    for (q, t, truth), r in zip(pairs, raw.align_pairs([(q, t) for q, t, _ in pairs], keep_plan=True)):
        match = plan_posteriors(r.plan).match
        out.append(calibration_samples(r.alignment, truth, match, match_feature="columns", query=q, target=t,
                                       kind="protein"))
    return out


def scores(calibration, samples, n_ref: int) -> dict:
    conf = np.concatenate([calibration.confidence(s[0]) for s in samples])
    right = np.concatenate([s[1] for s in samples])
    bins = np.clip((conf * 10).astype(int), 0, 9)
    ece = float(sum(abs(conf[bins == b].mean() - right[bins == b].mean()) * np.sum(bins == b)
                    for b in range(10) if np.any(bins == b)) / conf.size)
    keep = conf >= calibration.min_confidence
    tp = float(right[keep].sum())
    precision, recall = tp / max(1, int(keep.sum())), tp / n_ref
    return {"columns": int(conf.size), "right": float(right.mean()), "mean_confidence": float(conf.mean()), "ece": ece,
            "threshold": calibration.min_confidence, "precision": precision, "recall": recall,
            "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "every_column_recall": float(right.sum()) / n_ref, "dropped": int((~keep).sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["fit", "check"])
    ap.add_argument("--shards", required=True)
    ap.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    ap.add_argument("--half", default="A", choices=["A", "B", "all"])
    ap.add_argument("--model", default="learned")
    ap.add_argument("--identity-min", type=float, default=0.8)
    ap.add_argument("--max-substitutions", type=float, default=0.2)
    ap.add_argument("--knots", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--out", type=Path, help="fit: the model directory to write (the model with its close maps)")
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    plain = Aligner.load(args.model, identity_weight=0.0, min_confidence=0.0)
    pairs = close_pairs(args.shards, args.split, args.half, args.max_substitutions, args.seed, args.identity_min, plain)
    samples = samples_of(args.model, pairs)
    n_ref = sum(len(truth) for _, _, truth in pairs)
    source = Aligner.load(args.model)
    main_cal = source.calibration
    families = "every family" if args.half == "all" else f"half {args.half} of its families"
    what = (f"{len(pairs)} simulated close pairs (substitutions U(0, {args.max_substitutions:g}), an indel of 1-5 every "
            f"~50) of the {args.split} split's sequences, {families} (seed {args.seed}), plain decoding >= "
            f"{args.identity_min:g} identical")
    print(f"{what}: {sum(s[0].shape[0] for s in samples)} columns ({time.perf_counter() - t0:.0f} s)")
    if args.mode == "fit":
        if args.out is None:
            ap.error("fit needs -o DIR")
        from _common import replace_sentence

        from sinkalign.align.checkpoints import export_model

        fitted = fit_from_samples(samples, match_feature="columns", kind="protein", max_knots=args.knots,
                                  column_model=main_cal.column_model, min_confidence=main_cal.min_confidence)
        close = {"match_x": fitted.match_x, "match_y": fitted.match_y, "gap_x": fitted.gap_x, "gap_y": fitted.gap_y,
                 "identity_min": args.identity_min, "fitted_on": what}
        calibration = main_cal.to_dict() | {"close": close}
        sentence = (f"Close maps of the calibration (pairs the identity tie-break decodes, >= {args.identity_min:g} "
                    f"identical) fitted with benchmarks/close_calibration.py on {what}.")
        export_model(args.out, source.params, source.config,
                     provenance=replace_sentence(source.provenance, "Close maps of the calibration", sentence),
                     calibration=calibration,
                     significance=None if source.significance is None else source.significance.to_dict(),
                     msa_calibration=None if source.msa_calibration is None else source.msa_calibration.to_dict(),
                     overwrite=args.overwrite)
        print(f"close match knots {np.round(fitted.match_x, 3).tolist()} -> {np.round(fitted.match_y, 3).tolist()}")
        print(f"wrote {args.out}")
        return
    rows = {"main maps": scores(main_cal, samples, n_ref)}
    if main_cal.close is not None:
        rows["close maps"] = scores(main_cal.for_close(), samples, n_ref)
    print("| maps | columns | right | mean confidence | ECE | P / R / F1 at the threshold | every column recall |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['columns']} | {r['right']:.4f} | {r['mean_confidence']:.4f} | {r['ece']:.4f} | "
              f"{r['precision']:.4f} / {r['recall']:.4f} / {r['f1']:.4f} | {r['every_column_recall']:.4f} |")
    out = args.json or RESULTS / f"close_calibration_{args.split}_{args.half}.json"
    write_json(out, {"script": "benchmarks/close_calibration.py", "date": datetime.date.today().isoformat(),
                     "machine": machine(), "model": str(resolve_model(args.model)) if args.model else None,
                     "pairs": len(pairs), "what": what, "rows": rows,
                     "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
