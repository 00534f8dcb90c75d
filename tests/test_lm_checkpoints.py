"""The LM run layout: the newest complete checkpoint, whatever state `latest.json` is in."""

from __future__ import annotations

import json

from sinkalign.lm.checkpoints import LATEST, TRAINER_STATE, find_latest_checkpoint, step_dir_name


def _run(tmp_path, steps, complete=True):
    root = tmp_path / "run" / "checkpoints"
    for step in steps:
        d = root / step_dir_name(step)
        d.mkdir(parents=True)
        if complete:
            (d / TRAINER_STATE).write_text("{}")
    return tmp_path / "run", root


def test_pointer_is_followed_when_it_names_a_complete_checkpoint(tmp_path):
    run, root = _run(tmp_path, [10, 20])
    (root / LATEST).write_text(json.dumps({"step": 10, "dir": step_dir_name(10)}))
    assert find_latest_checkpoint(run) == root / "step-00000010"


def test_stale_outside_or_broken_pointers_fall_back_to_the_newest_complete(tmp_path, caplog):
    run, root = _run(tmp_path, [10, 20])
    (root / "step-00000030").mkdir()  # killed before its trainer state was written
    elsewhere = tmp_path / "other" / "checkpoints" / "step-00000099"
    elsewhere.mkdir(parents=True)
    (elsewhere / TRAINER_STATE).write_text("{}")
    for target in ("step-00000030", "../../other/checkpoints/step-00000099", str(elsewhere), 7):
        (root / LATEST).write_text(json.dumps({"dir": target}))
        assert find_latest_checkpoint(run) == root / "step-00000020", target
    (root / LATEST).write_text("{not json")
    assert find_latest_checkpoint(run) == root / "step-00000020"
    assert "not a complete checkpoint of this run" in caplog.text and "unreadable" in caplog.text


def test_no_checkpoints(tmp_path):
    assert find_latest_checkpoint(tmp_path) is None
    run, _ = _run(tmp_path, [5], complete=False)
    assert find_latest_checkpoint(run) is None
