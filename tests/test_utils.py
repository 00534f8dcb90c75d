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


def test_atomic_dir_replaces_only_on_success(tmp_path: Path) -> None:
    from sinkalign.utils import atomic_dir, file_sha256

    target = tmp_path / "model"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("one")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_dir(target) as tmp:
            (tmp / "a.txt").write_text("two")
            raise RuntimeError("boom")
    assert (target / "a.txt").read_text() == "one"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert file_sha256(target / "a.txt") == "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed"
