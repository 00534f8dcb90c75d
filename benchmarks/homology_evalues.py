"""E-values of the aligner against Smith-Waterman E-values, on held-out pairs.

Fits the E-value null of a calibrated model on training pairs and their shuffled copies
(what ``sinkalign fit-evalues`` does), and, with the same pairs, the same shuffles and the
same Gumbel fit, the null of the Smith-Waterman score alone, with and without the
composition adjustment (the classical statistic). Then, on the held-out split:

* how well each E-value is calibrated: the share of freshly shuffled held-out pairs with
  ``E <= t`` against the expected ``1 - exp(-t)``;
* real unrelated proteins: pairs across the Pfam validation families of different folds
  (``--decoy-families``, each pair of families, every ``--decoy-stride``-th sequence), the
  share with ``E <= t``;
* sensitivity: the share of held-out reference pairs (homologs) with ``E <= t``, per identity
  bin, and the ROC AUC of homologs against shuffled pairs.

    python benchmarks/homology_evalues.py --shards SHARDS --model sinkalign/data/aligner_learned

``SHARDS`` as in ``benchmarks/aligner_learned.py``. Tables to stdout, everything to
``benchmarks/results/homology_evalues_<split>.json``. Methods: ``sinkalign`` (the fit of
``sinkalign fit-evalues``), ``SW (composition-adjusted)`` (its local score in nats alone,
``alpha = 0``) and ``SW (raw score)`` (the raw local score, no composition adjustment), all
with the same censored null fit. ``--export DIR`` also writes the model with
the fitted null (as ``sinkalign fit-evalues`` would).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json

from sinkalign.align.aligner import Aligner
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.significance import (
    CENSOR_BELOW,
    Significance,
    composition_lambda,
    fit_gumbel,
    fit_significance,
    significance_samples,
)
from sinkalign.io.alignments import percent_identity

RESULTS = Path(__file__).resolve().parent / "results"
BINS = ((0, 20, "<20"), (20, 30, "20-30"), (30, 40, "30-40"), (40, 101, ">=40"))
THRESHOLDS = (1e-5, 1e-3, 1e-2, 0.1, 1.0)
PFAM = Path(__file__).resolve().parents[2] / "shared" / "data" / "pfam_seed"


def with_weights(w, null, lengths, kind, threshold, what) -> Significance:
    """The same censored Gumbel fit for the statistic ``w . x``."""
    loc, scale = fit_gumbel(null @ np.asarray(w), np.log(lengths[:, 0] * lengths[:, 1]), censor_below=CENSOR_BELOW)
    return Significance(list(w), loc, scale, threshold=threshold, kind=kind, fitted_on=what)


def evalue_cost(aligner, sig: Significance, items) -> dict:
    """Milliseconds per pair, one thread, of aligning ``items`` (the model's calibrated
    alignments, without E-values) and of their E-values alone (``Significance.pair_evalue``:
    the local score, the composition lambda, the statistic)."""
    from threadpoolctl import threadpool_limits

    one = Aligner(aligner.params, aligner.config, calibration=aligner.calibration, workers=1)
    with threadpool_limits(1):
        t = time.perf_counter()
        results = list(one.align_many((f"q{k}", q, f"t{k}", t_) for k, (q, t_) in enumerate(items)))
        align_s = time.perf_counter() - t
        confs = [r.alignment.match_posterior for r in results]
        t = time.perf_counter()
        for conf, (q, t_) in zip(confs, items):
            sig.pair_evalue(conf, q, t_)
        evalue_s = time.perf_counter() - t
    n = len(items)
    return {"pairs": n, "align_ms": 1e3 * align_s / n, "evalue_ms": 1e3 * evalue_s / n}


def report_fit(stats: dict, aligner, export: str | None, how: str, fitted_on: str) -> None:
    """Print the fitted statistics; with ``export``, write the model with the ``sinkalign`` one."""
    for name, sig in stats.items():
        print(f"  {name}: weights {np.round(sig.weights, 5).tolist()}, location {np.round(sig.location, 4).tolist()}, "
              f"scale {np.round(sig.scale, 4).tolist()}")
    if export:
        from sinkalign.align.checkpoints import export_model

        export_model(export, aligner.params, aligner.config, calibration=aligner.calibration.to_dict(),
                     significance=stats["sinkalign"].to_dict(),
                     provenance=f"{aligner.provenance.split(' E-values fitted with')[0]} E-values fitted with {how} on "
                                f"{fitted_on}.")
        print(f"wrote {export}")


def share_header() -> None:
    """The header of the 'share with E <= t' table."""
    print("| method | set | " + " | ".join(f"t={t:g}" for t in THRESHOLDS) + " |")
    print("|---|---|" + "---|" * len(THRESHOLDS))
    print("| expected | - | " + " | ".join(f"{-np.expm1(-t):.2g}" for t in THRESHOLDS) + " |")


def save_result(result: dict, t0: float, out: Path) -> None:
    """Write the run's JSON (with its wall time) and say where."""
    result["seconds"] = time.perf_counter() - t0
    write_json(out, result)
    print(f"\nwrote {out} ({result['seconds']:.0f} s)")


