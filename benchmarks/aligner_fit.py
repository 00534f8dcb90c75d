"""How the shipped BLOSUM-window aligners' free settings were chosen (`blosum`, the default protein model
until 2026-11-23, and `dna`), and how well their confidences hold.

Five parts, each printing a table (figures quoted in BENCHMARKS.md, "Aligner accuracy"):

* ``grid``: micro-F1 of the BLOSUM62-diagonal initialisation (no training) for a grid of
  window x eps on the Pfam *training* families (pairs up to 600 residues), the validation
  families and the low-TM structure pairs (0.4 <= min TM < 0.5, outside the evaluation set),
  with parasail Needleman-Wunsch on the same pairs.
* ``matrices``: the shipped window and eps with other substitution matrices in place of
  BLOSUM62 (each rescaled to BLOSUM62's standard deviation over the 20 standard residues),
  chosen on all training and validation pairs, then reported on the test families and the
  structure pairs (min TM >= 0.5) next to BLOSUM62 and Needleman-Wunsch.
* ``pairhmm``: probabilistic Needleman-Wunsch (:mod:`sinkalign.align.pairhmm`, BLOSUM62 with
  affine gaps, posteriors summed over all alignments, MEA decoding) as a bound on what the
  same evidence gives with explicit gap structure: temperature and gap costs chosen on the
  training families, then reported on the validation and test families and the structure
  pairs next to the shipped model, Needleman-Wunsch and Smith-Waterman, overall and below 30%
  identity.
* ``dna``: the same for the DNA initialisation on the MADE1 family, split by sequence: the
  grid is scored on pairs among the even-numbered sequences, the chosen setting also on pairs
  among the others.
* ``confidence``: for the shipped protein model, how well its calibrated confidences match
  the fraction of right columns on validation pairs (AUC, expected calibration error, bins),
  next to an isotonic map fitted on the raw posterior instead.

    python benchmarks/aligner_fit.py grid --shards SHARDS --tmalign valid.tsv
    python benchmarks/aligner_fit.py matrices --shards SHARDS --tmalign valid.tsv
    python benchmarks/aligner_fit.py pairhmm --shards SHARDS --tmalign valid.tsv
    python benchmarks/aligner_fit.py dna --made1 MADE1_dfam_dna.sto
    python benchmarks/aligner_fit.py confidence --shards SHARDS

``SHARDS`` is ``sinkalign shards build ../shared/data/pfam_seed/*.sto --alphabet protein
--split 0.6,0.2,0.2 --seed 0 --max-pairs-per-family 300``.
"""

from __future__ import annotations

import argparse

import numpy as np

from sinkalign.align import model as M
from sinkalign.align.aligner import Aligner
from sinkalign.align.baselines import Scoring, align_pair
from sinkalign.align.calibration import fit_calibration, local_share
from sinkalign.align.decode import plan_posteriors
from sinkalign.align.evaluate import load_reference_set
from sinkalign.align.metrics import micro_average, pair_scores, percent_identity
from sinkalign.align.pairhmm import pairhmm_align
from sinkalign.io.alignments import read_tmalign_pairs


def f1(preds, pairs) -> float:
    return micro_average([pair_scores(a, p.pairs) for a, p in zip(preds, pairs)])["f1"]


