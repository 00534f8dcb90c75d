from pathlib import Path

import pytest

from sinkalign.utils import atomic_write, atomic_write_text


def test_atomic_write_replaces_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    atomic_write_text(target, "first\n")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(target) as handle:
            handle.write("half")
            raise RuntimeError("boom")
    assert target.read_text() == "first\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_atomic_write_rejects_bad_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode='a'"):
        with atomic_write(tmp_path / "x", mode="a"):
            pass
