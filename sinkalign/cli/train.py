"""``sinkalign train``: train the OT aligner on Pfam pair shards."""

from __future__ import annotations

from pathlib import Path

import click

from sinkalign.cli.options import (
    FiniteFloatRange,
    RecordedCommand,
    model_options,
    progress_option,
    report_interrupted,
    show_progress,
)
from sinkalign.errors import Interrupted


@click.command(cls=RecordedCommand)
@click.option("--pfam-shards", "shards", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Shard directory from `sinkalign shards build` (with `sinkalign shards embed` for features).")
@click.option("--config", "preset_name", default="default", show_default=True,
              help="Preset: default, k2_eps1, k4_eps1, muot_dustbin_mono, muot_dustbin_hybrid.")
@click.option("--model-option", "model_opts", multiple=True, callback=model_options,
              help="Override an AlignerConfig setting of the preset as KEY=VALUE, e.g. eps=6 or window=16 "
                   "(repeatable).")
@click.option("--embedder", type=click.Choice(["builtin", "esm2", "none"]),
              help="Features the shards were embedded with (none: substitution part only). Default: builtin; with "
                   "--init the starting model's; with --resume the run's.")
@click.option("--steps", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Global batch; split over all local devices.")
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=3e-3, show_default=True)
@click.option("--weight-decay", type=FiniteFloatRange(min=0), default=1e-4, show_default=True,
              help="AdamW's decoupled weight decay.")
@click.option("--clip-norm", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Gradients are scaled down to this global norm.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/aligner"), show_default=True)
@click.option("--resume", is_flag=True, help="Continue the run in --out from its newest complete checkpoint, with the "
                   "run's model (leave out --config, --model-option and --embedder) and the same training flags.")
@click.option("--overwrite", is_flag=True,
              help="Replace the run in --out: its metrics.jsonl, checkpoints/ and best/ (nothing else) are moved to "
                   "OUT/.previous-run, deleted at the new run's first checkpoint and put back if the new run fails "
                   "before it.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--eval-every", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--certify-every", type=click.IntRange(min=0), default=500, show_default=True,
              help="Certified tail-depth check every N steps (0: never).")
@click.option("--max-length", type=click.IntRange(min=8, max=1024), default=384, show_default=True)
@click.option("--crop/--no-crop", default=False, show_default=True,
              help="Crop pairs longer than --max-length to windows around a reference pair (default: skip them).")
@click.option("--eval-pairs", type=click.IntRange(min=1), default=64, show_default=True,
              help="Validation pairs scored at every --eval-every (a fixed random subset); the best F1 so far "
                   "is kept in OUT/best.")
@click.option("--warmup", type=click.IntRange(min=0), default=50, show_default=True, help="Warm-up steps.")
@click.option("--freeze", multiple=True, help="Keep this parameter at its initial value (repeatable), e.g. "
                                              "--freeze sub keeps the BLOSUM62 window score and trains the rest.")
@click.option("--init", "init_model", metavar="MODEL",
              help="Start from a trained model's weights (fine-tuning): a shipped model by name (learned, blosum, "
                   "dna) or a model, checkpoint or run directory. The model keeps its own settings (no --config; "
                   "--model-option only where the parameters keep their shapes); default: the preset's initial "
                   "BLOSUM62 window.")
@click.option("--anchor", type=FiniteFloatRange(min=0), default=0.0, show_default=True,
              help="Add anchor/2 * |weights - starting weights|^2 to the loss (L2-SP): with few training pairs, "
                   "stay near what the starting model knows.")
@click.option("--flank", type=FiniteFloatRange(min=0, max=1), default=0.0, show_default=True,
              help="Share of training pairs whose longer sequence is put inside stretches of other training "
                   "proteins (the added residues aligned to nothing), up to --flank-ratio times the shorter one: "
                   "pairs as a search of a domain against whole proteins meets them (BENCHMARKS.md, 'Training on "
                   "flanked pairs': better on such pairs, not confirmed on pairs as they are).")
@click.option("--flank-ratio", type=FiniteFloatRange(min=1, min_open=True), default=8.0, show_default=True,
              help="Largest length ratio of a --flank pair (drawn log-uniformly; pairs are cut to fit "
                   "--max-length).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--distributed", is_flag=True, help="Multi-host: call jax.distributed.initialize() first.")
@progress_option("training steps")
@click.pass_context
def train(ctx, shards, preset_name, model_opts, embedder, steps, batch_size, lr, weight_decay, clip_norm, out, resume,
          overwrite, checkpoint_every, eval_every, certify_every, max_length, crop, eval_pairs, warmup, freeze, init_model,
          anchor, flank, flank_ratio, seed, distributed, progress):
    """Train the aligner; metrics go to OUT/metrics.jsonl, checkpoints to OUT/checkpoints.

    An OUT that already holds a run needs --resume (continue) or --overwrite (start again).
    """
    from sinkalign.align import model as M
    from sinkalign.align import train as T
    from sinkalign.errors import InputError
    from sinkalign.io.shards import read_index

    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite contradict each other; pass one")
    if distributed:
        T.init_distributed()
    index = read_index(shards)  # no index: MissingFileError naming `sinkalign shards build`; corrupt: FormatError
    init_path = init_state = None
    preset_from_default = ctx.get_parameter_source("preset_name") is click.core.ParameterSource.DEFAULT
    if init_model is not None:
        if not preset_from_default:
            raise click.UsageError("--init trains the model with its own settings: leave out --config")
        from sinkalign.align.aligner import resolve_model
        from sinkalign.align.checkpoints import load_checkpoint

        init_path = resolve_model(init_model).resolve()
        _, init_state, _ = load_checkpoint(init_path)
        init_config = M.AlignerConfig.from_dict(init_state["model"])
        embedder = embedder or (init_config.embedder or {}).get("name", "none")
    run_model = _resumed_model(out) if resume and init_model is None else None
    if run_model is not None:  # --resume: the run's own features unless --embedder says otherwise
        embedder = embedder or (run_model.embedder or {}).get("name", "none")
    embedder = embedder or "builtin"
    feature_dim, emb_config = 0, {"name": "none"}
    if embedder != "none":
        import json

        emb = index.get("embeddings")
        if not emb:
            how = "" if embedder == "builtin" else f" --embedder {embedder}"
            raise click.BadParameter(f"{shards} has no embeddings; run `sinkalign shards embed{how} {shards}`",
                                     param_hint="--pfam-shards")
        emb_config = json.loads(emb["name"])
        if emb_config.get("name") != embedder:
            raise click.BadParameter(f"{shards} holds {emb_config.get('name')!r} embeddings, not {embedder!r}",
                                     param_hint="--embedder")
        feature_dim = int(emb["dim"])
    overrides = dict(model_opts)
    for key in ("feature_dim", "embedder"):
        if key in overrides:
            raise click.BadParameter(f"{key} follows the shards' embeddings (--embedder), not --model-option",
                                     param_hint="--model-option")
    unknown = sorted(set(overrides) - set(M.AlignerConfig.setting_names()))
    if unknown:
        raise click.BadParameter(f"unknown AlignerConfig settings {unknown}; valid: "
                                 f"{M.AlignerConfig.setting_names()}", param_hint="--model-option")
    base = (init_config, f"--init {init_model} takes") if init_model is not None else (
        (run_model, f"the run in {out} was trained on") if run_model is not None and preset_from_default else None)
    if base is not None:  # --init's model, or --resume's: its settings with --model-option's changes
        try:  # (on --resume, one that changes the run's model is refused when training starts)
            model = base[0].replace(**overrides)
        except InputError as exc:
            raise click.BadParameter(str(exc), param_hint="--model-option") from exc
        if (model.feature_dim, model.embedder) != (feature_dim, emb_config):
            raise click.BadParameter(f"{base[1]} {model.embedder.get('name', 'none')!r} features (dimension "
                                     f"{model.feature_dim}); these shards and --embedder give "
                                     f"{emb_config.get('name')!r} ({feature_dim})", param_hint="--embedder")
    else:
        try:
            model = M.preset(preset_name, feature_dim=feature_dim, embedder=emb_config, **overrides)
        except InputError as exc:  # an unknown preset or a bad setting value (a bug keeps its traceback)
            raise click.BadParameter(str(exc), param_hint="--config / --model-option") from exc
    cfg = T.TrainConfig(shards=str(shards), out=str(out), model=model, steps=steps, batch_size=batch_size, lr=lr,
                        weight_decay=weight_decay, clip_norm=clip_norm, seed=seed,
                        checkpoint_every=checkpoint_every, eval_every=eval_every,
                        certify_every=certify_every, max_length=max_length, crop=crop, eval_pairs=eval_pairs,
                        warmup=warmup, freeze=tuple(freeze),
                        init=None if init_path is None else str(init_path), anchor=anchor, flank=flank,
                        flank_ratio=flank_ratio)
    try:
        result = T.train(cfg, resume=resume, overwrite=overwrite, progress=show_progress(progress))
    except Interrupted as exc:
        report_interrupted(ctx, exc, exc.step is not None)
    shown = ", ".join(f"{k}={v:.4g}" for k, v in result.last_metrics.items() if isinstance(v, float))
    if not shown:  # a resumed run that had already reached --steps: no step ran
        click.echo(f"{out}: already at step {result.step} of {steps}; nothing to train (raise --steps to go on; the "
                   "schedule follows it)")
        return
    click.echo(f"step {result.step}: {shown}")


def _resumed_model(out: Path):
    """The model config of the newest complete checkpoint in ``out`` (``None``: nothing to resume;
    an unreadable checkpoint raises its :class:`~sinkalign.errors.CheckpointError` here as it
    would when training)."""
    from sinkalign.align.checkpoints import find_latest_checkpoint, load_checkpoint, other_kind
    from sinkalign.align.model import AlignerConfig

    if not out.is_dir() or other_kind(out) is not None:  # (another kind of run is refused by train itself)
        return None
    latest = find_latest_checkpoint(out)
    if latest is None:
        return None
    _, state, _ = load_checkpoint(latest)
    return AlignerConfig.from_dict(state["model"])
