"""Training: shards -> steps -> atomic checkpoints -> resume (also after SIGKILL) -> data parallel."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.align import model as M
from sinkalign.align.checkpoints import export_model, find_latest_checkpoint
from sinkalign.align.train import TrainConfig, _fits, load_checkpoint, train
from sinkalign.cli.main import cli
from sinkalign.errors import CheckpointError, DivergedError, InputError, OutputExistsError
from sinkalign.io.shards import ShardDataset, build_shards
from tests.aligner_fixtures import make_families
from tests.cli_errors import assert_one_line_error, terminal_signals


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("aln")
    files = make_families(root / "sto", n_families=4, n_seqs=5, length=30)
    build_shards(files, root / "shards", split=(0.5, 0.25, 0.25), seed=0, min_length=5)
    return root / "shards"


def _cfg(shards, out, steps, **kw):
    model = M.preset("default", feature_dim=0, embedder={"name": "none"}, n_iters=4, window=2)
    return TrainConfig(shards=str(shards), out=str(out), model=model, steps=steps, batch_size=2, lr=1e-2,
                       warmup=1, eval_every=2, eval_pairs=4, **{"max_length": 64, "checkpoint_every": 2, **kw})


def test_two_local_devices_shard_the_batch(shards, tmp_path):
    assert len(jax.local_devices()) == 2  # conftest forces two host devices
    res = train(_cfg(shards, tmp_path / "run", 2), progress=False)
    assert res.step == 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2]
    assert {"loss", "ce", "mono", "recon", "f1_loss", "grad_norm", "lr", "examples_per_s", "val_f1",
            "val_ce"} <= set(lines[-1])
    assert "f1" not in lines[-1]  # the loss term 1 - soft F1 is f1_loss, not an F1 beside val_f1


def test_resume_continues_exactly(shards, tmp_path):
    straight = train(_cfg(shards, tmp_path / "a", 6), progress=False)
    train(_cfg(shards, tmp_path / "b", 6), progress=False, stop_after=4)
    params_b4, state, _ = load_checkpoint(tmp_path / "b")
    assert state["step"] == 4
    resumed = train(_cfg(shards, tmp_path / "b", 6), progress=False, resume=True)
    assert resumed.step == 6
    for name in straight.params:
        np.testing.assert_allclose(np.asarray(resumed.params[name]), np.asarray(straight.params[name]), atol=1e-6)
    steps = [json.loads(x)["step"] for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_resume_continues_exactly_when_batches_were_skipped(shards, tmp_path):
    """At --max-length 30 the third batch of epoch 0 holds no pair that fits and gives no step:
    steps and batches drift apart, and the resumed run reads on from the batch the checkpoint
    records (it counted batches from the step: it trained step 4's batch again, then shifted)."""
    fits = [sum(_fits(ex, 30) for ex in items)
            for items in ShardDataset(shards, "train", load_embeddings=False).iter_batches(2, seed=0, drop_last=True)]
    assert fits[2] == 0 and all(fits[:2]) and all(fits[3:5])  # the data this test is about
    straight = train(_cfg(shards, tmp_path / "a", 6, max_length=30), progress=False)
    train(_cfg(shards, tmp_path / "b", 6, max_length=30), progress=False, stop_after=4)
    _, state, _ = load_checkpoint(tmp_path / "b")
    assert (state["step"], state["data_position"]) == (4, [0, 5])
    resumed = train(_cfg(shards, tmp_path / "b", 6, max_length=30), progress=False, resume=True)
    losses = [[json.loads(x)["loss"] for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
              for run in "ab"]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)
    for name in straight.params:
        np.testing.assert_allclose(np.asarray(resumed.params[name]), np.asarray(straight.params[name]), atol=1e-6)


@pytest.mark.parametrize("damage", ["params", "opt_state"])
def test_resume_from_a_damaged_checkpoint_says_which_folder_to_delete(shards, tmp_path, damage):
    run = tmp_path / "b"
    train(_cfg(shards, run, 4), progress=False)
    last = run / "checkpoints" / "step_00000004"
    path = last / f"{damage}.safetensors"
    path.write_bytes(path.read_bytes()[:50])  # a torn write
    with pytest.raises(CheckpointError, match=rf"{damage}.safetensors: cannot read.*; the checkpoint {last} is "
                                              r"damaged: delete that folder to resume from the checkpoint before it "
                                              r"\(step_00000002\)"):
        train(_cfg(shards, run, 6), progress=False, resume=True)
    import shutil

    shutil.rmtree(last)
    assert train(_cfg(shards, run, 6), progress=False, resume=True).step == 6  # as the message says


def test_a_run_given_as_a_model_says_when_its_best_is_another_checkpoint(shards, tmp_path, caplog):
    """A run directory is its newest checkpoint; a user who selected the run by its validation F1
    means best/: a warning says which was used and where the best is."""
    from sinkalign.align.aligner import Aligner

    run = tmp_path / "run"
    train(_cfg(shards, run, 4), progress=False)
    best_state = run / "best" / "state.json"
    state = json.loads(best_state.read_text())
    best_state.write_text(json.dumps({**state, "step": 4}))
    with caplog.at_level("WARNING", logger="sinkalign.align.aligner"):
        Aligner.load(run)  # best is the newest: nothing to say
        Aligner.load(run / "best")
    assert caplog.text == ""
    best_state.write_text(json.dumps({**state, "step": 2, "val_f1": 0.5}))
    with caplog.at_level("WARNING", logger="sinkalign.align.aligner"):
        Aligner.load(run)
    assert f"{run} is a training run: its newest checkpoint (step 4) is used; its best on validation is " \
           f"{run / 'best'} (step 2, F1 0.5000): give that to use it" in caplog.text


def test_resume_refuses_a_bad_data_position(shards, tmp_path):
    run = tmp_path / "b"
    train(_cfg(shards, run, 4), progress=False, stop_after=2)
    state_file = next((run / "checkpoints").glob("step_*")) / "state.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "data_position": [0, -1]}))
    with pytest.raises(CheckpointError, match=r"state.json: bad data_position \[0, -1\] \(expected \[epoch, batch\]"):
        train(_cfg(shards, run, 4), progress=False, resume=True)


def test_resume_refuses_a_different_model(shards, tmp_path):
    train(_cfg(shards, tmp_path / "c", 2), progress=False)
    cfg = _cfg(shards, tmp_path / "c", 4)
    cfg = TrainConfig(**{**cfg.__dict__, "model": cfg.model.replace(window=3)})
    with pytest.raises(CheckpointError, match="model config differs"):
        train(cfg, progress=False, resume=True)


def test_resume_after_sigkill(shards, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "sinkalign.cli.main", "train", "--pfam-shards", str(shards), "--embedder", "none",
           "--steps", "400", "--batch-size", "2", "--checkpoint-every", "2", "--eval-every", "1000",
           "--certify-every", "0", "--max-length", "64", "--out", str(out), "--no-progress"]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    latest = out / "checkpoints" / "latest"
    deadline = time.time() + 240
    while not latest.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert latest.exists(), proc.stdout.read().decode()[-2000:]
    _, state, _ = load_checkpoint(out)
    killed_at = state["step"]
    assert 2 <= killed_at < 400
    # no half-written checkpoint is visible: every step_* dir is complete
    for d in (out / "checkpoints").glob("step_*"):
        assert (d / "params.safetensors").is_file() and (d / "state.json").is_file()
    result = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--steps",
                                      str(killed_at + 2), "--batch-size", "2", "--checkpoint-every", "2",
                                      "--eval-every", "1000", "--certify-every", "0", "--max-length", "64",
                                      "--out", str(out), "--resume", "--no-progress"])
    assert result.exit_code == 0, result.output
    _, state, _ = load_checkpoint(out)
    assert state["step"] == killed_at + 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_training_with_a_checkpoint_and_the_printed_command_resumes(shards, tmp_path, signum):
    """Ctrl-C, or a scheduler's SIGTERM, finishes the step under way, checkpoints it (with
    --checkpoint-every far away), prints the command that resumes, and exits 130 / 143."""
    import shlex

    out = tmp_path / "stopped"
    args = ["train", "--pfam-shards", str(shards), "--embedder", "none", "--steps", "400", "--batch-size", "2",
            "--checkpoint-every", "1000", "--eval-every", "1000", "--certify-every", "0", "--max-length", "64",
            "--out", str(out), "--no-progress"]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    proc = subprocess.Popen([sys.executable, "-m", "sinkalign.cli.main", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=terminal_signals)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=240)
    err = err.decode()
    assert proc.returncode == 128 + signum, err[-2000:]
    _, state, _ = load_checkpoint(out)
    stopped_at = state["step"]
    assert 2 <= stopped_at < 400
    steps = [json.loads(x)["step"] for x in metrics.read_text().splitlines()]
    assert steps == list(range(1, stopped_at + 1))  # every step up to the stop logged, once
    assert f"training stopped by {signal.Signals(signum).name} after step {stopped_at}" in err
    (line,) = [x for x in err.splitlines() if x.startswith("resume with: ")]
    command = shlex.split(line.removeprefix("resume with: "))
    assert command == ["sinkalign", *args, "--resume"]
    command[command.index("--steps") + 1] = str(stopped_at + 2)
    result = CliRunner().invoke(cli, command[1:])
    assert result.exit_code == 0, result.output
    steps = [json.loads(x)["step"] for x in metrics.read_text().splitlines()]
    assert steps == list(range(1, stopped_at + 3))


