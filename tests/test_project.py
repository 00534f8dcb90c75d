"""The project's contract: CI runs README's two quick-start commands as written."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_quick_start_is_two_commands_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = _bash_blocks(quick)
    assert len(blocks) == 2 and all("\n" not in b for b in blocks)
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    # the first command runs in a fresh virtual environment (its output captured), the second as is
    assert f"{blocks[0]} > \"$out\"" in ci
    assert blocks[1] in ci
    assert 'python3 -m venv "$fresh/venv"' in ci


def test_cli_lists_its_commands():
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    out = CliRunner().invoke(cli, ["--help"]).output
    for name in ("validate", "shards", "gc-profile"):
        assert name in out