def run(aligner, pairs, keep_plan=False):
    return list(aligner.align_many(((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs),
                                   keep_plan=keep_plan, strand="plus"))


def nw(pairs, scoring) -> float:
    return f1([align_pair(p.query_seq, p.target_seq, "nw", scoring=scoring).pairs for p in pairs], pairs)


def init_aligner(alphabet: str, **settings) -> Aligner:
    cfg = M.AlignerConfig.create(alphabet=alphabet, embedder={"name": "none"}, feature_dim=0, **settings)
    return Aligner(M.init_params(cfg), cfg)


def grid(args) -> None:
    short = lambda ps: [p for p in ps if max(len(p.query_seq), len(p.target_seq)) <= 600]  # noqa: E731
    sets = {
        "train": short(load_reference_set(args.shards, split="train", max_pairs=args.pairs, seed=1)),
        "valid": short(load_reference_set(args.shards, split="valid", max_pairs=args.pairs, seed=1)),
        "tm_0.4-0.5": short([p for p in read_tmalign_pairs(args.tmalign, min_tm=0.4)
                             if min(p.meta["tm1"], p.meta["tm2"]) < 0.5][: args.pairs]),
    }
    print("pairs:", {k: len(v) for k, v in sets.items()})
    print("NW:", {k: round(nw(v, Scoring.protein()), 3) for k, v in sets.items()})
    for window in args.windows:
        for eps in args.eps:
            al = init_aligner("protein", window=window, eps=eps)
            row = {k: round(f1([r.alignment.pairs for r in run(al, v)], v), 3) for k, v in sets.items()}
            print(f"window {window:3d} eps {eps:5.2f}:", row, flush=True)


def _rescaled(name: str) -> np.ndarray:
    """A Biopython matrix over the model's alphabet (X row and column 0), with BLOSUM62's spread."""
    from Bio.Align import substitution_matrices

    symbols = M.ALPHABETS["protein"]

    def load(n):
        mat = substitution_matrices.load(n)
        out = np.zeros((len(symbols), len(symbols)))
        out[:20, :20] = [[mat[a, b] for b in symbols[:20]] for a in symbols[:20]]
        return out

    mat = load(name)
    return mat * load("BLOSUM62")[:20, :20].std() / mat[:20, :20].std()


def matrices(args) -> None:
    fits = lambda ps: [p for p in ps if max(len(p.query_seq), len(p.target_seq)) <= 600]  # noqa: E731
    choose = {"train": fits(load_reference_set(args.shards, split="train")),
              "valid": load_reference_set(args.shards, split="valid")}
    report = {"test": load_reference_set(args.shards, split="test"),
              "tm>=0.5": list(read_tmalign_pairs(args.tmalign, min_tm=0.5))}
    cfg = M.preset("default", embedder={"name": "none"}, feature_dim=0)  # the shipped window and eps

    def aligner_for(name):
        return Aligner(M.init_params(cfg, substitution=_rescaled(name) / 16.0), cfg)

    print("pairs:", {k: len(v) for k, v in {**choose, **report}.items()})
    print("NW:", {k: round(nw(v, Scoring.protein()), 3) for k, v in {**choose, **report}.items()})
    pooled = {}
    for name in args.matrices:
        al = aligner_for(name)
        scores = {k: f1([r.alignment.pairs for r in run(al, v)], v) for k, v in choose.items()}
        pooled[name] = sum(scores[k] * len(v) for k, v in choose.items()) / sum(map(len, choose.values()))
        print(f"{name:12s}", {k: round(x, 3) for k, x in scores.items()}, f"pooled {pooled[name]:.3f}", flush=True)
    for name in dict.fromkeys([max(pooled, key=pooled.get), "BLOSUM62"]):
        al = aligner_for(name)
        print(f"held out, {name}:", {k: round(f1([r.alignment.pairs for r in run(al, v)], v), 3)
                                     for k, v in report.items()}, flush=True)


def _f1_low(preds, pairs, low) -> str:
    """'overall / on the pairs at indices ``low`` (their count)' F1."""
    return f"{f1(preds, pairs):.3f} / {f1([preds[i] for i in low], [pairs[i] for i in low]):.3f} ({len(low)})"


def pairhmm(args) -> None:
    train = [p for p in load_reference_set(args.shards, split="train")
             if max(len(p.query_seq), len(p.target_seq)) <= 600]
    report = {"valid": load_reference_set(args.shards, split="valid"),
              "test": load_reference_set(args.shards, split="test"),
              "tm>=0.5": list(read_tmalign_pairs(args.tmalign, min_tm=0.5))}
    print("pairs:", {"train": len(train), **{k: len(v) for k, v in report.items()}})

    def phmm(pairs, lam, go, ge):
        scoring = Scoring.protein(go, ge)
        return [pairhmm_align(p.query_seq, p.target_seq, scoring=scoring, lam=lam).pairs for p in pairs]

    print(f"train: NW {nw(train, Scoring.protein()):.3f}")
    fits = {}
    for lam in args.lam:
        for go, ge in args.gaps:
            fits[lam, go, ge] = f1(phmm(train, lam, go, ge), train)
            print(f"pair-HMM lam {lam:.3f} open {go:2d} extend {ge}: train {fits[lam, go, ge]:.3f}", flush=True)
    lam, go, ge = max(fits, key=fits.get)
    print(f"chosen: lam {lam:.3f} open {go} extend {ge}; held out, F1 overall / below 30% identity (pairs):")
    shipped = Aligner.load("blosum")
    for k, v in report.items():
        rows = {"sinkalign": [r.alignment.pairs for r in run(shipped, v)],
                "pair-HMM MEA": phmm(v, lam, go, ge),
                "NW": [align_pair(p.query_seq, p.target_seq, "nw").pairs for p in v],
                "SW": [align_pair(p.query_seq, p.target_seq, "sw").pairs for p in v]}
        low = [i for i, p in enumerate(v) if percent_identity(p.query_seq, p.target_seq, p.pairs) < 30.0]
        print(f"  {k}: " + "; ".join(f"{name} {_f1_low(preds, v, low)}" for name, preds in rows.items()), flush=True)


def dna(args) -> None:
    pairs = load_reference_set(args.made1)
    ids = sorted({p.query_id for p in pairs} | {p.target_id for p in pairs})
    half = set(ids[::2])
    rng = np.random.default_rng(0)
    tune = [p for p in pairs if p.query_id in half and p.target_id in half]
    held = [p for p in pairs if p.query_id not in half and p.target_id not in half]
    tune = [tune[i] for i in sorted(rng.choice(len(tune), min(args.pairs, len(tune)), replace=False))]
    held = [held[i] for i in sorted(rng.choice(len(held), min(args.pairs, len(held)), replace=False))]
    print(f"NW: tune {nw(tune, Scoring.dna()):.3f}, held {nw(held, Scoring.dna()):.3f}")
    for window in args.windows:
        for eps in args.eps:
            al = init_aligner("dna", window=window, eps=eps)
            print(f"window {window:3d} eps {eps:5.2f}: tune {f1([r.alignment.pairs for r in run(al, tune)], tune):.3f}"
                  f" held {f1([r.alignment.pairs for r in run(al, held)], held):.3f}", flush=True)


def _reliability(conf, hit) -> str:
    bins = np.digitize(conf, [0.5, 0.7, 0.9])
    ece = sum(abs(conf[bins == b].mean() - hit[bins == b].mean()) * (bins == b).mean()
              for b in range(4) if (bins == b).any())
    pos, neg = conf[hit == 1], conf[hit == 0]
    auc = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    cells = ", ".join(f"{conf[bins == b].mean():.2f} -> {hit[bins == b].mean():.2f} (n={(bins == b).sum()})"
                      for b in range(4) if (bins == b).any())
    return f"AUC {auc:.3f}, ECE {ece:.3f}; mean confidence -> fraction right: {cells}"


def confidence(args) -> None:
    shipped = Aligner.load("blosum")
    raw_aligner = Aligner.load(calibration=None)
    train = [p for p in load_reference_set(args.shards, split="train")
             if max(len(p.query_seq), len(p.target_seq)) <= 600]
    valid = load_reference_set(args.shards, split="valid", max_pairs=args.pairs, seed=2)
    fitted = run(raw_aligner, train)
    raw_cal = fit_calibration([r.alignment for r in fitted], train, match_feature="posterior")
    conf_s, conf_r, hit = [], [], []
    for res, p in zip(run(raw_aligner, valid, keep_plan=True), valid):
        ref = {tuple(x) for x in p.pairs.tolist()}
        match = plan_posteriors(res.plan).match
        conf_s.append(shipped.calibration.match(local_share(match, res.alignment.pairs, shipped.calibration.radius)))
        conf_r.append(raw_cal.match(res.alignment.match_posterior))
        hit.append(np.array([tuple(x) in ref for x in res.alignment.pairs.tolist()], dtype=float))
    hit = np.concatenate(hit)
    print(f"{len(valid)} validation pairs, {hit.size} aligned columns, precision {hit.mean():.3f}")
    print("shipped (local share):", _reliability(np.concatenate(conf_s), hit))
    print("raw posterior, isotonic on the same training pairs:", _reliability(np.concatenate(conf_r), hit))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="part", required=True)
    g = sub.add_parser("grid")
    g.add_argument("--shards", required=True)
    g.add_argument("--tmalign", required=True)
    g.add_argument("--pairs", type=int, default=80)
    g.add_argument("--windows", type=int, nargs="+", default=[4, 8, 12, 16, 24, 32])
    g.add_argument("--eps", type=float, nargs="+", default=[0.35, 1.0, 2.5, 6.0, 10.0])
    x = sub.add_parser("matrices")
    x.add_argument("--shards", required=True)
    x.add_argument("--tmalign", required=True)
    x.add_argument("--matrices", nargs="+", default=["BLOSUM62", "BLOSUM45", "BLOSUM80", "GONNET1992", "BENNER74",
                                                     "PAM250", "STR", "JOHNSON"])
    h = sub.add_parser("pairhmm")
    h.add_argument("--shards", required=True)
    h.add_argument("--tmalign", required=True)
    h.add_argument("--lam", type=float, nargs="+", default=[0.1, 0.15, 0.2, 0.3466])
    h.add_argument("--gaps", type=lambda x: tuple(map(int, x.split("/"))), nargs="+",
                   default=[(11, 1), (17, 2), (24, 2), (32, 2), (40, 2), (24, 3)], help="OPEN/EXTEND ...")
    d = sub.add_parser("dna")
    d.add_argument("--made1", required=True)
    d.add_argument("--pairs", type=int, default=400)
    d.add_argument("--windows", type=int, nargs="+", default=[4, 8, 16])
    d.add_argument("--eps", type=float, nargs="+", default=[1.0, 3.0, 6.0])
    c = sub.add_parser("confidence")
    c.add_argument("--shards", required=True)
    c.add_argument("--pairs", type=int, default=150)
    args = ap.parse_args()
    {"grid": grid, "matrices": matrices, "pairhmm": pairhmm, "dna": dna, "confidence": confidence}[args.part](args)


if __name__ == "__main__":
    main()
