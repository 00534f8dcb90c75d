"""Click helpers shared by several commands."""

from __future__ import annotations

import json

import click

__all__ = ["model_options", "parse_value"]


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
