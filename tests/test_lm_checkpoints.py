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


def test_steps_compare_as_numbers_and_links_are_not_checkpoints(tmp_path):
    """Past step 99,999,999 the names grow a digit: the newest is still the largest step. A
    complete-looking link inside checkpoints/ (e.g. to another run) is never taken."""
    run, root = _run(tmp_path, [99_999_999, 100_000_000, 5])
    assert find_latest_checkpoint(run) == root / "step-100000000"
    other, other_root = _run(tmp_path / "x", [200_000_000])
    (root / "step-300000000").symlink_to(other_root / "step-200000000")
    (root / LATEST).write_text(json.dumps({"dir": "step-300000000"}))
    assert find_latest_checkpoint(run) == root / "step-100000000"
