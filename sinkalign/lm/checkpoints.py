"""Where an LM training run keeps its checkpoints, and how the newest complete one is found.

Its own module so that loading a model (:mod:`sinkalign.lm.generate`) never imports the
trainer. A run directory holds ``checkpoints/step-NNNNNNNN/`` (complete once its
``trainer_state.json``, written last, exists) and ``checkpoints/latest.json`` naming the newest.

The aligner's directories (:mod:`sinkalign.align.checkpoints`) look alike but are another kind:
:func:`aligner_layout` tells them by their files, so that the LM commands refuse them by name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sinkalign.utils import ALIGNER_LAYOUT, GENOME_LM_LAYOUT, newest_checkpoint, previous_complete_checkpoint

__all__ = ["LATEST", "TRAINER_STATE", "aligner_layout", "find_latest_checkpoint", "not_a_genome_lm",
           "previous_checkpoint", "step_dir_name"]

TRAINER_STATE = "trainer_state.json"
LATEST = GENOME_LM_LAYOUT.pointer
_STEP_RE = GENOME_LM_LAYOUT.step_name


def _is_complete(path: Path) -> bool:
    """A checkpoint is complete once its trainer state, written last, exists."""
    return (path / TRAINER_STATE).is_file()


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
                             step_name=_STEP_RE, complete=_is_complete)


def previous_checkpoint(checkpoint: str | os.PathLike) -> Path | None:
    """The complete checkpoint of the same run with the highest step below ``checkpoint``'s
    (``None``: there is none), which a resume falls back to once ``checkpoint`` is deleted."""
    return previous_complete_checkpoint(checkpoint, step_name=_STEP_RE, complete=_is_complete)


def aligner_layout(path: str | os.PathLike) -> str | None:
    """What the aligner directory ``path`` is, told by its files (:data:`~sinkalign.utils.ALIGNER_LAYOUT`):
    ``"model"`` (``params.safetensors`` and ``state.json``: a model directory such as
    ``sinkalign/data/aligner_learned``, or one checkpoint of an aligner run), ``"run"`` (a
    ``sinkalign train`` run: ``checkpoints/latest``, ``checkpoints/step_NNNNNNNN/`` or ``best/``),
    or ``None`` (not an aligner directory)."""
    return ALIGNER_LAYOUT.kind(path)


def not_a_genome_lm(path: str | os.PathLike, kind: str) -> str:
    """The start of the message refusing ``path``, an aligner directory of ``kind``
    (:func:`aligner_layout`), where a genome language model or its run was expected."""
    if kind == "run":
        return f"{path} is an aligner training run (sinkalign train), not a genome LM run"
    return f"{path} is an aligner model (params.safetensors + state.json), not a genome language model"
