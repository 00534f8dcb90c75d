"""What the alignment pipelines (``sinkalign align``, ``sinkalign msa``) share: the model,
loaded once per process; chunks of pairs aligned here or as tasks on a Dask cluster, results in
input order; and the guards on inputs and outputs (standard input spooled once, an existing
output never replaced unasked)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from sinkalign.errors import InputError, OutputExistsError, SinkalignError, require
from sinkalign.utils import STDIO, is_special, is_stdio, names_a_folder, unguarded_main_call

__all__ = ["AUTO_PROCESSES_MIN_PAIRS", "DEFAULT_CHUNK_SIZE", "STDIN_NAME", "STDIO", "ModelSpec", "align_chunk",
           "auto_processes", "check_output", "check_outputs", "check_processes",
           "chunks", "is_stdio", "load_aligner", "run_cluster", "run_local", "stdin_spooled"]

log = logging.getLogger(__name__)

#: How messages name standard input read through :func:`stdin_spooled` (as Python and Biopython do).
STDIN_NAME = "<stdin>"
#: Pairs per chunk: the unit of work of a cluster task (and of the single-process loop).
DEFAULT_CHUNK_SIZE = 256

# --------------------------------------------------------------------------------------
# the model, loaded once per process
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What a process needs to build the aligner (small, picklable, hashable).

    ``path=None`` is the shipped model for ``alphabet``, resolved in the process that loads it.
    """

    path: str | None
    alphabet: str = "protein"
    backend: str = "reference"
    gap_weight: float | None = None
    embedder: str | None = None
    esm_weights: str | None = None
    min_confidence: float | None = None
    engine: str = "auto"
    threads: int | None = None  # the numpy engine's threads in this process (None: every CPU it may use)
    processes: int | None = None  # the host's share on this many worker processes of this one (Aligner(processes=))
    strand: str | None = None  # nucleotide models: plus, minus or both (None: the aligner's default, both)
    band: int | str | None = None  # a corridor of this radius for every pair, "dense", or None (long pairs banded)
    identity_weight: float | None = None  # the MEA identity tie-break (None: the model's)
    identity_min: float | None = None  # ... for pairs at least this identical (None: the model's)
    identity_gaps: str | None = None  # ... adding gaps or only moving them: "add" | "move" (None: the model's)
    identity_move_min: float | None = None  # ... moving gaps only, for pairs this identical below identity_min


def check_processes(processes, threads, workers, scheduler) -> None:
    """:class:`InputError` unless ``processes`` (a local run's worker processes, instead of
    threads) is ``None`` or a whole number >= 1 given without threads or a cluster."""
    if processes is None:
        return
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise InputError(f"processes={processes!r} must be a whole number >= 1")
    if threads is not None or workers is not None or scheduler is not None:
        raise InputError("processes is for a local run, instead of threads: not with threads, workers or scheduler")


#: A local run of at least this many pairs, with neither threads nor processes asked for, aligns on
#: one worker process per usable CPU instead of threads. The rule, fixed before the timing: processes
#: if they align 2,048 pairs of 300 at least 2x as fast as threads on a 16-core host. On the lent
#: H200's host (2026-11-27, BENCHMARKS.md) 16 processes gave 131.8 pairs/s, 16 threads 40.8 (3.2x);
#: a process starts in ~3 s more than threads, so small runs stay on threads: on this project's
#: 2-core VM threads win below ~650 pairs of 300, on 16 cores below ~160.
AUTO_PROCESSES_MIN_PAIRS = 1024


def auto_processes(n_pairs: int, *, largest_cells: int = 0, threads=None, processes=None, workers=None,
                   scheduler=None) -> int | None:
    """Worker processes for a local run of ``n_pairs`` pairs where the caller asked for none of
    threads, processes or a cluster: every usable CPU from :data:`AUTO_PROCESSES_MIN_PAIRS` pairs
    on a machine with at least two, else None (threads). Also threads where a pair of the run
    (``largest_cells`` residue pairs, its largest) is past the aligner's ``AUTO_BAND_CELLS``:
    such a pair's classical guides are dense (~6 bytes a residue pair), and threads share one
    process's budget for them (``HOST_CELL_BUDGET``), while each worker process would hold its own.
    And threads when called from a script's top level outside ``if __name__ == "__main__":``,
    where worker processes cannot start (the aligner refuses them there with a message)."""
    if any(x is not None for x in (threads, processes, workers, scheduler)) or n_pairs < AUTO_PROCESSES_MIN_PAIRS:
        return None
    from sinkalign.align import aligner

    if unguarded_main_call():  # a script's unguarded top level: 'spawn' cannot start processes from it
        return None
    cpus = aligner.default_workers()
    if cpus < 2 or largest_cells > aligner.AUTO_BAND_CELLS:
        return None
    log.info("aligning %d pairs on %d worker processes (--threads N for threads)", n_pairs, cpus)
    return cpus


