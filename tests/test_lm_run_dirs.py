"""What `sinkalign lm train --resume`, `lm eval` and `generate-dna` make of the directories they are
given: a damaged checkpoint, a run already at --steps, an aligner's run or model (not a genome LM)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import sinkalign
from sinkalign.cli.main import cli
from sinkalign.errors import CheckpointError
from sinkalign.lm.checkpoints import aligner_layout, previous_checkpoint
from sinkalign.lm.generate import resolve_model_path
from sinkalign.lm.train import OPTIMIZER_STATE, TRAINER_STATE, TrainConfig, train_lm
from tests.cli_errors import assert_one_line_error

_STEPS = 3
_TINY = ["--attention", "rope", "--steps", str(_STEPS), "--batch-size", "2", "--seq-len", "16", "--d-model", "16",
         "--n-layers", "1", "--n-heads", "2", "--eval-every", "0", "--eval-max-bases", "64", "--save-every", "1",
         "--keep-checkpoints", "3", "--log-every", "1", "--warmup-steps", "0", "--threads", "1", "--no-progress"]
_SHIPPED_ALIGNER = Path(sinkalign.__file__).parent / "data" / "aligner_learned"


@pytest.fixture(scope="module")
def fasta(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lm_run_dirs") / "toy.fa"
    seq = "".join("ACGT"[i] for i in np.random.default_rng(0).integers(0, 4, size=1500))
    path.write_text(">toy\n" + seq + "\n")
    return path


def _args(fasta: Path, out: Path, *extra: str) -> list[str]:
    return ["lm", "train", "--fasta", str(fasta), "--out", str(out), *_TINY, *extra]


@pytest.fixture(scope="module")
def finished_run(fasta, tmp_path_factory) -> Path:
    """A tiny run that reached --steps 3, with the checkpoints of steps 1, 2 and 3."""
    out = tmp_path_factory.mktemp("finished") / "run"
    res = CliRunner().invoke(cli, _args(fasta, out))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "latest.json", "step-00000001", "step-00000002", "step-00000003"]
    return out


def _snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``root``: its bytes, inode and modification time (a rewrite changes them)."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _metric_steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


# ----------------------------------------------------------------------------- a damaged checkpoint


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:5])


def _drop_optimizer_field(path: Path) -> None:
    state = json.loads(path.read_text())
    del state["optimizer"]
    path.write_text(json.dumps(state))


@pytest.mark.parametrize(
    ("file", "damage", "problem"),
    [
        (OPTIMIZER_STATE, _truncate, "corrupt safetensors file"),
        (OPTIMIZER_STATE, Path.unlink, "not found"),
        (TRAINER_STATE, _truncate, "unreadable training state"),
        (TRAINER_STATE, _drop_optimizer_field, "training state without a valid optimizer"),
        ("model.safetensors", _truncate, "corrupt safetensors file"),
        ("config.json", _truncate, "corrupt checkpoint config"),
    ],
    ids=["optimizer-truncated", "optimizer-deleted", "trainer-state-truncated", "trainer-state-incomplete",
         "weights-truncated", "config-truncated"],
)
def test_resume_from_a_damaged_checkpoint_names_the_file_and_the_way_out(fasta, finished_run, tmp_path, file,
                                                                         damage, problem):
    """A damaged file of the newest checkpoint used to end --resume in a traceback (SafetensorError,
    FileNotFoundError, JSONDecodeError, KeyError): now one `Error:` line names the file and says
    that deleting the checkpoint's folder resumes from the one before it, which is so."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    shutil.rmtree(out / "checkpoints" / "step-00000003")  # as if killed after step 2's checkpoint ...
    (out / "checkpoints" / "latest.json").write_text(json.dumps({"step": 2, "dir": "step-00000002"}))
    ck = out / "checkpoints" / "step-00000002"
    damage(ck / file)  # ... with that checkpoint damaged since
    before = _snapshot(out)
    res = CliRunner().invoke(cli, _args(fasta, out, "--resume"))
    assert_one_line_error(res, f"{ck / file}: {problem}",
                          f"the checkpoint {ck} is damaged: delete that folder to resume from the checkpoint "
                          f"before it (step-00000001)")
    assert _snapshot(out) == before
    shutil.rmtree(ck)  # what the message says to do
    res = CliRunner().invoke(cli, _args(fasta, out, "--resume"))
    assert res.exit_code == 0, res.output
    assert f"step {_STEPS}: train" in res.output
    assert _metric_steps(out / "metrics.jsonl") == [1, 2, 3]


