"""`Aligner(processes=N)`: the host's share on worker processes gives what threads give."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import time

import numpy as np
import pytest

from sinkalign.align.aligner import Aligner
from sinkalign.errors import InputError, SinkalignError

RNG = np.random.default_rng(11)
AA = np.array(list("ACDEFGHIKLMNPQRSTVWY"))


def _pairs(n: int, length: int = 60) -> list:
    out = []
    for i in range(n):
        q = "".join(RNG.choice(AA, length + i % 7))
        t = list(q)
        for j in RNG.choice(len(t), len(t) // 4, replace=False):
            t[j] = RNG.choice(AA)
        del t[10 : 10 + i % 4]
        out.append((f"q{i}", q, f"t{i}", "".join(t)))
    return out


ITEMS = _pairs(40)  # three numpy-engine tasks of 16 pairs


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x.query_id, x.target_id) == (y.query_id, y.target_id)
        np.testing.assert_array_equal(x.alignment.pairs, y.alignment.pairs)
        np.testing.assert_array_equal(x.alignment.match_posterior, y.alignment.match_posterior)
        np.testing.assert_array_equal(x.alignment.query_gap_posterior, y.alignment.query_gap_posterior)
        assert (x.alignment.score, x.score, x.evalue) == (y.alignment.score, y.score, y.evalue)


@pytest.fixture(scope="module")
def threaded():
    return Aligner.load("learned", workers=2)


def test_processes_give_what_threads_give(threaded):
    want = list(threaded.align_many(ITEMS))
    with Aligner.load("learned", processes=2) as aligner:
        got = list(aligner.align_many(ITEMS))
        _same(got, want)
        assert aligner._pool is not None
        again = list(aligner.align_many(ITEMS[:5]))  # the pool is kept between calls
        _same(again, want[:5])
    assert aligner._pool is None  # closed by the with block
    _same(list(aligner.align_many(ITEMS[:3])), want[:3])  # and started again when used
    aligner.close()


def test_a_bad_pair_is_raised_after_the_results_before_it(threaded):
    bad = [*ITEMS[:20], ("qx", "", "tx", "MKV"), *ITEMS[20:]]
    outcomes = []
    for aligner in (threaded, Aligner.load("learned", processes=2)):
        got = []
        with pytest.raises(InputError) as err:
            for res in aligner.align_many(bad):
                got.append(res)
        outcomes.append((len(got), str(err.value)))
        aligner.close()
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == 20, outcomes


def test_the_jax_engine_decodes_on_processes():
    want = list(Aligner.load("learned", engine="jax").align_many(ITEMS[:24], batch_size=24))
    with Aligner.load("learned", engine="jax", processes=2) as aligner:
        _same(list(aligner.align_many(ITEMS[:24], batch_size=24)), want)


def test_a_pickled_aligner_aligns_alike(threaded):
    copy = pickle.loads(pickle.dumps(threaded))
    assert copy.workers == threaded.workers == 2 and copy.processes == 0 and copy._pool is None
    _same(list(copy.align_many(ITEMS[:6])), list(threaded.align_many(ITEMS[:6])))


def test_a_pickled_jax_engine_aligner_holds_its_parameters_on_the_host_until_it_solves():
    import jax

    aligner = Aligner.load("learned", engine="jax")
    want = list(aligner.align_many(ITEMS[:6], batch_size=6))
    copy = pickle.loads(pickle.dumps(aligner))
    leaves = jax.tree_util.tree_leaves(copy.params)
    assert leaves and all(isinstance(leaf, np.ndarray) for leaf in leaves)  # no device array to unpickle
    for a, b in zip(jax.tree_util.tree_leaves(aligner.params), leaves):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), b)
    _same(list(copy.align_many(ITEMS[:6], batch_size=6)), want)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(copy.params))  # put there once


@pytest.mark.parametrize("engine", ["numpy", "jax"])
def test_worker_processes_start_no_jax_backend(engine):
    """A worker process only decodes (and solves with NumPy): it starts no JAX backend, which
    on a GPU machine is an accelerator context per process."""
    xla_bridge = pytest.importorskip("jax._src.xla_bridge")
    if not hasattr(xla_bridge, "backends_are_initialized"):
        pytest.skip("this JAX has no xla_bridge.backends_are_initialized")
    with Aligner.load("learned", engine=engine, processes=1) as aligner:
        list(aligner.align_many(ITEMS[:4], batch_size=4))
        assert aligner._pool.submit(xla_bridge.backends_are_initialized).result(timeout=60) is False


def test_blas_that_cannot_be_limited_is_said_once(monkeypatch, caplog):
    import logging
    import sys

    from sinkalign.align.aligner import _SingleThreadedBlas

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # as if not installed: its import fails
    blas = _SingleThreadedBlas()
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.aligner"):
        for _ in range(3):
            with blas:
                with blas:
                    pass
    said = [r for r in caplog.records if "threadpoolctl" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, caplog.records
    assert "pip install threadpoolctl" in said[0].getMessage()


def test_a_copy_keeps_its_settings_and_shares_the_model():
    import copy

    with Aligner.load("learned", engine="jax", processes=2) as aligner:
        list(aligner.align_many(ITEMS[:2], batch_size=2))
        twin = copy.copy(aligner)
        assert (twin.workers, twin.processes) == (aligner.workers, 2)
        assert twin._pool is None and aligner._pool is not None  # its own processes, when it uses them
        assert twin._plans_fn() is aligner._plans_fn()  # nothing compiled again
        twin.close()  # closes nothing of the original's
        assert aligner._pool is not None


def test_more_processes_than_cpus_is_a_warning(monkeypatch, caplog):
    """More worker processes than usable CPUs add no speed and a model copy each: said, not refused."""
    from sinkalign.align import aligner as A

    monkeypatch.setattr(A, "default_workers", lambda: 3)
    with caplog.at_level(logging.WARNING, logger="sinkalign.align.aligner"):
        Aligner.load("learned", processes=3)
        assert not caplog.records
        Aligner.load("learned", processes=4)
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "processes=4 is more than the 3 CPU(s) this process may use: "]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_processes(bad):
    with pytest.raises(InputError, match="processes=.* must be a whole number >= 0"):
        Aligner.load("learned", processes=bad)


def test_align_command_on_processes_writes_what_threads_write(tmp_path):
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    (tmp_path / "q.fa").write_text("".join(f">{q}\n{qs}\n" for q, qs, _, _ in ITEMS[:20]))
    (tmp_path / "t.fa").write_text("".join(f">{t}\n{ts}\n" for _, _, t, ts in ITEMS[:20]))
    args = ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--pairing", "zip", "--no-progress",
            "--format", "json"]
    runner = CliRunner()
    r = runner.invoke(cli, [*args, "--threads", "1", "-o", str(tmp_path / "threads.json")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, [*args, "--processes", "2", "-o", str(tmp_path / "processes.json")])
    assert r.exit_code == 0, r.output
    want = (tmp_path / "threads.json").read_text()
    assert (tmp_path / "processes.json").read_text() == want and len(want.splitlines()) == 20
    r = runner.invoke(cli, [*args, "--processes", "2", "--threads", "2"])
    assert r.exit_code == 2 and "--processes aligns on this machine's processes" in r.output


def test_align_fasta_processes_checked(tmp_path):
    from sinkalign.pipelines.align import align_fasta

    (tmp_path / "q.fa").write_text(">q\nMKVL\n")
    for bad, match in ((0, "processes=0 must be a whole number >= 1"),
                       (2.0, "processes=2.0 must be a whole number >= 1")):
        with pytest.raises(InputError, match=match):
            align_fasta(tmp_path / "q.fa", tmp_path / "q.fa", output=tmp_path / "o.tsv", processes=bad)
    with pytest.raises(InputError, match="processes is for a local run"):
        align_fasta(tmp_path / "q.fa", tmp_path / "q.fa", output=tmp_path / "o.tsv", processes=2, threads=2)
    assert not (tmp_path / "o.tsv").exists()


def test_msa_on_processes_gives_the_threads_alignment(tmp_path):
    from click.testing import CliRunner

    from sinkalign.cli.main import cli

    (tmp_path / "f.fa").write_text("".join(f">{q}\n{qs}\n" for q, qs, _, _ in ITEMS[:6]))
    runner = CliRunner()
    out = {}
    for name, opts in (("threads", ["--threads", "1"]), ("processes", ["--processes", "2"])):
        r = runner.invoke(cli, ["msa", str(tmp_path / "f.fa"), "--no-progress", *opts, "--column-scores",
                                str(tmp_path / f"{name}.tsv"), "-o", str(tmp_path / f"{name}.afa")])
        assert r.exit_code == 0, r.output
        out[name] = (tmp_path / f"{name}.afa").read_text() + (tmp_path / f"{name}.tsv").read_text()
    assert out["processes"] == out["threads"] and out["threads"].count(">") == 6
    r = runner.invoke(cli, ["msa", str(tmp_path / "f.fa"), "--processes", "2", "--workers", "2"])
    assert r.exit_code == 2 and "--processes aligns on this machine's processes" in r.output


def test_a_killed_worker_process_is_an_error_and_the_next_call_starts_anew(threaded):
    want = list(threaded.align_many(ITEMS[:20]))
    with Aligner.load("learned", processes=2) as aligner:
        list(aligner.align_many(ITEMS[:1]))
        for pid in list(aligner._pool._processes):  # every worker process, killed as the OOM killer would
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not aligner._pool._broken and time.monotonic() < deadline:  # the executor has seen it
            time.sleep(0.05)
        with pytest.raises(SinkalignError, match=r"a worker process of the aligner \(processes=2\) died"):
            list(aligner.align_many(ITEMS[:20]))
        assert aligner._pool is None
        _same(list(aligner.align_many(ITEMS[:20])), want)


SCRIPT = """\
from sinkalign import Aligner
items = [("q", "MKTAYIAKQRQISFVKSHFSRQ", "t", "MKTAYIAKQRQISFVKSHLSRQ")] * 4
{body}
"""
UNGUARDED = """\
with Aligner.load("learned", processes=2) as aligner:
    print(len(list(aligner.align_many(items))))
