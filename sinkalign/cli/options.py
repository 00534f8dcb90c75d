"""Click helpers shared by several commands."""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

import click

from sinkalign.errors import SinkalignError

__all__ = ["model_options", "one_line_errors", "parse_value"]


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn a :class:`~sinkalign.errors.SinkalignError` into click's one-line ``Error: ...``
    (exit 1). Any other exception is a bug and keeps its traceback."""
    try:
        yield
    except SinkalignError as exc:
        raise click.ClickException(str(exc)) from exc


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
