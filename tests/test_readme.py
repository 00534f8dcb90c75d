"""README.md's Python API section runs as written (doctest), in a folder holding the
built-in example as queries.fasta and targets.fasta."""

from __future__ import annotations

import doctest
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "sinkalign" / "data" / "examples"


def _section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_python_api_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```pycon\n(.*?)```", _section("Python API"), flags=re.S)
    assert len(blocks) >= 3
    shutil.copy(EXAMPLES / "globins_query.fasta", tmp_path / "queries.fasta")
    shutil.copy(EXAMPLES / "globins_target.fasta", tmp_path / "targets.fasta")
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, "README.md: Python API", "README.md", 0)
    assert len(test.examples) >= 15
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