def test_train_cli_errors(shards, tmp_path):
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "builtin", "--out", str(tmp_path)])
    assert r.exit_code == 2 and f"has no embeddings; run `sinkalign shards embed {shards}`" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "esm2", "--out", str(tmp_path)])
    assert r.exit_code == 2 and f"run `sinkalign shards embed --embedder esm2 {shards}`" in " ".join(r.output.split())
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--config", "nope",
                                 "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown preset 'nope'" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option",
                                 "temperature=2", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown AlignerConfig settings ['temperature']" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option",
                                 "feature_dim=3", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "feature_dim follows the shards' embeddings" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option",
                                 "eps=-1", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "eps=-1 must be a finite number > 0" in r.output
    for option, message in (('window="abc"', "window='abc' must be an integer >= 0"),
                            ("losses=3", "losses=3 must map loss terms"),
                            ("dustbin=5", "dustbin=5 is not one of ('banded', 'paper', 'none')")):
        r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option",
                                     option, "--out", str(tmp_path)])
        assert r.exit_code == 2 and f"Invalid value for --config / --model-option: {message}" in r.output, r.output
    assert not (tmp_path / "metrics.jsonl").exists()


def test_train_cli_config_bug_keeps_its_traceback(shards, tmp_path, monkeypatch):
    def bug(*args, **kwargs):
        raise TypeError("an internal invariant broke")

    monkeypatch.setattr(M, "preset", bug)
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--out", str(tmp_path)])
    assert isinstance(r.exception, TypeError) and "Error:" not in r.output


def test_train_cli_model_options_reach_the_saved_config(shards, tmp_path):
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option", "eps=6",
                                 "--model-option", "window=3", "--model-option", "symmetric=true", "--steps", "1",
                                 "--batch-size", "2", "--eval-every", "1000", "--certify-every", "0", "--max-length",
                                 "64", "--out", str(tmp_path), "--no-progress"])
    assert r.exit_code == 0, r.output
    params, state, _ = load_checkpoint(tmp_path)
    assert state["model"]["sinkhorn"]["eps"] == 6 and state["model"]["window"] == 3
    assert state["model"]["symmetric"] is True
    assert params["sub"].shape[0] == 7  # 2 * window + 1 diagonal offsets


def test_train_config_rejects_indivisible_batches(shards, tmp_path):
    with pytest.raises(ValueError, match="batch_size=3 must be a multiple of the 2 local devices"):
        train(TrainConfig(**{**_cfg(shards, tmp_path, 2).__dict__, "batch_size": 3}), progress=False)


# ------------------------------------------------------------------------------ nothing is lost


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_train_into_an_existing_run_refuses_and_keeps_it(shards, tmp_path):
    run = tmp_path / "run"
    train(_cfg(shards, run, 2), progress=False)
    before = _snapshot(run)
    with pytest.raises(OutputExistsError, match=r"already holds a training run \(checkpoint step_00000002\).*--resume"):
        train(_cfg(shards, run, 4), progress=False)
    assert _snapshot(run) == before
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--steps", "4",
                                 "--batch-size", "2", "--max-length", "64", "--out", str(run), "--no-progress"])
    assert r.exit_code == 1 and "already holds a training run" in r.output and "--overwrite" in r.output
    assert _snapshot(run) == before
    assert load_checkpoint(run)[1]["step"] == 2  # --model R still works


