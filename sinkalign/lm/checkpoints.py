"""Where genome LM checkpoints are: the shipped models, and the newest complete one of a training run.

Its own module (torch-free) so that loading a model (:mod:`sinkalign.lm.model`,
:mod:`sinkalign.lm.generate`) never imports the trainer. A checkpoint is a directory holding
:data:`CHECKPOINT_WEIGHTS` and :data:`CHECKPOINT_CONFIG`; the package ships some under the
names of :data:`SHIPPED_MODELS` (:func:`shipped_model`). A run directory holds
``checkpoints/step-NNNNNNNN/`` (complete once its ``trainer_state.json``, written last, exists)
and ``checkpoints/latest.json`` naming the newest.

The aligner's directories (:mod:`sinkalign.align.checkpoints`) look alike but are another kind:
:func:`aligner_layout` tells them by their files, so that the LM commands refuse them by name.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from collections.abc import Callable
from pathlib import Path

from sinkalign.errors import InputError, MissingFileError
from sinkalign.utils import ALIGNER_LAYOUT, GENOME_LM_LAYOUT, newest_checkpoint, previous_complete_checkpoint

__all__ = ["CHECKPOINT_CONFIG", "CHECKPOINT_WEIGHTS", "DEFAULT_MODEL_DIR", "LATEST", "SHIPPED_MODELS", "TRAINER_STATE",
           "aligner_layout", "default_model_path", "find_latest_checkpoint", "holds_checkpoint", "names_shipped_model",
           "not_a_genome_lm",
           "previous_checkpoint", "shipped_model", "step_dir_name"]

#: The two files of a checkpoint directory (:func:`sinkalign.lm.model.save_checkpoint`).
CHECKPOINT_WEIGHTS = "model.safetensors"
CHECKPOINT_CONFIG = "config.json"
#: Package-relative location of the shipped default checkpoint.
DEFAULT_MODEL_DIR = "data/lm_default"
#: Checkpoints shipped inside the package, by the name ``--model NAME`` takes: ``default``
#: (GOAT on 35 genomes, the default) and ``cdiph`` (GOAT on the C. diphtheriae chromosome only).
SHIPPED_MODELS = {"default": DEFAULT_MODEL_DIR, "cdiph": "data/lm_cdiph"}
TRAINER_STATE = "trainer_state.json"
LATEST = GENOME_LM_LAYOUT.pointer
_STEP_RE = GENOME_LM_LAYOUT.step_name


def _package_path(rel: str) -> Path:
    try:
        return Path(str(importlib.resources.files("sinkalign").joinpath(rel)))
    except NotADirectoryError:
        # an editable install made before sinkalign/__init__.py existed exposes `sinkalign` as a
        # namespace package, which importlib.resources cannot read; its subpackages are regular
        return Path(str(importlib.resources.files("sinkalign.lm"))).parent / rel


def default_model_path(name: str = "default") -> Path:
    """Filesystem path of a shipped checkpoint: ``default`` (``sinkalign/data/lm_default``) or
    another name of :data:`SHIPPED_MODELS` (``cdiph``)."""
    if name not in SHIPPED_MODELS:
        raise InputError(f"no shipped language model is named {name!r} (shipped: {', '.join(SHIPPED_MODELS)})")
    return _package_path(SHIPPED_MODELS[name])


def holds_checkpoint(path: str | os.PathLike) -> bool:
    """Whether the directory ``path`` holds a checkpoint's :data:`CHECKPOINT_CONFIG`."""
    return (Path(path) / CHECKPOINT_CONFIG).is_file()


def names_shipped_model(path: object, *, taken_as_path: Callable[[Path], bool] = Path.exists) -> bool:
    """Whether ``path`` is the name of a shipped model (:data:`SHIPPED_MODELS`): a ``str`` such as
    ``"default"`` unless ``taken_as_path(Path(path))``, where the path of that name is taken as given.

    The test is the caller's, as each reads a path: by default any existing path is taken
    (:func:`sinkalign.lm.generate.resolve_model_path`, which then follows a run folder named
    ``default`` to its newest checkpoint and passes over a folder holding neither); with
    :func:`holds_checkpoint` only a checkpoint directory is
    (:func:`sinkalign.lm.model.load_checkpoint`, which reads no runs)."""
    return isinstance(path, str) and path in SHIPPED_MODELS and not taken_as_path(Path(path))


def shipped_model(name: str) -> Path:
    """The checkpoint directory of the shipped model ``name`` (:func:`default_model_path`), checked:
    :class:`~sinkalign.errors.MissingFileError` when the installation lacks it."""
    path = default_model_path(name)
    if not (path / CHECKPOINT_CONFIG).is_file():
        raise MissingFileError(f"the shipped model {name!r} is missing from the installation: {path}")
    return path


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
