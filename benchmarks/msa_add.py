"""Adding a sequence to an existing alignment (``sinkalign msa --add-to``), left out and added back.

For every structure-based family of the chosen side of ``data_manifests/structural_split.json``
(``../shared/data/structural/{homstrad,sabre,oxbench}``, ``--min-seqs`` to ``--max-seqs``
sequences), up to ``--rows`` of its rows (drawn with seed 0) are each left out in turn: the
reference without that row (its columns that become all gaps dropped, as an alignment of the
others would have none) is the existing alignment, and the row's sequence is added back. The
result is scored on the reference's trusted (core) residues over the pairs of the added row
with every other row (the pairs of the pairwise tables, :func:`sinkalign.io.alignments.msa_to_pairs`):
micro precision / recall (sum-of-pairs) / F1, pooled, per source and per identity bin of the
reference pair. The other rows' pairs among themselves are the reference's own and not counted.

Methods (``--methods``), each on the same left-out rows in the same run:

* ``add`` / ``add-c0``: :func:`sinkalign.align.msa.add_to_alignment` over the default learned
  model's calibrated confidences, 2 / 0 consistency rounds (``sinkalign msa --add-to``);
* ``add-max`` / ``add-max-c0``: ``combine="max"`` (a column scored by its most confident pairing);
* ``add-near5`` / ``10`` / ``20``: ``--independent --nearest M`` (the row aligned to its M rows of
  best Smith-Waterman score only), for large alignments (``--sources pfam --rows 20``);
* ``add-nw``: the same recipe over Needleman-Wunsch's alignments (parasail BLOSUM62 11/1, each
  aligned pair at 1), 2 rounds;
* ``famsa-add``: FAMSA's profile-profile alignment of the existing alignment and the sequence
  (``pyfamsa``'s ``align_profiles``, which keeps each profile's columns; when installed): an
  outside aligner doing the same job;
* ``msa``: the whole family aligned from scratch (``sinkalign msa``, its pairs of that row),
  which knows nothing of the reference: what a user without ``--add-to`` would do;
* ``pair``, ``nw``: the row aligned to each other row alone (the learned aligner at its
  threshold; parasail Needleman-Wunsch).

``--fit-added FILE``: instead, the map of an added residue's confidence to the share of its
pairings that are right (:attr:`sinkalign.align.msa.MsaCalibration.added`), for each of
``--fit-rounds``: every left-out row added back with the library's own confidences, one
isotonic fit per number of rounds on all the families, and its expected calibration error
cross-fitted over ``--cv`` folds of families (no family mapped by a fit that saw it), against
the unmapped confidences' on the same residues; ``--out DIR`` writes the model with those maps.

    python benchmarks/msa_add.py --split valid
    python benchmarks/msa_add.py --split valid --fit-added benchmarks/results/msa_add_fit_valid.json --out DIR
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import numpy as np
from _common import export_with_msa_calibration, machine, write_json
from msa_families import families, first_families, induced_pairs, nw_matrix, parse_methods

from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.calibration import isotonic_knots
from sinkalign.align.metrics import IDENTITY_BINS, assign_identity_bins, core_pair_scores, identity_bin_labels, micro_average
from sinkalign.align.msa import MsaCalibration, add_to_alignment, align_multiple
from sinkalign.io.alignments import MSA, msa_to_pairs, percent_identity

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("add", "add-c0", "add-max", "add-max-c0", "add-near5", "add-near10", "add-near20", "add-nw", "famsa-add",
           "msa", "pair", "nw")


def without_row(msa: MSA, k: int) -> MSA:
    """``msa`` without row ``k`` and without the columns that leaves with no residue."""
    rows = [r for i, r in enumerate(msa.rows) if i != k]
    keep = [c for c in range(msa.n_columns) if any(r[c].isalpha() for r in rows)]
    return MSA(tuple(i for j, i in enumerate(msa.ids) if j != k), tuple("".join(r[c] for c in keep) for r in rows),
               msa.source, msa.format, msa.alphabet, msa.family)


def residue_reliability(conf: np.ndarray, name: str, mine: list, preds: list) -> np.ndarray:
    """``[k, 3]``: for each residue of the added row ``name`` with a confidence, the confidence,
    how many of its pairings in ``preds`` (one array per reference pair of ``mine``) are between
    trusted residues, and how many of those are reference pairs."""
    counted, right = np.zeros(len(conf)), np.zeros(len(conf))
    for ref, pred in zip(mine, preds):
        side = 0 if ref.query_id == name else 1
        core = [np.ones(len(ref.query_seq), bool) if ref.query_core is None else ref.query_core,
                np.ones(len(ref.target_seq), bool) if ref.target_core is None else ref.target_core]
        pred = np.asarray(pred, np.int64).reshape(-1, 2)
        pred = pred[core[0][pred[:, 0]] & core[1][pred[:, 1]]]
        truth = {tuple(p) for p in np.asarray(ref.pairs, np.int64).reshape(-1, 2).tolist()}
        hit = np.array([tuple(p) in truth for p in pred.tolist()], bool)
        np.add.at(counted, pred[:, side], 1.0)
        np.add.at(right, pred[:, side], hit.astype(np.float64))
    keep = np.isfinite(conf) & (counted > 0)
    return np.stack([conf[keep], counted[keep], right[keep]], axis=1)


def expected_calibration_error(samples: np.ndarray, bins: int = 10) -> dict:
    """ECE of :func:`residue_reliability` rows (each residue weighted by its pairings), with the
    reliability table: per bin of confidence, pairings, mean confidence and share right."""
    conf, n, k = samples.T
    which = np.minimum((conf * bins).astype(int), bins - 1)
    table, ece = [], 0.0
    for b in range(bins):
        sel = which == b
        if n[sel].sum():
            mean, share = float(np.average(conf[sel], weights=n[sel])), float(k[sel].sum() / n[sel].sum())
            ece += n[sel].sum() / n.sum() * abs(mean - share)
            table.append({"bin": [b / bins, (b + 1) / bins], "pairings": int(n[sel].sum()), "confidence": mean,
                          "right": share})
    return {"ece": ece, "bins": table}


def fit_added(samples: np.ndarray, max_knots: int = 16) -> tuple[tuple, tuple]:
    """The isotonic map ``(xs, ys)`` of :func:`residue_reliability` rows: each pairing one
    point at its residue's confidence, right or not."""
    conf, n, k = samples.T
    n, k = n.astype(np.int64), k.astype(np.int64)
    x = np.repeat(conf, n)
    y = np.concatenate([np.r_[np.ones(a), np.zeros(b - a)] for a, b in zip(k, n)]) if len(n) else np.zeros(0)
    xs, ys = isotonic_knots(x, y, max_knots=max_knots)
    return tuple(xs), tuple(ys)


