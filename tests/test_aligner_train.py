"""Training: shards -> steps -> atomic checkpoints -> resume (also after SIGKILL) -> data parallel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from click.testing import CliRunner

from sinkalign.align import model as M
from sinkalign.align.train import TrainConfig, load_checkpoint, train
from sinkalign.cli.main import cli
from sinkalign.io.shards import build_shards
from tests.aligner_fixtures import make_families


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("aln")
    files = make_families(root / "sto", n_families=4, n_seqs=5, length=30)
    build_shards(files, root / "shards", split=(0.5, 0.25, 0.25), seed=0, min_length=5)
    return root / "shards"


def _cfg(shards, out, steps, **kw):
    model = M.preset("default", feature_dim=0, embedder={"name": "none"}, n_iters=4, window=2)
    return TrainConfig(shards=str(shards), out=str(out), model=model, steps=steps, batch_size=2, lr=1e-2,
                       warmup=1, eval_every=2, eval_pairs=4, checkpoint_every=2, max_length=64, **kw)


def test_two_local_devices_shard_the_batch(shards, tmp_path):
    assert len(jax.local_devices()) == 2  # conftest forces two host devices
    res = train(_cfg(shards, tmp_path / "run", 2), progress=False)
    assert res.step == 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2]
    assert {"loss", "ce", "mono", "recon", "grad_norm", "lr", "examples_per_s", "val_f1", "val_ce"} <= set(lines[-1])


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


def test_resume_refuses_a_different_model(shards, tmp_path):
    train(_cfg(shards, tmp_path / "c", 2), progress=False)
    cfg = _cfg(shards, tmp_path / "c", 4)
    cfg = TrainConfig(**{**cfg.__dict__, "model": cfg.model.replace(window=3)})
    with pytest.raises(ValueError, match="model config differs"):
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


def test_train_cli_errors(shards, tmp_path):
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "builtin", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "has no embeddings" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--config", "nope",
                                 "--out", str(tmp_path)])
    assert r.exit_code == 1 and "unknown preset 'nope'" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option",
                                 "temperature=2", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown AlignerConfig fields ['temperature']" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option",
                                 "feature_dim=3", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "feature_dim follows the shards' embeddings" in r.output
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option",
                                 "eps=-1", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "eps" in r.output


def test_train_cli_model_options_reach_the_saved_config(shards, tmp_path):
    r = CliRunner().invoke(cli, ["train", "--pfam-shards", str(shards), "--embedder", "none", "--model-option", "eps=6",
                                 "--model-option", "window=3", "--steps", "1", "--batch-size", "2",
                                 "--eval-every", "1000", "--certify-every", "0", "--max-length", "64",
                                 "--out", str(tmp_path), "--no-progress"])
    assert r.exit_code == 0, r.output
    params, state, _ = load_checkpoint(tmp_path)
    assert state["model"]["eps"] == 6 and state["model"]["window"] == 3
    assert params["sub"].shape[0] == 7  # 2 * window + 1 diagonal offsets


def test_train_config_rejects_indivisible_batches(shards, tmp_path):
    with pytest.raises(ValueError, match="batch_size=3 must be a multiple of the 2 local devices"):
        train(TrainConfig(**{**_cfg(shards, tmp_path, 2).__dict__, "batch_size": 3}), progress=False)


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
