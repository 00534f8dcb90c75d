"""Where an LM training run keeps its checkpoints, and how the newest complete one is found.

Its own module so that loading a model (:mod:`sinkalign.lm.generate`) never imports the
trainer. A run directory holds ``checkpoints/step-NNNNNNNN/`` (complete once its
``trainer_state.json``, written last, exists) and ``checkpoints/latest.json`` naming the newest.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sinkalign.utils import newest_checkpoint

__all__ = ["LATEST", "TRAINER_STATE", "find_latest_checkpoint", "step_dir_name"]

TRAINER_STATE = "trainer_state.json"
LATEST = "latest.json"
_STEP_RE = re.compile(r"step-(\d{8,})")


def step_dir_name(step: int) -> str:
    """``step-00000042``: the checkpoint directory of ``step``."""
    return f"step-{step:08d}"


def find_latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint directory under ``out_dir/checkpoints`` (or ``None``).

    ``latest.json`` names it; if that pointer is missing, unreadable, stale or names
    anything but a complete ``step-NNNNNNNN`` directory inside ``checkpoints/``, the complete
    one with the highest step is taken (with a warning).
    """
    return newest_checkpoint(Path(out_dir) / "checkpoints", pointer=LATEST, pointed=lambda text: json.loads(text)["dir"],
                             step_name=_STEP_RE, complete=lambda path: (path / TRAINER_STATE).is_file())
