"""Aligner checkpoints and run directories: writing, finding, loading, cleaning up.

Kept apart from the trainer so that inference (:meth:`sinkalign.align.aligner.Aligner.load`)
imports neither optax nor the sharding machinery.

A *model directory* holds ``params.safetensors`` and ``state.json`` (``{"model": <AlignerConfig
dict>, ...}``). A *run directory* (``sinkalign train --out RUN``) holds::

    RUN/metrics.jsonl                      one JSON object per step
    RUN/checkpoints/step_00000100/         params.safetensors, opt_state.safetensors, state.json
    RUN/checkpoints/latest                 the name of the newest checkpoint (one line)

Every checkpoint is written into a hidden temporary directory and renamed into place, and
``latest`` is replaced atomically afterwards. :func:`find_latest_checkpoint` trusts ``latest``
only when it names a complete ``step_*`` directory inside the run; otherwise (missing,
stale, pointing elsewhere) it takes the complete checkpoint with the highest step.
:func:`clean_leftovers` removes the temporary files a killed run leaves behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
from pathlib import Path

import numpy as np

from sinkalign.errors import CheckpointError, OutputExistsError
from sinkalign.utils import (
    ALIGNER_LAYOUT,
    GENOME_LM_LAYOUT,
    SHIPPED_DATA,
    atomic_dir,
    atomic_write_text,
    newest_checkpoint,
    previous_complete_checkpoint,
    shipped_path,
)

__all__ = ["BUCKETS", "METRICS", "PREVIOUS_RUN", "check_model_output", "check_run_dir", "clean_leftovers",
           "discard_previous_run", "export_model", "find_latest_checkpoint", "load_checkpoint", "other_kind",
           "previous_checkpoint", "read_best", "restore_previous_run", "rewrite_metrics", "save_best", "save_checkpoint"]

log = logging.getLogger(__name__)

#: Square padded lengths a run trains at; inference pads to the same buckets up to 1024.
BUCKETS = (64, 128, 192, 256, 384, 512, 768, 1024)
METRICS = "metrics.jsonl"
PREVIOUS_RUN = ".previous-run"  # where --overwrite keeps the run it replaces until the first checkpoint
_MOVING_ASIDE = ".previous-run-moving"  # ... and where the run's files go first, while they are moved
LATEST = ALIGNER_LAYOUT.pointer
_STEP_RE = ALIGNER_LAYOUT.step_name
_MODEL_FILES = ALIGNER_LAYOUT.model_files


def _is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in _MODEL_FILES)


def other_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it is a genome language model's run or model (``sinkalign lm
    train``), which an aligner command must not read or write as its own; else ``None``."""
    kind = GENOME_LM_LAYOUT.kind(path)
    return None if kind is None else GENOME_LM_LAYOUT.describe(kind)