def test_overwrite_replaces_only_the_run(shards, tmp_path):
    run = tmp_path / "run"
    train(_cfg(shards, run, 4), progress=False)
    (run / "notes.txt").write_text("mine")
    res = train(_cfg(shards, run, 2), progress=False, overwrite=True)
    assert res.step == 2
    assert (run / "notes.txt").read_text() == "mine"
    assert not (run / ".previous-run").exists()  # the new run checkpointed: the old one is gone
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_00000002"]
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    with pytest.raises(CheckpointError, match="contradict"):
        train(_cfg(shards, run, 2), progress=False, overwrite=True, resume=True)


def _snapshot_run(run: Path) -> dict:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_overwrite_puts_the_old_run_back_when_the_new_one_diverges_before_its_first_checkpoint(
        shards, tmp_path, monkeypatch):
    """--overwrite deleted the old run before the new one had anything: a run that diverged at
    once left the user with neither. The old run now waits in .previous-run and comes back."""
    run = tmp_path / "run"
    train(_cfg(shards, run, 2), progress=False)
    before = _snapshot_run(run)
    loss_fn = M.loss_fn
    monkeypatch.setattr(M, "loss_fn", lambda *a: (lambda loss, terms: (loss * jnp.nan, terms))(*loss_fn(*a)))
    with pytest.raises(DivergedError, match=r"training diverged: the loss became nan at step 1 .* start again with a "
                                            r"lower --lr \(now 0.01\) or a longer --warmup \(--overwrite\), or go on "
                                            r"from a checkpoint before it with --init CHECKPOINT --out NEW"):
        train(_cfg(shards, run, 4, checkpoint_every=10), progress=False, overwrite=True)
    assert _snapshot_run(run) == before and not (run / ".previous-run").exists()
    # a run killed before its first checkpoint leaves the old run aside; a second --overwrite keeps it
    # there and replaces the killed run's files, and the first checkpoint removes it
    monkeypatch.setattr(M, "loss_fn", loss_fn)
    (run / ".previous-run").mkdir()
    for name in ("metrics.jsonl", "checkpoints", "best"):
        (run / name).rename(run / ".previous-run" / name)
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    with pytest.raises(DivergedError):
        monkeypatch.setattr(M, "loss_fn", lambda *a: (lambda loss, terms: (loss * jnp.nan, terms))(*loss_fn(*a)))
        train(_cfg(shards, run, 4, checkpoint_every=10), progress=False, overwrite=True)
    assert _snapshot_run(run) == before  # the run before both is back
    monkeypatch.setattr(M, "loss_fn", loss_fn)
    train(_cfg(shards, run, 2), progress=False, overwrite=True)
    assert not (run / ".previous-run").exists() and load_checkpoint(run)[1]["step"] == 2


def test_a_run_set_aside_never_costs_a_run_that_checkpointed_since(shards, tmp_path):
    """An --overwrite killed before its first checkpoint leaves the old run in .previous-run. A
    run that then checkpoints there (a --resume) owns the folder: the next --overwrite sets it
    aside in turn (it deleted it, keeping the older run), and the stale folder goes."""
    from sinkalign.align.checkpoints import check_run_dir

    run = tmp_path / "run"
    train(_cfg(shards, run, 2), progress=False)
    first = _snapshot_run(run)
    assert check_run_dir(run, resume=False, overwrite=True)  # ... and the process is killed here
    assert check_run_dir(run, resume=True, overwrite=False)  # a resume from step 0 owes the old run its checkpoint
    train(_cfg(shards, run, 4, seed=1), progress=False, resume=True)  # checkpoints: .previous-run goes
    assert not (run / ".previous-run").exists()
    second = _snapshot_run(run)
    assert second != first
    # killed while moving the run aside: the next start puts the moved files back, whole
    (run / ".previous-run-moving").mkdir()
    (run / "metrics.jsonl").rename(run / ".previous-run-moving" / "metrics.jsonl")
    assert check_run_dir(run, resume=False, overwrite=True)
    assert _snapshot_run(run / ".previous-run") == second and not (run / ".previous-run-moving").exists()


def test_train_cli_refuses_non_finite_numbers_and_a_diverged_run_is_one_line(shards, tmp_path, monkeypatch):
    runner = CliRunner()
    base = ["train", "--pfam-shards", str(shards), "--embedder", "none", "--steps", "2", "--batch-size", "2",
            "--max-length", "64", "--no-progress", "--out", str(tmp_path / "run")]
    for flag, value in (("--lr", "nan"), ("--lr", "inf"), ("--clip-norm", "nan"), ("--weight-decay", "-1"),
                        ("--anchor", "nan"), ("--flank-ratio", "inf")):
        res = runner.invoke(cli, [*base, flag, value])
        assert res.exit_code == 2 and f"Invalid value for '{flag}'" in res.output, (flag, res.output)
    assert not (tmp_path / "run").exists()
    loss_fn = M.loss_fn
    monkeypatch.setattr(M, "loss_fn", lambda *a: (lambda loss, terms: (loss * jnp.inf, terms))(*loss_fn(*a)))
    assert_one_line_error(runner.invoke(cli, base), "training diverged: the loss became", "at step 1")


