"""Where an LM training run keeps its checkpoints, and how the newest complete one is found.

Its own module so that loading a model (:mod:`sinkalign.lm.generate`) never imports the
trainer. A run directory holds ``checkpoints/step-NNNNNNNN/`` (complete once its
``trainer_state.json``, written last, exists) and ``checkpoints/latest.json`` naming the newest.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

__all__ = ["LATEST", "TRAINER_STATE", "find_latest_checkpoint", "step_dir_name"]

logger = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
LATEST = "latest.json"


def step_dir_name(step: int) -> str:
    """``step-00000042``: the checkpoint directory of ``step``."""
    return f"step-{step:08d}"


def find_latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint directory under ``out_dir/checkpoints`` (or ``None``).

    ``latest.json`` names it; if that pointer is missing, unreadable, stale or names a
    directory outside ``checkpoints/``, the complete ``step-*`` directory with the highest
    step is taken (with a warning).
    """
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return None
    pointer = root / LATEST
    if pointer.is_file():
        try:
            name = json.loads(pointer.read_text(encoding="utf-8"))["dir"]
            target = root / name
            inside = isinstance(name, str) and target.resolve().parent == root.resolve()
            if inside and (target / TRAINER_STATE).is_file():
                return target
            logger.warning("%s names %r, which is not a complete checkpoint of this run; "
                           "taking the newest complete one", pointer, name)
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
            logger.warning("%s is unreadable; looking for step directories", pointer)
    done = sorted(p for p in root.glob("step-*") if (p / TRAINER_STATE).is_file())
    return done[-1] if done else None