def find_latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of a run directory, or ``None`` when it holds none.

    ``checkpoints/latest`` is followed only when it names a complete ``step_NNNNNNNN``
    directory directly inside ``checkpoints/``; a pointer outside the run, to a deleted
    step or to an incomplete one is ignored (with a warning) in favour of the complete
    ``step_*`` directory with the highest step.
    """
    return newest_checkpoint(Path(run_dir) / "checkpoints", pointer=LATEST, pointed=str.strip, step_name=_STEP_RE,
                             complete=_is_complete)


def previous_checkpoint(checkpoint: str | os.PathLike) -> Path | None:
    """The complete checkpoint of the same run before ``checkpoint`` (``None``: there is none)."""
    return previous_complete_checkpoint(checkpoint, step_name=_STEP_RE, complete=_is_complete)


def clean_leftovers(run_dir: str | os.PathLike) -> list[Path]:
    """Remove the hidden ``.*.tmp`` files and directories a killed run left in ``run_dir`` and
    ``run_dir/checkpoints`` (atomic writes in progress). Returns what was removed."""
    removed = []
    for folder in (Path(run_dir), Path(run_dir) / "checkpoints"):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if p.name.startswith(".") and p.name.endswith(".tmp"):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                removed.append(p)
    if removed:
        log.info("removed %d leftover temporary file(s) of an interrupted run in %s", len(removed), run_dir)
    return removed


def check_run_dir(out: str | os.PathLike, *, resume: bool, overwrite: bool) -> bool:
    """Refuse to start a fresh run over an existing one unless asked.

    A directory holding ``metrics.jsonl``, ``checkpoints/`` or ``best/`` is a run. Without
    ``resume`` or ``overwrite`` that raises :class:`OutputExistsError`; with ``overwrite`` the
    run's own files (those three: a stale ``best/`` would pass for the new run's) are moved
    into ``out/.previous-run`` (returns ``True``), which the new run deletes at its first
    checkpoint (:func:`discard_previous_run`) or puts back if it fails before
    (:func:`restore_previous_run`); anything else in the directory is left alone. A genome LM's run or model is refused either
    way (:func:`other_kind`), and so is a ``checkpoints/`` or ``best/`` holding anything a run
    does not write there (a user's own folder: the run would replace or delete it).
    """
    if resume and overwrite:
        raise CheckpointError("--resume and --overwrite contradict each other; pass one")
    out = Path(out)
    _refuse_shipped(out)
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out} exists and is not a directory")
    kind = other_kind(out)
    if kind is not None:
        raise OutputExistsError(f"{out} is {kind}, not an aligner training run; choose another --out")
    _finish_moving_aside(out)
    existing = [p for p in (out / METRICS, out / "checkpoints", out / "best") if p.exists()]
    for folder in (p for p in existing if p.name != METRICS):
        if not folder.is_dir():
            raise OutputExistsError(f"{folder} is a file, where a training run keeps its {folder.name}/ folder; "
                                    "choose another --out")
        foreign = _not_the_runs(folder)
        if foreign:  # a user's own best/ or checkpoints/: a run would replace or --overwrite delete it
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise OutputExistsError(f"{folder} holds what no aligner training run writes ({shown}); the run "
                                    f"would replace it: choose another --out")
    aside = out / PREVIOUS_RUN
    if aside.is_dir() and find_latest_checkpoint(out) is not None:  # a run has checkpointed here since: stale
        log.warning("%s: removing %s, the run an --overwrite set aside before the run here checkpointed", out,
                    aside.name)
        shutil.rmtree(aside)
    elif aside.is_dir():
        log.warning("%s holds the run an --overwrite replaced before it was stopped short of its first checkpoint; "
                    "it is deleted at this run's first checkpoint (move it back by hand to keep it)", aside)
    if not existing or resume:  # a run from step 0 still owes the run set aside a checkpoint (or its return)
        return aside.is_dir()
    if not overwrite:
        latest = find_latest_checkpoint(out)
        what = f"checkpoint {latest.name}" if latest is not None else ", ".join(p.name for p in existing)
        raise OutputExistsError(f"{out} already holds a training run ({what}); pass --resume to continue it, "
                                f"--overwrite to replace it, or choose another --out")
    if aside.is_dir():  # the files here never checkpointed (else the run set aside went above): the older run stays
        for p in existing:
            _remove(p)
    else:  # moved into a folder of another name first, which becomes .previous-run once all are in
        moving = out / _MOVING_ASIDE
        moving.mkdir()
        for p in existing:
            p.rename(moving / p.name)
        moving.rename(aside)
    log.warning("--overwrite: the previous run's %s in %s are kept in %s until this run's first checkpoint",
                ", ".join(p.name for p in existing), out, aside.name)
    return True


def _finish_moving_aside(out: Path) -> None:
    """Undo an ``--overwrite`` killed while it moved the old run aside (:func:`check_run_dir`):
    the files it had moved go back beside the others, which makes the run whole again."""
    moving = out / _MOVING_ASIDE
    if not moving.is_dir():
        return
    for p in moving.iterdir():
        if not (out / p.name).exists():
            p.rename(out / p.name)
    with contextlib.suppress(OSError):  # (not empty: a name both here and in the run; left for the user)
        moving.rmdir()
    log.warning("%s: put back the run an --overwrite was moving aside when it was stopped", out)


def discard_previous_run(out: str | os.PathLike) -> None:
    """Delete the run an ``--overwrite`` kept aside (:func:`check_run_dir`): the new run has
    written its first checkpoint."""
    aside = Path(out) / PREVIOUS_RUN
    if aside.is_dir():
        shutil.rmtree(aside)
        log.info("removed the previous run kept in %s", aside)


def restore_previous_run(out: str | os.PathLike) -> None:
    """Put back the run an ``--overwrite`` kept aside, in place of the new run's files: the new
    run stopped (an error) before its first checkpoint."""
    out = Path(out)
    aside = out / PREVIOUS_RUN
    if not aside.is_dir():
        return
    for name in (METRICS, "checkpoints", "best"):
        if (out / name).exists() or (out / name).is_symlink():
            _remove(out / name)
    for p in aside.iterdir():
        p.rename(out / p.name)
    aside.rmdir()
    log.warning("the run stopped before its first checkpoint: the previous run in %s is back in place", out)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink()


def _not_the_runs(folder: Path) -> list[str]:
    """The entries of a run's ``checkpoints/`` or ``best/`` (a folder, or a link to one: e.g.
    checkpoints on scratch space) that a training run does not write (sorted names; ``[]``: the
    folder is the run's, or empty)."""
    if folder.name == "checkpoints":
        def ours(p: Path) -> bool:
            return (p.name == LATEST and p.is_file()) or (_STEP_RE.fullmatch(p.name) is not None and p.is_dir())
    else:
        def ours(p: Path) -> bool:
            return p.name in _MODEL_FILES and p.is_file()
    return sorted(p.name for p in folder.iterdir()
                  if not ours(p) and not (p.name.startswith(".") and p.name.endswith(".tmp")))


def rewrite_metrics(path: str | os.PathLike, upto_step: int) -> None:
    """Keep only the metric lines of steps ``<= upto_step`` (atomically): a resumed run
    repeats the steps after its checkpoint, which must not appear twice. Torn lines of a
    killed process are dropped too."""
    path = Path(path)
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if int(json.loads(line)["step"]) <= upto_step:
                keep.append(line)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    atomic_write_text(path, "".join(x + "\n" for x in keep))


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------
def _flatten(tree) -> dict[str, np.ndarray]:
    import jax

    leaves = jax.tree_util.tree_leaves(tree)
    return {f"{i:05d}": np.asarray(x) for i, x in enumerate(leaves)}


def save_checkpoint(out: str | os.PathLike, step: int, params: dict, opt_state, state: dict, keep: int = 3) -> Path:
    """Write ``checkpoints/step_{step}`` atomically (temp dir + rename), point ``latest`` at it
    and keep the newest ``keep`` checkpoints."""
    from safetensors.numpy import save_file

    root = Path(out) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    with atomic_dir(final) as tmp:
        save_file({k: np.asarray(v) for k, v in params.items()}, tmp / "params.safetensors")
        save_file(_flatten(opt_state), tmp / "opt_state.safetensors")
        (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=1))
    atomic_write_text(root / LATEST, final.name + "\n")
    old = sorted(p for p in root.iterdir() if _STEP_RE.fullmatch(p.name) and p.is_dir())
    for p in old[:-keep]:
        if p != final:
            _remove_dir(p)
    return final


