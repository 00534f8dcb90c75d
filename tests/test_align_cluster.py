"""`sinkalign align` on a Dask cluster: two local worker processes give the single-process
output, and a worker killed in the middle of a run costs nothing but a recomputed chunk."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import sinkalign.pipelines.align as pipeline
import sinkalign.pipelines.runner as runner
from sinkalign.cli.main import cli
from sinkalign.pipelines.align import align_fasta

distributed = pytest.importorskip("distributed")

QUERIES = {f"q{i}": s for i, s in enumerate([
    "MKVLAAGHWERTYLLKPQ", "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "MKVLSAGHWERTLLKPQDE", "GHWERTYLLKPQMKV",
    "MSNPKPQRKTRRNTNRRPQ", "MKILSAGHWERTLLKPQ"])}
TARGETS = {"t0": "MKILSAGHWERTLLKPQ", "t1": "MSNPKPQRKTRRNTNRRPQDVKFPG", "t2": "PQRKTKRNTNRRPQDV"}


@pytest.fixture()
def inputs(tmp_path, monkeypatch):
    # the workers compute in the precision mode of this process (tests enable float64 in JAX)
    monkeypatch.setenv("JAX_ENABLE_X64", "1")
    (tmp_path / "q.fa").write_text("".join(f">{k}\n{v}\n" for k, v in QUERIES.items()))
    (tmp_path / "t.fa").write_text("".join(f">{k}\n{v}\n" for k, v in TARGETS.items()))
    return tmp_path


def crash_once(marker, spec, chunk, batch_size, keep_plan):
    """The chunk holding q3 kills its worker process (SIGKILL) the first time it runs."""
    if any(q == "q3" for q, *_ in chunk):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
    return runner.align_chunk(spec, chunk, batch_size, keep_plan)


def test_two_local_workers_give_the_single_process_output(inputs, monkeypatch):
    args = ["align", str(inputs / "q.fa"), str(inputs / "t.fa"), "--chunk-size", "2", "--batch-size", "2",
            "--no-progress"]
    r = CliRunner().invoke(cli, [*args, "-o", str(inputs / "one.tsv"), "--plan-out", str(inputs / "one.npz")])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(pipeline, "run_local", None)  # from here on, only workers may align
    r = CliRunner().invoke(cli, [*args, "--workers", "2", "-o", str(inputs / "two.tsv"),
                                 "--plan-out", str(inputs / "two.npz")])
    assert r.exit_code == 0, r.output
    one, two = (inputs / "one.tsv").read_text(), (inputs / "two.tsv").read_text()
    assert two == one and len(one.splitlines()) == 1 + len(QUERIES) * len(TARGETS)
    with np.load(inputs / "one.npz") as a, np.load(inputs / "two.npz") as b:
        assert a.files == b.files and len(a.files) == len(QUERIES) * len(TARGETS)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])
    assert sorted(p.name for p in inputs.iterdir()) == ["one.npz", "one.tsv", "q.fa", "t.fa", "two.npz", "two.tsv"]


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(inputs):
    marker = inputs / "killed"
    single = inputs / "one.json"
    align_fasta(inputs / "q.fa", inputs / "t.fa", fmt="json", output=single, chunk_size=2, batch_size=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as client:
        out = inputs / "cluster.json"
        n = align_fasta(inputs / "q.fa", inputs / "t.fa", fmt="json", output=out, chunk_size=2, batch_size=2,
                        scheduler=cluster.scheduler_address, _task=functools.partial(crash_once, str(marker)))
        client.wait_for_workers(2, timeout=120)  # the nanny restarts the killed worker
        loads = client.run(lambda: runner._LOADS)
        threads = client.run(lambda: sorted({a.workers for _, a in runner._ALIGNERS.values()}))
        restored = client.run(lambda: (runner._LOADS, runner._MALLOC_RESTORED))
    assert marker.exists()  # the worker running q3's chunk was killed
    assert n == len(QUERIES) * len(TARGETS)
    assert out.read_text() == single.read_text()
    objs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(o["query_id"], o["target_id"]) for o in objs] == [(q, t) for q in QUERIES for t in TARGETS]
    # the model is loaded once per worker process (the restarted one: once if it got a chunk after)
    assert sorted(loads.values()) in ([1, 1], [0, 1])
    # each worker's engine runs on the worker's one thread, not on a thread per CPU
    assert all(t in ([1], []) for t in threads.values()), threads
    # and with malloc's thresholds set back from Dask's MALLOC_TRIM_THRESHOLD_ (glibc)
    if sys.platform.startswith("linux"):
        assert all(ok for n, ok in restored.values() if n), restored


def test_cluster_errors(inputs):
    import dask

    from sinkalign.errors import InputError

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(InputError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        align_fasta(inputs / "q.fa", inputs / "t.fa", output=inputs / "x.tsv", scheduler="tcp://127.0.0.1:9")
    assert not (inputs / "x.tsv").exists()
    # a malformed port: refused at once (a half-made client stalled 60 s before exiting)
    with pytest.raises(InputError, match=r"--scheduler tcp://127.0.0.1:abc: not an address"):
        align_fasta(inputs / "q.fa", inputs / "t.fa", output=inputs / "x.tsv", scheduler="tcp://127.0.0.1:abc")


def test_a_scheduler_without_workers_is_an_error_not_a_hang(inputs, monkeypatch):
    from sinkalign.errors import InputError

    monkeypatch.setattr(runner, "WORKER_WAIT_S", 1.0)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, \
            pytest.raises(InputError, match=r"has no worker \(waited 1 s\): start some \(dask worker "):
        align_fasta(inputs / "q.fa", inputs / "t.fa", output=inputs / "x.tsv", scheduler=cluster.scheduler_address)
    assert not (inputs / "x.tsv").exists()


ROOT = Path(__file__).resolve().parents[1]


def die_on_q3(spec, chunk, batch_size, keep_plan):
    """The chunk holding q3 kills its worker process; a worker without a nanny stays dead."""
    if any(q == "q3" for q, *_ in chunk):
        os.kill(os.getpid(), signal.SIGKILL)
    return runner.align_chunk(spec, chunk, batch_size, keep_plan)


def stall(marker, spec, chunk, batch_size, keep_plan):
    """Marks that a chunk runs, then outlasts the test."""
    Path(marker).touch()
    time.sleep(120)
    return runner.align_chunk(spec, chunk, batch_size, keep_plan)


def dask_process(*args) -> subprocess.Popen:
    """`dask scheduler` or `dask worker ... --no-nanny` as its own process, able to import the tests."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_run_whose_workers_all_left_is_an_error_not_a_hang(inputs, monkeypatch):
    """A worker that dies for good (no nanny: a batch job ended, a machine went down) leaves the
    scheduler holding the run's tasks for ever; the run waits WORKER_WAIT_S for a worker, then
    stops with an error, and writes nothing."""
    from sinkalign.errors import SinkalignError

    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=":0", silence_logs=logging.ERROR) as cluster:
        worker = dask_process("worker", cluster.scheduler_address, "--no-nanny", "--nthreads", "1", "--no-dashboard")
        try:
            with distributed.Client(cluster) as client:
                client.wait_for_workers(1, timeout=120)
            monkeypatch.setattr(runner, "WORKER_WAIT_S", 2.0)
            started = time.monotonic()
            with pytest.raises(SinkalignError, match=r"every worker of the Dask scheduler at tcp://.* has left and "
                                                     r"none came back in 2 s, after \d+ pairs were aligned: the run is "
                                                     r"abandoned; start workers \(dask worker tcp://"):
                align_fasta(inputs / "q.fa", inputs / "t.fa", output=inputs / "x.tsv", chunk_size=2, batch_size=2,
                            scheduler=cluster.scheduler_address, _task=die_on_q3)
            assert time.monotonic() - started < 60
        finally:
            worker.kill()
            worker.wait()
    assert worker.returncode == -signal.SIGKILL  # by its own hand, on q3's chunk
    assert not (inputs / "x.tsv").exists()