"""
CONDITIONAL = """\
if len(items) > 2:
    with Aligner.load("learned", processes=2) as aligner:
        print(len(list(aligner.align_many(items))))
"""
GUARDED = """\
def main():
    with Aligner.load("learned", processes=2) as aligner:
        print(len(list(aligner.align_many(items))))

if __name__ == "__main__":
    main()
"""


def _run_script(tmp_path, body: str):
    import subprocess
    import sys

    script = tmp_path / "analysis.py"
    script.write_text(SCRIPT.format(body=body))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env,
                         cwd=tmp_path)
    return res, sorted(p.name for p in tmp.iterdir() if p.name.startswith("sinkalign-aligner-"))


def test_a_script_without_a_main_guard_is_refused_before_any_process_starts(tmp_path):
    """The 'spawn' start method runs the main script again in each worker process; unguarded,
    the worker refused to start processes of its own and exited, while this process blocked
    forever writing the ~4 MB aligner into the worker's start pipe (the timeout here). A call from
    an unguarded top-level line is now refused at once, saying what to do."""
    res, left = _run_script(tmp_path, UNGUARDED)
    assert res.returncode != 0
    assert "SinkalignError: processes=2 from the top level of the main script" in res.stderr
    assert 'Put the script\'s work under `if __name__ == "__main__":`' in res.stderr
    assert res.stderr.count("sinkalign.errors.SinkalignError:") == 1  # one traceback: no worker started
    assert left == []


def test_a_worker_that_dies_as_it_starts_is_an_error_not_a_hang(tmp_path):
    """Under a condition the check cannot judge, the workers still run the line again and die
    as they start: the pool's death is an error (it hung, as above), the workers are told why
    in their own tracebacks, and no handover file is left behind."""
    res, left = _run_script(tmp_path, CONDITIONAL)
    assert res.returncode != 0
    assert "SinkalignError: a worker process of the aligner (processes=2) died" in res.stderr
    assert "a worker process of an aligner runs the main script again as it starts" in res.stderr
    assert left == []


def test_a_guarded_script_runs_and_leaves_no_file(tmp_path):
    res, left = _run_script(tmp_path, GUARDED)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["4"] and left == []


def test_the_workers_read_the_aligner_from_a_private_file_removed_when_the_pool_stops(threaded):
    aligner = Aligner.load("learned", processes=1)
    list(aligner.align_many(ITEMS[:2]))
    path = aligner._pool_finalizer.peek()[2][1]
    assert os.path.exists(path) and (os.stat(path).st_mode & 0o777) == 0o600
    aligner.close()
    assert not os.path.exists(path) and aligner._pool is None
    list(aligner.align_many(ITEMS[:2]))  # a new pool, a new file
    path = aligner._pool_finalizer.peek()[2][1]
    aligner._discard_pool()
    assert not os.path.exists(path)


def test_auto_processes_rule(monkeypatch):
    from sinkalign.align import aligner as aligner_module
    from sinkalign.pipelines import runner

    monkeypatch.setattr(aligner_module, "default_workers", lambda: 16)
    n = runner.AUTO_PROCESSES_MIN_PAIRS
    assert n == 1024
    assert runner.auto_processes(n) == 16 and runner.auto_processes(n - 1) is None
    for asked in ({"threads": 16}, {"processes": 4}, {"workers": 2}, {"scheduler": "tcp://h:8786"}):
        assert runner.auto_processes(10 * n, **asked) is None  # what the caller asked for stands
    big = aligner_module.AUTO_BAND_CELLS
    assert runner.auto_processes(n, largest_cells=big) == 16
    assert runner.auto_processes(n, largest_cells=big + 1) is None  # long pairs share one process's memory budget
    monkeypatch.setattr(aligner_module, "default_workers", lambda: 1)
    assert runner.auto_processes(10 * n) is None  # one CPU: no process to gain


def test_a_large_align_run_takes_processes_by_default(tmp_path, monkeypatch):
    """`sinkalign align` with neither --threads nor --processes: a run of at least
    AUTO_PROCESSES_MIN_PAIRS pairs aligns on a worker process per CPU (here 2 CPUs and a
    threshold of 20, so that 20 pairs count as large), a smaller run on threads; the same output."""
    from click.testing import CliRunner

    from sinkalign.align import aligner as aligner_module
    from sinkalign.cli.main import cli
    from sinkalign.pipelines import align as align_pipeline
    from sinkalign.pipelines import runner

    monkeypatch.setattr(runner, "AUTO_PROCESSES_MIN_PAIRS", 20)
    monkeypatch.setattr(aligner_module, "default_workers", lambda: 2)
    seen, run_local = [], align_pipeline.run_local

    def recording(spec, *args):
        seen.append((spec.threads, spec.processes))
        return run_local(spec, *args)

    monkeypatch.setattr(align_pipeline, "run_local", recording)
    largest, auto = [], align_pipeline.auto_processes

    def recording_auto(n_pairs, **kw):
        largest.append(kw["largest_cells"])
        return auto(n_pairs, **kw)

    monkeypatch.setattr(align_pipeline, "auto_processes", recording_auto)
    outputs = {}
    for n in (20, 19):
        (tmp_path / "q.fa").write_text("".join(f">{q}\n{qs}\n" for q, qs, _, _ in ITEMS[:n]))
        (tmp_path / "t.fa").write_text("".join(f">{t}\n{ts}\n" for _, _, t, ts in ITEMS[:n]))
        for name, extra in (("default", []), ("threads", ["--threads", "2"])):
            out = tmp_path / f"{n}_{name}.json"
            r = CliRunner().invoke(cli, ["align", str(tmp_path / "q.fa"), str(tmp_path / "t.fa"), "--pairing", "zip",
                                         "--no-progress", "--format", "json", "-o", str(out), *extra])
            assert r.exit_code == 0, r.output
            outputs[n, name] = out.read_text()
    assert seen == [(None, 2), (2, None), (None, None), (2, None)]
    cells = [len(qs) * len(ts) for _, qs, _, ts in ITEMS]
    assert largest == [max(cells[:20])] * 2 + [max(cells[:19])] * 2  # the scan's largest pair reaches the rule
    assert outputs[20, "default"] == outputs[20, "threads"] and len(outputs[20, "default"].splitlines()) == 20
    assert outputs[19, "default"] == outputs[19, "threads"]


def test_the_scan_finds_the_largest_pair(tmp_path):
    """The residue pairs of a run's largest pair, as the processes rule reads them: all-vs-all
    (the longest query against the longest target), zip and a pair list (the pairs themselves)."""
    from sinkalign.pipelines.align import _FastaPairs, _ListedPairs

    (tmp_path / "q.fa").write_text(">q1\n" + "M" * 10 + "\n>q2\n" + "K" * 30 + "\n")
    (tmp_path / "t.fa").write_text(">t1\n" + "W" * 20 + "\n>t2\n" + "L" * 5 + "\n")
    q, t = tmp_path / "q.fa", tmp_path / "t.fa"
    assert _FastaPairs(q, t, "all", None, None).scan("tsv").largest == 30 * 20
    assert _FastaPairs(q, t, "zip", None, None).scan("tsv").largest == max(10 * 20, 30 * 5)
    (tmp_path / "pairs.tsv").write_text("q2\tt2\nq1\tt2\n")
    assert _ListedPairs(tmp_path / "pairs.tsv", q, t).scan("tsv").largest == 30 * 5


def test_a_large_family_takes_processes_by_default(tmp_path, monkeypatch):
    """`sinkalign msa` with neither --threads nor --processes: a family of at least
    AUTO_PROCESSES_MIN_PAIRS pairs runs its pairwise alignments on a worker process per CPU
    (here 2 CPUs and a threshold of 15 pairs: 6 records), a smaller one on threads; the same alignment."""
    from click.testing import CliRunner

    from sinkalign.align import aligner as aligner_module
    from sinkalign.cli.main import cli
    from sinkalign.pipelines import msa as msa_pipeline
    from sinkalign.pipelines import runner

    monkeypatch.setattr(runner, "AUTO_PROCESSES_MIN_PAIRS", 15)
    monkeypatch.setattr(aligner_module, "default_workers", lambda: 2)
    seen, load = [], msa_pipeline.load_aligner

    def recording(spec):
        seen.append((spec.alphabet, spec.threads, spec.processes))
        return load(spec)

    monkeypatch.setattr(msa_pipeline, "load_aligner", recording)
    out = {}
    for n, name, opts in ((6, "default", []), (6, "threads", ["--threads", "2"]), (5, "default", [])):
        (tmp_path / "f.fa").write_text("".join(f">{q}\n{qs}\n" for q, qs, _, _ in ITEMS[:n]))
        seen.clear()
        r = CliRunner().invoke(cli, ["msa", str(tmp_path / "f.fa"), "--no-progress", *opts, "-o",
                                     str(tmp_path / f"{n}{name}.afa")])
        assert r.exit_code == 0, r.output
        out[n, name] = ((tmp_path / f"{n}{name}.afa").read_text(), seen[-1])
    assert out[6, "default"][1] == ("protein", None, 2) and out[6, "threads"][1] == ("protein", 2, None)
    assert out[6, "default"][0] == out[6, "threads"][0] and out[6, "default"][0].count(">") == 6
    assert out[5, "default"][1] == ("protein", None, None)  # 10 pairs: threads


def test_no_processes_by_default_from_an_unguarded_script(tmp_path):
    """A script calling the API at its top level, outside ``if __name__ == "__main__":``, keeps
    threads: 'spawn' would run that line again in every worker (the aligner refuses processes
    there); under the guard the default takes processes."""
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text("from sinkalign.align import aligner\nfrom sinkalign.pipelines import runner\n\n"
                      "aligner.default_workers = lambda: 4\nprint('top', runner.auto_processes(5000))\n"
                      "if __name__ == '__main__':\n    print('guarded', runner.auto_processes(5000))\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["top None", "guarded 4"]
