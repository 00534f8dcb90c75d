"""Small shared utilities: atomic file output, shared-data discovery, signals, and whether a call
comes from a main script's unguarded top level (where spawned worker processes cannot start)."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import gzip as gz
import hashlib
import io
import logging
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

__all__ = ["STDIO", "atomic_dir", "atomic_path", "atomic_write", "atomic_write_bytes", "atomic_write_text",
           "dataclass_from_dict", "file_sha256", "is_stdio", "newest_checkpoint", "open_output", "unguarded_main_call"]

#: The name of standard input or output, as an input or output path.
STDIO = "-"


def short_repr(seq: str, keep: int = 50) -> str:
    """``repr(seq)`` for a notebook line: a sequence longer than ``keep`` letters as its first
    and last ``keep // 2`` with ``...`` between and its length after
    (``'MVLSPADKTN...HKLRVDPVNF' (142 letters)``)."""
    if len(seq) <= keep:
        return repr(seq)
    half = keep // 2
    return f"{seq[:half] + '...' + seq[-half:]!r} ({len(seq):,} letters)"


def names_a_folder(path) -> bool:
    """Whether an output's name ends in a path separator (``newdir/``): it names a folder, and
    ``pathlib`` would drop the separator and write a file of the folder's name."""
    return os.fspath(path).endswith(("/", os.sep))


