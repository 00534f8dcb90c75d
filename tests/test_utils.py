import gzip
import os
import threading
from pathlib import Path

import pytest

from sinkalign.utils import atomic_write, atomic_write_text, open_output


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


def test_open_output_is_stdout_for_dash_else_an_atomic_file(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_output("-") as handle:
        handle.write("to stdout\n")
    assert capsys.readouterr().out == "to stdout\n" and list(tmp_path.iterdir()) == []  # no file named '-'
    target = tmp_path / "out.json"
    with open_output(target) as handle:
        handle.write("first\n")
    with pytest.raises(RuntimeError, match="boom"), open_output(target) as handle:
        handle.write("half")
        raise RuntimeError("boom")
    assert target.read_text() == "first\n" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
    with open_output(tmp_path / "out.json.gz") as handle:  # .gz: compressed, as the other outputs
        handle.write("packed\n")
    assert gzip.decompress((tmp_path / "out.json.gz").read_bytes()) == b"packed\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_open_output_writes_a_named_pipe_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    with open_output(fifo) as handle:
        handle.write("through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"] and [p.name for p in tmp_path.iterdir()] == ["pipe"]


@pytest.mark.parametrize("opener", ["atomic_write", "atomic_path"])
def test_a_folder_that_refuses_the_temporary_file_is_named_by_the_output(tmp_path: Path, monkeypatch, opener) -> None:
    """A folder where no file may be made (``-o /sys/x.tsv``) was reported by the temporary
    file's hidden name (``/sys/.x.tsv.pbul36w6.tmp``): the error names the output asked for."""
    import errno
    import tempfile

    from sinkalign import utils

    def refuse(prefix, suffix, dir):
        raise PermissionError(errno.EACCES, "Permission denied", str(Path(dir) / f"{prefix}abc{suffix}"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    target = tmp_path / "x.tsv"
    with pytest.raises(PermissionError) as info:
        with getattr(utils, opener)(target):
            pass
    assert info.value.filename == str(target) and info.value.errno == errno.EACCES
    assert "Permission denied" in str(info.value) and ".tmp" not in str(info.value)
