"""Click helpers shared by several commands."""

from __future__ import annotations

import json
import sys

import click

__all__ = ["FiniteFloatRange", "model_options", "parse_value", "progress_option", "show_progress"]


class FiniteFloatRange(click.FloatRange):
    """:class:`click.FloatRange` that also refuses ``nan`` and ``inf`` (which Python's ``float``
    parses and a range check lets through: ``nan`` compares false with every bound)."""

    def convert(self, value, param, ctx):
        import math

        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return out


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


def show_progress(flag: bool | None) -> bool:
    """The ``--progress`` choice, or whether standard error is a terminal when none was made."""
    if flag is not None:
        return bool(flag)
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())