def mapped(samples: np.ndarray, knots: tuple) -> np.ndarray:
    out = samples.copy()
    out[:, 0] = np.interp(samples[:, 0], *knots)
    return out


def fit_mode(fams, learned, args) -> None:
    """``--fit-added``: the maps of :attr:`MsaCalibration.added` (module docstring)."""
    rounds = [int(r) for r in args.fit_rounds.split(",")]
    raw = MsaCalibration({})  # no maps: the library's own confidences
    per_family: list[dict] = []
    for src, msa in fams:
        ids = list(msa.ids)
        seqs = [msa.ungapped(k) for k in range(len(msa))]
        refs = msa_to_pairs(msa)
        got = {r: [] for r in rounds}
        for k in np.sort(np.random.default_rng(0).choice(len(msa), min(args.rows, len(msa)), replace=False)):
            name = ids[k]
            mine = [r for r in refs if name in (r.query_id, r.target_id)]
            existing = without_row(msa, int(k))
            for r in rounds:
                res = add_to_alignment(existing.ids, existing.rows, [name], [seqs[k]], learned, consistency=r,
                                       calibration=raw)
                rows = {i: row.upper() for i, row in zip(res.ids, res.rows)}
                preds = [induced_pairs(rows, ref.query_id, ref.target_id) for ref in mine]
                got[r].append(residue_reliability(res.confidence[-1], name, mine, preds))
        per_family.append({r: np.concatenate(v) for r, v in got.items()})
        print(f"  {src} {msa.family}: {len(msa)} rows", flush=True)
    folds = np.random.default_rng(args.seed).permutation(len(per_family)) % args.cv
    added, report = {}, {}
    for r in rounds:
        everything = np.concatenate([f[r] for f in per_family])
        added[r] = fit_added(everything, args.knots)
        crossed = [mapped(f[r], fit_added(np.concatenate([g[r] for g, h in zip(per_family, folds) if h != fold]),
                                          args.knots))
                   for f, fold in zip(per_family, folds)]
        report[r] = {"raw": expected_calibration_error(everything),
                     "cross_fitted": expected_calibration_error(np.concatenate(crossed)),
                     "in_sample": expected_calibration_error(mapped(everything, added[r])),
                     "knots": {"x": list(added[r][0]), "y": list(added[r][1])}}
        print(f"{r} rounds: ECE of the added residues' confidences, library's own {report[r]['raw']['ece']:.3f}, "
              f"mapped cross-fitted ({args.cv} folds of families) {report[r]['cross_fitted']['ece']:.3f}, "
              f"in sample {report[r]['in_sample']['ece']:.3f}; {len(added[r][0])} knots")
    fitted_on = (f"{len(per_family)} {args.split} families of {', '.join(args.sources.split(','))} "
                 f"({args.min_seqs}-{args.max_seqs} sequences, data_manifests/structural_split.json), "
                 f"{args.rows} rows each left out and added back (benchmarks/msa_add.py --fit-added)")
    write_json(args.fit_added, {"benchmark": "msa_add_fit", "machine": machine(),
                                "date": datetime.date.today().isoformat(), "split": args.split,
                                "families": len(per_family), "cv": args.cv, "seed": args.seed, "fitted_on": fitted_on,
                                "rounds": {str(r): v for r, v in report.items()}})
    print(f"wrote {args.fit_added}")
    if args.out:  # the model with these maps, its maps for alignments from scratch kept
        base = learned.msa_calibration
        cal = MsaCalibration(base.knots, base.fitted_on, added) if base is not None else MsaCalibration({}, "", added)
        export_with_msa_calibration(learned, args.out, cal, "Confidences of added records",
                                    f"Confidences of added records calibrated on {fitted_on}.")
        print(f"wrote the model with the maps to {args.out}")


