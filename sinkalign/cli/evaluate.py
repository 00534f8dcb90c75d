"""``sinkalign evaluate``: F1 of aligned residue pairs vs references, with NW/SW in the same run."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
from rich.console import Console

from sinkalign.align.significance import MIX_GRID, PAIR_FEATURES
from sinkalign.cli.options import FiniteFloatRange, OutputPath, embedder_options, esm_weights_option
from sinkalign.utils import atomic_write_text

#: below these, `sinkalign calibrate` warns that its maps follow noise
MIN_CALIBRATION_PAIRS = 50
MIN_CALIBRATION_COLUMNS = 2000
#: below this, `sinkalign fit-evalues` warns that its null's tail is not checked (0.1% of it: 2 pairs)
MIN_NULL_PAIRS = 2000


def _reference_options(purpose: str, split: str):
    """The options shared by commands that read reference sets and a model."""

    def wrap(fn):
        for opt in reversed((
            click.option("--reference", "references", multiple=True, required=True,
                         type=click.Path(exists=True, path_type=Path),
                         help=f"Reference set {purpose}: Stockholm/aligned FASTA/A2M/MSF file, TM-align TSV, "
                              "structure-based PIR file (HOMSTRAD) or folder of them or of bench1.0 aligned FASTA "
                              "(SABRE, PREFAB, OXBench), or shard directory; a pipe (<(...)) is read as a file. Repeatable."),
            click.option("--model", help="Model directory, checkpoint or run, or a shipped model by name "
                                         "(learned, blosum, dna). Default: the shipped protein model."),
            esm_weights_option(),
            click.option("--split", default=split, show_default=True, help="Split to read from shard directories."),
            click.option("--min-tm", type=FiniteFloatRange(0, 1), default=0.5, show_default=True,
                         help="TM-align pairs: keep min(tm1, tm2) >= this."),
            click.option("--max-pairs", type=click.IntRange(min=1),
                         help="Subsample each set to at most this many pairs."),
        )):
            fn = opt(fn)
        return fn

    return wrap


def _reference_sets(references, **options) -> list[list]:
    """Each ``--reference``'s pairs (:func:`~sinkalign.align.evaluate.load_reference_set` with
    ``options``). A pipe (``<(...)``) is read once, through a copy (its format is told on one
    open and its pairs read on another, which would find it empty), and named as given."""
    from sinkalign.align.evaluate import load_reference_set
    from sinkalign.pipelines.runner import stdin_spooled

    with stdin_spooled(list(references)) as paths:
        return [load_reference_set(path, name=None if path == Path(ref) else str(ref), **options)
                for ref, path in zip(references, paths)]


def _fitting_pairs(references, *, split, min_tm, max_pairs, max_length) -> list:
    """The reference pairs of every ``--reference`` with both sequences at most ``max_length``."""
    return [p for pairs in _reference_sets(references, min_tm=min_tm, max_pairs=max_pairs, split=split)
            for p in pairs if max(len(p.query_seq), len(p.target_seq)) <= max_length]


def _set_names(references, split: str) -> list[str]:
    """A name per ``--reference``: its file or folder name (a shard directory's with ``:split``),
    or, where two share one, the path as given (the second set replaced the first). The same
    path twice is refused."""
    seen: dict[Path, Path] = {}
    for ref in references:
        if ref.resolve() in seen:
            raise click.BadParameter(f"{ref} is given twice (as {seen[ref.resolve()]} before)", param_hint="--reference")
        seen[ref.resolve()] = ref
    tags = [f":{split}" if (ref / "index.json").is_file() else "" for ref in references]
    names = [ref.name + tag for ref, tag in zip(references, tags)]
    return [f"{ref}{tag}" if names.count(name) > 1 else name for ref, tag, name in zip(references, tags, names)]


def _check_not_run_best(out: Path) -> None:
    """Refuse ``out`` where it is a training run's ``best/``: `sinkalign train` keeps there the
    best weights with the step and validation F1 that ``--resume`` reads, which a model written
    by another command would lack (or replace with unrelated weights)."""
    from sinkalign.align.checkpoints import METRICS
    from sinkalign.errors import OutputExistsError

    folder = out.resolve()  # RUN/best/., a link to it
    run = folder.parent
    if folder.name == "best" and ((run / METRICS).is_file() or (run / "checkpoints").is_dir()):
        raise OutputExistsError(f"{out} is the best model of the training run {run}, which only `sinkalign train` "
                                "writes (--overwrite does not apply there); write the model elsewhere")


def _pair_scores_tsv(result: dict) -> str:
    """The ``--pair-scores`` table of an :func:`~sinkalign.align.evaluate.evaluate_sets` result
    made with ``per_pair``: a row per pair and method (``nan`` where a ratio has no denominator)."""
    rows = ["set\tfamily\tquery\ttarget\tidentity\tmethod\ttp\tpredicted\treference\tprecision\trecall\tf1"]
    for name, data in result["sets"].items():
        for method, m in data["methods"].items():
            for pair, sc in zip(data["pairs"], m["pair_scores"]):
                rows.append("\t".join([name, pair["family"] or "", pair["query"], pair["target"],
                                       f"{pair['identity']:.2f}", method, str(sc["tp"]), str(sc["n_pred"]),
                                       str(sc["n_ref"]), f"{sc['precision']:.6g}", f"{sc['recall']:.6g}",
                                       f"{sc['f1']:.6g}"]))
    return "\n".join(rows) + "\n"


def _source_table(name: str, data: dict):
    """A ``rich`` table of one set's collections (``evaluate --by-source``): pairs, mean
    identity and each method's pooled F1, the best of each row in bold."""
    from rich import box
    from rich.table import Table

    methods = list(data["methods"])
    table = Table(title=f"{name} by collection: pooled F1", box=box.SIMPLE_HEAD)
    table.add_column("collection", no_wrap=True)
    table.add_column("pairs", justify="right")
    table.add_column("mean identity", justify="right")
    for method in methods:
        table.add_column(method, justify="right")
    for src, info in data["sources"].items():
        f1 = [data["methods"][m]["by_source"][src]["micro"]["f1"] for m in methods]
        best = max(f1)
        identity = "-" if info["mean_identity"] is None else f"{info['mean_identity']:.1f}%"
        table.add_row(src, str(info["n_pairs"]), identity,
                      *(f"[bold]{x:.3f}[/bold]" if x == best else f"{x:.3f}" for x in f1))
    return table


def _json_ready(value):
    """``value`` with every non-finite float as ``None`` (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


@click.command()
@_reference_options("to score against", "test")
@click.option("--methods", default="sinkalign,nw,sw,pairhmm", show_default=True,
              help="Comma-separated subset of sinkalign,nw,sw,pairhmm (pairhmm: the affine-gap pair-HMM with "
                   "MAC decoding, the settings of BENCHMARKS.md; the slowest of the four).")
@click.option("--backend", type=click.Choice(["reference", "pallas"]), default="reference", show_default=True,
              help="The jax engine's dense solve: the pure-JAX operator, or the blockwise Pallas kernels (for a GPU; "
                   "interpreted on a CPU, slow). The numpy engine has one of its own.")
@click.option("--json", "json_path", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
              help="Write results as JSON ('-': standard output; the tables then go to standard error).")
@click.option("--pair-scores", "pair_scores", type=OutputPath(dir_okay=False, allow_dash=True, path_type=Path),
              help="Also write each pair's counts under each method as a tab-separated table (set, family, query, "
                   "target, identity, method, tp, predicted, reference, precision, recall, f1; '-': standard "
                   "output): what the tables are made of, to recount them or group the pairs otherwise (by family, "
                   "by source).")
@click.option("--by-source", is_flag=True,
              help="Also score each collection of a set on its own (homstrad, sabre, prefab, oxbench: the folder part "
                   "of a structural family's name; else the file a pair was read from): a table of pooled F1 per "
                   "collection and method, and in --json each one's identity bins. The same alignments: nothing is "
                   "aligned twice.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --json or --pair-scores file.")
def evaluate(references, model, esm_weights, split, min_tm, max_pairs, methods, backend, json_path, pair_scores,
             by_source, overwrite):
    """Precision, recall and F1 per reference set, binned by percent identity."""
    from sinkalign.align.evaluate import METHODS, evaluate_sets
    from sinkalign.align.metrics import render_table
    from sinkalign.pipelines.runner import check_outputs
    from sinkalign.utils import is_stdio

    chosen = tuple(dict.fromkeys(m.strip().lower() for m in methods.split(",") if m.strip()))  # once each
    if not chosen:
        raise click.BadParameter(f"name at least one of {','.join(METHODS)}", param_hint="--methods")
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:  # before the references and the model are read
        raise click.BadParameter(f"unknown {', '.join(map(repr, unknown))}; choose from {','.join(METHODS)}",
                                 param_hint="--methods")
    read = [f for r in references for f in (sorted(p for p in r.rglob("*") if p.is_file()) if r.is_dir() else [r])]
    check_outputs([(json_path, "--json"), (pair_scores, "--pair-scores")], overwrite, read)  # before any work
    names = _set_names(references, split)
    sets = dict(zip(names, _reference_sets(references, min_tm=min_tm, max_pairs=max_pairs, split=split)))
    aligner = None
    if "sinkalign" in chosen:
        from sinkalign.align.aligner import Aligner
        from sinkalign.align.evaluate import check_reference_alphabet

        # references pair the sequences as given; other ESM-2 weights are refused here, before any pair
        aligner = Aligner.load(model, backend=backend, strand="plus", **embedder_options(esm_weights))
        for pairs in sets.values():
            check_reference_alphabet(pairs, aligner.config.alphabet, model or "learned (the default)")
    result = evaluate_sets(sets, aligner, methods=chosen, per_pair=pair_scores is not None, by_source=by_source)
    to_stdout = any(p is not None and is_stdio(p) for p in (json_path, pair_scores))
    console = Console(stderr=to_stdout)
    for name, data in result["sets"].items():
        for method, m in data["methods"].items():
            speed = "" if m["pairs_per_s"] is None else f", {m['pairs_per_s']:.1f} pairs/s"
            console.print(render_table(m["bins"], title=f"{name} ({data['n_pairs']} pairs): {method}, "
                                                        f"pooled F1 {m['micro']['f1']:.3f}{speed}"))
        if "sources" in data:
            console.print(_source_table(name, data))
        elif by_source:
            console.print(f"{name}: every pair is from one collection; its tables are the set's")
    if pair_scores is not None:
        table = _pair_scores_tsv(result)
        for name, data in result["sets"].items():  # the table holds them; the JSON keeps its own shape
            data.pop("pairs")
            for m in data["methods"].values():
                m.pop("pair_scores")
        if is_stdio(pair_scores):
            click.echo(table, nl=False)
        else:
            atomic_write_text(pair_scores, table)
            console.print(f"wrote {pair_scores}")
    text = json.dumps(_json_ready(result), indent=2, allow_nan=False)  # NaN is no JSON (jq refuses it)
    if json_path is not None and is_stdio(json_path):
        click.echo(text)
    elif json_path:
        atomic_write_text(json_path, text + "\n")
        console.print(f"wrote {json_path}")


@click.command()
@_reference_options("to fit on (training data, not test data)", "train")
@click.option("--max-length", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Skip pairs with a sequence longer than this.")
@click.option("--knots", type=click.IntRange(min=2), default=16, show_default=True,
              help="Most knots per calibration curve.")
@click.option("--match-feature", type=click.Choice(["local_share", "columns"]), default="local_share",
              show_default=True, help="What the column confidence is read from: the plan's local share, or a "
                                      "logistic model over column features (plan, substitution scores, agreement "
                                      "with NW/SW) fitted here.")
@click.option("--min-confidence", type=FiniteFloatRange(min=0, max=1, max_open=True), default=0.0, show_default=True,
              help="Store this threshold with the calibration: `sinkalign align` leaves columns less confident "
                   "than it unaligned (choose it on validation pairs, not on these).")
@click.option("--flank", type=FiniteFloatRange(min=0, max=1), default=0.0, show_default=True,
              help="Also fit on flanked copies of this share of the pairs: the longer side put inside windows of "
                   "other families' sequences, up to --flank-ratio times the shorter side (log-uniform), the added "
                   "residues unaligned. Gives the confidences support for a domain against a whole protein "
                   "(BENCHMARKS.md, 'Calibrating on flanked pairs').")
@click.option("--flank-ratio", type=FiniteFloatRange(min=1, min_open=True), default=64.0, show_default=True,
              help="Largest length ratio of a --flank copy.")
@click.option("--flank-max-length", type=click.IntRange(min=2), default=2048, show_default=True,
              help="Longest sequence of a --flank copy (a pair is cut first to fit its ratio).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --flank copies.")
@click.option("--keep-column-model", is_flag=True,
              help="Keep the model's own column model (its calibration's logistic model over column features) and "
                   "refit only the isotonic maps of its probabilities: a recalibration on other pairs, e.g. held-out "
                   "ones (BENCHMARKS.md, 'pairwise confidences refitted on held-out pairs'). Implies --match-feature "
                   "columns.")
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Model directory to write: the model with the fitted calibration. It must be new or empty "
                   "(a directory holding other files is refused).")
@click.option("--overwrite", is_flag=True, help="Replace the model already in --out (only a model directory).")
def calibrate(references, model, esm_weights, split, min_tm, max_pairs, max_length, knots, match_feature,
              min_confidence, flank, flank_ratio, flank_max_length, seed, keep_column_model, out, overwrite):
    """Fit calibrated confidences (isotonic) for a model's posteriors and write the calibrated model.

    The calibration goes with the model: `sinkalign align` reports calibrated column
    confidences, and leaves columns below --min-confidence unaligned.
    """
    from sinkalign.align.aligner import Aligner, default_model_path, resolve_model
    from sinkalign.align.calibration import calibration_samples, fit_from_samples
    from sinkalign.align.checkpoints import check_model_output, export_model, load_checkpoint
    from sinkalign.align.decode import plan_posteriors
    from sinkalign.align.evaluate import check_reference_alphabet
    from sinkalign.errors import InputError

    console = Console()
    _check_not_run_best(out)
    check_model_output(out, overwrite=overwrite)  # refuse before the work, not after
    pairs = _fitting_pairs(references, split=split, min_tm=min_tm, max_pairs=max_pairs, max_length=max_length)
    if not pairs:
        raise InputError(f"no reference pair of at most {max_length} residues in {[str(r) for r in references]}")
    names = ", ".join(r.name for r in references)
    fitted_on = f"{len(pairs)} pairs of {names} (split {split}, <= {max_length} residues)"
    if flank:
        from sinkalign.align.train import flanked_copies

        extra = flanked_copies(pairs, flank, flank_max_length, flank_ratio, seed)
        fitted_on += (f" and flanked copies of {len(extra)} of them (ratio <= {flank_ratio:g}, <= {flank_max_length} "
                      f"residues, seed {seed})")
        pairs = pairs + extra
    source = resolve_model(model) if model else default_model_path()
    kept = None
    if keep_column_model:
        own = Aligner.load(source).calibration
        if own is None or own.column_model is None:
            raise InputError(f"--keep-column-model: {source} has no column model to keep (its calibration is "
                             f"{'missing' if own is None else repr(own.match_feature)}); fit one with "
                             "--match-feature columns")
        kept, kept_from, match_feature = own.column_model, own.fitted_on, "columns"
    aligner = Aligner.load(source, calibration=None, strand="plus",  # the raw posteriors are what is fitted
                           **embedder_options(esm_weights))
    check_reference_alphabet(pairs, aligner.config.alphabet, str(model or source))
    samples, raw = [], []
    kind = aligner.config.alphabet  # "protein" or "dna" (AlignerConfig checks it)
    for r, p in zip(aligner.align_many(((p.query_id, p.query_seq, p.target_id, p.target_seq) for p in pairs),
                                       keep_plan=True), pairs):
        match = plan_posteriors(r.plan).match  # one plan at a time: bounded memory
        samples.append(calibration_samples(r.alignment, p, match, match_feature=match_feature, query=p.query_seq,
                                           target=p.target_seq, kind=kind))
        raw.append(r.alignment.match_posterior)
    cal = fit_from_samples(samples, max_knots=knots, match_feature=match_feature, kind=kind,
                           min_confidence=min_confidence, fitted_on=fitted_on, symmetric=aligner.config.symmetric,
                           column_model=kept)
    earlier = aligner.provenance.split(" Calibrated confidences fitted with")[0]  # a calibration replaces the last
    threshold = f", columns below {min_confidence} left unaligned" if min_confidence else ""
    what = match_feature if kept is None else f"columns: the column model fitted on {kept_from} kept, its maps refitted"
    provenance = (earlier + f" Calibrated confidences fitted with `sinkalign calibrate` ({what}{threshold}) "
                  f"on {cal.fitted_on}.").strip()
    source_state = load_checkpoint(source)[1]  # read once: what of the old model is carried over
    null = source_state.get("significance")
    # a null whose statistic gives the expected correct columns no weight does not read the calibration
    kept_null = null if null is not None and not null["weights"][PAIR_FEATURES.index("expected_correct")] else None
    note = aligner.provenance.find(" E-values fitted")
    if kept_null is not None and note >= 0 and " E-values fitted" not in provenance:  # the note goes with the null
        provenance += " " + aligner.provenance[note:].strip()
    export_model(out, aligner.params, aligner.config, provenance=provenance,
                 calibration=cal.to_dict(), significance=kept_null, overwrite=overwrite)
    conf = np.concatenate([cal.confidence(s[0]) for s in samples])
    hits = np.concatenate([s[1] for s in samples])
    console.print(f"{len(pairs)} pairs, {conf.size} aligned columns: mean raw posterior "
                  f"{np.mean(np.concatenate(raw)):.4f}, mean calibrated {conf.mean():.3f}, precision {hits.mean():.3f}")
    if len(pairs) < MIN_CALIBRATION_PAIRS or conf.size < MIN_CALIBRATION_COLUMNS:
        console.print(f"warning: {len(pairs)} pairs and {conf.size} columns are few to calibrate on (each map fits up "
                      f"to {knots} knots): the confidences follow these pairs' noise; give at least "
                      f"{MIN_CALIBRATION_PAIRS} pairs with {MIN_CALIBRATION_COLUMNS} columns (the shipped protein "
                      "models' were fitted on about 1,600 pairs)")
    if null is not None and kept_null is None:
        console.print("note: the model's E-value null was fitted with its old calibration and is not carried over; "
                      f"refit it with `sinkalign fit-evalues --model {out} ...`")
    elif kept_null is not None:
        console.print("note: the model's E-value null is carried over (its statistic is the local score alone, which "
                      "the calibration does not change)")
    if "msa_calibration" in source_state:
        console.print("note: the model's multiple-alignment confidences were calibrated with its old calibration and "
                      "are not carried over (`sinkalign msa` reports them uncalibrated)")
    if (source_state.get("calibration") or {}).get("close"):
        console.print("note: the close maps of the model's old calibration (pairs its identity tie-break decodes) are "
                      "not carried over; refit them with benchmarks/close_calibration.py")
    console.print(f"wrote {out}")


@click.command("fit-evalues")
@_reference_options("to fit on (training data, not test data)", "train")
@click.option("--max-length", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Skip pairs with a sequence longer than this.")
@click.option("--shuffles", type=click.IntRange(min=1), default=2, show_default=True,
              help="Shuffled copies of each pair (target and query shuffled in turn) that make the null.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the shuffles and of where the --null-fasta windows are cut.")
@click.option("--null-fasta", "null_fastas", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Draw the null from shuffled windows of these sequences (e.g. genomes; plain or gzipped FASTA) "
                   "instead of from shuffled reference pairs: for references whose lengths span too little "
                   "(the null's length dependence is fitted from it). Repeatable.")
@click.option("--null-pairs", type=click.IntRange(min=10), default=20000, show_default=True,
              help="Window pairs of the --null-fasta null.")
@click.option("--null-lengths", type=(click.IntRange(min=1), click.IntRange(min=1)), default=(50, 1000),
              show_default=True, help="Shortest and longest window of the --null-fasta null (log-uniform).")
@click.option("--alpha", type=FiniteFloatRange(min=0), default=None,
              help="Fix the statistic's multiple of expected correct columns (default: chosen from "
                   f"{', '.join(f'{a:g}' for a in MIX_GRID)} on the reference "
                   "pairs). 0: the local score alone, whose null holds at every length; the shipped DNA model's.")
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Model directory to write: the model with its E-value null. It must be new or empty "
                   "(a directory holding other files is refused).")
@click.option("--overwrite", is_flag=True, help="Replace the model already in --out (only a model directory).")
def fit_evalues(references, model, esm_weights, split, min_tm, max_pairs, max_length, shuffles, seed, null_fastas,
                null_pairs, null_lengths, alpha, out, overwrite):
    """Fit the null of a calibrated model's E-values on shuffled pairs and write the model.

    Each reference pair is aligned as it is and with one sequence shuffled. The statistic is
    the Smith-Waterman score in nats (scaled by the Karlin-Altschul lambda of the pair's own
    compositions) plus a multiple of the model's expected correct columns; an extreme-value
    law fitted to the tail of its shuffled scores gives every alignment's E-value (`sinkalign
    align` reports it), and the multiple kept is the one whose E-values find most of the
    reference pairs at E <= 1e-3.
    """
    from sinkalign.align.aligner import Aligner, default_model_path, resolve_model
    from sinkalign.align.checkpoints import check_model_output, export_model
    from sinkalign.align.evaluate import check_reference_alphabet
    from sinkalign.align.significance import aligned_features, fit_significance, significance_samples, window_pairs
    from sinkalign.errors import InputError

    console = Console()
    _check_not_run_best(out)
    check_model_output(out, overwrite=overwrite)  # refuse before the work, not after
    pairs = _fitting_pairs(references, split=split, min_tm=min_tm, max_pairs=max_pairs, max_length=max_length)
    source = resolve_model(model) if model else default_model_path()
    aligner = Aligner.load(source, significance=None, **embedder_options(esm_weights))
    check_reference_alphabet(pairs, aligner.config.alphabet, str(model or source))  # before counting them
    if len(pairs) < 10:
        raise InputError(f"{len(pairs)} reference pairs of at most {max_length} residues in "
                         f"{[str(r) for r in references]}: E-values need at least 10")
    if aligner.calibration is None:
        raise InputError(f"{source} has no calibration: fit one with `sinkalign calibrate` first")
    kind = aligner.config.alphabet  # "protein" or "dna" (AlignerConfig checks it)
    items = [(p.query_seq, p.target_seq) for p in pairs]
    names = ", ".join(r.name for r in references)
    if null_fastas:
        from sinkalign.io.fasta import read_fasta

        lo, hi = null_lengths
        if lo > hi:
            raise InputError(f"--null-lengths {lo} {hi}: the shortest window is longer than the longest")
        records = [rec.seq for path in null_fastas for rec in read_fasta(path, aligner.config.alphabet)]
        windows = window_pairs(records, null_pairs, min_length=lo, max_length=hi, seed=seed)
        real, real_lengths = aligned_features(aligner, items)
        null, lengths = aligned_features(aligner, windows)
        null_from = (f"{len(null)} pairs of shuffled {lo}-{hi} letter windows of "
                     f"{', '.join(p.name for p in null_fastas)} (seed {seed})")
    else:
        real, real_lengths, null, lengths = significance_samples(aligner, items, shuffles=shuffles, seed=seed)
        null_from = f"{len(null)} shuffled copies (seed {seed})"
    fitted_on = f"{len(pairs)} pairs of {names} (split {split}, <= {max_length} residues) and {null_from}"
    if alpha is not None:
        fitted_on += f", alpha fixed at {alpha:g}"
    sig = fit_significance(real, real_lengths, null, lengths, threshold=aligner.calibration.min_confidence,
                           kind=kind, fitted_on=fitted_on, **({} if alpha is None else {"alphas": (alpha,)}))
    earlier = aligner.provenance.split(" E-values fitted with")[0]  # a new fit replaces the last
    provenance = f"{earlier} E-values fitted with `sinkalign fit-evalues` on {fitted_on}.".strip()
    msa = aligner.msa_calibration  # fitted with the same calibration: kept
    export_model(out, aligner.params, aligner.config, provenance=provenance,
                 calibration=aligner.calibration.to_dict(), significance=sig.to_dict(),
                 msa_calibration=None if msa is None else msa.to_dict(), overwrite=overwrite)
    e_real = sig.evalue(real, real_lengths[:, 0], real_lengths[:, 1])
    e_null = sig.evalue(null, lengths[:, 0], lengths[:, 1])
    console.print(f"statistic: composition-adjusted local score (nats) + {sig.weights[1]:g} x expected correct columns")
    console.print(f"{len(pairs)} pairs, {len(null)} null pairs: E <= 1e-3 for {np.mean(e_real <= 1e-3):.1%} of the "
                  f"pairs and {np.mean(e_null <= 1e-3):.2%} of the null pairs (expected {-np.expm1(-1e-3):.2%})")
    if len(null) < MIN_NULL_PAIRS:
        console.print(f"warning: {len(null)} null pairs are few for E-values: the fit's tail, where E <= 1e-3 is "
                      f"read, holds about {len(null) * 1e-3:.1g} of them and is not checked; give at least "
                      f"{MIN_NULL_PAIRS:,} (more reference pairs, --shuffles, or --null-fasta with --null-pairs)")
    console.print(f"wrote {out}")
