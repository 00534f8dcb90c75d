"""The ``sinkalign`` command-line interface: a click group, one module per command."""

from __future__ import annotations

import logging

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sinkalign")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """sinkalign: differentiable sequence alignment by entropic optimal transport."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _register() -> None:
    # Each command lives in its own module; registration is explicit so that
    # `sinkalign --help` lists exactly what is installed.
    from sinkalign.cli.validate import validate

    cli.add_command(validate)
    from sinkalign.cli.gc_profile import gc_profile

    cli.add_command(gc_profile)
    from sinkalign.cli.shards import shards

    cli.add_command(shards)
    from sinkalign.cli.align import align
    from sinkalign.cli.evaluate import calibrate, evaluate
    from sinkalign.cli.train import train

    cli.add_command(align)
    cli.add_command(evaluate)
    cli.add_command(calibrate)
    cli.add_command(train)
    from sinkalign.cli.lm import lm

    cli.add_command(lm)
    from sinkalign.cli.generate import generate_dna

    cli.add_command(generate_dna)


_register()


if __name__ == "__main__":
    cli()