def test_a_lost_scheduler_is_an_error_not_a_traceback(inputs):
    from sinkalign.errors import SinkalignError

    marker, address_file = inputs / "running", inputs / "scheduler.json"
    scheduler = dask_process("scheduler", "--port", "0", "--no-dashboard", "--scheduler-file", str(address_file))
    worker = None
    try:
        for _ in range(600):
            if address_file.exists() and address_file.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(address_file.read_text())["address"]
        worker = dask_process("worker", address, "--no-nanny", "--nthreads", "1", "--no-dashboard")
        threading.Thread(target=lambda: (_wait_for(marker), scheduler.kill()), daemon=True).start()
        started = time.monotonic()
        with pytest.raises(SinkalignError, match=rf"the connection to the Dask scheduler at {address} was lost "
                                                 r"after 0 pairs were aligned: the run is abandoned; run it again"):
            align_fasta(inputs / "q.fa", inputs / "t.fa", output=inputs / "x.tsv", chunk_size=2, batch_size=2,
                        scheduler=address, _task=functools.partial(stall, str(marker)))
        assert time.monotonic() - started < 100  # the chunk would take 120 s
    finally:
        for process in (scheduler, worker):
            if process is not None:
                process.kill()
                process.wait()
    assert marker.exists() and not (inputs / "x.tsv").exists()


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


MALLINFO_PROBE = r"""
import ctypes, sys
import numpy as np
import sinkalign.pipelines.runner as runner

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2

def mapped_for_one_mib_array():
    before = libc.mallinfo2().hblks
    a = np.ones(1 << 17)  # 1 MiB
    return libc.mallinfo2().hblks - before

print(mapped_for_one_mib_array(), mapped_for_one_mib_array())  # glibc: mapped, then dynamic: from the heap
runner._worker_threads = lambda: 1  # as inside a Dask worker
print(runner._restore_malloc_thresholds())
print(mapped_for_one_mib_array())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_dask_workers_malloc_thresholds_are_set_back(tmp_path):
    """Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which maps every array above 128
    KB afresh (2.6x slower alignment, `benchmarks/host_parallel.py`); in a worker,
    `_restore_malloc_thresholds` makes a 1 MiB array come from the heap again."""
    import ctypes

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("glibc < 2.33: no mallinfo2")
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    res = subprocess.run([sys.executable, "-c", MALLINFO_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["1", "1", "True", "0"]  # mapped again and again until set back
    # without the setting nothing is changed (glibc's dynamic threshold)
    env.pop("MALLOC_TRIM_THRESHOLD_")
    res = subprocess.run([sys.executable, "-c", MALLINFO_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert res.stdout.split() == ["1", "0", "False", "0"], res.stderr[-2000:]