def test_damaged_checkpoint_under_ddp_is_the_same_one_line_error(fasta, finished_run, tmp_path):
    """--nproc 2: the workers' error came back as a ProcessRaisedException with their traceback."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    ck = out / "checkpoints" / "step-00000003"
    _truncate(ck / OPTIMIZER_STATE)
    res = CliRunner().invoke(cli, _args(fasta, out, "--resume", "--nproc", "2"))
    assert_one_line_error(res, f"{ck / OPTIMIZER_STATE}: corrupt safetensors file",
                          "delete that folder to resume from the checkpoint before it (step-00000002)")


def test_damaged_only_checkpoint_says_to_start_over(fasta, finished_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    for step in (1, 2):
        shutil.rmtree(out / "checkpoints" / f"step-0000000{step}")
    ck = out / "checkpoints" / "step-00000003"
    _truncate(ck / OPTIMIZER_STATE)
    assert previous_checkpoint(ck) is None
    res = CliRunner().invoke(cli, _args(fasta, out, "--resume"))
    assert_one_line_error(res, f"{ck / OPTIMIZER_STATE}: corrupt safetensors file",
                          "it is the run's only checkpoint: delete that folder and resume again to start the run "
                          "over from scratch")
    shutil.rmtree(ck)
    res = CliRunner().invoke(cli, _args(fasta, out, "--resume"))
    assert res.exit_code == 0, res.output
    assert (out / "metrics.jsonl.1").is_file() and _metric_steps(out / "metrics.jsonl") == [1, 2, 3]


def test_previous_checkpoint(finished_run):
    root = finished_run / "checkpoints"
    assert previous_checkpoint(root / "step-00000003") == root / "step-00000002"
    assert previous_checkpoint(root / "step-00000001") is None


# ----------------------------------------------------------------------------- a run already at --steps


def test_resume_of_a_finished_run_says_there_is_nothing_to_train_and_writes_nothing(fasta, finished_run, tmp_path):
    """It printed `step 3: train nan bits/base, held-out n/a bits/base; ...` and rewrote metrics.jsonl."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    before = _snapshot(out)
    res = CliRunner().invoke(cli, _args(fasta, out, "--resume"))
    assert res.exit_code == 0, res.output
    assert res.output == (f"{out}: already at step {_STEPS} of {_STEPS}; nothing to train (its model: "
                          f"{out / 'checkpoints' / 'step-00000003'})\n")
    assert _snapshot(out) == before
    # the Python API: step == start_step says so
    cfg = TrainConfig(fasta=str(fasta), attention="rope", out_dir=str(out), steps=_STEPS, batch_size=2, seq_len=16,
                      d_model=16, n_layers=1, n_heads=2, eval_every=0, eval_max_bases=64, save_every=1,
                      keep_checkpoints=3, log_every=1, warmup_steps=0, num_threads=1, progress=False, resume=True)
    result = train_lm(cfg)
    assert (result.step, result.start_step) == (_STEPS, _STEPS) and math.isnan(result.train_loss)
    assert result.checkpoint_dir == str(out / "checkpoints" / "step-00000003")
    assert _snapshot(out) == before


# ----------------------------------------------------------------------------- messages name the options


def test_cli_messages_name_the_options_and_the_api_names_the_fields(fasta, finished_run, tmp_path):
    """`lm train` said "pass --resume (resume=True) ..., or choose another out_dir"."""
    res = CliRunner().invoke(cli, _args(fasta, finished_run))
    assert_one_line_error(res, f"{finished_run} already holds checkpoints (step-00000003); pass --resume to "
                               f"continue, or choose another --out")
    assert "resume=True" not in res.output and "out_dir" not in res.output
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    res = CliRunner().invoke(cli, _args(fasta, stopped))
    assert_one_line_error(res, "stopped before its first checkpoint; pass --resume to start over there from "
                               "scratch", "or choose another --out")
    assert "resume=True" not in res.output and "out_dir" not in res.output
    with pytest.raises(CheckpointError, match=r"already holds checkpoints \(step-00000003\); pass resume=True to "
                                              r"continue, or choose another out_dir$"):
        train_lm(TrainConfig(fasta=str(fasta), attention="rope", out_dir=str(finished_run), seq_len=16))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_device_cuda_without_cuda_names_the_option(fasta, tmp_path):
    res = CliRunner().invoke(cli, _args(fasta, tmp_path / "run", "--device", "cuda"))
    assert res.exit_code == 2 and "--device cuda: CUDA is not available" in res.output, res.output
    assert "device='cuda'" not in res.output and not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- an aligner's directories