_ALIGNERS: dict = {}
_LOADS = 0  # models loaded by this process (a cluster test reads it on each worker)


def _fingerprint(path: Path) -> tuple:
    """Names, sizes and times of the files under ``path``: a model changed on disk is reloaded."""
    if path.is_file():
        st = path.stat()
        return ((path.name, st.st_size, st.st_mtime_ns),)
    out = []
    for root, _, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(root, name))
            out.append((os.path.relpath(os.path.join(root, name), path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _worker_threads() -> int | None:
    """Inside a Dask worker, that worker's thread count: a machine runs several worker
    processes, so the aligner's engine must not start a thread per CPU in each of them.
    Elsewhere ``None`` (the engine's default)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        worker = distributed.get_worker()
    except ValueError:  # not running inside a worker
        return None
    nthreads = getattr(worker, "nthreads", None) or getattr(getattr(worker, "state", None), "nthreads", None)
    return max(1, int(nthreads)) if nthreads else None


#: Environment variables that fix glibc's malloc thresholds (``mallopt(3)``: setting any of them
#: turns off its dynamic mmap threshold).
_MALLOC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
#: glibc's ceiling for its dynamic mmap threshold on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``).
_MMAP_THRESHOLD = 32 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_MALLOC_RESTORED = False  # this process's thresholds were set by _restore_malloc_thresholds


def _restore_malloc_thresholds() -> bool:
    """In a Dask worker whose environment fixes malloc's thresholds, set them to what glibc
    would reach on its own: an mmap threshold of 32 MiB and a trim threshold of twice that.

    Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``
    (``distributed.nanny.pre-spawn-environ``). A fixed threshold turns off glibc's dynamic mmap
    threshold, so each array above 128 KB (a 300-residue pair's plan is 720 KB) is mapped
    afresh and unmapped when freed, page faults every time: one thread aligned 2.6x slower
    under that setting. Memory still goes back to the OS after each chunk (:func:`_trim_heap`).
    True if the thresholds were set (glibc, a Dask worker, one of :data:`_MALLOC_ENV` set)."""
    global _MALLOC_RESTORED
    if _MALLOC_RESTORED:
        return True
    if not any(name in os.environ for name in _MALLOC_ENV) or _worker_threads() is None:
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    _MALLOC_RESTORED = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_THRESHOLD))
    log.debug("malloc thresholds of this worker set to glibc's dynamic ceilings: %s", _MALLOC_RESTORED)
    return _MALLOC_RESTORED


def load_aligner(spec: ModelSpec):
    """The :class:`~sinkalign.align.aligner.Aligner` of ``spec``, loaded once per process
    (again only when the model's files change). In a Dask worker, malloc's thresholds are
    first set back to glibc's own (:func:`_restore_malloc_thresholds`)."""
    global _LOADS
    from sinkalign.align.aligner import Aligner, default_model_path

    _restore_malloc_thresholds()

    path = Path(spec.path) if spec.path is not None else default_model_path(spec.alphabet)
    key = (spec, _fingerprint(path) if path.exists() else None)
    cached = _ALIGNERS.get(spec)
    if cached is not None and cached[0] == key:
        return cached[1]
    options = {"weights": spec.esm_weights} if spec.esm_weights else {}
    threads = _worker_threads() or spec.threads
    extra = {} if threads is None else {"workers": threads}
    extra["min_confidence"] = spec.min_confidence
    extra["engine"] = spec.engine
    extra["strand"] = spec.strand
    if spec.band is not None:
        extra["band"] = spec.band
    extra["identity_weight"] = spec.identity_weight
    extra["identity_min"] = spec.identity_min
    extra["identity_gaps"] = spec.identity_gaps
    extra["identity_move_min"] = spec.identity_move_min
    if spec.processes:
        extra["processes"] = spec.processes
    aligner = Aligner.load(path, backend=spec.backend, gap_weight=spec.gap_weight, **extra)
    trained_with = aligner.config.embedder.get("name") if aligner.config.feature_dim else None
    if spec.embedder is not None and spec.embedder != (trained_with or "none"):
        raise InputError(f"--embedder {spec.embedder}: the model {path} was trained with "
                         + (f"the {trained_with!r} embedder" if trained_with else "no embedder (its own residue encoder)"))
    if spec.esm_weights and trained_with != "esm2":
        raise InputError(f"--esm-weights: the model {path} takes no ESM-2 features (it was trained with "
                         f"{'the ' + repr(trained_with) + ' embedder' if trained_with else 'no embedder'}); drop the option "
                         "or give a model trained on esm2 features")
    if trained_with == "esm2" and options:
        aligner = Aligner.load(path, backend=spec.backend, gap_weight=spec.gap_weight, embedder_options=options,
                               **extra)
        # the embedder built now, not at the first batch: weights other than the model's are an
        # error before any pair is aligned and before an output is written
        aligner.embedder
    _ALIGNERS[spec] = (key, aligner)
    _LOADS += 1
    return aligner


def _align_pairs(aligner, pairs, *, batch_size: int, keep_plan: bool):
    """The pipeline's one call into the aligner: ``(query_id, query, target_id, target)``
    tuples in, :class:`~sinkalign.alignment.AlignedPair` out, in input order."""
    return aligner.align_many(pairs, batch_size=batch_size, keep_plan=keep_plan)


_MALLOC_TRIM = None


def _trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc only; elsewhere nothing). glibc keeps what
    is freed in per-thread arenas, and as JAX's threads allocate and free batch buffers the
    resident size creeps up by hundreds of MB over a long run; trimming after each chunk keeps
    it flat (``benchmarks/align_memory.py``)."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        import ctypes

        try:
            _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


def align_chunk(spec: ModelSpec, chunk: list, batch_size: int, keep_plan: bool) -> list:
    """Align one chunk of ``(query_id, query, target_id, target)``: a list of ``(alignment,
    plan or None, E-value or None, strand, log E-value or None)`` in the chunk's order. The task a
    cluster worker runs (and the single process too, chunk by chunk, so both give the same
    batches and the same results)."""
    aligner = load_aligner(spec)
    out = []
    for res in _align_pairs(aligner, chunk, batch_size=batch_size, keep_plan=keep_plan):
        out.append((res.alignment, None if res.plan is None else res.plan.astype(np.float32), res.evalue,
                    res.strand, res.log_evalue))
    if len(out) != len(chunk):  # an aligner that drops or adds pairs is a bug, never silent
        raise RuntimeError(f"the aligner returned {len(out)} results for {len(chunk)} pairs")
    _trim_heap()
    return out




# --------------------------------------------------------------------------------------
# inputs and outputs
# --------------------------------------------------------------------------------------
def check_output(path, overwrite: bool, inputs: list[Path], what: str) -> None:
    if names_a_folder(path):
        raise InputError(f"{what} {os.fspath(path)} ends in {os.fspath(path)[-1]!r}, so it names a folder; give a "
                         "file name")
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} {path} is a directory; give a file name")
    for src in inputs:
        if path.exists() and src.exists() and path.resolve() == src.resolve():
            raise InputError(f"{what} {path} is also an input; write the output somewhere else")
    if path.exists() and not overwrite and not is_special(path):
        raise OutputExistsError(f"{what} {path} already exists; remove it, or pass --overwrite to replace it "
                                "(overwrite=True in Python; it is replaced only when the run succeeds)")
    if is_special(path):  # /dev/null, /dev/stdout, a pipe: written in place, whatever its folder allows
        return
    folder = path.absolute().parent  # its folder is made when written: a file in the way, or no write
    while not folder.exists() and folder != folder.parent:  # permission, failed only after the run (and after
        folder = folder.parent                              # the outputs written before it)
    if not folder.is_dir():
        raise InputError(f"{what} {path}: {folder} is a file, not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{what} {path}: cannot write in {folder} (permission denied)")


def check_distinct_outputs(outputs) -> None:
    """:class:`InputError` if two of ``outputs`` (``(path, what)``; ``None`` and ``-`` skipped)
    name one file (through links too): the second write would silently replace the first."""
    seen: dict[str, str] = {}
    for path, what in outputs:
        if path is None or is_stdio(path):
            continue
        key = os.path.realpath(os.path.abspath(os.fspath(path)))
        if key in seen:
            raise InputError(f"{seen[key]} and {what} are the same file, {path}; give each its own")
        seen[key] = what


def check_outputs(outputs, overwrite: bool, inputs: list[Path]) -> None:
    """Check a command's outputs before any work: ``outputs`` are ``(path, what)`` (``None``: not
    written, ``-``: standard output). At most one goes to standard output, no two name one file
    (:func:`check_distinct_outputs`), and each file passes :func:`check_output`."""
    outputs = [(path, what) for path, what in outputs if path is not None]
    to_stdout = [what for path, what in outputs if is_stdio(path)]
    if len(to_stdout) > 1:
        both = "both" if len(to_stdout) == 2 else "all"
        raise InputError(f"{' and '.join(to_stdout)} would {both} go to standard output; give all but one a file")
    check_distinct_outputs(outputs)
    for path, what in outputs:
        if not is_stdio(path):
            check_output(path, overwrite, inputs, what)


def _is_stream(path) -> bool:
    """A named pipe or a shell's process substitution (``<(...)``, ``/dev/fd/N``): readable once,
    from its start, so it is read through a copy, as standard input is."""
    if path is None or is_stdio(path):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


@contextlib.contextmanager
def stdin_spooled(paths: list):
    """Replace each ``-`` by one temporary copy of standard input, and each named pipe or
    process substitution by a copy of it (read once, constant memory): their readers open a file
    more than once (a gzip test, two passes over a pair list), which a pipe would not survive (it
    lost pairs, or hung). A :class:`SinkalignError` raised inside names each copy as it was
    given (standard input :data:`STDIN_NAME`), not its path."""
    if not any(is_stdio(p) or _is_stream(p) for p in paths):
        yield [None if p is None else Path(p) for p in paths]
        return
    with tempfile.TemporaryDirectory(prefix="sinkalign-stdin-") as tmp:
        out_paths, names = [], {}
        for k, p in enumerate(paths):
            if is_stdio(p) or _is_stream(p):
                spool = Path(tmp) / ("stdin" if is_stdio(p) else f"input{k}")
                if is_stdio(p) and spool.exists():  # '-' twice: one copy
                    out_paths.append(spool)
                    continue
                with open(spool, "wb") as out:
                    if is_stdio(p):
                        shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
                    else:
                        with open(p, "rb") as src:
                            shutil.copyfileobj(src, out, 1 << 20)
                names[str(spool)] = STDIN_NAME if is_stdio(p) else str(p)
                out_paths.append(spool)
            else:
                out_paths.append(None if p is None else Path(p))
        try:
            yield out_paths
        except SinkalignError as exc:
            for spool, name in names.items():
                _rename_path(exc, spool, name)
            raise


def _rename_path(exc: BaseException, old: str, new: str) -> None:
    """Name the file ``old`` as ``new`` in ``exc``'s message (and its ``path``, where it has one)."""
    exc.args = tuple(a.replace(old, new) if isinstance(a, str) else a for a in exc.args)
    if getattr(exc, "path", None) == old:
        exc.path = new


# --------------------------------------------------------------------------------------
# running the chunks: here or on a Dask cluster
# --------------------------------------------------------------------------------------
def chunks(pairs: Iterable, size: int) -> Iterator[list]:
    it = iter(pairs)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def run_local(spec, chunks, batch_size, keep_plan, task=None):
    """Chunks aligned in this process by ``task`` (default :func:`align_chunk`), in order."""
    task = task or align_chunk
    for chunk in chunks:
        yield chunk, task(spec, chunk, batch_size, keep_plan)


#: seconds a run on a cluster waits for a worker (its first one, or one after every worker has
#: left) before it gives up
WORKER_WAIT_S = 60.0
#: seconds between looks at the cluster's workers while a chunk is awaited
WORKER_POLL_S = 1.0


@contextlib.contextmanager
def _client(scheduler: str | None, workers: int | None):
    distributed = require("distributed", "cluster", "sinkalign align --workers/--scheduler")
    if logging.getLogger().getEffectiveLevel() > logging.INFO:  # Dask sets its loggers to INFO: keep them to -v
        for name in ("distributed", "bokeh", "tornado"):
            logging.getLogger(name).setLevel(logging.WARNING)
    if scheduler is not None:
        try:  # a malformed port, before a Client is made (a half-made one stalled 60 s in __del__)
            scheme, location = distributed.comm.parse_address(scheduler)
            if scheme in ("tcp", "tls"):  # a missing port is Dask's default
                distributed.comm.parse_host_port(location, default_port=8786)
        except ValueError as exc:
            raise InputError(f"--scheduler {scheduler}: not an address (host:port, the port a number): "
                             f"{exc}") from None
        try:
            client = distributed.Client(scheduler, set_as_default=False)  # distributed.comm.timeouts.connect
        except (OSError, ValueError) as exc:  # ValueError: an address Dask cannot parse
            raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from exc
        with client:
            try:  # a scheduler without workers would take the tasks and never run them
                client.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except (TimeoutError, OSError) as exc:
                raise InputError(f"the Dask scheduler at {scheduler} has no worker (waited {WORKER_WAIT_S:g} s): "
                                 f"start some (dask worker {scheduler})") from exc
            yield client
        return
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client


def _result(client, future, gatherer, done: int):
    """``future``'s result; an error, not a hang, once the cluster has had no worker for
    :data:`WORKER_WAIT_S` (a scheduler keeps the tasks of a run whose workers all left, and
    waits for new ones without end, and so does a gather from a worker that died).

    The result is gathered once, on ``gatherer``'s thread, while this one watches the workers:
    ``future.result(timeout=...)`` in a loop would leave a gather running after each timeout,
    each fetching the result again."""
    gathered = gatherer.submit(future.result)
    alone_since = None
    try:
        while True:
            try:
                return gathered.result(timeout=WORKER_POLL_S)
            except TimeoutError:
                pass
            if client.nthreads():
                alone_since = None
                continue
            now = time.monotonic()
            if alone_since is None:
                alone_since = now
            elif now - alone_since >= WORKER_WAIT_S:
                address = client.scheduler.address
                raise SinkalignError(f"every worker of the Dask scheduler at {address} has left and none came back "
                                     f"in {WORKER_WAIT_S:g} s, after {done} pairs were aligned: the run is "
                                     f"abandoned; start workers (dask worker {address}) and run it again")
    except BaseException:  # this error, Ctrl-C, a lost scheduler: the gather ends with the future
        future.cancel()
        raise


def run_cluster(spec, chunks, batch_size, keep_plan, scheduler, workers, task):
    """Chunks as Dask tasks; a bounded window in flight; results yielded in input order."""
    distributed = require("distributed", "cluster", "sinkalign align --workers/--scheduler")
    with _client(scheduler, workers) as client, concurrent.futures.ThreadPoolExecutor(1) as gatherer:
        window = max(2, 2 * sum(client.nthreads().values()))
        pending: deque = deque()
        done = 0

        def submit(chunk):
            pending.append((chunk, client.submit(task, spec, chunk, batch_size, keep_plan, pure=False)))

        for chunk in itertools.islice(chunks, window):
            submit(chunk)
        while pending:
            chunk, future = pending.popleft()
            try:
                out = _result(client, future, gatherer, done)
            except distributed.KilledWorker as exc:
                raise SinkalignError(f"a chunk of {len(chunk)} pairs (from {chunk[0][0]} / {chunk[0][2]}) "
                                     f"killed every worker that ran it: {exc}") from exc
            except concurrent.futures.CancelledError as exc:  # Dask's FutureCancelledError: the scheduler is gone
                raise SinkalignError(f"the connection to the Dask scheduler at {client.scheduler.address} was lost "
                                     f"after {done} pairs were aligned: the run is abandoned; run it again") from exc
            future.release()
            done += len(chunk)
            for nxt in itertools.islice(chunks, 1):
                submit(nxt)
            yield chunk, out