def is_stdio(path) -> bool:
    """Whether ``path`` is ``-``: standard input or output."""
    return path is not None and str(path) == STDIO


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", *,
                 gzip: bool = False) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    An exception inside the ``with`` block (or a killed process) leaves any previous
    ``path`` untouched and removes the temporary file, so readers never see a
    half-written result. ``gzip``: what is written is gzip-compressed on its way to the
    file (:func:`wants_gzip` tells it from an output's name).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"{mode=} must be 'w' or 'wb'")
    path = Path(path)
    kwargs = {"encoding": encoding, "newline": ""} if mode == "w" else {}
    if is_special(path):  # /dev/null, a named pipe: nothing to replace, written in place
        with open(path, mode, **kwargs) as handle:
            yield handle
        return
    fd, tmp = _temporary_beside(path)
    try:
        if gzip:
            with os.fdopen(fd, "wb") as raw:
                with gz.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed:
                    handle = io.TextIOWrapper(packed, **kwargs) if mode == "w" else packed
                    yield handle
                    handle.flush()
                    if mode == "w":
                        handle.detach()
                raw.flush()
                os.fsync(raw.fileno())
        else:
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


def _temporary_beside(path: Path) -> tuple[int, str]:
    """``(fd, name)`` of a new temporary file in ``path``'s folder (made if missing). A folder
    that refuses it (no permission, read-only, full) raises the ``OSError`` naming ``path``, the
    file asked for, not the temporary file's hidden name."""
    path.parent.mkdir(parents=True, exist_ok=True)  # (its own error names the folder)
    try:
        return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def is_special(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a directory (``/dev/null``, a
    named pipe, a terminal): an output there is written in place, not through a renamed
    temporary file, and replacing it needs no ``--overwrite``."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def wants_gzip(path: str | os.PathLike) -> bool:
    """Whether an output named ``path`` should be gzip-compressed: its name ends in ``.gz``
    (``hits.tsv.gz``), as the inputs are read compressed by content."""
    return str(path).lower().endswith(".gz")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path`` for a writer that opens files by name (pysam);
    on success fsync it, give it the usual mode (``0666 & ~umask``) and rename it over ``path``.
    On error the temporary file is removed and any previous ``path`` is left as it was."""
    path = Path(path)
    if is_special(path):  # /dev/null, a named pipe: written in place
        yield str(path)
        return
    fd, tmp = _temporary_beside(path)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
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


@contextlib.contextmanager
def open_output(path: str | os.PathLike) -> Iterator[IO[str]]:
    """Standard output for ``-``; else ``path`` through :func:`atomic_write` (gzip-compressed
    when its name ends in ``.gz``; a named pipe or device written in place)."""
    if is_stdio(path):
        yield sys.stdout
        sys.stdout.flush()
        return
    with atomic_write(path, gzip=wants_gzip(path)) as handle:
        yield handle


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; on success fsync its files and rename it
    over ``path`` (replacing an old one). On error the temporary directory is removed and any
    previous ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        mode = 0o666 & ~_umask()
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
            f.chmod(mode)
        tmp.chmod(mode | 0o111 & ~_umask())  # mkdtemp creates 0700; give the usual mode
        if path.exists():
            # move the old one aside atomically, so a kill never leaves a half-deleted directory
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old.tmp", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def dataclass_from_dict(cls, data, what: str):
    """``cls(**data)`` for a dataclass stored as JSON: ``ValueError`` naming ``what`` when
    ``data`` is not a mapping or has keys ``cls`` does not know (the constructor checks the
    values)."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a mapping, got {type(data).__name__}")
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown {what} keys {sorted(unknown)}")
    return cls(**data)


log = logging.getLogger(__name__)


def newest_checkpoint(root: str | os.PathLike, *, pointer: str, pointed: Callable[[str], object],
                      step_name: re.Pattern, complete: Callable[[Path], bool]) -> Path | None:
    """The newest complete checkpoint directory in ``root`` (a run's ``checkpoints/``), or ``None``.

    The file ``root/pointer`` names the newest checkpoint; ``pointed(text)`` reads that name from
    its text. The name is trusted only when it fully matches ``step_name`` (whose first group is
    the step) and names a real directory (not a link) inside ``root`` for which ``complete`` holds.
    Otherwise (no pointer, unreadable, stale, naming something outside the run or a checkpoint a
    kill left half-written) a warning is logged and the complete step directory with the highest
    step is taken.
    """
    root = Path(root)
    if not root.is_dir():
        return None

    def usable(path: Path) -> bool:
        return path.is_dir() and not path.is_symlink() and complete(path)

    if (root / pointer).is_file():
        try:
            name = pointed((root / pointer).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
            log.warning("%s is unreadable (%s); using the newest complete checkpoint", root / pointer, err)
        else:
            if isinstance(name, str) and step_name.fullmatch(name) and usable(root / name):
                return root / name
            log.warning("%s names %r, which is not a complete checkpoint of this run; using the newest complete one",
                        root / pointer, str(name)[:80])
    done = complete_checkpoints(root, step_name=step_name, complete=complete)
    return max(done, key=lambda item: item[0])[1] if done else None


def complete_checkpoints(root: str | os.PathLike, *, step_name: re.Pattern,
                         complete: Callable[[Path], bool]) -> list[tuple[int, Path]]:
    """``(step, directory)`` of every complete checkpoint in ``root``: a real directory (not a
    link) whose name fully matches ``step_name`` (the step its first group) and for which
    ``complete`` holds."""
    root = Path(root)
    return [(int(m.group(1)), p) for p in root.iterdir()
            if (m := step_name.fullmatch(p.name)) and p.is_dir() and not p.is_symlink() and complete(p)]


def previous_complete_checkpoint(checkpoint: str | os.PathLike, *, step_name: re.Pattern,
                                 complete: Callable[[Path], bool]) -> Path | None:
    """The complete checkpoint of the same run with the highest step below ``checkpoint``'s
    (``None``: there is none), which a resume falls back to once ``checkpoint`` is deleted."""
    checkpoint = Path(checkpoint)
    match = step_name.fullmatch(checkpoint.name)
    if match is None or not checkpoint.parent.is_dir():
        return None
    step = int(match.group(1))
    earlier = [item for item in complete_checkpoints(checkpoint.parent, step_name=step_name, complete=complete)
               if item[0] < step]
    return max(earlier)[1] if earlier else None


def damaged_checkpoint_message(checkpoint: Path, problem: str, previous: Path | None) -> str:
    """The message of a resume that cannot read ``checkpoint``: ``problem`` (which names the
    damaged file) and what to do about it (``previous``: the checkpoint before it, if any)."""
    if previous is not None:
        todo = f"delete that folder to resume from the checkpoint before it ({previous.name})"
    else:
        todo = ("it is the run's only checkpoint: delete that folder and resume again to start the run over "
                "from scratch, or train into another directory")
    return f"{problem}; the checkpoint {checkpoint} is damaged: {todo}"


def user_cache_dir(env: str, name: str) -> Path | None:
    """A cache directory of sinkalign's: ``$env`` when set (``0``, ``off``, ``false``, ``no``
    or empty: no cache, ``None``), else ``$XDG_CACHE_HOME/sinkalign/<name>`` (default
    ``~/.cache/sinkalign/<name>``)."""
    value = os.environ.get(env)
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "false", "no") else Path(value).expanduser()
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "sinkalign" / name


#: the models shipped inside the package (sinkalign/data)
SHIPPED_DATA = Path(__file__).resolve().parent / "data"


def shipped_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` is the package's shipped data or inside it (links followed): no
    command writes there, ``--overwrite`` or not; a new model belongs elsewhere."""
    try:
        return Path(path).resolve().is_relative_to(SHIPPED_DATA)
    except OSError:
        return False


@dataclasses.dataclass(frozen=True)
class RunLayout:
    """How one kind of training run lays out its directories, so that each kind's commands can
    tell their own directories from the other kind's by one description (the aligner's
    ``sinkalign train``: :data:`ALIGNER_LAYOUT`; the genome LM's ``sinkalign lm train``:
    :data:`GENOME_LM_LAYOUT`).

    A *model* directory (a shipped or exported model, or one checkpoint of a run) holds every
    file of ``model_files``; a *run* directory holds ``checkpoints/`` with the ``pointer`` file
    naming the newest ``step_name`` directory, or such directories, or a ``best`` model."""

    name: str  # "an aligner model", "a genome language model"
    run_name: str  # "an aligner training run", "a genome LM training run"
    command: str  # the command that writes its runs
    model_files: tuple[str, ...]
    pointer: str  # checkpoints/<pointer>
    step_name: re.Pattern  # a checkpoint directory's name, the step its first group
    best: str | None = None  # a run's best model, where the kind keeps one

    def kind(self, path: str | os.PathLike) -> str | None:
        """``"model"``, ``"run"`` or ``None`` (``path`` is neither of this layout)."""
        path = Path(path)
        if not path.is_dir():
            return None
        if all((path / name).is_file() for name in self.model_files):
            return "model"
        root = path / "checkpoints"
        if root.is_dir() and ((root / self.pointer).is_file()
                              or any(self.step_name.fullmatch(p.name) and p.is_dir() for p in root.iterdir())):
            return "run"
        if self.best is not None and all((path / self.best / name).is_file() for name in self.model_files):
            return "run"
        return None

    def describe(self, kind: str) -> str:
        """``"an aligner training run (sinkalign train)"`` and the like, for ``kind`` from :meth:`kind`."""
        return f"{self.run_name if kind == 'run' else self.name} ({self.command})"


ALIGNER_LAYOUT = RunLayout("an aligner model", "an aligner training run", "sinkalign train",
                           ("params.safetensors", "state.json"), "latest", re.compile(r"step_(\d{8,})"), best="best")
GENOME_LM_LAYOUT = RunLayout("a genome language model", "a genome LM training run", "sinkalign lm train",
                             ("config.json", "model.safetensors"), "latest.json", re.compile(r"step-(\d{8,})"))


class StopFlag:
    """The first SIGINT / SIGTERM received (0: none yet); set by :func:`stop_on_signals`."""

    def __init__(self) -> None:
        self.signum = 0


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals(flag: StopFlag, *, repeat_aborts: bool, forward=None):
    """Record SIGINT / SIGTERM in ``flag`` instead of dying, while the block runs.

    ``repeat_aborts``: after the first signal the previous handlers come back, so a second one
    aborts at once (a single process; under DDP the terminal and the launcher may both deliver
    one, so repeats are ignored there). ``forward(signum)`` is called for every signal (the DDP
    launcher passes it on to its workers). Outside the main thread (where Python takes no
    signal handlers) nothing is installed, nor for a signal the process ignores (a background
    job of a shell without job control ignores SIGINT).
    """
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    previous = {s: signal.SIG_DFL if h is None else h for s, h in previous.items() if h != signal.SIG_IGN}

    def handler(signum, frame) -> None:
        first = flag.signum == 0
        if first:
            flag.signum = signum
        if forward is not None:
            forward(signum)
        if first and repeat_aborts:
            for s, h in previous.items():
                signal.signal(s, h)

    for s in previous:
        signal.signal(s, handler)
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def unguarded_main_call() -> bool:
    """Whether the calling code runs from a line of the main script's top level that no
    condition guards (no ``if``, ``while``, ``match`` or ``except`` around it): a line the
    'spawn' start method runs again in each worker process, where starting worker processes in
    turn is refused (the worker exits with code 1). ``False`` where that cannot be told. The
    aligner's worker processes and ``train_lm_ddp`` refuse to start from there."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None:
        return False
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return False
    spans = _conditional_spans(path)
    return spans is not None and not any(lo <= frame.f_lineno <= hi for lo, hi in spans)


@functools.lru_cache(maxsize=8)
def _conditional_spans(path: str) -> tuple[tuple[int, int], ...] | None:
    """The line spans of a script that run only under a condition (``if``, ``while`` and
    ``match`` statements, ``except`` and ``else`` blocks); ``None`` if it cannot be parsed."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.Match)):
            spans.append((node.lineno, node.end_lineno))
        elif isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)):
            spans += [(part.lineno, part.end_lineno) for part in [*node.handlers, *node.orelse]]
    return tuple(spans)