def _remove_dir(path: Path) -> None:
    """Delete a checkpoint so that no half-deleted one is ever visible: rename it to a hidden
    ``.tmp`` name first (atomic); a kill during the deletion leaves only that leftover."""
    doomed = path.with_name(f".{path.name}.deleted.tmp")
    shutil.rmtree(doomed, ignore_errors=True)  # an earlier interrupted deletion
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def export_model(out_dir: str | os.PathLike, params: dict, config, *, provenance: str,
                 calibration: dict | None = None, significance: dict | None = None,
                 msa_calibration: dict | None = None, overwrite: bool = False) -> Path:
    """Write a standalone model directory (params.safetensors + state.json), atomically.

    ``calibration``: a :meth:`sinkalign.align.calibration.Calibration.to_dict` stored with the
    model, applied to the posteriors of every alignment it makes. ``significance``: a
    :meth:`sinkalign.align.significance.Significance.to_dict` (the null of its E-values,
    fitted with that calibration). ``msa_calibration``: a
    :meth:`sinkalign.align.msa.MsaCalibration.to_dict` (multiple alignments' confidences,
    fitted with that calibration).

    Nothing a user has is lost: an existing empty directory is filled; an existing model
    directory (only ``params.safetensors`` and ``state.json``) is replaced only with
    ``overwrite=True``; a directory holding anything else is refused
    (:class:`OutputExistsError` naming what is there).
    """
    from safetensors.numpy import save_file

    out_dir = Path(out_dir)
    check_model_output(out_dir, overwrite=overwrite)
    state = {"model": config.to_dict(), "provenance": provenance}
    if calibration is not None:
        state["calibration"] = calibration
    if significance is not None:
        if calibration is None:
            raise ValueError("a significance (E-value null) goes with the calibration it was fitted with")
        state["significance"] = significance
    if msa_calibration is not None:
        if calibration is None:
            raise ValueError("an MSA calibration goes with the calibration it was fitted with")
        state["msa_calibration"] = msa_calibration
    with atomic_dir(out_dir) as tmp:
        save_file({k: np.asarray(v) for k, v in params.items()}, tmp / "params.safetensors")
        (tmp / "state.json").write_text(json.dumps(state, indent=1) + "\n")
    return out_dir


def _refuse_shipped(out: Path) -> None:
    if shipped_path(out):
        raise OutputExistsError(f"{out} is inside the models shipped with sinkalign ({SHIPPED_DATA}); write the new "
                                f"model or run elsewhere (--overwrite does not apply there)")


