"""Training loop of the DNA language models (sinkalign.lm.train, `sinkalign lm train`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from click.testing import CliRunner

from sinkalign.cli.main import cli
from sinkalign.errors import CheckpointError
from sinkalign.lm import load_checkpoint
from sinkalign.lm.data import encode
from sinkalign.lm.train import (
    OPTIMIZER_STATE,
    TRAINER_STATE,
    TrainConfig,
    TrainingInterrupted,
    WindowSampler,
    find_latest_checkpoint,
    lr_multiplier,
    train_lm,
    train_lm_ddp,
)
from tests.cli_errors import assert_one_line_error, terminal_signals


def _markov_chain_dna(n: int, seed: int = 0) -> str:
    """Order-2 chain with peaked transitions (about 1.1 bits/base): learnable in a few steps."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(4, 0.3), size=16)  # [context, next]
    out = list(rng.integers(0, 4, size=2))
    u = rng.random(n)
    for i in range(n - 2):
        cdf = np.cumsum(probs[out[-2] * 4 + out[-1]])
        out.append(min(int(np.searchsorted(cdf, u[i])), 3))
    return "".join("ACGT"[x] for x in out)


@pytest.fixture(scope="module")
def fasta(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lm_train") / "toy.fa"
    seq = _markov_chain_dna(12_000)
    path.write_text(">toy description\n" + "\n".join(seq[i : i + 70] for i in range(0, len(seq), 70)) + "\n")
    return path


def _config(fasta: Path, out: Path, **kw) -> TrainConfig:
    base = dict(fasta=str(fasta), attention="rope", out_dir=str(out), steps=12, batch_size=4, seq_len=32,
                d_model=32, n_layers=2, n_heads=2, lr=3e-3, warmup_steps=3, eval_every=6, eval_max_bases=512,
                save_every=6, log_every=3, num_threads=1, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def _metric_steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


# ----------------------------------------------------------------------------- config, schedule, sampler


def test_train_config_validation(fasta, tmp_path):
    with pytest.raises(ValueError, match=r"attention='flash' is not one of goat, bam, sla, rope, alibi, nope"):
        _config(fasta, tmp_path, attention="flash")
    with pytest.raises(ValueError, match=r"steps=0 must be >= 1"):
        _config(fasta, tmp_path, steps=0)
    with pytest.raises(ValueError, match=r"lr=0.0 must be > 0"):
        _config(fasta, tmp_path, lr=0.0)
    with pytest.raises(ValueError, match=r"d_model=30 must be divisible by n_heads=4"):
        _config(fasta, tmp_path, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match=r"unknown model options \['goat_bogus'\]; valid: \[") as err:
        _config(fasta, tmp_path, model_options=(("goat_bogus", 1),))
    assert "goat_init" in str(err.value) and "d_model" not in str(err.value)  # the settings of their own not offered
    with pytest.raises(ValueError, match=r"model options may not set d_model, max_train_len, which have settings of "
                                         r"their own \(d_model: --d-model / d_model; max_train_len: --seq-len / "
                                         r"seq_len\)"):
        _config(fasta, tmp_path, model_options=(("d_model", 64), ("max_train_len", 8)))
    with pytest.raises(ValueError, match=r"goat_init='wild' is not one of"):
        _config(fasta, tmp_path, attention="goat", model_options=(("goat_init", "wild"),))
    with pytest.raises(ValueError, match=r"device='tpu' is not one of 'cpu', 'cuda'"):
        _config(fasta, tmp_path, device="tpu")
    cfg = _config(fasta, tmp_path, attention="goat", model_options=(("goat_n_freqs", 3),))
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.model_config().max_train_len == 32 and cfg.model_config().goat_n_freqs == 3


def test_lr_schedule_warmup_then_cosine():
    kw = dict(steps=100, warmup_steps=10, min_lr_ratio=0.1)
    mult = [lr_multiplier(s, **kw) for s in range(100)]
    assert mult[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert mult[10] == pytest.approx(1.0) and mult[99] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(mult[10:], mult[11:]))  # monotone decay after warmup
    assert mult[10 + 89 // 2] == pytest.approx(0.55, abs=0.02)  # cosine midpoint
    assert lr_multiplier(0, steps=5, warmup_steps=0, min_lr_ratio=0.0) == pytest.approx(1.0)


def test_window_sampler_is_a_function_of_seed_rank_step():
    rng = np.random.default_rng(1)
    seqs = ["".join(rng.choice(list("ACGT"), 500)), "ACGT" * 10, "NNNNNNNNNN" + "".join(rng.choice(list("ACGT"), 300))]
    s0 = WindowSampler(seqs, 20, seed=3, rank=0, max_n_fraction=0.0)
    again = WindowSampler(seqs, 20, seed=3, rank=0, max_n_fraction=0.0)
    other_rank = WindowSampler(seqs, 20, seed=3, rank=1, max_n_fraction=0.0)
    b5 = s0.batch(5, 64)
    assert b5.shape == (64, 20) and b5.dtype == torch.int64
    assert torch.equal(b5, again.batch(5, 64))  # no hidden state: same step, same batch
    s0.batch(6, 64)
    assert torch.equal(b5, s0.batch(5, 64))
    assert not torch.equal(b5, s0.batch(6, 64))
    assert not torch.equal(b5, other_rank.batch(5, 64))
    assert int((b5 == 4).sum()) == 0  # windows holding N were redrawn
    tokens = [encode(s) for s in seqs]
    for row in b5.numpy():  # every window is a substring of one record
        assert any(any(np.array_equal(t[i : i + 20], row) for i in range(t.size - 19)) for t in tokens)
    assert s0.state(7) == {"kind": "counter", "seed": 3, "length": 20, "next_step": 7}
    with pytest.raises(ValueError, match=r"no training sequence holds a window of 1000 bases \(longest is 500\)"):
        WindowSampler(seqs, 1000, seed=0)


# ----------------------------------------------------------------------------- training runs


def test_train_learns_writes_metrics_and_checkpoints(fasta, tmp_path):
    out = tmp_path / "run"
    res = train_lm(_config(fasta, out, steps=60, eval_every=30, save_every=20, log_every=10, lr=1e-2,
                           warmup_steps=5, eval_max_bases=None))
    assert (res.step, res.start_step, res.rank, res.world_size) == (60, 0, 0, 1)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [10, 20, 30, 40, 50, 60]
    for x in lines:
        assert {"step", "loss", "bits_per_base", "lr", "tokens_per_s"} <= set(x)
        assert x["bits_per_base"] == pytest.approx(x["loss"] / math.log(2))
    assert [x["step"] for x in lines if "val_bits_per_base" in x] == [30, 60]
    # the toy chain has ~1.1 bits/base of entropy and ~1.9 bits of composition: the model
    # must have learned context, and the final figure is the one returned
    assert lines[-1]["val_bits_per_base"] == res.val_bits_per_base
    assert res.val_bits_per_base < 1.6
    assert lines[-1]["bits_per_base"] < lines[0]["bits_per_base"]
    # checkpoints: the newest keep_checkpoints=2 survive, latest.json names the last
    ckdir = out / "checkpoints"
    assert sorted(p.name for p in ckdir.iterdir()) == ["latest.json", "step-00000040", "step-00000060"]
    assert json.loads((ckdir / "latest.json").read_text()) == {"step": 60, "dir": "step-00000060"}
    assert find_latest_checkpoint(out) == ckdir / "step-00000060" == Path(res.checkpoint_dir)
    ckpt = load_checkpoint(res.checkpoint_dir)
    assert ckpt.extra["step"] == 60 and ckpt.config.attention == "rope"
    state = json.loads((ckdir / "step-00000060" / TRAINER_STATE).read_text())
    assert state["step"] == 60 and state["sampler"]["next_step"] == 60 and state["world_size"] == 1
    opt = safetensors.torch.load_file(str(ckdir / "step-00000060" / OPTIMIZER_STATE))
    assert "rng.torch.rank0" in opt and any(k.endswith(".exp_avg_sq") for k in opt)
    # an existing run is not silently overwritten
    with pytest.raises(ValueError, match=r"already holds checkpoints \(step-00000060\); pass resume=True to "
                                         r"continue, or choose another out_dir$"):
        train_lm(_config(fasta, out, steps=60))


def test_resume_matches_uninterrupted_run(fasta, tmp_path):
    """2N steps straight == N steps, then resume from the step-N checkpoint for N more."""
    cfg = dict(steps=16, save_every=8, eval_every=8, dropout=0.1, attention="goat",
               model_options=(("goat_n_freqs", 3),))
    straight = train_lm(_config(fasta, tmp_path / "a", **cfg))
    # reconstruct the state "killed right after step 8": copy the run, drop the step-16 checkpoint
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    ck = tmp_path / "b" / "checkpoints"
    shutil.rmtree(ck / "step-00000016")
    (ck / "latest.json").write_text(json.dumps({"step": 8, "dir": "step-00000008"}))
    resumed = train_lm(_config(fasta, tmp_path / "b", resume=True, **cfg))
    assert (resumed.start_step, resumed.step) == (8, 16)
    assert resumed.weights_sha256 == straight.weights_sha256  # bit-identical weights (dropout RNG restored)
    assert resumed.train_loss == pytest.approx(straight.train_loss, rel=1e-6)
    assert resumed.val_bits_per_base == pytest.approx(straight.val_bits_per_base, rel=1e-6)
    assert _metric_steps(tmp_path / "b" / "metrics.jsonl") == _metric_steps(tmp_path / "a" / "metrics.jsonl")
    # settings that change the trajectory cannot differ on resume
    with pytest.raises(ValueError, match=r"cannot resume from .*step-00000016: the run's settings differ "
                                         r"\(lr: checkpoint 0.003 vs now 0.001\)"):
        train_lm(_config(fasta, tmp_path / "b", resume=True, **{**cfg, "lr": 1e-3}))
    # more steps than the finished run had: its schedule ended; --init starts a new run from it
    with pytest.raises(ValueError, match=r"\(steps: checkpoint 16 vs now 32\); to train on from this model with a "
                                         rf"new schedule, start a new run from it \(--init {tmp_path / 'b'}, another "
                                         r"--out\)"):
        train_lm(_config(fasta, tmp_path / "b", resume=True, **{**cfg, "steps": 32}))


def test_time_limit_ends_the_run_with_an_evaluation_and_a_checkpoint_and_resume_goes_on(fasta, tmp_path, monkeypatch):
    """--time-limit stops after the first step past the limit (here: every step takes a
    simulated minute), evaluates and checkpoints there; a resume continues to --steps."""
    import sinkalign.lm.train as T

    clock = iter(range(0, 10_000, 30))  # each perf_counter() call advances 30 s
    monkeypatch.setattr(T.time, "perf_counter", lambda: float(next(clock)))
    cfg = dict(steps=12, save_every=0, eval_every=0, log_every=100)
    first = train_lm(_config(fasta, tmp_path / "run", time_limit_minutes=2.5, **cfg))
    assert first.step < 12 and first.val_bits_per_base is not None
    assert find_latest_checkpoint(tmp_path / "run").name == f"step-{first.step:08d}"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == first.step and "val_bits_per_base" in records[-1]
    monkeypatch.undo()
    rest = train_lm(_config(fasta, tmp_path / "run", resume=True, **cfg))
    assert (rest.start_step, rest.step) == (first.step, 12)
    with pytest.raises(ValueError, match="time_limit_minutes"):
        _config(fasta, tmp_path / "x", time_limit_minutes=0.0)


def test_cli_says_when_the_time_limit_ended_the_run_and_how_to_resume(fasta, tmp_path, monkeypatch):
    """A --time-limit stop exits 0 (the run is whole up to there) and says it stopped early, with
    the command that resumes it (it printed only the last step's line)."""
    import sinkalign.lm.train as T

    clock = iter(range(0, 10_000, 30))  # each perf_counter() call advances 30 s
    monkeypatch.setattr(T.time, "perf_counter", lambda: float(next(clock)))
    out = tmp_path / "limited"
    args = ["lm", "train", "--fasta", str(fasta), "--attention", "rope", "--out", str(out), "--steps", "12",
            "--batch-size", "2", "--seq-len", "32", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
            "--eval-max-bases", "256", "--save-every", "0", "--eval-every", "0", "--threads", "1", "--no-progress",
            "--time-limit", "2.5"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    step = find_latest_checkpoint(out).name
    n = int(step.split("-")[1])
    assert 0 < n < 12
    assert f"stopped at --time-limit 2.5 minutes, after step {n} of 12; resume with: sinkalign lm train" in res.stderr
    assert res.stderr.rstrip().endswith("--time-limit 2.5 --resume")


def test_killed_subprocess_resumes_to_the_same_weights(fasta, tmp_path):
    """SIGKILL a CLI training run after its first checkpoint, resume, compare with a clean run."""
    out = tmp_path / "killed"
    args = ["lm", "train", "--fasta", str(fasta), "--attention", "alibi", "--out", str(out), "--steps", "150",
            "--batch-size", "4", "--seq-len", "32", "--d-model", "32", "--n-layers", "2", "--n-heads", "2",
            "--lr", "0.003", "--warmup-steps", "3", "--eval-every", "0", "--eval-max-bases", "512",
            "--save-every", "5", "--keep-checkpoints", "3", "--log-every", "5", "--threads", "1",
            "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from sinkalign.cli.main import cli; cli()", *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoints" / "latest.json").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        time.sleep(0.3)  # let it run on into later steps / checkpoint writes
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    ckdir = out / "checkpoints"
    latest = find_latest_checkpoint(out)
    killed_at = json.loads((latest / TRAINER_STATE).read_text())["step"]
    assert 5 <= killed_at < 150, "the run must have been killed mid-way"
    # no visible checkpoint directory is ever half-written (only hidden .tmp-* may be)
    for d in ckdir.glob("step-*"):
        assert {p.name for p in d.iterdir()} == {"model.safetensors", "config.json", OPTIMIZER_STATE,
                                                TRAINER_STATE}, d
        assert load_checkpoint(d).extra["step"] == int(d.name.split("-")[1])
    cfg = dict(attention="alibi", steps=150, eval_every=0, save_every=5, keep_checkpoints=3, log_every=5)
    resumed = train_lm(_config(fasta, out, resume=True, **cfg))
    assert (resumed.start_step, resumed.step) == (killed_at, 150)
    assert not list(ckdir.glob(".tmp-*"))  # leftovers of the killed write are cleaned up
    steps = _metric_steps(out / "metrics.jsonl")
    assert steps == list(range(5, 151, 5))  # lines logged after the checkpoint were replaced, none doubled
    clean = train_lm(_config(fasta, tmp_path / "clean", **cfg))
    assert resumed.weights_sha256 == clean.weights_sha256


def test_ddp_two_cpu_processes(fasta, tmp_path):
    out = tmp_path / "ddp"
    cfg = _config(fasta, out, steps=6, save_every=3, eval_every=6, log_every=3, attention="bam",
                  model_options=(("bam_chunk_size", 16),))
    results = train_lm_ddp(cfg, nprocs=2)
    assert [r.rank for r in results] == [0, 1] and {r.world_size for r in results} == {2}
    assert all(r.step == 6 for r in results)
    # the ranks draw different batches, so equal weights mean the gradients were averaged
    assert results[0].weights_sha256 == results[1].weights_sha256
    assert results[0].tokens_seen == 6 * 2 * 4 * 32
    assert results[0].val_bits_per_base is not None and results[1].val_bits_per_base is None
    # rank 0 alone writes: one metrics line per logged step, one set of checkpoints
    assert _metric_steps(out / "metrics.jsonl") == [3, 6]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest.json", "step-00000003",
                                                                      "step-00000006"]
    state = json.loads((out / "checkpoints" / "step-00000006" / TRAINER_STATE).read_text())
    assert state["world_size"] == 2
    opt = safetensors.torch.load_file(str(out / "checkpoints" / "step-00000006" / OPTIMIZER_STATE))
    assert {"rng.torch.rank0", "rng.torch.rank1"} <= set(opt)
    assert load_checkpoint(results[0].checkpoint_dir).config.attention == "bam"


def test_ddp_from_an_unguarded_script_is_refused_before_any_process_starts(fasta, tmp_path):
    """'spawn' runs the main script again in each worker; from an unguarded top-level line every
    worker died in torch's bootstrapping error, a traceback apiece. Now one clear error, no run
    directory; the same call under ``if __name__ == "__main__":`` trains."""
    import subprocess
    import sys

    call = (f"cfg = TrainConfig(fasta={str(fasta)!r}, attention='rope', out_dir={str(tmp_path / 'run')!r}, "
            "steps=2, batch_size=2, seq_len=32, d_model=16, n_layers=1, n_heads=2, eval_every=0, save_every=2, "
            "num_threads=1, progress=False)\n")
    runs = {}
    for name, body in (("unguarded", call + "train_lm_ddp(cfg, nprocs=2)\n"),
                       ("guarded", call + "if __name__ == '__main__':\n    print(train_lm_ddp(cfg, nprocs=2)[0].step)\n")):
        script = tmp_path / f"{name}.py"
        script.write_text("from sinkalign.lm.train import TrainConfig, train_lm_ddp\n" + body)
        runs[name] = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                                    cwd=tmp_path)
        if name == "unguarded":
            assert not (tmp_path / "run").exists()
    bad = runs["unguarded"]
    assert bad.returncode != 0
    assert "SinkalignError: train_lm_ddp(nprocs=2) from the top level of the main script" in bad.stderr
    assert 'Put the script\'s work under `if __name__ == "__main__":`' in bad.stderr
    assert bad.stderr.count("Traceback") == 1  # no worker started
    assert runs["guarded"].returncode == 0, runs["guarded"].stderr[-3000:]
    assert runs["guarded"].stdout.split() == ["2"]


def test_bad_data_errors(tmp_path):
    bad = tmp_path / "bad.fa"
    bad.write_text(">r1\nACGTACGTEACGT\n")
    with pytest.raises(ValueError, match=r"bad.fa: record 'r1' has invalid character 'E' at 0-based position 8"):
        train_lm(_config(bad, tmp_path / "o"))
    short = tmp_path / "short.fa"
    short.write_text(">r1\n" + "ACGT" * 5 + "\n")
    with pytest.raises(ValueError, match=r"no training sequence holds a window of 33 bases \(longest is 18\)"):
        train_lm(_config(short, tmp_path / "o2"))
    with pytest.raises(FileNotFoundError, match=r"FASTA file not found: .*missing.fa"):
        train_lm(_config(tmp_path / "missing.fa", tmp_path / "o3"))


def test_cli_train(fasta, tmp_path):
    runner = CliRunner()
    out = tmp_path / "cli"
    args = ["lm", "train", "--fasta", str(fasta), "--attention", "goat", "--out", str(out), "--steps", "4",
            "--batch-size", "2", "--seq-len", "32", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
            "--model-option", "goat_n_freqs=3", "--model-option", "goat_init=alibi", "--eval-max-bases", "256",
            "--threads", "1", "--no-progress"]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "step 4:" in res.output and "held-out" in res.output
    cfg = load_checkpoint(out / "checkpoints" / "step-00000004").config
    assert (cfg.goat_n_freqs, cfg.goat_init, cfg.n_layers) == (3, "alibi", 1)
    again = runner.invoke(cli, args)
    assert_one_line_error(again, "already holds checkpoints (step-00000004); pass --resume to continue, or choose "
                                 "another --out")
    resumed = runner.invoke(cli, args + ["--resume"])  # nothing left to do
    assert resumed.exit_code == 0 and "already at step 4 of 4; nothing to train" in resumed.output
    bad = runner.invoke(cli, args + ["--model-option", "goat_n_freqs"])
    assert bad.exit_code == 2 and "'goat_n_freqs' is not KEY=VALUE" in bad.output
    bad = runner.invoke(cli, ["lm", "train", "--fasta", str(fasta), "--attention", "goat", "--steps", "0",
                              "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "Invalid value for '--steps': 0 is not in the range x>=1." in bad.output


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--steps", "0", "Invalid value for '--steps': 0 is not in the range x>=1."),
        ("--val-fraction", "1.5", "Invalid value for '--val-fraction': 1.5 is not in the range 0<x<1."),
        ("--lr", "nan", "Invalid value for '--lr': nan is not a finite number."),
        ("--weight-decay", "inf", "Invalid value for '--weight-decay': inf is not a finite number."),
        ("--eval-max-bases", "0", "Invalid value for '--eval-max-bases': 0 is not in the range x>=1."),
        ("--seq-len", "1", "Invalid value for '--seq-len': 1 is not in the range x>=2."),
        ("--dropout", "1", "Invalid value for '--dropout': 1.0 is not in the range 0<=x<1."),
        ("--time-limit", "nan", "Invalid value for '--time-limit': nan is not a finite number."),
        ("--nproc", "0", "Invalid value for '--nproc': 0 is not in the range x>=1."),
    ],
)
def test_cli_train_option_errors_name_the_option(fasta, tmp_path, option, value, message):
    """Bad option values are click usage errors naming the option (not TrainConfig's field)."""
    res = CliRunner().invoke(cli, ["lm", "train", "--fasta", str(fasta), "--attention", "rope", "--out",
                                   str(tmp_path / "x"), option, value])
    assert res.exit_code == 2 and message in res.output, res.output
    assert re.search(r"[a-z_]+=", res.output) is None  # no `field=value` wording
    assert not (tmp_path / "x").exists()


def test_standard_input_is_refused_as_a_training_genome_with_the_reason(fasta, tmp_path, monkeypatch):
    """`lm train --fasta -` said "Path '-' does not exist" (or trained on a file named '-'): a run
    reads its genomes again to resume and its checkpoints name them by path, so standard input is
    refused, saying why and what to do (as a named pipe is: "not a regular file")."""
    why = ("'-' (standard input) cannot be a training genome (fasta / --fasta): a run reads its genomes again to "
           "resume, and its checkpoints name them by path; save them to a file and give that")
    for sources in ("-", (str(fasta), "-")):
        with pytest.raises(ValueError, match=re.escape(why)):
            TrainConfig(fasta=sources, attention="rope", out_dir=str(tmp_path / "run"))
    monkeypatch.chdir(tmp_path)
    Path("-").write_text(fasta.read_text())  # a file of that name is not what '-' means (it was trained on)
    for extra in ([], ["--fasta", str(fasta)]):
        res = CliRunner().invoke(cli, ["lm", "train", "--fasta", "-", *extra, "--attention", "rope", "--steps", "2",
                                       "--batch-size", "2", "--seq-len", "16", "--d-model", "16", "--n-layers", "1",
                                       "--n-heads", "2", "--out", str(tmp_path / "run"), "--no-progress"],
                                 input=fasta.read_text())
        assert res.exit_code == 2 and why in " ".join(res.output.split()), res.output
        assert not (tmp_path / "run").exists()


def test_cli_train_manifest_naming_a_missing_genome_is_a_clean_error(tmp_path):
    man = tmp_path / "genomes.tsv"
    man.write_text("file\tspecies\nabsent.fa\tnobody\n")
    res = CliRunner().invoke(cli, ["lm", "train", "--fasta", str(man), "--attention", "rope", "--out",
                                   str(tmp_path / "run")])
    assert_one_line_error(res, f"{man}: line 2: genome file not found: {tmp_path / 'absent.fa'}")
    man.write_text("file\tspecies\n\tnobody\n")
    res = CliRunner().invoke(cli, ["lm", "train", "--fasta", str(man), "--attention", "rope", "--out",
                                   str(tmp_path / "run")])
    assert_one_line_error(res, f"{man}: line 2: the 'file' column is empty")


def test_run_stopped_before_its_first_checkpoint_is_refused_and_resume_starts_over(fasta, tmp_path, caplog):
    """A run killed before its first checkpoint leaves its metrics.jsonl (and maybe a half-written
    checkpoint): a new run there used to append its steps to that log. It is refused; --resume
    starts from scratch with a new log, the old one renamed (never deleted)."""
    out = tmp_path / "run"
    out.mkdir()
    old = '{"step": 10, "loss": 1.0}\n{"step": 20, "loss": 1.0}\n'
    (out / "metrics.jsonl").write_text(old)
    args = ["lm", "train", "--fasta", str(fasta), "--attention", "rope", "--out", str(out), "--steps", "6",
            "--batch-size", "2", "--seq-len", "16", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
            "--log-every", "2", "--eval-max-bases", "64", "--threads", "1", "--no-progress"]
    res = CliRunner().invoke(cli, args)
    assert_one_line_error(res, f"{out} holds an earlier training run (metrics.jsonl) stopped before its first "
                               "checkpoint; pass --resume to start over there from scratch (its "
                               "metrics.jsonl is kept as metrics.jsonl.1), remove those files, or choose another "
                               "--out")
    assert (out / "metrics.jsonl").read_text() == old and sorted(p.name for p in out.iterdir()) == ["metrics.jsonl"]
    with caplog.at_level(logging.WARNING, logger="sinkalign.lm.train"):
        res = CliRunner().invoke(cli, [*args, "--resume"])
    assert res.exit_code == 0, res.output
    assert f"resume requested but {out} holds no checkpoint; starting from scratch with a new metrics.jsonl (the " \
           "earlier one is kept as metrics.jsonl.1)" in caplog.text
    assert (out / "metrics.jsonl.1").read_text() == old
    assert _metric_steps(out / "metrics.jsonl") == [2, 4, 6]
    # a first checkpoint a kill left half-written counts as a run too; --resume clears it away
    half = tmp_path / "half"
    (half / "checkpoints" / ".tmp-step-00000006-123").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(half))} holds an earlier training run "
                                              r"\(checkpoints/\) stopped before its first checkpoint"):
        train_lm(_config(fasta, half))
    res = train_lm(_config(fasta, half, resume=True))
    assert res.start_step == 0 and not list((half / "checkpoints").glob(".tmp-*"))
    assert _metric_steps(half / "metrics.jsonl") == [3, 6, 9, 12] and not (half / "metrics.jsonl.1").exists()


