"""Click helpers shared by several commands."""

from __future__ import annotations

import json
import sys

import click

__all__ = ["EValueThreshold", "FiniteFloatRange", "OutputPath", "RecordedCommand", "Strand", "embedder_options",
           "esm_weights_option", "exit_on_broken_pipe", "given_command", "model_options", "os_error_message",
           "parse_value", "progress_option", "report_interrupted", "show_progress"]


class FiniteFloatRange(click.FloatRange):
    """:class:`click.FloatRange` that also refuses ``nan`` and ``inf`` (which Python's ``float``
    parses and a range check lets through: ``nan`` compares false with every bound)."""

    def convert(self, value, param, ctx):
        import math

        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{out} is not a finite number.", param, ctx)
        return out


class EValueThreshold(click.ParamType):
    """An E-value threshold read exactly as a :class:`decimal.Decimal`: ``1e-400`` stays
    1e-400 (``float`` reads it as 0), for thresholds compared as logs. Refuses negatives,
    ``nan`` and ``inf``."""

    name = "evalue"

    def convert(self, value, param, ctx):
        import decimal

        from sinkalign.errors import InputError
        from sinkalign.pipelines.align import log_evalue_threshold

        if isinstance(value, decimal.Decimal):
            return value
        try:
            log_evalue_threshold(str(value))  # the library's rule, its message
        except InputError as err:
            self.fail(str(err).replace("max_evalue=", ""), param, ctx)
        return decimal.Decimal(str(value).strip())


class OutputPath(click.Path):
    """:class:`click.Path` of an output file that also refuses a name ending in a path separator
    (``newdir/``): it names a folder, and ``pathlib`` would drop the slash and write a file
    ``newdir``."""

    def convert(self, value, param, ctx):
        from sinkalign.utils import names_a_folder

        if isinstance(value, str) and names_a_folder(value):
            self.fail(f"{value!r} ends in {value[-1]!r}, so it names a folder: give a file name", param, ctx)
        return super().convert(value, param, ctx)


class Strand(click.ParamType):
    """A strand, in any case, as :func:`sinkalign.align.aligner.strand_name` reads it: one of
    :data:`~sinkalign.align.aligner.STRANDS` or the signs ``+`` and ``-``; converted to its name
    (``plus``, ``minus``, ``both``). ``--strand -`` and ``--strand=-`` both parse as ``minus``.
    The aligner (which pulls in JAX) is imported only when a value is converted, so ``--help``
    shows :data:`CHOICES`, a copy of those names that a test holds to ``STRANDS``."""

    name = "strand"
    CHOICES = ("plus", "minus", "both", "+", "-")

    def get_metavar(self, param, ctx=None):  # click >= 8.2 passes ctx
        return f"[{'|'.join(self.CHOICES)}]"

    def convert(self, value, param, ctx):
        from sinkalign.align.aligner import strand_name
        from sinkalign.errors import InputError

        try:
            return strand_name(value)
        except InputError:
            self.fail(f"{value!r} is not a strand: {'|'.join(self.CHOICES)} (any case)", param, ctx)


def os_error_message(exc: OSError, outputs) -> str:
    """One line for an ``OSError`` of a command: its file where it names one, else for a write
    that failed past its open (a full disk, a quota, a file size limit) the ``outputs`` being
    written (``None``: an output not asked for)."""
    import errno

    if exc.filename:
        return f"{exc.strerror or exc}: {exc.filename}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        names = [str(p) for p in outputs if p is not None]
        return f"{exc.strerror} writing {' or '.join(names)}"
    return str(exc)


def exit_on_broken_pipe():
    """End a command whose standard output was closed by its reader (``... | head``): no traceback
    and no message, standard output sent to ``/dev/null`` (Python would complain flushing it at
    exit), and status 141 (128 + SIGPIPE), what the shell reports for a filter SIGPIPE stopped."""
    import os
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(128 + signal.SIGPIPE)


