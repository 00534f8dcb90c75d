"""Golden outputs of the shipped models: a change in decoding, calibration or weights shows
as a reviewed diff of these files.

Regenerate after an intended change with ``SINKALIGN_UPDATE_GOLDEN=1 python -m pytest
tests/test_golden.py`` and review ``git diff tests/golden``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from sinkalign.cli.main import cli

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("SINKALIGN_UPDATE_GOLDEN") == "1"
FORMATS = ("tsv", "sam", "stockholm", "fasta", "text", "blast6", "paf", "maf")
INPUTS = {
    "example_default": ["--example"],  # the shipped protein model on the built-in globins
    "dna_default": [str(GOLDEN / "dna_query.fasta"), str(GOLDEN / "dna_target.fasta")],  # the DNA model
}


def _normalise(text: str) -> str:
    text = re.sub(r"(@PG\t.*\tVN:)\S+", r"\1<version>", text)  # the version is not the model's output
    return re.sub(r"(@PG\t.*)\tCL:[^\t\n]*", r"\1", text)  # nor the command line (a temporary -o path)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_shipped_model_output_is_golden(name, fmt, tmp_path):
    out = tmp_path / f"out.{fmt}"
    result = CliRunner().invoke(cli, ["align", *INPUTS[name], "--format", fmt, "-o", str(out)])
    assert result.exit_code == 0, result.output
    got = _normalise(out.read_text())
    golden = GOLDEN / f"{name}.{fmt}"
    if UPDATE:
        golden.write_text(got)
    assert golden.exists(), f"{golden} missing: run with SINKALIGN_UPDATE_GOLDEN=1 and review it"
    assert got == golden.read_text(), f"{name} --format {fmt} differs from {golden.name}"


def test_readme_shows_the_golden_text_output():
    """README's `--format text` block is the start of the shipped model's golden text output."""
    readme = (GOLDEN.parents[1] / "README.md").read_text()
    block = readme.split("```text\n", 1)[1].split("```", 1)[0]
    assert (GOLDEN / "example_default.text").read_text().startswith(block)