def auc(pos, neg) -> float:
    from scipy.stats import rankdata

    x = np.r_[pos, neg]
    r = rankdata(x)
    return float((r[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def pfam_decoys(families: list[str], stride: int) -> list[tuple[str, str]]:
    from sinkalign.io.alignments import read_stockholm

    seqs = {}
    for fam in families:
        msa = next(iter(read_stockholm(PFAM / f"{fam}.sto")))
        seqs[fam] = [s.replace("-", "").replace(".", "").upper() for s in msa.rows][::stride]
    return [(a, b) for f, g in itertools.combinations(families, 2) for a in seqs[f] for b in seqs[g]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--model", default="learned", help="a calibrated model (name or directory)")
    ap.add_argument("--fit-split", default="train")
    ap.add_argument("--split", default="valid", choices=["valid", "test"], help="the held-out split")
    ap.add_argument("--max-fit-pairs", type=int, default=None, help="subsample the fitting pairs (seed 0)")
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--shuffles", type=int, default=2)
    ap.add_argument("--decoy-families", default="LuxC,RRM_1,fn3",
                    help="Pfam families of different folds whose cross pairs are real unrelated proteins")
    ap.add_argument("--decoy-stride", type=int, default=3)
    ap.add_argument("--timing-pairs", type=int, default=400, help="held-out pairs timed for the E-value cost")
    ap.add_argument("--export", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    t0 = time.perf_counter()
    aligner = Aligner.load(args.model, significance=None)
    kind = aligner.config.alphabet  # "protein" or "dna" (AlignerConfig checks it)
    threshold = aligner.calibration.min_confidence

    def seqs(split, max_pairs=None):
        ps = load_reference_set(args.shards, split=split, max_pairs=max_pairs)
        return [p for p in ps if max(len(p.query_seq), len(p.target_seq)) <= args.max_length]

    def sample(items, shuffles, seed) -> dict:
        """Features of ``items`` and of their shuffles; ``raw`` versions with the raw local
        score (the shuffles keep each pair's compositions, hence its lambda)."""
        real, real_len, null, null_len = significance_samples(aligner, items, shuffles=shuffles, seed=seed)
        lam = np.array([composition_lambda(q, t, kind=kind) for q, t in items])
        raw_real, raw_null = real.copy(), null.copy()
        raw_real[:, 0] /= lam
        raw_null[:, 0] /= np.repeat(lam, shuffles)
        return {"features": {"sinkalign": (real, null), "SW (composition-adjusted)": (real, null),
                             "SW (raw score)": (raw_real, raw_null)},
                "real_len": real_len, "null_len": null_len}

    fit_pairs = seqs(args.fit_split, args.max_fit_pairs)
    fit = sample([(p.query_seq, p.target_seq) for p in fit_pairs], args.shuffles, 0)
    real, null = fit["features"]["sinkalign"]
    fitted_on = (f"{len(fit_pairs)} pairs of {Path(args.shards).name} (split {args.fit_split}, <= {args.max_length} "
                 f"residues) and {len(null)} shuffled copies (seed 0)")
    sw_only = [1.0, 0.0]
    stats = {"sinkalign": fit_significance(real, fit["real_len"], null, fit["null_len"], threshold=threshold,
                                           kind=kind, fitted_on=fitted_on),
             "SW (composition-adjusted)": with_weights(sw_only, null, fit["null_len"], kind, threshold,
                                                       "composition-adjusted local score only"),
             "SW (raw score)": with_weights(sw_only, fit["features"]["SW (raw score)"][1], fit["null_len"], kind,
                                            threshold, "raw local score only")}
    t_fit = time.perf_counter() - t0
    print(f"fitted on {len(fit_pairs)} pairs + {len(null)} shuffled in {t_fit:.0f} s")
    report_fit(stats, aligner, args.export, "`benchmarks/homology_evalues.py` (as `sinkalign fit-evalues`)", fitted_on)

    held = seqs(args.split)
    hs = sample([(p.query_seq, p.target_seq) for p in held], 2, 1)
    decoys = pfam_decoys(args.decoy_families.split(","), args.decoy_stride)
    ds = sample(decoys, 1, 2)
    ident = np.array([percent_identity(p) for p in held])
    cost = evalue_cost(aligner, stats["sinkalign"], [(p.query_seq, p.target_seq) for p in held[: args.timing_pairs]])
    print(f"\nE-value cost on {cost['pairs']} held-out pairs (one thread): {cost['evalue_ms']:.3f} ms per pair against "
          f"{cost['align_ms']:.3f} ms for the alignment ({100 * cost['evalue_ms'] / cost['align_ms']:.1f}%)")

    result = {"machine": machine(), "model": str(args.model), "fit_split": args.fit_split, "split": args.split,
              "fit_pairs": len(fit_pairs), "fit_shuffled": len(null), "held_pairs": len(held),
              "held_shuffled": len(hs["null_len"]), "decoy_families": args.decoy_families, "decoy_pairs": len(decoys),
              "fit_seconds": t_fit, "evalue_cost": cost, "statistics": {k: v.to_dict() for k, v in stats.items()}, "methods": {}}
    print(f"\nheld-out {args.split}: {len(held)} reference pairs, {len(hs['null_len'])} shuffled, {len(decoys)} Pfam "
          f"cross-family decoys ({args.decoy_families})")
    print("\nShare with E <= t (expected for a calibrated null: 1 - exp(-t))")
    share_header()
    for name, sig in stats.items():
        h_real, h_null = hs["features"][name]
        e_null = sig.evalue(h_null, hs["null_len"][:, 0], hs["null_len"][:, 1])
        e_dec = sig.evalue(ds["features"][name][0], ds["real_len"][:, 0], ds["real_len"][:, 1])
        e_hom = sig.evalue(h_real, hs["real_len"][:, 0], hs["real_len"][:, 1])
        row = {"shuffled": [float(np.mean(e_null <= t)) for t in THRESHOLDS],
               "pfam_decoys": [float(np.mean(e_dec <= t)) for t in THRESHOLDS],
               "auc_vs_shuffled": {}, "sensitivity": {}}
        for label, vals in (("shuffled", row["shuffled"]), ("Pfam decoys", row["pfam_decoys"])):
            print(f"| {name} | {label} | " + " | ".join(f"{v:.4f}" for v in vals) + " |")
        for lo, hi, b in ((0, 101, "all"), *BINS):
            sel = (ident >= lo) & (ident < hi)
            row["sensitivity"][b] = {"n": int(sel.sum()), "share": [float(np.mean(e_hom[sel] <= t)) for t in THRESHOLDS]}
            row["auc_vs_shuffled"][b] = auc(-np.log(e_hom[sel]), -np.log(e_null))
        result["methods"][name] = row
    print("\nSensitivity: share of held-out homologs with E <= 1e-3 (E <= 1e-5), and ROC AUC against shuffled pairs")
    print("| method | " + " | ".join(f"{b} ({result['methods']['sinkalign']['sensitivity'][b]['n']})"
                                       for b in ("all", *(x[2] for x in BINS))) + " |")
    print("|---|" + "---|" * (len(BINS) + 1))
    k3, k5 = THRESHOLDS.index(1e-3), THRESHOLDS.index(1e-5)
    for name, row in result["methods"].items():
        cells = [f"{row['sensitivity'][b]['share'][k3]:.3f} ({row['sensitivity'][b]['share'][k5]:.3f}), "
                 f"AUC {row['auc_vs_shuffled'][b]:.3f}" for b in ("all", *(x[2] for x in BINS))]
        print(f"| {name} | " + " | ".join(cells) + " |")
    save_result(result, t0, Path(args.out) if args.out else RESULTS / f"homology_evalues_{args.split}.json")


if __name__ == "__main__":
    main()