def test_latest_pointer_outside_the_run_or_stale_falls_back(shards, tmp_path):
    run, other = tmp_path / "run", tmp_path / "other"
    train(_cfg(shards, run, 4), progress=False)
    train(_cfg(shards, other, 6), progress=False)
    latest = run / "checkpoints" / "latest"
    for pointer in ("../../other/checkpoints/step_00000006", str(other / "checkpoints" / "step_00000006"),
                    "step_00000099", "step_00000002", "garbage\x00"):
        latest.write_text(pointer + "\n")
        found = find_latest_checkpoint(run)
        want = "step_00000002" if pointer == "step_00000002" else "step_00000004"
        assert found == run / "checkpoints" / want, pointer
        assert load_checkpoint(run)[1]["step"] == int(want[5:])
    latest.write_text("step_00000099\n")  # stale: resume still works from the newest complete one
    res = train(_cfg(shards, run, 6), progress=False, resume=True)
    assert res.step == 6
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_resume_cleans_leftovers_and_never_duplicates_metrics(shards, tmp_path):
    run = tmp_path / "run"
    train(_cfg(shards, run, 6), progress=False, stop_after=4)
    # what a run killed after step 5 leaves: metric lines past the checkpoint, a torn line, temp files
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 5, "loss": 1.0}) + "\n" + '{"step": 6, "lo')
    (run / "checkpoints" / ".step_00000006.abc.tmp").mkdir()
    (run / "checkpoints" / ".step_00000006.abc.tmp" / "params.safetensors").write_bytes(b"half")
    (run / "checkpoints" / ".latest.xyz.tmp").write_text("step_00000006")
    (run / ".metrics.jsonl.q.tmp").write_text("")
    (run / "keep.tmp").write_text("not hidden: not ours")
    train(_cfg(shards, run, 6), progress=False, resume=True)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert not list(run.glob(".*.tmp")) and not list((run / "checkpoints").glob(".*.tmp"))
    assert (run / "keep.tmp").exists()