def parse_value(text: str):
    """``key=value`` option values: JSON if it parses (numbers, true/false, null), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def model_options(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]):
    """Callback for a repeatable ``KEY=VALUE`` option: a tuple of ``(key, value)`` pairs."""
    out = []
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", ctx=ctx, param=param)
        out.append((key.strip(), parse_value(raw)))
    return tuple(out)


def progress_option(what: str):
    """``--progress/--no-progress``, by default on only when standard error is a terminal (as
    pip and tqdm do): a job's log file or a pipe gets no bar unless asked for."""
    return click.option("--progress/--no-progress", default=None,
                        help=f"Progress bar of {what} on stderr [default: on a terminal].")


def esm_weights_option():
    """``--esm-weights FILE``: the local ESM-2 weights of a model trained on ``esm2`` features
    (they must be the very file it was trained with: its sha256 is checked when the model is
    loaded). Without it such a model looks in the torch hub cache."""
    from pathlib import Path

    return click.option("--esm-weights", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        metavar="FILE",
                        help="Local ESM-2 weights (a fair-esm .pt file) for a model trained on esm2 features: the "
                             "file it was trained with (checked by its sha256). Default: <model>.pt in the torch hub "
                             "cache ($TORCH_HOME/hub/checkpoints). Models without ESM-2 features refuse it.")


def embedder_options(esm_weights) -> dict:
    """``Aligner.load`` keyword arguments for ``--esm-weights`` (none without it)."""
    return {} if esm_weights is None else {"embedder_options": {"weights": str(esm_weights)}}


def check_processes_option(processes, threads, workers, scheduler) -> None:
    """``--processes`` replaces threads on this machine: a usage error beside --threads or a cluster."""
    if processes is not None and (threads is not None or workers is not None or scheduler is not None):
        raise click.UsageError("--processes aligns on this machine's processes instead of threads: not with "
                               "--threads, --workers or --scheduler")


def show_progress(flag: bool | None) -> bool:
    """The ``--progress`` choice, or whether standard error is a terminal when none was made."""
    if flag is not None:
        return bool(flag)
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


class RecordedCommand(click.Command):
    """A command that keeps the command line it was given (``ctx.meta``): a training command
    prints the command that resumes it (:func:`report_interrupted`), ``align`` writes it to a
    SAM header (:func:`given_command`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["sinkalign.args"] = list(args)
        return super().parse_args(ctx, args)


def report_interrupted(ctx: click.Context, exc, saved: bool) -> None:
    """Say that a signal stopped the run (:class:`sinkalign.errors.Interrupted`) and, when a
    checkpoint was ``saved``, the command that resumes it; exit with the signal's status."""
    click.echo(str(exc), err=True)
    if saved:
        click.echo(f"resume with: {resume_command(ctx)}", err=True)
    ctx.exit(exc.exit_status)


def given_command(ctx: click.Context | None = None, extra: tuple[str, ...] = ()) -> str:
    """The command line of a :class:`RecordedCommand` as given (``ctx``: the current one),
    quoted for a shell, with ``extra`` arguments added that it lacks; the group's own options
    (``-v``) aside."""
    import shlex

    ctx = ctx or click.get_current_context()
    args = ctx.meta.get("sinkalign.args", [])
    args = [*args, *(arg for arg in extra if arg not in args)]
    names, c = [], ctx
    while c.parent is not None:  # the subcommands, whatever name the program ran under
        names.insert(0, c.info_name)
        c = c.parent
    return shlex.join(["sinkalign", *names, *args])


def resume_command(ctx: click.Context) -> str:
    """The command line that resumes this run: the one given, with ``--resume``."""
    return given_command(ctx, ("--resume",))


def torch_threads_option():
    """``--threads N``: PyTorch's CPU threads for a command that runs a genome LM on the CPU."""
    return click.option("--threads", "torch_threads", default=None, type=click.IntRange(min=1), metavar="N",
                        help="PyTorch CPU threads (torch.set_num_threads) [default: PyTorch's, one per core]. One "
                             "base at a time is a small computation: 1 thread decodes about as fast on an idle "
                             "machine, and many times faster when other jobs hold the cores.")