_TINY_RUN = ["--attention", "rope", "--steps", "300", "--batch-size", "2", "--seq-len", "16", "--d-model", "16",
             "--n-layers", "1", "--n-heads", "2", "--eval-every", "0", "--eval-max-bases", "64", "--save-every", "0",
             "--log-every", "1", "--threads", "1", "--no-progress"]


def _signal_after_first_step(args: list[str], out: Path, signum: int) -> tuple[int, str]:
    """Run `sinkalign ARGS` in a subprocess, send ``signum`` once its first step is logged; (status, stderr)."""
    proc = subprocess.Popen([sys.executable, "-c", "from sinkalign.cli.main import cli; cli()", *args],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_signals)
    try:
        deadline = time.monotonic() + 120
        while not ((out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text()):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no step logged within 120 s"
            time.sleep(0.02)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_training_with_a_checkpoint_and_the_printed_command_resumes(fasta, tmp_path, signum, status):
    """Ctrl-C or a scheduler's SIGTERM (with --save-every 0: no checkpoint planned before the end)
    finishes the step, writes a checkpoint, prints it and the command that resumes, and exits
    128 + the signal; that command completes the run without logging a step twice."""
    out = tmp_path / "run"
    args = ["lm", "train", "--fasta", str(fasta), "--out", str(out), *_TINY_RUN]
    code, err = _signal_after_first_step(args, out, signum)
    assert code == status, err
    assert "Aborted!" not in err and "Traceback" not in err
    logged = _metric_steps(out / "metrics.jsonl")
    k = logged[-1]
    assert logged == list(range(1, k + 1)) and k < 300
    ckpt = out / "checkpoints" / f"step-{k:08d}"
    assert find_latest_checkpoint(out) == ckpt and load_checkpoint(ckpt).extra["step"] == k
    assert f"training stopped by {signal.Signals(signum).name} after step {k}; checkpoint {ckpt}" in err
    (line,) = [x for x in err.splitlines() if x.startswith("resume with: ")]
    command = shlex.split(line.removeprefix("resume with: "))
    assert command == ["sinkalign", *args, "--resume"]
    res = CliRunner().invoke(cli, command[1:])
    assert res.exit_code == 0, res.output
    assert "step 300:" in res.output
    assert _metric_steps(out / "metrics.jsonl") == list(range(1, 301))  # no step logged twice


def test_ddp_launcher_names_rank_0s_checkpoint_when_another_rank_dies_after_a_signal(fasta, tmp_path, monkeypatch):
    """Under load a stopped gloo worker can abort as it exits ("terminate called without an
    active exception") after rank 0 wrote its checkpoint and its result: the launcher said
    "stopped before its first step; nothing was saved". It now reads rank 0's result first."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessExitedException

    from sinkalign.lm import train as T

    saved = T.TrainResult(step=2, start_step=0, train_loss=1.0, val_bits_per_base=None, tokens_seen=64,
                          elapsed_s=0.1, checkpoint_dir=str(tmp_path / "step-2"), metrics_path="m", rank=0,
                          world_size=2, weights_sha256="x")

    class Died:  # what torch's ProcessContext is to the launcher: processes and join()
        processes = []

        def __init__(self, queue):
            self.queue = queue

        def join(self):
            self.queue.put((signal.SIGTERM, tuple(saved)))  # rank 0 stopped, saved and said so
            os.kill(os.getpid(), signal.SIGTERM)  # the signal the launcher passes on
            raise ProcessExitedException("process 1 terminated with signal SIGABRT", error_index=1, error_pid=1,
                                         exit_code=-6, signal_name="SIGABRT")

    monkeypatch.setattr(mp, "start_processes", lambda fn, args, **kw: Died(args[3]))
    with pytest.raises(TrainingInterrupted) as info:
        T.train_lm_ddp(_config(fasta, tmp_path / "run"), 2)
    assert info.value.result == saved and "after step 2" in str(info.value)


def test_signal_under_ddp_stops_every_rank_after_the_same_step(fasta, tmp_path):
    """--nproc 2: SIGTERM to the launcher reaches the workers, which stop together (no deadlock),
    rank 0 writes the checkpoint, and a resume with --nproc 2 completes the run."""
    out = tmp_path / "ddp"
    args = ["lm", "train", "--fasta", str(fasta), "--out", str(out), *_TINY_RUN, "--nproc", "2"]
    args[args.index("--steps") + 1] = "200"
    code, err = _signal_after_first_step(args, out, signal.SIGTERM)
    assert code == 143, err
    k = _metric_steps(out / "metrics.jsonl")[-1]
    assert _metric_steps(out / "metrics.jsonl") == list(range(1, k + 1)) and k < 200
    latest = find_latest_checkpoint(out)
    assert latest.name == f"step-{k:08d}" and json.loads((latest / TRAINER_STATE).read_text())["world_size"] == 2
    assert f"training stopped by SIGTERM after step {k}; checkpoint {latest}" in err
    res = CliRunner().invoke(cli, [*args, "--resume"])
    assert res.exit_code == 0, res.output
    assert _metric_steps(out / "metrics.jsonl") == list(range(1, 201))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads a process's children from /proc")
def test_ctrl_c_while_the_ddp_workers_start_ends_in_one_line(fasta, tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: while the --nproc workers were still
    importing it ended them in tracebacks. Now they start with SIGINT ignored and the launcher
    passes it on: status 130 and its one line, nothing else."""
    out = tmp_path / "ddp"
    args = ["lm", "train", "--fasta", str(fasta), "--out", str(out), *_TINY_RUN, "--nproc", "2"]
    proc = subprocess.Popen([sys.executable, "-c", "from sinkalign.cli.main import main; main()", *args],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_signals, start_new_session=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    try:
        deadline = time.monotonic() + 120
        while len(children.read_text().split()) < 2:  # the launcher has spawned its workers
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no workers within 120 s"
            time.sleep(0.01)
        time.sleep(0.3)  # they are importing
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "Fatal Python error" not in err, err
    assert "training stopped by SIGINT" in err


def test_training_interrupted_names_the_signal_and_exit_status():
    assert TrainingInterrupted(signal.SIGINT, None).exit_status == 130
    err = TrainingInterrupted(signal.SIGTERM, None)
    assert err.exit_status == 143 and str(err) == "training stopped by SIGTERM before its first step; nothing was saved"


# ----------------------------------------------------------------------------- many genomes


def _genome(path: Path, seqs: dict[str, str]) -> Path:
    path.write_text("".join(f">{rid}\n{seq}\n" for rid, seq in seqs.items()))
    return path


def test_genome_sources_files_directories_and_manifests(tmp_path):
    from sinkalign.lm.data import genome_files

    d = tmp_path / "g"
    d.mkdir()
    a = _genome(d / "A_one.fna", {"a1": "ACGT" * 50})
    b = _genome(d / "B_two.fa", {"b1": "GGCC" * 50})
    (d / "notes.txt").write_text("not a genome")
    man = tmp_path / "MANIFEST.tsv"
    man.write_text("file\tspecies\ng/B_two.fa\tB two\ng/A_one.fna\tA one\n")
    assert genome_files(d) == [a, b]
    assert genome_files(str(man)) == [b, a]
    assert genome_files([str(a), str(d)]) == [a, b]  # each once
    man.write_text("file\ng/C.fa\n")
    with pytest.raises(FileNotFoundError, match=r"MANIFEST.tsv: line 2: genome file not found: .*C.fa"):
        genome_files(man)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="directory holds no FASTA file"):
        genome_files(tmp_path / "empty")


def test_balanced_sampler_draws_genomes_evenly_and_reads_both_strands():
    """balance='genome': a genome 20x smaller is drawn as often as the large one; with
    reverse_complement each window is a forward slice or its reverse complement, about half
    each; without both options the sampler's draws are unchanged (resumable runs)."""
    from sinkalign.lm.data import reverse_complement_tokens

    rng = np.random.default_rng(0)
    big = "".join(rng.choice(list("ACGT"), 20_000))
    small = "".join(rng.choice(list("ACGT"), 1_000))
    plain = WindowSampler([big, small], 50, seed=3)
    counts = {"big": 0, "small": 0}
    balanced = WindowSampler([big, small], 50, seed=3, groups=[0, 1])
    for step in range(40):
        for w in balanced.batch(step, 16).numpy():
            counts["small" if decode_window(w) in small else "big"] += 1
    assert 0.4 < counts["small"] / 640 < 0.6, counts
    assert torch.equal(plain.batch(5, 8), WindowSampler([big, small], 50, seed=3).batch(5, 8))
    stranded = WindowSampler([big], 50, seed=3, reverse_complement=True)
    forward = WindowSampler([big], 50, seed=3)
    flipped = 0
    for step in range(20):
        got, fwd = stranded.batch(step, 16).numpy(), forward.batch(step, 16).numpy()
        for g, f in zip(got, fwd):
            if not np.array_equal(g, f):
                assert np.array_equal(g, reverse_complement_tokens(f))
                flipped += 1
    assert 100 < flipped < 220
    np.testing.assert_array_equal(reverse_complement_tokens(np.array([0, 1, 2, 3, 4, 0])), [3, 4, 0, 1, 2, 3])


def decode_window(w) -> str:
    return "".join("ACGTN"[int(x)] for x in w)


def test_genus_split_trains_on_train_genomes_validates_on_valid_ones_and_never_reads_test(tmp_path):
    import sinkalign.lm.train as T

    rng = np.random.default_rng(1)
    files = {}
    for name in ("Alpha_a", "Beta_b", "Gamma_c"):
        files[name] = _genome(tmp_path / f"{name}.fa", {f"{name}_1": "".join(rng.choice(list("ACGT"), 3000))})
    (tmp_path / "Delta_d.fa").write_text(">broken\nACGT-XX\n")  # a test genome: must never be read
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"genomes": {"Alpha_a.fa": {"split": "train"}, "Beta_b.fa": {"split": "train"},
                                             "Gamma_c.fa": {"split": "valid"}, "Delta_d.fa": {"split": "test"}}}))
    cfg = _config(tmp_path / "Alpha_a.fa", tmp_path / "run", genome_split=str(split), balance="genome",
                  reverse_complement=True)
    cfg = TrainConfig.from_dict({**cfg.to_dict(), "fasta": [str(tmp_path)]})
    train, groups, val, _ = T._load_data(cfg)
    gamma = files["Gamma_c"].read_text().split("\n")[1]
    assert len(train) == 2 and groups == [0, 1] and len(val) == 1
    assert val[0][1] + val[0][0] == gamma and all(t not in gamma for t in train)
    result = train_lm(cfg)
    assert result.step == cfg.steps and math.isfinite(result.val_bits_per_base)
    # a run of an older version (its config lacks the newer settings) still resumes
    saved = {k: v for k, v in cfg.to_dict().items() if k not in ("genome_split", "balance", "reverse_complement")}
    T._check_resume_config(saved, TrainConfig.from_dict({**saved, "fasta": saved["fasta"]}), tmp_path)
    with pytest.raises(ValueError, match="not a genome split"):
        T._genome_split(str(files["Alpha_a"]))