def test_state_json_with_missing_fields_is_a_clear_error(shards, tmp_path):
    run = tmp_path / "run"
    train(_cfg(shards, run, 2), progress=False)
    ck = run / "checkpoints" / "step_00000002"
    state = json.loads((ck / "state.json").read_text())
    del state["model"]["window"]
    (ck / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"parameter '\w+' has shape .* lacks \['window'\] \(defaults were assumed\)"):
        load_checkpoint(run)
    (ck / "state.json").write_text(json.dumps({"provenance": "x"}))
    with pytest.raises(CheckpointError, match=r"state.json: has no 'model' config"):
        load_checkpoint(ck)
    (ck / "state.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"state.json: not valid JSON"):
        load_checkpoint(ck)
    r = CliRunner().invoke(cli, ["align", "--model", str(run), "--example"])
    assert r.exit_code != 0 and "state.json" in r.output and "Traceback" not in r.output


def test_train_on_a_directory_without_shards(tmp_path):
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(tmp_path / "empty"), "--embedder", "none",
                                 "--out", str(tmp_path / "run")])
    assert_one_line_error(r, f"{tmp_path / 'empty'} is not a shard directory",
                          f"sinkalign shards build ALIGNMENTS --out {tmp_path / 'empty'}")
    (tmp_path / "empty" / "index.json").write_text('{"format": "sinkalign-pair-shards", "format_version": 9}')
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(tmp_path / "empty"), "--embedder", "none",
                                 "--out", str(tmp_path / "run")])
    assert_one_line_error(r, f"{tmp_path / 'empty' / 'index.json'}: format_version=9, this sinkalign reads")
    (tmp_path / "empty" / "index.json").unlink()
    with pytest.raises(InputError, match="holds no pair shards"):
        train(_cfg(tmp_path / "empty", tmp_path / "run", 2), progress=False)
    assert not (tmp_path / "run").exists()
    # --overwrite with bad shards deletes nothing
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(InputError, match="holds no pair shards"):
        train(_cfg(tmp_path / "empty", tmp_path / "run", 2), progress=False, overwrite=True)
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_export_model_never_empties_a_directory(tmp_path):
    params = M.init_params(M.preset("default", feature_dim=0, embedder={"name": "none"}, window=2))
    cfg = M.preset("default", feature_dim=0, embedder={"name": "none"}, window=2)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "thesis.tex").write_text("years of work")
    with pytest.raises(OutputExistsError, match=r"holds other files \(thesis.tex\)"):
        export_model(busy, params, cfg, provenance="t", overwrite=True)
    assert sorted(p.name for p in busy.iterdir()) == ["thesis.tex"]
    model = export_model(tmp_path / "model", params, cfg, provenance="first")
    with pytest.raises(OutputExistsError, match="already holds a model; pass --overwrite"):
        export_model(model, params, cfg, provenance="second")
    export_model(model, params, cfg, provenance="second", overwrite=True)
    assert load_checkpoint(model)[1]["provenance"] == "second"
    assert oct((model / "state.json").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_inference_does_not_import_the_trainer():
    code = ("import sys; from sinkalign.align.aligner import Aligner; Aligner.load(); "
            "bad = [m for m in ('optax', 'sinkalign.align.train') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})


def test_freeze_keeps_parameters_and_best_tracks_validation(shards, tmp_path):
    cfg = _cfg(shards, tmp_path / "fz", 4, freeze=("sub",))
    model = cfg.model.replace(res_ctx_dim=8, res_ctx_layers=1, res_qk_dim=4, gap_head=True)
    cfg = TrainConfig(**{**{k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "model": model})
    res = train(cfg, progress=False)
    init = M.init_params(model)
    np.testing.assert_array_equal(np.asarray(res.params["sub"]), np.asarray(init["sub"]))
    assert not np.array_equal(np.asarray(res.params["res_wk"]), np.asarray(init["res_wk"]))
    records = [json.loads(x) for x in (tmp_path / "fz" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "val_f1" in r]
    best = max(evals, key=lambda r: r["val_f1"])  # the first of equal maxima is the one kept
    best = next(r for r in evals if r["val_f1"] == best["val_f1"])
    state = json.loads((tmp_path / "fz" / "best" / "state.json").read_text())
    assert (state["step"], state["val_f1"]) == (best["step"], best["val_f1"])
    with pytest.raises(ValueError, match=r"no parameters \['nope'\]"):
        _cfg(shards, tmp_path / "x", 2, freeze=("nope",))


def test_certified_depth_on_a_training_batch():
    """The trainer's certificate (--certify-every) on the model's own augmented problem: the
    selected depth is the first whose omitted-gradient norm is within tau; no dustbins, no
    certificate."""
    from sinkalign.align.train import certified_depth

    cfg = M.preset("default", feature_dim=0, embedder={"name": "none"}, n_iters=4, window=2)
    params = M.init_params(cfg, seed=1)
    rng = np.random.default_rng(0)
    aa = list("ACDEFGHIKLMNPQRSTVWY")
    items = [("".join(rng.choice(aa, 14)), "".join(rng.choice(aa, 11)), None, None,
              np.array([[0, 0], [1, 1], [3, 2]]), None)]
    batch = M.make_batch(items, cfg, 16, 16)
    sel = certified_depth(params, batch, cfg, tau=1e-3)
    assert sel is not None and sel.norms[sel.depth] <= 1e-3
    assert all(sel.norms[r] > 1e-3 for r in sel.norms if r < sel.depth)
    assert certified_depth(params, batch, cfg, tau=1e-9).depth > sel.depth
    assert certified_depth(M.init_params(cfg.replace(dustbin="none")), batch, cfg.replace(dustbin="none"),
                           tau=1e-3) is None


def test_validation_split_missing_or_broken(shards, tmp_path, caplog):
    """Shards without a validation split train without validation (a warning, no best/); a
    validation split that is listed but whose shard is gone is an error before any step,
    not a run that silently skips validation."""
    import shutil

    from sinkalign.errors import MissingFileError

    broken = tmp_path / "broken"
    shutil.copytree(shards, broken)
    index = json.loads((broken / "index.json").read_text())
    for entry in index["splits"]["valid"]["shards"]:
        (broken / entry["file"]).unlink()
    with pytest.raises(MissingFileError, match="valid-00000.npz: listed in index.json but missing"):
        train(_cfg(broken, tmp_path / "run_b", 2), progress=False)
    assert not (tmp_path / "run_b" / "checkpoints").exists()
    train(_cfg(shards, tmp_path / "run_o", 2), progress=False)  # an existing run, asked to be overwritten
    kept = sorted(p.relative_to(tmp_path / "run_o") for p in (tmp_path / "run_o").rglob("*"))
    with pytest.raises(MissingFileError, match="listed in index.json but missing"):
        train(_cfg(broken, tmp_path / "run_o", 2), progress=False, overwrite=True)
    assert sorted(p.relative_to(tmp_path / "run_o") for p in (tmp_path / "run_o").rglob("*")) == kept  # untouched
    del index["splits"]["valid"]
    (broken / "index.json").write_text(json.dumps(index))
    with caplog.at_level("WARNING", logger="sinkalign.align.train"):
        train(_cfg(broken, tmp_path / "run_n", 2), progress=False)  # evaluates at step 2
    assert "has no validation split: training without validation" in caplog.text
    assert not (tmp_path / "run_n" / "best").exists()


# --------------------------------------------------------------------------- --init and --anchor


def _learned_like(shards, out, steps, **kw):
    """A small model with the encoder and gap head (as the shipped learned model has)."""
    cfg = _cfg(shards, out, steps, **kw)
    model = cfg.model.replace(res_ctx_dim=8, res_ctx_layers=1, res_qk_dim=4, gap_head=True)
    return TrainConfig(**{**{k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "model": model})


def test_init_starts_from_a_trained_model_and_anchor_holds_it_there(shards, tmp_path):
    """--init: step 0 is the given model's weights (not the preset's); --anchor adds
    anchor/2 |theta - theta_0|^2 (its gradient pulls back towards theta_0, exactly)."""
    from sinkalign.align.train import anchor_drift, starting_params

    first = train(_learned_like(shards, tmp_path / "first", 4), progress=False)
    base = export_model(tmp_path / "base", first.params, _learned_like(shards, tmp_path, 1).model, provenance="test")
    cfg = _learned_like(shards, tmp_path / "tuned", 6, init=str(base))
    theta_0 = starting_params(cfg)
    fresh = M.init_params(cfg.model)
    for k in fresh:
        np.testing.assert_array_equal(np.asarray(theta_0[k]), np.asarray(first.params[k]))
    assert not np.array_equal(np.asarray(theta_0["res_wk"]), np.asarray(fresh["res_wk"]))
    # the penalty and its gradient
    moved = {k: v + 0.01 * (i + 1) for i, (k, v) in enumerate(sorted(theta_0.items()))}
    drift = float(anchor_drift(moved, theta_0))
    exact = sum(float(np.sum((np.asarray(moved[k], np.float64) - np.asarray(theta_0[k], np.float64)) ** 2))
                for k in theta_0)
    assert drift == pytest.approx(exact, rel=1e-4)  # JAX sums ~2,000 float32 squares
    grad = jax.grad(lambda p: 0.5 * 3.0 * anchor_drift(p, theta_0, ("sub",)))(moved)
    for k in theta_0:
        expect = 0 if k == "sub" else 3.0 * (np.asarray(moved[k]) - np.asarray(theta_0[k]))
        np.testing.assert_allclose(np.asarray(grad[k]), expect, rtol=1e-5, atol=1e-7)
    # training: without an anchor the weights walk away (Adam: about lr per step and weight);
    # a strong anchor holds them within about one step of theta_0
    free = train(cfg, progress=False)
    held = train(TrainConfig(**{**cfg.__dict__, "out": str(tmp_path / "held"), "anchor": 1e4}), progress=False)
    dist = {name: float(anchor_drift(res.params, theta_0)) for name, res in (("free", free), ("held", held))}
    assert dist["held"] < 0.1 * dist["free"], dist
    records = [json.loads(x) for x in (tmp_path / "held" / "metrics.jsonl").read_text().splitlines()]
    assert "anchor" in records[-1] and records[0]["anchor"] == 0.0  # theta = theta_0 before the first update
    state = json.loads((tmp_path / "held" / "best" / "state.json").read_text())
    assert state["train"]["init"] == str(base) and state["train"]["anchor"] == 1e4


def test_init_refuses_a_model_of_another_shape_and_resume_keeps_init(shards, tmp_path):
    first = train(_cfg(shards, tmp_path / "small", 2), progress=False)  # no encoder
    small = export_model(tmp_path / "small_model", first.params, _cfg(shards, tmp_path, 1).model, provenance="test")
    with pytest.raises(CheckpointError, match=r"its parameters do not fit .*res_wk: absent there"):
        train(_learned_like(shards, tmp_path / "x", 2, init=str(small)), progress=False)
    train(_cfg(shards, tmp_path / "a", 4, init=str(small)), progress=False, stop_after=2)
    with pytest.raises(CheckpointError, match="the run started with --init"):
        train(_cfg(shards, tmp_path / "a", 4), progress=False, resume=True)
    with pytest.raises(CheckpointError, match="the run started with --anchor"):
        train(_cfg(shards, tmp_path / "a", 4, init=str(small), anchor=2.0), progress=False, resume=True)
    with pytest.raises(CheckpointError, match="the run started with --flank 0.0, not 0.5"):
        train(_cfg(shards, tmp_path / "a", 4, init=str(small), flank=0.5), progress=False, resume=True)
    assert train(_cfg(shards, tmp_path / "a", 4, init=str(small)), progress=False, resume=True).step == 4
    with pytest.raises(ValueError, match="anchor=-1.0 must be a finite number >= 0"):
        _cfg(shards, tmp_path / "y", 2, anchor=-1.0)


def test_train_cli_init_from_a_shipped_model(shards, tmp_path):
    """`sinkalign train --init blosum`: the shipped model's settings and weights (its embedder,
    none, by default), a model option that keeps the shapes; --config or the DNA model on
    protein shards are refused."""
    from sinkalign.align.aligner import resolve_model

    args = ["train", "--pfam-shards", str(shards), "--steps", "1", "--batch-size", "2", "--eval-every", "1000",
            "--certify-every", "0", "--max-length", "64", "--no-progress"]
    r = CliRunner().invoke(cli, [*args, "--init", "blosum", "--model-option", "n_iters=4", "--anchor", "0.5",
                                 "--out", str(tmp_path / "ft")])
    assert r.exit_code == 0, r.output
    _, state, _ = load_checkpoint(tmp_path / "ft")
    shipped, shipped_state, _ = load_checkpoint(resolve_model("blosum"))
    assert state["model"]["window"] == shipped_state["model"]["window"]
    assert state["model"]["sinkhorn"]["n_iters"] == 4 and state["train"]["anchor"] == 0.5
    assert state["train"]["init"] == str(resolve_model("blosum").resolve())
    r = CliRunner().invoke(cli, [*args, "--init", "blosum", "--config", "k2_eps1", "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "leave out --config" in r.output
    r = CliRunner().invoke(cli, [*args, "--init", "blosum", "--model-option", "window=3", "--out", str(tmp_path / "w")])
    assert r.exit_code == 1 and "do not fit this model's configuration" in r.output
    assert not (tmp_path / "w").exists()  # refused before the run directory is made
    r = CliRunner().invoke(cli, [*args, "--init", "dna", "--out", str(tmp_path / "d")])
    assert r.exit_code == 1 and "the train split holds ['protein'] families, and the model is for dna" in r.output
    assert not (tmp_path / "d" / "metrics.jsonl").exists()


def test_train_cli_flank_trains_on_flanked_pairs_and_records_it(shards, tmp_path, monkeypatch):
    """`--flank 1 --flank-ratio 3`: every training pair goes through flank_example (the
    longer side grown), the run records both settings; a share outside [0, 1] is refused."""
    from sinkalign.align import train as T

    seen = []
    original = T.flank_example

    def spy(example, donors, max_length, max_ratio, rng):
        out = original(example, donors, max_length, max_ratio, rng)
        seen.append((max(len(example.pair.query_seq), len(example.pair.target_seq)),
                     max(len(out.pair.query_seq), len(out.pair.target_seq)), max_ratio))
        return out

    monkeypatch.setattr(T, "flank_example", spy)
    args = ["train", "--pfam-shards", str(shards), "--steps", "2", "--batch-size", "2", "--eval-every", "1000",
            "--certify-every", "0", "--max-length", "64", "--no-progress", "--init", "blosum"]
    r = CliRunner().invoke(cli, [*args, "--flank", "1", "--flank-ratio", "3", "--out", str(tmp_path / "f")])
    assert r.exit_code == 0, r.output
    assert len(seen) == 4 and all(ratio == 3.0 for *_, ratio in seen)
    assert any(after > before for before, after, _ in seen)
    _, state, _ = load_checkpoint(tmp_path / "f")
    assert state["train"]["flank"] == 1.0 and state["train"]["flank_ratio"] == 3.0
    r = CliRunner().invoke(cli, [*args, "--flank", "1.5", "--out", str(tmp_path / "g")])
    assert r.exit_code == 2 and "--flank" in r.output


def test_data_that_give_no_batch_are_refused_before_any_step(shards, tmp_path):
    """It spun forever: fewer training pairs than a batch, or none that fits --max-length
    without --crop, gave no batch in any epoch. Now a one-line error, and no run left behind."""
    from sinkalign.io.shards import ShardDataset

    n = len(ShardDataset(shards, "train"))
    for kw, words in (({"batch_size": n + 2}, [f"holds {n} pairs, fewer than --batch-size {n + 2}"]),
                      ({"max_length": 8}, ["no training pair fits --max-length 8", "--crop"])):
        out = tmp_path / f"run{len(words)}"
        cfg = _cfg(shards, out, 2)
        cfg = dataclasses.replace(cfg, **kw)
        t0 = time.perf_counter()
        with pytest.raises(InputError) as err:
            train(cfg, progress=False)
        assert time.perf_counter() - t0 < 60
        assert all(w in str(err.value) for w in words), str(err.value)
        assert not (out / "metrics.jsonl").exists() and not list(out.glob("**/*.safetensors"))
    # with --crop the long pairs are cut to windows that fit: it trains
    assert train(dataclasses.replace(_cfg(shards, tmp_path / "crop", 1), max_length=8, crop=True),
                 progress=False).step == 1


def test_train_cli_resume_of_a_finished_run_says_so(shards, tmp_path):
    args = ["train", "--pfam-shards", str(shards), "--embedder", "none", "--steps", "1", "--batch-size", "2",
            "--certify-every", "0", "--eval-pairs", "2", "--out", str(tmp_path / "run"), "--no-progress"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0 and r.output.startswith("step 1: loss="), r.output
    r = CliRunner().invoke(cli, [*args, "--resume"])
    assert r.exit_code == 0 and "already at step 1 of 1; nothing to train" in r.output, r.output


def test_overwrite_also_removes_the_previous_runs_best(shards, tmp_path):
    """--overwrite deletes best/ with the run's metrics and checkpoints: a stale best/ would
    pass for the new run's best model (the new run may never beat its F1, or have no
    validation split at all)."""
    from sinkalign.align.checkpoints import check_run_dir

    run = tmp_path / "run"
    train(_cfg(shards, run, 2), progress=False)
    (run / "notes.txt").write_text("mine")
    assert (run / "best" / "state.json").is_file()
    assert check_run_dir(run, resume=False, overwrite=True)  # the run is kept aside until the new one checkpoints
    assert sorted(p.name for p in run.iterdir()) == [".previous-run", "notes.txt"]
    assert sorted(p.name for p in (run / ".previous-run").iterdir()) == ["best", "checkpoints", "metrics.jsonl"]
    (run / "best").mkdir()  # a best/ alone is a run's too
    with pytest.raises(OutputExistsError, match=r"already holds a training run \(best\)"):
        check_run_dir(run, resume=False, overwrite=False)


def test_resume_refuses_changed_settings_but_not_more_steps(shards, tmp_path):
    """A resumed run keeps the settings that shape its optimisation, data and best/ (each
    named by its flag); --steps may change, and shards moved elsewhere are the same shards."""
    import shutil

    run = tmp_path / "run"
    train(_cfg(shards, run, 2), progress=False)
    for change, flag in (({"lr": 2e-2}, "--lr"), ({"batch_size": 4}, "--batch-size"), ({"seed": 1}, "--seed"),
                         ({"max_length": 128}, "--max-length"), ({"eval_pairs": 8}, "--eval-pairs"),
                         ({"freeze": ("sub",)}, "--freeze")):
        with pytest.raises(CheckpointError, match=f"the run started with {flag} .*resume with the same {flag}"):
            train(dataclasses.replace(_cfg(shards, run, 4), **change), progress=False, resume=True)
    # every changed setting at once, not one per attempt
    with pytest.raises(CheckpointError, match=r"the run started with --batch-size 2, not 4; --lr 0.01, not 0.02; "
                                              r"resume with the same --batch-size and --lr \(or start"):
        train(dataclasses.replace(_cfg(shards, run, 4), lr=2e-2, batch_size=4), progress=False, resume=True)
    other = tmp_path / "other_shards"
    build_shards(make_families(tmp_path / "sto", n_families=5, n_seqs=5, length=30), other,
                 split=(0.5, 0.25, 0.25), seed=0, min_length=5)
    with pytest.raises(CheckpointError, match="--pfam-shards"):
        train(_cfg(other, run, 4), progress=False, resume=True)
    moved = tmp_path / "moved"
    shutil.copytree(shards, moved)
    assert train(_cfg(moved, run, 4), progress=False, resume=True).step == 4
    # shards rebuilt in place (another split seed): the same path, other splits and validation pairs;
    # a resume went on silently (a usability audit)
    run2 = tmp_path / "run2"
    train(_cfg(moved, run2, 2), progress=False)
    shutil.rmtree(moved)
    build_shards(make_families(tmp_path / "sto2", n_families=4, n_seqs=5, length=30), moved,
                 split=(0.5, 0.25, 0.25), seed=5, min_length=5)
    with pytest.raises(CheckpointError, match=r"the shards in .*moved are not the ones the run started with \(their "
                                              r"index.json differs: rebuilt or replaced\?\)"):
        train(_cfg(moved, run2, 4), progress=False, resume=True)


def test_resume_marks_best_as_the_first_time(shards, tmp_path):
    """A run killed after best/ was saved past its last checkpoint runs those steps again: the
    re-run steps are judged against the kept metric lines, so best/ and the "best" marks come
    out as in an uninterrupted run."""
    import shutil

    straight, killed = tmp_path / "straight", tmp_path / "killed"
    cfg = dict(eval_every=1, checkpoint_every=1, keep_checkpoints=6)
    train(dataclasses.replace(_cfg(shards, straight, 6), **cfg), progress=False)
    lines = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    marked = [r["step"] for r in lines if r.get("best")]
    best_state = json.loads((straight / "best" / "state.json").read_text())
    # as if the checkpoints after step 1 had not been written (killed while writing step 2's):
    # the metric lines and best/ of later steps are there, the run resumes from step 1
    shutil.copytree(straight, killed)
    for step in range(2, 7):
        shutil.rmtree(killed / "checkpoints" / f"step_{step:08d}")
    (killed / "checkpoints" / "latest").write_text("step_00000001\n")
    train(dataclasses.replace(_cfg(shards, killed, 6), **cfg), progress=False, resume=True)
    again = [json.loads(x) for x in (killed / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in again if r.get("best")] == marked
    assert [r["val_f1"] for r in again] == [r["val_f1"] for r in lines]
    state = json.loads((killed / "best" / "state.json").read_text())
    assert (state["step"], state["val_f1"]) == (best_state["step"], best_state["val_f1"])
    assert max(marked) > 1, f"the best is not past the checkpoint ({marked}): the test tests nothing"


def test_a_genome_lm_run_or_model_is_named_not_taken_for_an_aligner(tmp_path):
    """An LM run (checkpoints/step-N, latest.json) or model (config.json + model.safetensors)
    given where an aligner's run or model goes is refused as what it is, and never written
    into, not even with --resume or --overwrite."""
    from sinkalign.align.checkpoints import check_run_dir

    lm_run, lm_model = tmp_path / "lm_run", tmp_path / "lm_model"
    (lm_run / "checkpoints" / "step-00000004").mkdir(parents=True)
    (lm_run / "checkpoints" / "latest.json").write_text('{"step": 4, "dir": "step-00000004"}')
    (lm_run / "metrics.jsonl").write_text('{"step": 4}\n')
    lm_model.mkdir()
    (lm_model / "config.json").write_text("{}")
    (lm_model / "model.safetensors").write_bytes(b"")
    before = _snapshot(lm_run)
    for resume, overwrite in ((False, False), (True, False), (False, True)):
        with pytest.raises(OutputExistsError, match=r"lm_run is a genome LM training run \(sinkalign lm train\), "
                                                    "not an aligner training run; choose another --out"):
            check_run_dir(lm_run, resume=resume, overwrite=overwrite)
    assert _snapshot(lm_run) == before
    with pytest.raises(CheckpointError, match="lm_run is a genome LM training run .*not an aligner model"):
        load_checkpoint(lm_run)
    with pytest.raises(CheckpointError, match=r"lm_model is a genome language model \(sinkalign lm train\), not an "
                                              "aligner model"):
        load_checkpoint(lm_model)
    r = CliRunner().invoke(cli, ["align", "--example", "--model", str(lm_model)])
    assert r.exit_code == 1 and "is a genome language model" in r.output, r.output


def test_an_empty_validation_split_is_said(tmp_path, caplog):
    """`shards build` lists a validation split even when no family fell in it; training on such
    shards ran without validation and without best/, saying nothing."""
    files = make_families(tmp_path / "sto", n_families=2, n_seqs=4, length=30)
    build_shards(files, tmp_path / "shards", split=(1.0, 0.0, 0.0), seed=0, min_length=5)
    index = json.loads((tmp_path / "shards" / "index.json").read_text())
    assert "valid" in index["splits"] and index["splits"]["valid"]["n_pairs"] == 0
    with caplog.at_level("WARNING", logger="sinkalign.align.train"):
        train(_cfg(tmp_path / "shards", tmp_path / "run", 2), progress=False)
    assert "has an empty validation split: training without validation (no best/ checkpoint)" in caplog.text
    assert not (tmp_path / "run" / "best").exists()


def test_train_cli_resume_takes_the_runs_model(shards, tmp_path):
    """`train --resume` without --embedder/--config/--model-option continues the run's own model
    (it said the shards had no embeddings: --embedder defaulted to builtin); a --model-option
    that changes the model is refused naming the setting (it said only "model config differs")."""
    args = ["train", "--pfam-shards", str(shards), "--batch-size", "2", "--certify-every", "0", "--eval-pairs", "2",
            "--out", str(tmp_path / "run"), "--no-progress"]
    r = CliRunner().invoke(cli, [*args, "--steps", "1", "--embedder", "none", "--model-option", "window=2",
                                 "--model-option", "n_iters=4"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, [*args, "--steps", "2", "--resume"])
    assert r.exit_code == 0 and r.output.startswith("step 2: loss="), r.output
    _, state, _ = load_checkpoint(tmp_path / "run")
    assert state["step"] == 2 and M.AlignerConfig.from_dict(state["model"]).window == 2
    r = CliRunner().invoke(cli, [*args, "--steps", "3", "--resume", "--model-option", "window=3"])
    assert_one_line_error(r, "model config differs from this run's (window: 2 -> 3); resume with the run's settings")
    r = CliRunner().invoke(cli, [*args, "--steps", "3", "--resume", "--model-option", "n_iters=4"])  # the run's own
    assert r.exit_code == 0 and r.output.startswith("step 3: loss="), r.output
    # features of another embedder than the run's: named before anything is read
    import shutil

    from sinkalign.align.embed import embed_shards, get_embedder

    embedded = tmp_path / "embedded"
    shutil.copytree(shards, embedded)
    embed_shards(embedded, get_embedder("builtin"))
    args[2] = str(embedded)
    r = CliRunner().invoke(cli, [*args, "--steps", "4", "--resume", "--embedder", "builtin"])
    assert r.exit_code == 2 and (f"Invalid value for --embedder: the run in {tmp_path / 'run'} was trained on 'none' "
                                 "features (dimension 0); these shards and --embedder give 'builtin' (53)") in r.output


def test_a_users_own_best_or_checkpoints_folder_is_not_taken_for_a_run(tmp_path):
    """A best/ or checkpoints/ holding what no run writes is the user's: refused with and without
    --overwrite (which deleted it) and --resume (save_best replaced it), and left as it was;
    before, it was called a training run."""
    from sinkalign.align.checkpoints import check_run_dir

    for folder, names in (("best", ("model.pt", "notes.txt")), ("checkpoints", ("epoch3.ckpt",))):
        out = tmp_path / folder
        (out / folder).mkdir(parents=True)
        for name in names:
            (out / folder / name).write_text("mine")
        for kw in ({"resume": False, "overwrite": False}, {"resume": False, "overwrite": True},
                   {"resume": True, "overwrite": False}):
            with pytest.raises(OutputExistsError, match=rf"{folder} holds what no aligner training run writes "
                                                        rf"\({', '.join(names)}\); the run would replace it"):
                check_run_dir(out, **kw)
            assert sorted(p.name for p in (out / folder).iterdir()) == sorted(names)
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "best").write_text("a file named best")
    with pytest.raises(OutputExistsError, match=r"best is a file, where a training run keeps its best/ folder"):
        check_run_dir(tmp_path / "file", resume=False, overwrite=True)
    assert (tmp_path / "file" / "best").read_text() == "a file named best"
    # checkpoints/ linked to scratch space is the run's own (a review found it refused on --resume)
    scratch = tmp_path / "scratch"
    (scratch / "step_00000100").mkdir(parents=True)
    (scratch / "latest").write_text("step_00000100\n")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "checkpoints").symlink_to(scratch, target_is_directory=True)
    check_run_dir(tmp_path / "linked", resume=True, overwrite=False)


def _lower_case(path: Path) -> None:
    """The rows of a Stockholm file in lower case (insert columns: aligned to nothing)."""
    lines = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and line != "//":
            name, row = line.split()
            line = f"{name} {row.lower()}"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")


def test_shards_that_align_nothing_are_refused_or_not_validated_on(tmp_path, caplog):
    """Shards of all-lower-case Stockholm rows align no residue pair: a train split of them
    is refused before the run starts, a validation split of them is not validated on (it
    trained to 'everything unaligned' and reported validation F1 1, with no warning)."""
    files = make_families(tmp_path / "sto", n_families=4, n_seqs=5, length=30)
    for f in files:
        _lower_case(Path(f))
    build_shards(files, tmp_path / "lower", split=(0.5, 0.25, 0.25), seed=0, min_length=5)
    with pytest.raises(InputError, match=r"no reference alignment of the train split aligns a residue pair"):
        train(_cfg(tmp_path / "lower", tmp_path / "run", 2), progress=False)
    assert not (tmp_path / "run").exists()
    files = make_families(tmp_path / "sto2", n_families=4, n_seqs=5, length=30)
    build_shards(files, tmp_path / "upper", split=(0.5, 0.25, 0.25), seed=0, min_length=5)
    index = json.loads((tmp_path / "upper" / "index.json").read_text())
    valid = [Path(f) for f in files if index["families"][Path(f).stem]["split"] == "valid"]
    assert valid
    for f in valid:
        _lower_case(f)
    build_shards(files, tmp_path / "mixed", split=(0.5, 0.25, 0.25), seed=0, min_length=5)  # the same split
    with caplog.at_level("WARNING", logger="sinkalign.align.train"):
        train(_cfg(tmp_path / "mixed", tmp_path / "run2", 2), progress=False)
    assert "no reference alignment of the validation split aligns a residue pair" in caplog.text
    assert "has an empty validation split" not in caplog.text
    assert not (tmp_path / "run2" / "best").exists()