@pytest.fixture(scope="module")
def aligner_run(tmp_path_factory) -> Path:
    """An aligner training run as `sinkalign train` lays it out, written by the aligner's own checkpoint
    functions (on the shipped model's weights): metrics.jsonl, checkpoints/step_NNNNNNNN/, latest, best/."""
    from safetensors.numpy import load_file

    from sinkalign.align.checkpoints import save_best, save_checkpoint

    out = tmp_path_factory.mktemp("aligner") / "arun"
    params = load_file(_SHIPPED_ALIGNER / "params.safetensors")
    state = json.loads((_SHIPPED_ALIGNER / "state.json").read_text())
    for step in (1, 2):
        save_checkpoint(out, step, params, {}, {"model": state["model"]})
    save_best(out, 2, params, {"model": state["model"], "val_f1": 0.5})
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 5.2, "f1": 0.9}\n{"step": 2, "loss": 5.1, "f1": 0.9}\n')
    assert (out / "checkpoints" / "latest").is_file() and (out / "checkpoints" / "step_00000002").is_dir()
    return out


@pytest.mark.parametrize("resume", [False, True])
def test_lm_train_refuses_an_aligner_run_as_out(fasta, aligner_run, resume):
    """It said the aligner run "was stopped before its first checkpoint; pass --resume", and --resume
    renamed the aligner's metrics.jsonl and wrote LM checkpoints beside the aligner's."""
    before = _snapshot(aligner_run)
    res = CliRunner().invoke(cli, _args(fasta, aligner_run, *(["--resume"] if resume else [])))
    assert_one_line_error(res, f"{aligner_run} is an aligner training run (sinkalign train), not a genome LM run; "
                               f"choose another --out")
    assert _snapshot(aligner_run) == before


def test_lm_train_refuses_an_aligner_model_directory_as_out(fasta, tmp_path):
    model = tmp_path / "aligner_model"
    shutil.copytree(_SHIPPED_ALIGNER, model)
    before = _snapshot(model)
    res = CliRunner().invoke(cli, _args(fasta, model))
    assert_one_line_error(res, f"{model} is an aligner model (params.safetensors + state.json), not a genome "
                               f"language model; choose another --out")
    assert _snapshot(model) == before


@pytest.mark.parametrize("command", ["generate-dna", "lm eval"])
@pytest.mark.parametrize("target", ["shipped model", "run", "run checkpoint", "run best"])
def test_lm_commands_refuse_aligner_models_and_runs_by_name(fasta, aligner_run, command, target):
    """`generate-dna --model` / `lm eval --model` said "checkpoint file not found: X/config.json"
    or "training run X holds no complete checkpoint"."""
    path, kind = {
        "shipped model": (_SHIPPED_ALIGNER, "model"),
        "run": (aligner_run, "run"),
        "run checkpoint": (aligner_run / "checkpoints" / "step_00000002", "model"),
        "run best": (aligner_run / "best", "model"),
    }[target]
    args = (["generate-dna", "--prompt", "ACGT", "--length", "5"] if command == "generate-dna"
            else ["lm", "eval", "--fasta", str(fasta)])
    res = CliRunner().invoke(cli, [*args, "--model", str(path)])
    what = ("is an aligner training run (sinkalign train), not a genome LM run" if kind == "run"
            else "is an aligner model (params.safetensors + state.json), not a genome language model")
    assert_one_line_error(res, f"{path} {what}; give a genome LM: a checkpoint directory (config.json + "
                               f"model.safetensors), a run of `sinkalign lm train` or a shipped model's name")
    with pytest.raises(CheckpointError, match="aligner"):
        resolve_model_path(path)


def test_aligner_layout(aligner_run, finished_run, tmp_path):
    assert aligner_layout(_SHIPPED_ALIGNER) == "model"
    assert aligner_layout(aligner_run) == "run"
    assert aligner_layout(aligner_run / "checkpoints" / "step_00000001") == "model"
    only_best = tmp_path / "only_best"  # a run that kept its best model, its checkpoints deleted
    shutil.copytree(aligner_run / "best", only_best / "best")
    assert aligner_layout(only_best) == "run"
    # genome LM runs and checkpoints, empty or missing directories are not
    assert aligner_layout(finished_run) is None
    assert aligner_layout(finished_run / "checkpoints" / "step-00000003") is None
    assert aligner_layout(tmp_path / "missing") is None
    (tmp_path / "empty").mkdir()
    assert aligner_layout(tmp_path / "empty") is None
    assert resolve_model_path(finished_run) == finished_run / "checkpoints" / "step-00000003"