def famsa_add(existing: MSA, name: str, seq: str) -> dict[str, str]:
    """FAMSA's profile-profile alignment of ``existing`` (upper-cased, gaps as '-') and ``seq``."""
    from pyfamsa import Aligner as Famsa
    from pyfamsa import Alignment, GappedSequence

    profile = Alignment([GappedSequence(i.encode(), "".join(c if c.isalpha() else "-" for c in r).upper().encode())
                         for i, r in zip(existing.ids, existing.rows)])
    new = Alignment([GappedSequence(name.encode(), seq.encode())])
    out = Famsa(guide_tree="upgma").align_profiles(profile, new)
    return {s.id.decode(): s.sequence.decode() for s in out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=("valid", "test"), default="valid")
    ap.add_argument("--sources", default="homstrad,sabre,oxbench")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--min-seqs", type=int, default=4, help="the existing alignment has at least min-seqs - 1 rows")
    ap.add_argument("--max-seqs", type=int, default=25)
    ap.add_argument("--rows", type=int, default=2, help="rows left out and added back per family")
    ap.add_argument("--max-families", type=int, default=0, help="at most this many families per source (0: all)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--twins", action="store_true", help="also add a copy of each left-out row to the whole family: "
                    "the share of copies that land exactly on their row's columns")
    ap.add_argument("--fit-added", default=None, metavar="FILE", help="fit the added records' maps (see above)")
    ap.add_argument("--fit-rounds", default="0,1,2,3")
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="of the folds of families")
    ap.add_argument("--knots", type=int, default=16)
    ap.add_argument("--model", default="learned")
    ap.add_argument("--out", default=None, help="with --fit-added: write the model with the maps to this directory")
    args = ap.parse_args()
    methods = parse_methods(ap, args.methods, METHODS, "famsa-add")
    sources = args.sources.split(",")
    fams = first_families(families(args.split, sources, args.min_seqs, args.max_seqs), sources, args.max_families)
    learned = Aligner.load(args.model)
    if args.fit_added:
        fit_mode(fams, learned, args)
        return
    sources_of = {m: learned for m in METHODS if m.startswith("add") and m != "add-nw"} | {"add-nw": nw_matrix}
    twins = {m: [] for m in methods if m in ("add", "add-c0", "add-max", "add-max-c0")} if args.twins else {}
    scores = {m: [] for m in methods}
    reliability = {m: [] for m in methods if m.startswith("add") and m != "add-nw"}
    kind = {}  # method -> whether its confidences came out calibrated
    seconds = {m: 0.0 for m in methods}
    pair_src, pair_id, per_row = [], [], []
    print(f"{len(fams)} families ({args.split}), up to {args.rows} rows each left out and added back")
    for src, msa in fams:
        ids = list(msa.ids)
        seqs = [msa.ungapped(k) for k in range(len(msa))]
        refs = msa_to_pairs(msa)
        scratch = None
        if "msa" in methods:
            t0 = time.perf_counter()
            res = align_multiple(ids, seqs, learned)
            seconds["msa"] += time.perf_counter() - t0
            scratch = dict(zip(res.ids, res.rows))
        picks = np.sort(np.random.default_rng(0).choice(len(msa), min(args.rows, len(msa)), replace=False))
        for k in picks:
            name = ids[k]
            mine = [r for r in refs if name in (r.query_id, r.target_id)]
            existing = without_row(msa, int(k))
            row = {"family": msa.family, "source": src, "row": name, "pairs": len(mine)}
            for m in methods:
                t0 = time.perf_counter()
                if m.startswith("add"):
                    settings = {"consistency": 0 if m.endswith("c0") or "near" in m else 2,
                                "combine": "max" if "max" in m else "mean"}
                    if "near" in m:
                        settings |= {"independent": True, "nearest": int(m.split("near")[1])}
                    res = add_to_alignment(existing.ids, existing.rows, [name], [seqs[k]], sources_of[m], **settings)
                    if m in twins:  # a copy of the row, added to the whole family: on its twin's columns?
                        twin = add_to_alignment(msa.ids, msa.rows, ["copy"], [seqs[k]], learned, **settings)
                        copy_cols = [c for c, ch in enumerate(twin.rows[-1]) if ch != "-"]
                        twin_cols = [c for c, ch in enumerate(twin.rows[int(k)]) if ch != "-"]
                        on = sum(a == b for a, b in zip(copy_cols, twin_cols))  # residues in their twin's column
                        twins[m].append((on == len(copy_cols), on, len(copy_cols)))
                    # scored upper-cased, as every other method's rows are: a lower-case (untrusted)
                    # residue of a bench1.0 row is in its column as much as an upper-case one
                    rows = {i: r.upper() for i, r in zip(res.ids, res.rows)}
                    preds = [induced_pairs(rows, r.query_id, r.target_id) for r in mine]
                    if m in reliability:
                        reliability[m].append(residue_reliability(res.confidence[-1], name, mine, preds))
                        kind[m] = "calibrated" if res.calibrated else "the library's own"
                elif m == "famsa-add":
                    rows = famsa_add(existing, name, seqs[k])
                    preds = [induced_pairs(rows, r.query_id, r.target_id) for r in mine]
                elif m == "msa":
                    preds = [induced_pairs(scratch, r.query_id, r.target_id) for r in mine]
                elif m == "pair":
                    out = learned.align_many([(r.query_id, r.query_seq, r.target_id, r.target_seq) for r in mine])
                    preds = [x.alignment.pairs for x in out]
                else:
                    preds = [align_pair(r.query_seq, r.target_seq, "nw", scoring=Scoring.protein()).pairs for r in mine]
                seconds[m] += time.perf_counter() - t0
                s = [core_pair_scores(p, r) for p, r in zip(preds, mine)]
                scores[m] += s
                row[m] = micro_average(s)["f1"]
            pair_src += [src] * len(mine)
            pair_id += [percent_identity(r) for r in mine]
            per_row.append(row)
        print(f"  {src} {msa.family}: {len(msa)} rows; " + ", ".join(f"{m} {np.mean([r[m] for r in per_row[-len(picks):]]):.3f}"
                                                            for m in methods), flush=True)
    pair_src, pair_id = np.array(pair_src), np.array(pair_id)
    bins = assign_identity_bins(pair_id)
    labels = identity_bin_labels(IDENTITY_BINS)
    groups = {"all": np.arange(len(pair_src))}
    groups.update({s: np.nonzero(pair_src == s)[0] for s in sources})
    groups.update({f"id {lab}": np.nonzero(bins == b)[0] for b, lab in enumerate(labels)})
    head = [g for g in groups if len(groups[g])]
    table = {m: {g: {**micro_average([scores[m][i] for i in groups[g]]), "pairs": int(len(groups[g]))} for g in head}
             | {"seconds": seconds[m]} for m in methods}
    print(f"\nP / R (SP) / F1 on trusted residues of the added row's pairs, {args.split}, "
          f"{len(per_row)} rows added back, pairs per group in brackets")
    print("| method | " + " | ".join(f"{g} ({len(groups[g])})" for g in head) + " | s |")
    print("|---" * (len(head) + 2) + "|")
    for m in methods:
        cells = [f"{table[m][g]['precision']:.3f} / {table[m][g]['recall']:.3f} / {table[m][g]['f1']:.3f}" for g in head]
        print(f"| {m} | " + " | ".join(cells) + f" | {seconds[m]:.1f} |")
    for m, v in twins.items():
        print(f"{m}: {sum(e for e, _, _ in v)} of {len(v)} copies of a row on exactly that row's columns; "
              f"{sum(o for _, o, _ in v) / sum(n for _, _, n in v):.4f} of their residues on their twin's")
    calibration = {m: expected_calibration_error(np.concatenate(v)) for m, v in reliability.items() if v}
    for m, c in calibration.items():
        print(f"{m}: the added rows' residue confidences ({kind[m]}), ECE {c['ece']:.3f}; per bin "
              "(pairings, mean confidence, share right): "
              + "; ".join(f"[{b['bin'][0]:.1f}, {b['bin'][1]:.1f}) {b['pairings']} {b['confidence']:.3f} {b['right']:.3f}"
                          for b in c["bins"]))
    payload = {"benchmark": "msa_add", "machine": machine(), "date": datetime.date.today().isoformat(),
               "split": args.split, "sources": sources, "min_seqs": args.min_seqs, "max_seqs": args.max_seqs,
               "rows_per_family": args.rows, "families": len(fams), "rows_added": len(per_row), "table": table,
               "added_residue_calibration": calibration,
               "twins": {m: {"exact": int(sum(e for e, _, _ in v)), "copies": len(v),
                             "residues_on_twin": sum(o for _, o, _ in v) / max(1, sum(n for _, _, n in v))}
                         for m, v in twins.items()},
               "per_row": per_row}
    out = args.json or str(RESULTS / f"msa_add_{args.split}.json")
    write_json(out, payload)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
