"""The ``sinkalign`` command-line interface: a click group, one module per command.

Commands are loaded lazily: ``sinkalign --help`` reads the one-line descriptions from
:data:`COMMANDS` and imports no command module (so neither JAX nor PyTorch), and
``sinkalign CMD ...`` imports only ``CMD``'s module. Errors a user can fix
(:class:`sinkalign.errors.SinkalignError`) are printed as one ``Error: ...`` line with exit
status 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import threading

import click

from sinkalign.errors import SinkalignError

# name -> (module, attribute, one-line help shown by `sinkalign --help`).
# tests/test_cli_main.py checks that each line is the command's own short help.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "align": ("sinkalign.cli.align", "align",
              "Align the records of QUERY_FASTA against those of TARGET_FASTA (protein or DNA)."),
    "calibrate": ("sinkalign.cli.evaluate", "calibrate",
                  "Fit calibrated confidences (isotonic) for a model's posteriors and write the calibrated model."),
    "evaluate": ("sinkalign.cli.evaluate", "evaluate",
                 "Precision, recall and F1 per reference set, binned by percent identity."),
    "fit-evalues": ("sinkalign.cli.evaluate", "fit_evalues",
                    "Fit the null of a calibrated model's E-values on shuffled pairs and write the model."),
    "gc-profile": ("sinkalign.cli.gc_profile", "gc_profile",
                   "GC content, GC skew and cumulative skew of FASTA (plain or .gz) in windows."),
    "generate-dna": ("sinkalign.cli.generate", "generate_dna",
                     "Continue --prompt by --length bases sampled from a DNA language model."),
    "lm": ("sinkalign.cli.lm", "lm",
           "Genome language models: train, eval (see also `sinkalign generate-dna`)."),
    "msa": ("sinkalign.cli.msa", "msa", "Align the records of FASTA all together (a multiple alignment)."),
    "score-msa": ("sinkalign.cli.score_msa", "score_msa",
                  "Score the multiple alignment TEST against the REFERENCE alignment of the same sequences."),
    "shards": ("sinkalign.cli.shards", "shards",
               "Pfam pair shards: family-disjoint train/valid/test pairs with reference alignments."),
    "train": ("sinkalign.cli.train", "train",
              "Train the aligner; metrics go to OUT/metrics.jsonl, checkpoints to OUT/checkpoints."),
    "validate": ("sinkalign.cli.validate", "validate",
                 "Validation harness: exactness, tail depth, certificates, orbit, contraction, kernels."),
}


def load_command(name: str) -> click.Command:
    """Import and return the command registered as ``name`` in :data:`COMMANDS`."""
    module, attr, _ = COMMANDS[name]
    command = getattr(importlib.import_module(module), attr)
    if not isinstance(command, click.Command):  # pragma: no cover - a wiring bug
        raise TypeError(f"{module}.{attr} is not a click command")
    return command


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use; listing them imports nothing."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        command = load_command(cmd_name)
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:  # added directly, already imported
                rows.append((name, self.commands[name].get_short_help_str(limit)))
            else:
                rows.append((name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SinkalignError as exc:
            raise click.ClickException(str(exc)) from exc
        except KeyboardInterrupt:  # Ctrl-C: the shell's status 130 (click's own 'Aborted!' exits 1)
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sinkalign")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """sinkalign: differentiable sequence alignment by entropic optimal transport."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # -v is sinkalign's own account; JAX's (e.g. "Unable to initialize backend 'tpu'" on every
    # machine without one) only with -vv
    logging.getLogger("jax").setLevel(logging.NOTSET if verbose >= 2 else logging.WARNING)


def _terminated(signum: int, frame) -> None:
    """SIGTERM's handler: :class:`SystemExit` through every ``finally``, so half-written outputs
    are removed. Python runs a handler between any two instructions of the main thread, also
    where an exception is lost: a garbage-collector callback (JAX registers one) or a
    ``__del__`` prints and drops it, and a module being imported may catch everything (parasail
    does, and then fails to load). There the signal is sent again shortly, to be handled once
    that code is left (not from here: the handler would run again at once, inside itself)."""
    if _resent(signum, frame):
        return
    raise SystemExit(128 + signum)


def _interrupted(signum: int, frame) -> None:
    """SIGINT's handler (Ctrl-C): :class:`KeyboardInterrupt`, as Python's own, but sent again
    shortly where it would be dropped (see :func:`_terminated`); the command exits 130."""
    if _resent(signum, frame):
        return
    raise KeyboardInterrupt


def _resent(signum: int, frame) -> bool:
    """Where ``frame`` would drop an exception (:func:`_in_dropping_context`), send ``signum``
    again in 10 ms and say so; else ``False``, for the handler to raise now."""
    if not _in_dropping_context(frame):
        return False
    timer = threading.Timer(0.01, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()
    return True


def _in_dropping_context(frame) -> bool:
    """Whether ``frame`` runs inside a garbage-collector callback, a ``__del__`` method or an
    import, where an exception may be dropped or caught."""
    callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        code = frame.f_code
        if code in callbacks or code.co_name == "__del__" or code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def main() -> None:
    """The ``sinkalign`` program: :func:`cli`, with SIGTERM (what a batch scheduler sends, or
    ``kill``) ending it as an exception, as SIGINT does, so that a half-written output's
    temporary file is removed on the way out (exit status 143, the shell's; Ctrl-C 130). Commands that
    stop gracefully on a signal (``train``, ``lm train``) put their own handler in place while
    they run."""
    import signal

    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _terminated)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted)
    cli()


if __name__ == "__main__":
    main()
