"""Small shared utilities: atomic file output and shared-data discovery."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text"]


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    An exception inside the ``with`` block (or a killed process) leaves any previous
    ``path`` untouched and removes the temporary file, so readers never see a
    half-written result.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"{mode=} must be 'w' or 'wb'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        kwargs = {"encoding": encoding, "newline": ""} if mode == "w" else {}
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + rename)."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (temp file + rename)."""
    with atomic_write(path, "w") as handle:
        handle.write(text)