def test_cli_train_takes_many_genomes(tmp_path):
    a = _genome(tmp_path / "a.fa", {"a": _markov_chain_dna(3000, seed=1)})
    b = _genome(tmp_path / "b.fa", {"b": _markov_chain_dna(3000, seed=2)})
    res = CliRunner().invoke(cli, ["lm", "train", "--fasta", str(a), "--fasta", str(b), "--attention", "rope",
                                   "--out", str(tmp_path / "run"), "--steps", "4", "--batch-size", "2", "--seq-len", "32",
                                   "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--balance", "genome",
                                   "--reverse-complement", "--eval-max-bases", "256", "--threads", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    state = json.loads(next((tmp_path / "run" / "checkpoints").glob("step-*/trainer_state.json")).read_text())
    assert state["train_config"]["fasta"] == [str(a), str(b)] and state["train_config"]["balance"] == "genome"


@pytest.mark.shared_data
def test_genome_split_manifest_is_reproducible_and_splits_whole_genera(shared_data):
    """data_manifests/genomes_multi_split.json is what make_genome_split.py writes from the
    shared MANIFEST.tsv, covers every genome there, and no genus sits in two splits."""
    root = Path(__file__).resolve().parents[1] / "data_manifests"
    manifest = shared_data / "genomes" / "multi" / "MANIFEST.tsv"
    res = subprocess.run([sys.executable, str(root / "make_genome_split.py"), str(manifest)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json.loads((root / "genomes_multi_split.json").read_text())
    genomes = json.loads(res.stdout)["genomes"]
    assert set(genomes) == {p.name for p in (shared_data / "genomes" / "multi").glob("*.fna.gz")}
    by_genus: dict[str, set] = {}
    for g in genomes.values():
        by_genus.setdefault(g["genus"], set()).add(g["split"])
    assert all(len(s) == 1 for s in by_genus.values())
    assert {s for (s,) in by_genus.values()} == {"train", "valid", "test"}


def test_records_whose_held_out_part_is_all_n_are_left_out_before_any_step(tmp_path, caplog):
    """An assembly gap at a record's end (or at the start of the bases --eval-max-bases scores)
    is skipped with a warning naming it; the bases scored are the first eval_max_bases of the
    others. With nothing left the run is refused before its first step, naming the option."""
    import sinkalign.lm.train as T

    good = _markov_chain_dna(3000, seed=1)
    gap = _markov_chain_dna(2700, seed=2) + "N" * 300  # its held-out tenth is all N
    head = _markov_chain_dna(2700, seed=3) + "N" * 200 + _markov_chain_dna(100, seed=4)  # N where scoring starts
    path = _genome(tmp_path / "g.fa", {"gap": gap, "head": head, "good": good})
    cfg = _config(path, tmp_path / "run", eval_max_bases=150, steps=3, eval_every=0, save_every=0)
    with caplog.at_level("WARNING", logger="sinkalign.lm.train"):
        _, _, val, _ = T._load_data(cfg)
    assert val == [(good[2700:2850], good[:2700])]  # the first 150 scorable held-out bases
    assert "g.fa: gap" in caplog.text and "g.fa: head" in caplog.text and "--eval-max-bases" in caplog.text
    _, _, whole, _ = T._load_data(_config(path, tmp_path / "run", eval_max_bases=None))
    assert whole == [(head[2700:], head[:2700]), (good[2700:], good[:2700])]  # a part with some bases is scored
    result = train_lm(cfg)
    assert result.step == 3 and math.isfinite(result.val_bits_per_base)

    only_gaps = _genome(tmp_path / "n.fa", {"gap": gap})
    res = CliRunner().invoke(cli, ["lm", "train", "--fasta", str(only_gaps), "--attention", "nope", "--out",
                                   str(tmp_path / "none"), "--steps", "3", "--batch-size", "2", "--seq-len", "32",
                                   "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--threads", "1",
                                   "--no-progress"])
    assert res.exit_code != 0
    assert str(only_gaps) in res.output and "all N" in res.output and "--val-fraction" in res.output
    assert not (tmp_path / "none" / "metrics.jsonl").exists()  # refused before any step


def test_resume_tells_the_data_by_content_not_by_path(tmp_path):
    import sinkalign.lm.train as T

    a = _genome(tmp_path / "a.fa", {"a": _markov_chain_dna(3000, seed=1)})
    cfg = _config(a, tmp_path / "run", steps=3, eval_every=0, save_every=3)
    train_lm(cfg)
    state = json.loads(next((tmp_path / "run" / "checkpoints").glob("step-*/trainer_state.json")).read_text())
    assert state["data_sha256"] == T._load_data(cfg)[3]
    # the same genome by another path resumes
    (tmp_path / "elsewhere").mkdir()
    copy = shutil.copy(a, tmp_path / "elsewhere" / "a.fa")
    again = train_lm(dataclasses.replace(cfg, fasta=str(copy), resume=True))
    assert again.step == 3
    # the same path, other bases: refused, naming what differs
    _genome(copy, {"a": _markov_chain_dna(3000, seed=2)})
    with pytest.raises(CheckpointError, match="the training data differ from the checkpoint's"):
        train_lm(dataclasses.replace(cfg, fasta=str(copy), resume=True))
    # a run of an older version (no digest) compares the paths, as before
    with pytest.raises(CheckpointError, match="fasta: checkpoint"):
        T._check_resume_config(state["train_config"], dataclasses.replace(cfg, fasta=str(copy)), tmp_path)
    T._check_resume_config(state["train_config"], cfg, tmp_path)


# ----------------------------------------------------------------------------- --init: start from a model


def _weights(path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path).model.state_dict()


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_init_starts_from_the_model_and_a_resume_from_the_run(fasta, tmp_path):
    """``init`` loads the model's weights at step 0 (a run at a vanishing learning rate ends where
    it began, far from where the seed alone would put it); its dropout may differ; a resumed run
    takes its own checkpoint, whatever ``init`` says then."""
    from sinkalign.lm.train import init_model_settings

    first = train_lm(_config(fasta, tmp_path / "first", steps=6, attention="goat",
                             model_options=(("goat_init", "alibi"),)))
    settings = init_model_settings(tmp_path / "first")  # a run directory: its newest checkpoint
    assert settings == {"attention": "goat", "d_model": 32, "n_layers": 2, "n_heads": 2, "mlp_ratio": 4.0,
                        "seq_len": 32, "model_options": (("goat_init", "alibi"),)}
    tiny = dict(steps=4, lr=1e-12, warmup_steps=0, weight_decay=0.0, seed=7, **settings)
    started = train_lm(_config(fasta, tmp_path / "ft", init=str(tmp_path / "first"), dropout=0.1,
                               time_limit_minutes=1e-9, **tiny))  # stopped after its first step
    fresh = train_lm(_config(fasta, tmp_path / "fresh", **tiny))  # the same run without init
    assert started.step == 1
    assert _max_diff(_weights(started.checkpoint_dir), _weights(first.checkpoint_dir)) < 1e-8
    assert _max_diff(_weights(fresh.checkpoint_dir), _weights(first.checkpoint_dir)) > 1e-2
    state = json.loads((Path(started.checkpoint_dir) / TRAINER_STATE).read_text())
    assert state["train_config"]["init"] == str(tmp_path / "first")

    # resume: the run's own checkpoint, even with another init named (read at step 0 only)
    resumed = train_lm(_config(fasta, tmp_path / "ft", init=str(tmp_path / "fresh"), dropout=0.1, resume=True,
                               **tiny))
    assert (resumed.start_step, resumed.step) == (1, 4)
    assert _max_diff(_weights(resumed.checkpoint_dir), _weights(first.checkpoint_dir)) < 1e-8


def test_init_of_another_model_is_refused_before_the_data_are_read(fasta, tmp_path):
    train_lm(_config(fasta, tmp_path / "first", steps=3))
    missing = tmp_path / "no_such_genome.fa"  # never read: the model is checked first
    with pytest.raises(ValueError, match=r"is another model than this run's \(d_model: 32 there, 64 here; "
                                         r"n_heads: 2 there, 4 here\)"):
        train_lm(_config(missing, tmp_path / "ft", init=str(tmp_path / "first"), d_model=64, n_heads=4))
    with pytest.raises(ValueError, match=r"max_train_len: 32 there, 64 here"):
        train_lm(_config(missing, tmp_path / "ft", init=str(tmp_path / "first"), seq_len=64))
    with pytest.raises(FileNotFoundError, match="model path not found: nowhere"):
        train_lm(_config(missing, tmp_path / "ft", init="nowhere"))
    with pytest.raises(ValueError, match=r"init=3 must be a model path or name"):
        _config(fasta, tmp_path / "ft", init=3)
    assert not (tmp_path / "ft").exists()


def test_cli_init_takes_the_model_settings_and_refuses_others(fasta, tmp_path, monkeypatch):
    """`--init default` fine-tunes the shipped model: its settings are taken (from its config.json:
    the weights are loaded once, by the run), and a differing one given on the command line is a
    usage error naming both values."""
    import sinkalign.lm.train as T
    from sinkalign.lm.generate import default_model_path

    loads = []
    monkeypatch.setattr(T, "load_checkpoint", lambda path, **kw: loads.append(path) or load_checkpoint(path, **kw))
    runner = CliRunner()
    base = ["lm", "train", "--fasta", str(fasta), "--steps", "1", "--batch-size", "1", "--eval-max-bases", "300",
            "--threads", "1", "--no-progress", "--lr", "1e-12", "--warmup-steps", "0", "--weight-decay", "0"]
    res = runner.invoke(cli, [*base, "--init", "default", "--out", str(tmp_path / "ft"), "--attention", "goat",
                              "--model-option", "input_kmer=4"])  # given as they are: accepted
    assert res.exit_code == 0, res.output
    assert loads == [default_model_path()]
    shipped = load_checkpoint(default_model_path())
    tuned = load_checkpoint(tmp_path / "ft" / "checkpoints" / "step-00000001")
    assert tuned.config == shipped.config
    assert _max_diff(tuned.model.state_dict(), shipped.model.state_dict()) < 1e-8
    for extra, message in (
        (["--d-model", "64"], "--d-model 64 differs from the --init model's 128 (default): a run that starts from "
                              "a model trains that model; leave --d-model out"),
        (["--seq-len", "128"], "--seq-len 128 differs from the --init model's 256 (default)"),
        (["--attention", "rope"], "--attention rope differs from the --init model's goat (default)"),
        (["--model-option", "input_kmer=2"], "--model-option input_kmer=2 differs from the --init model's 4"),
        (["--model-option", "colour=3"], "--model-option colour: not an option of the model"),
    ):
        bad = runner.invoke(cli, [*base, "--init", "default", "--out", str(tmp_path / "bad"), *extra])
        assert bad.exit_code == 2 and message in bad.output, bad.output
    bad = runner.invoke(cli, [*base, "--init", str(tmp_path / "nowhere"), "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "Invalid value for '--init': model path not found" in bad.output
    bad = runner.invoke(cli, [*base, "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "Missing option '--attention' (or give --init MODEL" in bad.output
    assert not (tmp_path / "bad").exists()
