"""``sinkalign lm``: train and evaluate the genome language models."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import click

from sinkalign.cli.options import (
    FiniteFloatRange,
    OutputPath,
    RecordedCommand,
    progress_option,
    report_interrupted,
    resume_command,
    show_progress,
    torch_threads_option,
)
from sinkalign.cli.options import model_options as _model_options
from sinkalign.errors import InputError, require
from sinkalign.lm.config import ATTENTION_NAMES, LMConfig

logger = logging.getLogger(__name__)


_POSITIVE = click.IntRange(min=1)
_NON_NEGATIVE = click.IntRange(min=0)
_FRACTION = FiniteFloatRange(0, 1, min_open=True, max_open=True)


def _int_tuple(ctx: click.Context, param: click.Parameter, value: str | None):
    if value is None:
        return None
    try:
        vals = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers", ctx=ctx,
                                 param=param) from None
    if not vals:
        raise click.BadParameter("empty list", ctx=ctx, param=param)
    return vals


@click.group("lm")
def lm() -> None:
    """Genome language models: train, eval (see also `sinkalign generate-dna`)."""


@lm.command("train", cls=RecordedCommand)
# allow_dash: '-' reaches TrainConfig, which says why a run cannot train on standard input
@click.option("--fasta", "fasta", required=True, multiple=True,
              type=click.Path(exists=True, readable=True, allow_dash=True),
              help="Genomes: a FASTA file (plain or gzip), a directory of them, or a genome manifest (.tsv with "
                   "a 'file' column); repeat for more. Each file is one genome. Not '-': a run reads its genomes "
                   "again to --resume.")
@click.option("--genome-split", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Split by whole genera (e.g. data_manifests/genomes_multi_split.json): 'valid' genomes are the "
                   "validation data, 'test' genomes are not read.")
@click.option("--balance", type=click.Choice(["length", "genome"]), default="length", show_default=True,
              help="Draw windows uniformly over bases, or over genomes first.")
@click.option("--reverse-complement/--no-reverse-complement", default=False, show_default=True,
              help="Read each training window from either strand.")
@click.option("--attention", default=None, type=click.Choice(ATTENTION_NAMES),
              help="Required, unless --init gives it.")
@click.option("--init", "init_model", metavar="MODEL", default=None,
              help="Start from this genome LM's weights instead of a random initialisation, with a fresh optimizer "
                   "and schedule (e.g. the shipped model, fine-tuned on your genomes): a checkpoint, a run of "
                   "`sinkalign lm train`, or a shipped model's name (default, cdiph). Its settings are the run's "
                   "(--attention, --d-model, --n-layers, --n-heads, --seq-len, --model-option): leave them out, "
                   "or give its values; --dropout may differ. Read at the start only, not on --resume.")
@click.option("--out", "out_dir", default="runs/lm", show_default=True, type=click.Path(file_okay=False),
              help="Run directory: metrics.jsonl and checkpoints/.")
@click.option("--steps", default=2000, show_default=True, type=_POSITIVE)
@click.option("--batch-size", default=16, show_default=True, type=_POSITIVE, help="Windows per step per process.")
@click.option("--seq-len", default=LMConfig.max_train_len, show_default=True, type=click.IntRange(min=2),
              help="Training context length.")
@click.option("--lr", default=2e-3, show_default=True, type=FiniteFloatRange(min=0, min_open=True),
              help="Peak learning rate.")
@click.option("--min-lr-ratio", default=0.1, show_default=True, type=FiniteFloatRange(0, 1),
              help="The cosine schedule's floor, a share of --lr, reached at --steps.")
@click.option("--warmup-steps", default=100, show_default=True, type=_NON_NEGATIVE,
              help="Steps of linear warm-up to --lr.")
@click.option("--weight-decay", default=0.1, show_default=True, type=FiniteFloatRange(min=0),
              help="AdamW's decoupled weight decay (matrices only).")
@click.option("--grad-clip", default=1.0, show_default=True, type=FiniteFloatRange(min=0), help="0 disables clipping.")
# the model's defaults are LMConfig's (a dataclass field's default is its class attribute)
@click.option("--d-model", default=LMConfig.d_model, show_default=True, type=_POSITIVE)
@click.option("--n-layers", default=LMConfig.n_layers, show_default=True, type=_POSITIVE)
@click.option("--n-heads", default=LMConfig.n_heads, show_default=True, type=_POSITIVE)
@click.option("--dropout", default=LMConfig.dropout, show_default=True, type=FiniteFloatRange(0, 1, max_open=True))
@click.option("--model-option", "model_options", multiple=True, callback=_model_options,
              help="Further LMConfig field as KEY=VALUE, e.g. goat_init=alibi (repeatable).")
@click.option("--val-fraction", default=0.1, show_default=True, type=_FRACTION,
              help="The last share of each record, held out of training; the held-out shares are the validation "
                   "data (with --genome-split, those of its 'valid' genomes).")
@click.option("--eval-every", default=500, show_default=True, type=_NON_NEGATIVE, help="0: only at the end.")
@click.option("--eval-max-bases", default=None, type=_POSITIVE, help="Held-out bases per evaluation [default: all].")
@click.option("--save-every", default=500, show_default=True, type=_NON_NEGATIVE,
              help="0: only at the end (and when stopped by Ctrl-C or SIGTERM, as at any time).")
@click.option("--keep-checkpoints", default=2, show_default=True, type=_POSITIVE)
@click.option("--log-every", default=10, show_default=True, type=_POSITIVE)
@click.option("--seed", default=0, show_default=True, type=_NON_NEGATIVE)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--threads", "num_threads", default=None, type=_POSITIVE, help="torch.set_num_threads per process.")
@click.option("--nproc", default=1, show_default=True, type=_POSITIVE,
              help="Processes for DDP (spawned here; gloo on CPU, nccl on CUDA). Under torchrun leave at 1.")
@click.option("--resume", is_flag=True,
              help="Continue from the newest checkpoint in --out (none there: start over, the old log kept aside).")
@progress_option("training steps")
@click.option("--time-limit", "time_limit", default=None, type=FiniteFloatRange(min=0, min_open=True),
              metavar="MINUTES", help="Stop early (held-out evaluation and a checkpoint) after this much training time.")
@click.pass_context
def train(ctx, fasta, attention, out_dir, steps, batch_size, seq_len, lr, min_lr_ratio, warmup_steps, weight_decay,
          grad_clip, d_model, n_layers, n_heads, dropout, model_options, val_fraction, eval_every, eval_max_bases,
          save_every, keep_checkpoints, log_every, seed, device, num_threads, nproc, resume, progress,
          time_limit, genome_split, balance, reverse_complement, init_model) -> None:
    """Train a DNA language model on FASTA with the chosen attention.

    Ctrl-C or SIGTERM (a batch scheduler's time limit) ends the run after the current step with a
    checkpoint, and prints the command that resumes it (exit status 130 or 143).
    """
    torch = require("torch", "torch", "sinkalign lm train")
    from sinkalign.lm.train import TrainConfig, TrainingInterrupted, check_out_dir, train_lm, train_lm_ddp

    mlp_ratio = LMConfig.mlp_ratio
    if init_model is not None:
        attention, d_model, n_layers, n_heads, seq_len, mlp_ratio, model_options = _init_settings(
            ctx, init_model, attention=attention, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
            seq_len=seq_len, model_options=model_options)
    elif attention is None:
        raise click.UsageError("Missing option '--attention' (or give --init MODEL, whose attention is taken).")
    try:
        config = TrainConfig(
            fasta=fasta[0] if len(fasta) == 1 else tuple(fasta), attention=attention, out_dir=out_dir, steps=steps,
            batch_size=batch_size, seq_len=seq_len,
            lr=lr, min_lr_ratio=min_lr_ratio, warmup_steps=warmup_steps, weight_decay=weight_decay,
            grad_clip=grad_clip, d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio,
            dropout=dropout, model_options=model_options, val_fraction=val_fraction, eval_every=eval_every,
            eval_max_bases=eval_max_bases, save_every=save_every, keep_checkpoints=keep_checkpoints,
            log_every=log_every, seed=seed, device=device, num_threads=num_threads, resume=resume,
            progress=show_progress(progress), time_limit_minutes=time_limit, genome_split=genome_split, balance=balance,
            reverse_complement=reverse_complement, init=init_model)
    except InputError as exc:  # a bad setting (a bug raising ValueError keeps its traceback)
        raise click.UsageError(str(exc)) from exc
    if device == "cuda" and not torch.cuda.is_available():
        raise click.UsageError("--device cuda: CUDA is not available")
    if device == "cuda" and nproc > torch.cuda.device_count():
        raise click.BadParameter(f"{nproc} exceeds the {torch.cuda.device_count()} visible CUDA device(s)",
                                 param_hint="'--nproc'")
    # before reading any data, in this process (not in each --nproc worker), naming the options; train_lm
    # checks again, and warns then of a stale checkpoints/latest.json (not twice: quiet here)
    quiet = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        check_out_dir(out_dir, resume=resume, cli=True)
    finally:
        logging.disable(quiet)
    try:
        result = train_lm(config) if nproc == 1 else train_lm_ddp(config, nproc)[0]
    except TrainingInterrupted as exc:
        if exc.result is not None and exc.result.rank != 0:  # under torchrun rank 0 alone reports
            ctx.exit(exc.exit_status)
        report_interrupted(ctx, exc, exc.result is not None)
    if result.rank == 0 and result.step == result.start_step:  # a resumed run that had reached --steps
        click.echo(f"{out_dir}: already at step {result.step} of {steps}; nothing to train (its model: "
                   f"{result.checkpoint_dir})")
    elif result.rank == 0:
        val = "n/a" if result.val_bits_per_base is None else f"{result.val_bits_per_base:.4f}"
        click.echo(f"step {result.step}: train {result.train_loss / 0.6931471805599453:.4f} bits/base, "
                   f"held-out {val} bits/base; checkpoint {result.checkpoint_dir}")
        if result.step < steps:  # --time-limit ended it
            click.echo(f"stopped at --time-limit {time_limit:g} minutes, after step {result.step} of {steps}; resume "
                       f"with: {resume_command(ctx)}", err=True)



def _init_settings(ctx: click.Context, init_model: str, **given):
    """The model settings of a run that starts from ``--init``: the init model's, each option the
    user gave checked against them (a differing one is an error naming both values)."""
    from click.core import ParameterSource

    from sinkalign.errors import MissingFileError
    from sinkalign.lm.train import init_model_config, model_settings

    try:
        cfg = init_model_config(init_model)[1]  # its config.json alone: train_lm loads the weights
    except (MissingFileError, InputError) as exc:  # a missing model, or not a genome LM's
        raise click.BadParameter(str(exc), param_hint="'--init'") from None
    theirs = model_settings(cfg)
    for name, flag in (("attention", "--attention"), ("d_model", "--d-model"), ("n_layers", "--n-layers"),
                       ("n_heads", "--n-heads"), ("seq_len", "--seq-len")):
        value = given[name]
        if value is not None and ctx.get_parameter_source(name) is not ParameterSource.DEFAULT \
                and value != theirs[name]:
            raise click.UsageError(f"{flag} {value} differs from the --init model's {theirs[name]} ({init_model}): "
                                   f"a run that starts from a model trains that model; leave {flag} out")
    fields = {f.name for f in dataclasses.fields(LMConfig)}
    for key, value in given["model_options"]:
        if key not in fields:
            raise click.UsageError(f"--model-option {key}: not an option of the model (LMConfig fields: "
                                   f"{', '.join(sorted(fields))})")
        if value != getattr(cfg, key):
            raise click.UsageError(f"--model-option {key}={value!r} differs from the --init model's "
                                   f"{getattr(cfg, key)!r} ({init_model}); leave it out")
    return (theirs["attention"], theirs["d_model"], theirs["n_layers"], theirs["n_heads"], theirs["seq_len"],
            theirs["mlp_ratio"], theirs["model_options"])

@lm.command("eval")
@click.option("--model", "model_path", default=None, type=click.Path(),
              help="Checkpoint or training run directory, or a shipped model by name: default (35 genomes), "
                   "cdiph (C. diphtheriae only) [default: default].")
@click.option("--fasta", required=True, type=click.Path(exists=True, dir_okay=False, readable=True, allow_dash=True),
              help="Genome FASTA (plain or gzip); '-': standard input.")
@click.option("--json", "json_out", default=None, type=OutputPath(dir_okay=False, allow_dash=True),
              help="Write the full report as JSON here (atomically; '-' = stdout, the summary then goes to stderr).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing --json file (when the run succeeds). Without it an existing file is an error.")
@click.option("--val-fraction", default=0.1, show_default=True, type=_FRACTION,
              help="The last share of each record, held out as `lm train` held it out: what is scored (the rest "
                   "fits the Markov baseline and gives the first windows their context).")
@click.option("--context", default=None, type=_POSITIVE, help="Evaluation window [default: training length].")
@click.option("--stride", default=None, type=_POSITIVE, help="New targets per window [default: context/2].")
@click.option("--max-bases", default=None, type=_POSITIVE, help="Score only the first N held-out bases per record.")
@click.option("--markov-order", default=None, type=click.IntRange(0, 30),
              help="Fixed Markov order [default: best of 0..12 on the training split's tail].")
@click.option("--lengths", "length_multipliers", default="1,2,4,8,16", show_default=True, callback=_int_tuple,
              help="Extrapolation: multiples of the training length.")
@click.option("--extrapolation-bases", default=8192, show_default=True, type=_POSITIVE,
              help="Held-out targets scored at every context length (the same bases at each).")
@click.option("--extrapolation-stride", default=None, type=_POSITIVE,
              help="New targets per window in the extrapolation section: a base sees between length - stride + 1 "
                   "and length bases of context [default: training length / 2].")
@click.option("--passkey-lengths", "passkey_multipliers", default="1,2,4", show_default=True,
              callback=_int_tuple, help="Passkey contexts: multiples of the training length.")
@click.option("--passkey-trials", default=50, show_default=True, type=_POSITIVE)
@click.option("--prompts", "completion_prompts", default=100, show_default=True, type=_POSITIVE,
              help="Completion prompts from the held-out split.")
@click.option("--prompt-len", default=None, type=_POSITIVE, help="[default: training length]")
@click.option("--completion-len", default=200, show_default=True, type=_POSITIVE)
@click.option("--gc-window", default=25, show_default=True, type=_POSITIVE,
              help="Completion: window of the GC trajectories whose Pearson r is reported (the GOAT paper's: 25).")
@click.option("--temperature", default=1.0, show_default=True, type=FiniteFloatRange(min=0),
              help="Completion sampling temperature; 0 = greedy.")
@click.option("--top-k", default=None, type=_POSITIVE)
@click.option("--top-p", default=None, type=FiniteFloatRange(0, 1, min_open=True))
@click.option("--sections", default="heldout,extrapolation,passkey,completion", show_default=True,
              help="Comma-separated subset of the evaluation sections.")
@click.option("--seed", default=0, show_default=True, type=_NON_NEGATIVE)
@click.option("--batch-size", default=16, show_default=True, type=_POSITIVE,
              help="Windows scored per forward pass (memory, not results).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@torch_threads_option()
def eval_cmd(model_path, fasta, json_out, overwrite, val_fraction, context, stride, max_bases, markov_order,
             length_multipliers, extrapolation_bases, extrapolation_stride, passkey_multipliers, passkey_trials,
             completion_prompts, prompt_len, completion_len, gc_window, temperature, top_k, top_p, sections, seed, batch_size,
             device, torch_threads) -> None:
    """Held-out bits/base vs an order-k Markov chain, length extrapolation, passkey and completions."""
    require("torch", "torch", "sinkalign lm eval")
    from sinkalign.lm.evaluate import EvalConfig, evaluate_lm
    from sinkalign.lm.generate import load_model, resolve_model_path
    from sinkalign.pipelines.runner import STDIN_NAME, check_outputs, stdin_spooled
    from sinkalign.utils import is_stdio, open_output

    try:
        config = EvalConfig(
            fasta=fasta, name=STDIN_NAME if is_stdio(fasta) else None, val_fraction=val_fraction, context=context,
            stride=stride, max_bases=max_bases,
            markov_order=markov_order, length_multipliers=length_multipliers,
            extrapolation_bases=extrapolation_bases, extrapolation_stride=extrapolation_stride,
            passkey_multipliers=passkey_multipliers,
            passkey_trials=passkey_trials, completion_prompts=completion_prompts, prompt_len=prompt_len,
            completion_len=completion_len, gc_window=gc_window, temperature=temperature, top_k=top_k, top_p=top_p,
            sections=tuple(s.strip() for s in sections.split(",") if s.strip()), seed=seed,
            batch_size=batch_size, device=device)
    except InputError as exc:  # a bad setting (a bug raising ValueError keeps its traceback)
        raise click.UsageError(str(exc)) from exc
    check_outputs([(json_out, "--json")], overwrite, [] if is_stdio(fasta) else [Path(fasta)])  # before any work
    path = resolve_model_path(model_path)  # a missing or corrupt model: MissingFileError / CheckpointError
    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
    ckpt = load_model(path, device=device)
    with stdin_spooled([fasta]) as (spooled,):  # standard input: one copy, read as a file (errors name <stdin>)
        report = evaluate_lm(ckpt.model, dataclasses.replace(config, fasta=str(spooled)), model_path=str(path))
    doc = report.to_dict()
    if json_out is not None:
        with open_output(json_out) as handle:
            handle.write(json.dumps(doc, indent=2) + "\n")
    _echo_summary(doc, err=is_stdio(json_out))


def _echo_summary(doc: dict, *, err: bool = False) -> None:
    """The report in a few lines (on stderr with ``err``: standard output holds the JSON)."""

    def echo(line: str) -> None:
        click.echo(line, err=err)

    h = doc.get("heldout")
    if h:
        m = h["markov"]
        echo(f"held-out bits/base: LM {h['bits_per_base']:.4f} ({h['n_scored']} bases, context "
                   f"{h['context']}, stride {h['stride']}); Markov order {m['order']} ({m['order_selection']}) "
                   f"{m['bits_per_base']:.4f}; delta {h['delta_vs_markov']:+.4f}")
    x = doc.get("extrapolation")
    if x:
        for r in x["rows"]:
            delta = "" if r["delta_vs_1x"] is None else f" (delta vs 1x {r['delta_vs_1x']:+.4f})"
            echo(f"length {r['multiplier']:>2}x = {r['length']:>6} (context {r['context_min']}-{r['context_max']}): "
                       f"{r['bits_per_base']:.4f} bits/base{delta}")
    p = doc.get("passkey")
    if p:
        for r in p["rows"]:
            a = r["base_accuracy"]
            echo(f"passkey {r['multiplier']}x = {r['length']}: base accuracy {a['mean']:.3f} "
                       f"[{a['ci_low']:.3f}, {a['ci_high']:.3f}], exact {r['exact_match_rate']:.3f}")
    c = doc.get("completion")
    if c:
        for who in ("lm", "markov"):
            if who in c:
                i, g = c[who]["identity"], c[who]["gc_pearson_r"]
                o, k = c[who]["orf_fraction"], c[who]["kmer_js_divergence"]
                echo(f"completion ({who}): identity {i['mean']:.3f} [{i['ci_low']:.3f}, {i['ci_high']:.3f}], "
                           f"GC r {g['mean']:.3f} [{g['ci_low']:.3f}, {g['ci_high']:.3f}] (n={g['n']}); in ORFs >= "
                           f"{c['orf_min_len']} bp {o['mean']:.3f} (true {c['true_orf_fraction']['mean']:.3f}); "
                           f"{k['k']}-mer JS {k['value']:.4f} bits (noise floor {c['kmer_js_noise_floor'] or 0:.4f}); "
                           f"GC {c[who]['gc_mean']:.3f} (true {c['true_gc_mean']:.3f}), between prompts r "
                           + ("n/a" if c[who]["gc_between_prompts_r"]["value"] is None
                              else f"{c[who]['gc_between_prompts_r']['value']:.3f}"))
