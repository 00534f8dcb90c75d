"""The command group: lazy loading, what `--help` imports, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from sinkalign.cli.main import COMMANDS, LazyGroup, cli, load_command
from sinkalign.errors import CheckpointError, InputError


def _modules_after(args: list[str]) -> set[str]:
    """Top-level modules imported by running ``sinkalign ARGS`` in a fresh interpreter."""
    code = (
        "import sys, json\n"
        "from sinkalign.cli.main import cli\n"
        f"try:\n    cli({args!r}, prog_name='sinkalign')\n"
        "except SystemExit:\n    pass\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def test_top_level_help_imports_no_command_module_jax_or_torch():
    mods = _modules_after(["--help"])
    assert not mods & {"jax", "torch", "numpy", "triton"}, mods & {"jax", "torch", "numpy", "triton"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_help_never_imports_torch(name):
    assert "torch" not in _modules_after([name, "--help"])


def test_align_help_is_light():
    """`sinkalign align --help` must not pay for JAX (the issue's 0.5 s budget)."""
    assert not _modules_after(["align", "--help"]) & {"jax", "torch"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_listed_help_is_the_commands_own(name):
    command = load_command(name)
    assert command.name == name
    assert click.Command(name, help=COMMANDS[name][2]).get_short_help_str(1000) == command.get_short_help_str(1000)


def test_help_lists_every_command():
    out = CliRunner().invoke(cli, ["--help"]).output
    for name in COMMANDS:
        assert f"  {name} " in out


def _group_with(callback) -> click.Group:
    @click.group(cls=LazyGroup)
    def group() -> None:
        pass

    group.add_command(click.Command("boom", callback=callback))
    return group


def test_sinkalign_errors_become_one_line_messages():
    def fail():
        raise CheckpointError("run R: checkpoints/latest points outside the run")

    result = CliRunner().invoke(_group_with(fail), ["boom"])
    assert result.exit_code == 1
    assert result.output == "Error: run R: checkpoints/latest points outside the run\n"

    def bad_input():
        raise InputError("a.fasta, record 3 (x), position 7: 'J' is not an amino acid")

    result = CliRunner().invoke(_group_with(bad_input), ["boom"])
    assert result.exit_code == 1 and result.output.startswith("Error: a.fasta, record 3")


def test_bugs_keep_their_traceback():
    def bug():
        raise ValueError("an internal invariant broke")

    result = CliRunner().invoke(_group_with(bug), ["boom"])
    assert result.exit_code == 1
    assert isinstance(result.exception, ValueError)
    assert "Error:" not in result.output


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["alignn"])
    assert result.exit_code == 2 and "No such command 'alignn'" in result.output


def _all_commands():
    """Every command, with the subcommands of the groups (``lm train``, ``shards build``...)."""
    for name in COMMANDS:
        command = load_command(name)
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                yield f"{name} {sub.name}", sub
        else:
            yield name, command


def test_progress_bars_default_to_a_terminal_only():
    """Every --progress flag is tri-state: unset means "when standard error is a terminal", so
    a job's log file or a pipe gets no bar unless one is asked for."""
    from sinkalign.cli.options import show_progress

    flags = {name: p for name, cmd in _all_commands() for p in cmd.params if p.name == "progress"}
    assert {"align", "train", "gc-profile", "lm train", "shards build", "shards embed"} <= set(flags)
    for name, param in flags.items():
        assert param.default is None, f"{name} --progress defaults to {param.default!r}"

    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    for tty in (True, False):
        saved, sys.stderr = sys.stderr, Stream(tty)
        try:
            assert show_progress(None) is tty
            assert show_progress(True) is True and show_progress(False) is False
        finally:
            sys.stderr = saved


def test_align_into_a_pipe_shows_no_bar_unless_asked():
    run = [sys.executable, "-m", "sinkalign.cli.main", "align", "--example", "--model", "blosum"]
    quiet = subprocess.run(run, capture_output=True, text=True, check=True)
    loud = subprocess.run(run + ["--progress"], capture_output=True, text=True, check=True)
    assert quiet.stdout == loud.stdout and quiet.stdout.count("\n") == 3
    assert "pair" not in quiet.stderr and "2/2" in loud.stderr


def test_verbose_logs_sinkalign_and_very_verbose_jax_too():
    """-v is sinkalign's own account (JAX's INFO lines, such as its search for a TPU, only with -vv)."""
    base = [sys.executable, "-m", "sinkalign.cli.main"]
    args = ["align", "--example", "--model", "blosum", "--engine", "jax"]  # the jax engine starts JAX's backends
    info = subprocess.run([*base, "-v", *args], capture_output=True, text=True, check=True).stderr
    debug = subprocess.run([*base, "-vv", *args], capture_output=True, text=True, check=True).stderr
    assert "INFO sinkalign.cli.align: wrote 2 records" in info
    assert "jax" not in info and "DEBUG jax" in debug