def check_model_output(out_dir: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Raise :class:`OutputExistsError` unless :func:`export_model` may write ``out_dir``: it is
    new, empty, or (with ``overwrite``) a model directory holding nothing but a model."""
    out_dir = Path(out_dir)
    _refuse_shipped(out_dir)
    if out_dir.exists():
        if not out_dir.is_dir():
            raise OutputExistsError(f"{out_dir} exists and is not a directory")
        present = sorted(p.name for p in out_dir.iterdir())
        foreign = [n for n in present if n not in _MODEL_FILES]
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputExistsError(f"{out_dir} holds other files ({shown}); a model is written only to a new or "
                                    f"empty directory, or over a model directory with --overwrite")
        if present and not overwrite:
            raise OutputExistsError(f"{out_dir} already holds a model; pass --overwrite to replace it, or choose "
                                    f"another output directory")


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------
def _check_params(path: Path, params: dict, model: dict) -> None:
    """The weights must be those of the model that state.json describes (names and shapes)."""
    from sinkalign.align import model as M

    try:
        config = M.AlignerConfig.from_dict(model)
        expected = M.init_params(config, seed=0)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path / 'state.json'}: bad 'model' config: {exc}") from exc
    absent = sorted(set(M.AlignerConfig.__dataclass_fields__) - set(model))
    hint = (f"; state.json's model config lacks {absent} (defaults were assumed)" if absent
            else "; were params.safetensors and state.json written together?")
    missing = sorted(set(expected) - set(params))
    extra = sorted(set(params) - set(expected))
    if missing or extra:
        raise CheckpointError(f"{path}: params.safetensors does not match state.json's model config "
                              f"(missing parameters {missing}, unexpected {extra}){hint}")
    for name, want in expected.items():
        got = tuple(params[name].shape)
        if got != tuple(np.shape(want)):
            raise CheckpointError(f"{path}: parameter {name!r} has shape {got} but state.json's model config "
                                  f"implies {tuple(np.shape(want))}{hint}")


def load_checkpoint(path: str | os.PathLike) -> tuple[dict, dict, dict | None]:
    """(params, state, flat opt_state or None) from a checkpoint dir, a run dir or a model dir.

    A run directory resolves to :func:`find_latest_checkpoint`. ``state.json`` must be a JSON
    object whose ``model`` entry matches the weights (names and shapes); anything missing,
    unreadable or inconsistent raises :class:`CheckpointError` naming the file.
    """
    import jax.numpy as jnp
    from safetensors.numpy import load_file

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"model {path} does not exist")
    kind = other_kind(path)
    if kind is not None:
        raise CheckpointError(f"{path} is {kind}, not an aligner model, checkpoint or run")
    if (path / "checkpoints").is_dir() and not _is_complete(path):
        latest = find_latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"training run {path} holds no complete checkpoint")
        path = latest
    if not _is_complete(path):
        raise CheckpointError(f"{path} is not an aligner checkpoint (needs params.safetensors and state.json)")
    try:
        params = {k: jnp.asarray(v) for k, v in load_file(path / "params.safetensors").items()}
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"{path / 'params.safetensors'}: cannot read weights: {exc}") from exc
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path / 'state.json'}: not valid JSON: {exc}") from exc
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise CheckpointError(f"{path / 'state.json'}: has no 'model' config (an object of AlignerConfig fields)")
    _check_params(path, params, state["model"])
    opt = None
    if (path / "opt_state.safetensors").is_file():
        try:
            opt = load_file(path / "opt_state.safetensors")
        except Exception as exc:  # corrupt file
            raise CheckpointError(f"{path / 'opt_state.safetensors'}: cannot read: {exc}") from exc
    return params, state, opt


def save_best(out: str | os.PathLike, step: int, params: dict, state: dict) -> Path:
    """Write ``OUT/best`` (the parameters with the best validation F1 so far), atomically."""
    from safetensors.numpy import save_file

    final = Path(out) / "best"
    with atomic_dir(final) as tmp:
        save_file({k: np.asarray(v) for k, v in params.items()}, tmp / "params.safetensors")
        (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=1))
    return final


def read_best(out: str | os.PathLike) -> tuple[int | None, float]:
    """(step, validation F1) of ``OUT/best``, or (None, -inf) when there is none."""
    path = Path(out) / "best" / "state.json"
    if not path.is_file():
        return None, -math.inf
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        return int(state["step"]), float(state["val_f1"])
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable best-checkpoint record ({exc}); remove {path.parent} "
                              "to start the selection again") from exc
