"""Training loop of the DNA language models: AdamW, warmup + cosine schedule, JSON-lines
metrics, atomic resumable checkpoints and torch DDP.

Entry points::

    result = train_lm(TrainConfig(fasta="genome.fna.gz", attention="goat", out_dir="runs/goat"))
    results = train_lm_ddp(config, nprocs=2)        # spawn 2 processes (gloo on CPU, nccl on CUDA)

``train_lm`` also runs under ``torchrun`` (it reads ``RANK`` / ``WORLD_SIZE`` /
``MASTER_ADDR`` / ``MASTER_PORT``) or inside a process group that the caller initialised.

Data: every record of the FASTA is split with :func:`sinkalign.lm.data.train_val_split`
(the last ``val_fraction`` is held out). Training windows of ``seq_len + 1`` bases are
drawn uniformly from the training splits by :class:`WindowSampler`, whose draws for a
step are a pure function of ``(seed, rank, step)``, so its whole state is the step
counter and a resumed run sees exactly the batches it would have seen.

Output directory layout (only rank 0 writes)::

    out_dir/metrics.jsonl                 one JSON object per logged step
    out_dir/checkpoints/latest.json       {"step": N, "dir": "step-0000000N"} (atomic)
    out_dir/checkpoints/step-0000000N/    model.safetensors + config.json (load_checkpoint),
                                          optimizer.safetensors (AdamW moments, RNG states),
                                          trainer_state.json (step, param groups, scheduler,
                                          sampler, train config)

A checkpoint is written into a hidden temporary directory and renamed into place when it
is complete; ``latest.json`` is then replaced atomically. A process killed at any moment
leaves the previous checkpoint intact, and ``resume=True`` restarts from the newest
complete one (temporary leftovers are removed). Nothing is pickled: tensors go to
safetensors, everything else to JSON.

Stopping: SIGINT (Ctrl-C) or SIGTERM (what a batch scheduler sends at its time limit) during
the training steps ends the run as ``time_limit_minutes`` does, less the held-out evaluation:
the current step finishes, a checkpoint is written and :class:`TrainingInterrupted` is raised
(``resume=True`` continues from it). Under DDP every rank stops after the same step. In a single
process a second signal aborts at once, without saving.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import safetensors.torch
import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from sinkalign.errors import CheckpointError, DivergedError, InputError, Interrupted, MissingFileError, SinkalignError
from sinkalign.lm.checkpoints import (
    LATEST,
    TRAINER_STATE,
    aligner_layout,
    find_latest_checkpoint,
    not_a_genome_lm,
    previous_checkpoint,
    step_dir_name,
)
from sinkalign.lm.config import ATTENTION_NAMES, LMConfig
from sinkalign.lm.data import encode, genome_files, read_genome, reverse_complement_tokens, train_val_split
from sinkalign.lm.evaluate import heldout_bits_per_base
from sinkalign.lm.model import DNALanguageModel, load_checkpoint, load_checkpoint_config, save_checkpoint
from sinkalign.lm.tokenizer import NucleotideTokenizer
from sinkalign.utils import (
    SHIPPED_DATA,
    StopFlag,
    atomic_write_bytes,
    atomic_write_text,
    damaged_checkpoint_message,
    is_stdio,
    shipped_path,
    stop_on_signals,
    unguarded_main_call,
)

__all__ = [
    "TrainConfig",
    "TrainResult",
    "TrainingInterrupted",
    "WindowSampler",
    "check_out_dir",
    "find_latest_checkpoint",
    "init_model_config",
    "init_model_settings",
    "lr_multiplier",
    "model_settings",
    "train_lm",
    "train_lm_ddp",
]

logger = logging.getLogger(__name__)

_STATE_FORMAT = "sinkalign.lm.train/1"
OPTIMIZER_STATE = "optimizer.safetensors"
METRICS = "metrics.jsonl"
_LN2 = math.log(2.0)

# Fields that may change between a run and its resumption (they do not alter the
# optimisation trajectory); every other field must match the checkpoint.
_RESUMABLE_CHANGES = frozenset({
    "out_dir", "resume", "eval_every", "eval_max_bases", "save_every", "keep_checkpoints",
    "log_every", "num_threads", "progress", "device", "eval_batch_size", "time_limit_minutes",
    "init",  # read at step 0 only: a resumed run's weights come from its checkpoint
})

#: LMConfig fields a TrainConfig sets itself (not through ``model_options``)
_MODEL_FIELDS = frozenset({"vocab_size", "d_model", "n_layers", "n_heads", "attention", "max_train_len", "mlp_ratio",
                           "dropout", "pad_id"})


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name}={value!r} must be an int")
    if value < minimum:
        raise InputError(f"{name}={value!r} must be >= {minimum}")


def _check_float(name: str, value: Any, lo: float, hi: float | None = None, *, lo_open: bool = False,
                 hi_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name}={value!r} must be a finite number")
    if value < lo or (lo_open and value == lo):
        raise InputError(f"{name}={value!r} must be {'>' if lo_open else '>='} {lo}")
    if hi is not None and (value > hi or (hi_open and value == hi)):
        raise InputError(f"{name}={value!r} must be {'<' if hi_open else '<='} {hi}")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Configuration of :func:`train_lm`.

    Data: ``fasta``: one source or a tuple of them, each a FASTA file (plain or gzip), a
    directory of them or a genome manifest (:func:`sinkalign.lm.data.genome_files`); every file
    is one genome; not ``-`` (standard input: a run reads its genomes again to resume, and its
    checkpoints name them by path). ``val_fraction`` is held out at the end of every record. ``genome_split``: a
    JSON split by whole genera (``data_manifests/genomes_multi_split.json``: ``genomes`` maps a
    file name to its ``split``); genomes of its ``valid`` split are not trained on and their
    records' last ``val_fraction`` is the validation data (after their first part as
    context), genomes of its ``test`` split are not read at all, the other genomes train on
    their first part. ``balance``: ``length`` draws windows uniformly over every training
    base; ``genome`` first draws a genome uniformly, so many genomes of one genus do not drown
    one of another. ``reverse_complement``: each window is read from the other strand with
    probability 1/2. Training windows with more than ``max_n_fraction`` N are redrawn.

    Model: ``attention`` (one of ``ATTENTION_NAMES``), ``d_model``, ``n_layers``,
    ``n_heads``, ``mlp_ratio``, ``dropout``; ``seq_len`` is the training context (the
    model's ``max_train_len``); ``model_options`` holds further :class:`LMConfig` fields as
    ``(name, value)`` pairs, e.g. ``(("goat_init", "alibi"),)``.

    ``init``: start from the weights of this genome LM (a checkpoint directory, a ``sinkalign lm
    train`` run or a shipped model's name, as :func:`~sinkalign.lm.generate.resolve_model_path`
    reads them) instead of a random initialisation, with a fresh optimizer and schedule: e.g. to
    fine-tune the shipped model on other genomes. The model settings must be the init model's,
    dropout aside (:func:`init_model_settings` gives them); a resumed run ignores it.

    Optimisation: ``steps`` optimizer steps of ``batch_size`` windows per process (the
    global batch is ``batch_size * world_size``); AdamW (``lr``, ``beta1``, ``beta2``,
    ``weight_decay`` on linear-layer weights only); linear warmup over ``warmup_steps``
    then cosine decay to ``min_lr_ratio * lr`` at ``steps``; gradient-norm clipping at
    ``grad_clip`` (0 disables); ``seed`` fixes initialisation, data and dropout.

    Bookkeeping: metrics every ``log_every`` steps; held-out bits/base every
    ``eval_every`` steps and at the end (0: only at the end) on the first
    ``eval_max_bases`` validation bases (``None``: all); checkpoints every ``save_every``
    steps and at the end, keeping the newest ``keep_checkpoints``; ``resume`` continues
    from the newest checkpoint in ``out_dir`` (when there is none, the run starts from scratch
    there and an earlier ``metrics.jsonl`` is renamed ``metrics.jsonl.1``; without ``resume`` an
    ``out_dir`` holding an earlier run's files is refused).

    Execution: ``device`` "cpu" | "cuda" (bf16 autocast on CUDA only);
    ``num_threads`` sets ``torch.set_num_threads`` for the process (``None``: unchanged);
    ``progress`` shows a tqdm bar on rank 0; ``time_limit_minutes`` ends the run early, with a
    held-out evaluation and a checkpoint, after the first step that finishes past that much wall
    time (counted from this process's first step; a ``resume`` continues it, up to ``steps``).
    """

    fasta: str | tuple[str, ...]
    attention: str
    out_dir: str = "runs/lm"
    steps: int = 2000
    batch_size: int = 16
    seq_len: int = LMConfig.max_train_len  # the model's defaults are LMConfig's (its class attributes)
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    d_model: int = LMConfig.d_model
    n_layers: int = LMConfig.n_layers
    n_heads: int = LMConfig.n_heads
    mlp_ratio: float = LMConfig.mlp_ratio
    dropout: float = LMConfig.dropout
    model_options: tuple[tuple[str, Any], ...] = ()
    val_fraction: float = 0.1
    max_n_fraction: float = 0.05
    eval_every: int = 500
    eval_max_bases: int | None = None
    eval_batch_size: int = 16
    save_every: int = 500
    keep_checkpoints: int = 2
    log_every: int = 10
    seed: int = 0
    device: str = "cpu"
    num_threads: int | None = None
    resume: bool = False
    progress: bool = True
    time_limit_minutes: float | None = None
    genome_split: str | None = None
    balance: str = "length"
    reverse_complement: bool = False
    init: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.fasta, (list, tuple)):
            object.__setattr__(self, "fasta", tuple(self.fasta))
            if not self.fasta or not all(isinstance(f, str) and f for f in self.fasta):
                raise InputError(f"fasta={self.fasta!r} must be a non-empty path string or tuple of them")
        elif not isinstance(self.fasta, str) or not self.fasta:
            raise InputError(f"fasta={self.fasta!r} must be a non-empty path string")
        if any(is_stdio(f) for f in (self.fasta if isinstance(self.fasta, tuple) else (self.fasta,))):
            raise InputError("'-' (standard input) cannot be a training genome (fasta / --fasta): a run reads its "
                             "genomes again to resume, and its checkpoints name them by path; save them to a file "
                             "and give that")
        if self.balance not in ("length", "genome"):
            raise InputError(f"balance={self.balance!r} is not one of ('length', 'genome')")
        if not isinstance(self.reverse_complement, bool):
            raise InputError(f"reverse_complement={self.reverse_complement!r} must be a bool")
        if self.genome_split is not None and (not isinstance(self.genome_split, str) or not self.genome_split):
            raise InputError(f"genome_split={self.genome_split!r} must be a path string or None")
        if self.init is not None and (not isinstance(self.init, str) or not self.init):
            raise InputError(f"init={self.init!r} must be a model path or name (a string), or None")
        if self.attention not in ATTENTION_NAMES:
            raise InputError(f"attention={self.attention!r} is not one of {', '.join(ATTENTION_NAMES)}")
        if not isinstance(self.out_dir, str) or not self.out_dir:
            raise InputError(f"out_dir={self.out_dir!r} must be a non-empty path string")
        for name in ("steps", "batch_size", "eval_batch_size", "log_every", "keep_checkpoints"):
            _check_int(name, getattr(self, name), 1)
        _check_int("seq_len", self.seq_len, 2)
        for name in ("warmup_steps", "eval_every", "save_every", "seed"):
            _check_int(name, getattr(self, name), 0)
        if self.eval_max_bases is not None:
            _check_int("eval_max_bases", self.eval_max_bases, 1)
        if self.num_threads is not None:
            _check_int("num_threads", self.num_threads, 1)
        _check_float("lr", self.lr, 0.0, lo_open=True)
        _check_float("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        _check_float("weight_decay", self.weight_decay, 0.0)
        _check_float("beta1", self.beta1, 0.0, 1.0, hi_open=True)
        _check_float("beta2", self.beta2, 0.0, 1.0, hi_open=True)
        _check_float("grad_clip", self.grad_clip, 0.0)
        if self.time_limit_minutes is not None:
            _check_float("time_limit_minutes", self.time_limit_minutes, 0.0, lo_open=True)
        _check_float("val_fraction", self.val_fraction, 0.0, 1.0, lo_open=True, hi_open=True)
        _check_float("max_n_fraction", self.max_n_fraction, 0.0, 1.0)
        if self.device not in ("cpu", "cuda"):
            raise InputError(f"device={self.device!r} is not one of 'cpu', 'cuda'")
        for name in ("resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name}={getattr(self, name)!r} must be a bool")
        opts = self.model_options
        if not isinstance(opts, tuple) or not all(isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str)
                                                  for o in opts):
            raise InputError(f"model_options={opts!r} must be a tuple of (name, value) pairs")
        clash = sorted({k for k, _ in opts} & _MODEL_FIELDS)
        if clash:
            own = {"vocab_size": "(fixed by the tokenizer)", "pad_id": "(fixed by the tokenizer)",
                   "max_train_len": "--seq-len / seq_len", "mlp_ratio": "(fixed at 4, or --init's)"}
            ways = [f"{k}: {own.get(k, '--' + k.replace('_', '-') + ' / ' + k)}" for k in clash]
            raise InputError(f"model options may not set {', '.join(clash)}, which have settings of their own "
                             f"({'; '.join(ways)})")
        self.model_config()  # validates d_model / n_heads / the options now, before any work

    def model_config(self) -> LMConfig:
        """The :class:`LMConfig` of the model this run trains."""
        tok = NucleotideTokenizer()
        fields = {f.name for f in dataclasses.fields(LMConfig)}
        unknown = sorted(k for k, _ in self.model_options if k not in fields)
        if unknown:
            raise InputError(f"unknown model options {unknown}; valid: {sorted(fields - _MODEL_FIELDS)}")
        return LMConfig(vocab_size=tok.vocab_size, d_model=self.d_model, n_layers=self.n_layers,
                        n_heads=self.n_heads, attention=self.attention, max_train_len=self.seq_len,
                        mlp_ratio=float(self.mlp_ratio), dropout=float(self.dropout), pad_id=tok.pad_id,
                        **dict(self.model_options))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (``model_options`` as a list of pairs)."""
        d = dataclasses.asdict(self)
        d["model_options"] = [list(p) for p in self.model_options]
        if isinstance(self.fasta, tuple):
            d["fasta"] = list(self.fasta)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise InputError(f"unknown TrainConfig keys {unknown}")
        kw = dict(data)
        kw["model_options"] = tuple(tuple(p) for p in kw.get("model_options", ()))
        if isinstance(kw.get("fasta"), list):
            kw["fasta"] = tuple(kw["fasta"])
        return cls(**kw)


def init_model_settings(init: str | os.PathLike) -> dict[str, Any]:
    """The model settings of the genome LM ``init`` (a checkpoint directory, a run or a shipped
    model's name), as :class:`TrainConfig` fields: ``attention``, ``d_model``, ``n_layers``,
    ``n_heads``, ``mlp_ratio``, ``seq_len`` and ``model_options`` (its other fields that differ
    from :class:`LMConfig`'s defaults), for a run that starts from it (``init=``). Only its
    ``config.json`` is read."""
    return model_settings(init_model_config(init)[1])


def model_settings(cfg: LMConfig) -> dict[str, Any]:
    """The :class:`TrainConfig` fields that build the model ``cfg`` describes (see
    :func:`init_model_settings`)."""
    defaults = {f.name: f.default for f in dataclasses.fields(LMConfig) if f.default is not dataclasses.MISSING}
    options = tuple((f.name, getattr(cfg, f.name)) for f in dataclasses.fields(LMConfig)
                    if f.name not in _MODEL_FIELDS and getattr(cfg, f.name) != defaults.get(f.name, dataclasses.MISSING))
    return {"attention": cfg.attention, "d_model": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
            "mlp_ratio": cfg.mlp_ratio, "seq_len": cfg.max_train_len, "model_options": options}


def init_model_config(init: str | os.PathLike) -> tuple[Path, LMConfig]:
    """``(path, config)`` of the genome LM ``init`` (see :class:`TrainConfig`), its weights not loaded."""
    from sinkalign.lm.generate import resolve_model_path

    path = resolve_model_path(init)
    return path, load_checkpoint_config(path)


def _init_checkpoint(init: str | os.PathLike):
    """``(path, checkpoint)`` of the genome LM ``init`` (see :class:`TrainConfig`), on the CPU."""
    from sinkalign.lm.generate import resolve_model_path

    path = resolve_model_path(init)
    return path, load_checkpoint(path)


def _check_init(init: str, path: Path, init_cfg: LMConfig, model_cfg: LMConfig) -> None:
    """Refuse an ``init`` model whose settings (dropout aside) differ from the run's."""
    theirs, mine = dataclasses.replace(init_cfg, dropout=0.0), dataclasses.replace(model_cfg, dropout=0.0)
    if theirs != mine:
        diffs = "; ".join(f"{f.name}: {getattr(theirs, f.name)!r} there, {getattr(mine, f.name)!r} here"
                          for f in dataclasses.fields(LMConfig) if getattr(theirs, f.name) != getattr(mine, f.name))
        raise InputError(f"init={init!r} ({path}) is another model than this run's ({diffs}): a run that starts "
                         "from a model trains that model, so its settings must be the init model's "
                         "(init_model_settings gives them; `sinkalign lm train --init` takes them)")


class TrainResult(NamedTuple):
    """What :func:`train_lm` did (one per process under DDP).

    ``step``: optimizer steps completed; ``start_step``: where this invocation began
    (> 0 after a resume); ``train_loss``: mean loss (nats/token) over the last logging
    interval; ``val_bits_per_base``: final held-out bits/base (rank 0; ``None`` elsewhere);
    ``checkpoint_dir``: the final checkpoint (``load_checkpoint``-compatible);
    ``weights_sha256``: digest of the final weights (equal on every DDP rank). ``step ==
    start_step``: a resumed run that had already reached ``steps``, where nothing was trained
    (nor written); ``train_loss`` is then NaN.
    """

    step: int
    start_step: int
    train_loss: float
    val_bits_per_base: float | None
    tokens_seen: int
    elapsed_s: float
    checkpoint_dir: str
    metrics_path: str
    rank: int
    world_size: int
    weights_sha256: str


class TrainingInterrupted(Interrupted):
    """SIGINT or SIGTERM stopped :func:`train_lm` (or :func:`train_lm_ddp`) before ``steps``.

    ``signum``: the signal; ``result``: what was done (its ``checkpoint_dir`` holds the
    checkpoint written at the stop, which ``resume=True`` continues), or ``None`` when the
    signal came before the first step (nothing was saved). ``exit_status`` is the shell's
    convention for a process ended by that signal (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self, signum: int, result: TrainResult | None) -> None:
        self.result = result
        super().__init__(signum, None if result is None else result.step,
                         None if result is None else result.checkpoint_dir)


def lr_multiplier(step: int, *, steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """LR factor for the update taken at 0-based ``step``: linear warmup then cosine decay.

    ``(step + 1) / warmup_steps`` while ``step < warmup_steps``; afterwards
    ``min + (1 - min) * (1 + cos(pi * p)) / 2`` with ``p`` going from 0 (end of warmup) to
    1 (the last step).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, steps - 1 - warmup_steps)
    p = min(1.0, (step - warmup_steps) / span)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))


class WindowSampler:
    """Uniform random windows ``[B, length]`` (int64 token ids) from training sequences.

    Starts are uniform over every position ``s`` with ``s + length <= len(record)`` across
    records (windows never cross records); with ``groups`` (a genome index per sequence) a
    genome is drawn uniformly first, then a start uniformly within its records. A window with
    more than ``max_n_fraction`` N is redrawn; with ``reverse_complement`` each window is read
    from the other strand with probability 1/2. The draw for ``(seed, rank, step)`` comes from
    ``numpy.random.default_rng`` seeded with exactly that triple: it does not depend on earlier
    draws, so the sampler needs no state beyond the step to resume, and DDP ranks see
    independent streams.
    """

    def __init__(self, seqs: Sequence[str], length: int, *, seed: int, rank: int = 0,
                 max_n_fraction: float = 1.0, groups: Sequence[int] | None = None,
                 reverse_complement: bool = False) -> None:
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise InputError(f"{length=} must be a positive integer")
        if groups is not None and len(groups) != len(seqs):
            raise InputError(f"groups has {len(groups)} entries for {len(seqs)} sequences")
        self.length, self.seed, self.rank = length, int(seed), int(rank)
        self.max_n = max_n_fraction * length
        self.reverse_complement = bool(reverse_complement)
        keep = [i for i, s in enumerate(seqs) if len(s) >= length]
        self._tokens = [encode(seqs[i]) for i in keep]
        if not self._tokens:
            longest = max((len(s) for s in seqs), default=0)
            raise InputError(f"no training sequence holds a window of {length} bases (longest is {longest})")
        n_starts = np.array([t.size - length + 1 for t in self._tokens], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(n_starts)])  # [R + 1]
        self._n_cum = [np.concatenate([[0], np.cumsum(t == 4, dtype=np.int64)]) for t in self._tokens]
        self._groups = None
        if groups is not None:  # per genome: its records' flat start range [lo, hi) in _offsets
            ranges: dict[int, list[int]] = {}
            for r, i in enumerate(keep):  # a genome's records are consecutive
                ranges.setdefault(groups[i], [r, r])[1] = r
            self._groups = [(int(self._offsets[lo]), int(self._offsets[hi + 1])) for _, (lo, hi) in sorted(ranges.items())]

    def state(self, step: int) -> dict[str, Any]:
        """JSON state of the sampler before ``step`` (everything :meth:`batch` depends on)."""
        return {"kind": "counter", "seed": self.seed, "length": self.length, "next_step": int(step)}

    def _starts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self._groups is None:
            return rng.integers(0, int(self._offsets[-1]), size=n)
        lo_hi = np.asarray(self._groups)[rng.integers(0, len(self._groups), size=n)]
        return lo_hi[:, 0] + (rng.random(n) * (lo_hi[:, 1] - lo_hi[:, 0])).astype(np.int64)

    def batch(self, step: int, batch_size: int) -> torch.Tensor:
        """The ``[batch_size, length]`` int64 windows of ``step`` for this rank."""
        rng = np.random.default_rng([self.seed, self.rank, int(step)])
        out = np.empty((batch_size, self.length), dtype=np.int64)
        filled = 0
        for _ in range(1000):
            for flat in self._starts(rng, batch_size - filled):
                r = int(np.searchsorted(self._offsets, flat, side="right") - 1)
                s = int(flat - self._offsets[r])
                if self._n_cum[r][s + self.length] - self._n_cum[r][s] > self.max_n:
                    continue
                out[filled] = self._tokens[r][s : s + self.length]
                filled += 1
            if filled == batch_size:
                if self.reverse_complement:
                    flip = rng.random(batch_size) < 0.5
                    out[flip] = reverse_complement_tokens(out[flip])
                return torch.from_numpy(out)
        raise InputError(f"could not draw windows with at most {self.max_n:.0f} N bases after 1000 rounds")


# ----------------------------------------------------------------------------- distributed


class _Dist(NamedTuple):
    rank: int
    world_size: int
    owns_group: bool  # we initialised the process group (and destroy it at the end)


def _setup_distributed(device: torch.device) -> _Dist:
    if dist.is_available() and dist.is_initialized():
        return _Dist(dist.get_rank(), dist.get_world_size(), False)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist(0, 1, False)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    return _Dist(dist.get_rank(), dist.get_world_size(), True)


class _LossModule(nn.Module):
    """Wraps the model so that DDP's forward computes the loss (DDP must own the forward)."""

    def __init__(self, model: DNALanguageModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.loss(tokens)


# ----------------------------------------------------------------------------- checkpoints


def _weights_digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = opt.state_dict()
    tensors = {}
    for idx, st in sd["state"].items():
        for key, val in st.items():
            if not isinstance(val, torch.Tensor):
                raise TypeError(f"optimizer state {idx}.{key} is not a tensor")
            tensors[f"state.{idx}.{key}"] = val.detach().to("cpu").contiguous()
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups}


def _load_optimizer(opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any],
                    device: torch.device) -> None:
    """Load what :func:`_optimizer_tensors` saved into ``opt``; a ``ValueError`` (or ``KeyError``,
    ``TypeError``) when it does not fit ``opt``'s parameters."""
    params = [p for group in opt.param_groups for p in group["params"]]
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, val in tensors.items():
        if not name.startswith("state."):
            continue
        _, idx, key = name.split(".", 2)
        if not 0 <= int(idx) < len(params):
            raise ValueError(f"{name}: the model has {len(params)} parameters")
        if key != "step" and tuple(val.shape) != tuple(params[int(idx)].shape):
            raise ValueError(f"{name} has shape {tuple(val.shape)}, its parameter {tuple(params[int(idx)].shape)}")
        # "step" stays on the CPU (AdamW's default for non-capturable, non-fused steps)
        state.setdefault(int(idx), {})[key] = val if key == "step" else val.to(device)
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in meta["param_groups"]]
    opt.load_state_dict({"state": state, "param_groups": groups})


def _save_training_checkpoint(out_dir: Path, step: int, model: DNALanguageModel, opt: torch.optim.Optimizer,
                              sched: torch.optim.lr_scheduler.LRScheduler, sampler_state: dict[str, Any],
                              rng_states: list[torch.Tensor], cuda_rng_states: list[torch.Tensor],
                              config: TrainConfig, tokens_seen: int, world_size: int, keep: int,
                              data_digest: str) -> Path:
    """Write a complete checkpoint for ``step`` (see the module docstring); ``data_digest``: the
    training data's (:func:`_load_data`). Rank 0 only."""
    root = out_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{step_dir_name(step)}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_checkpoint(tmp, model, extra={"step": step, "train_config": config.to_dict()})
    opt_tensors, opt_meta = _optimizer_tensors(opt)
    for r, st in enumerate(rng_states):
        opt_tensors[f"rng.torch.rank{r}"] = st
    for r, st in enumerate(cuda_rng_states):
        opt_tensors[f"rng.cuda.rank{r}"] = st
    atomic_write_bytes(tmp / OPTIMIZER_STATE, safetensors.torch.save(opt_tensors))
    state = {
        "format": _STATE_FORMAT,
        "step": step,
        "tokens_seen": tokens_seen,
        "world_size": world_size,
        "optimizer": opt_meta,
        "scheduler": sched.state_dict(),
        "sampler": sampler_state,
        "train_config": config.to_dict(),
        "data_sha256": data_digest,
    }
    atomic_write_text(tmp / TRAINER_STATE, json.dumps(state, indent=2, sort_keys=True) + "\n")  # written last
    _fsync_dir(tmp)
    if final.exists():  # re-saving a step (e.g. a resumed run that stops where it started)
        _remove_checkpoint_dir(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    atomic_write_text(root / LATEST, json.dumps({"step": step, "dir": final.name}) + "\n")
    done = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in done[: max(0, len(done) - keep)]:
        if old != final:
            _remove_checkpoint_dir(old)
    logger.info("checkpoint step %d -> %s", step, final)
    return final


def _remove_checkpoint_dir(path: Path) -> None:
    """Delete a checkpoint directory so that no half-deleted one is ever visible: rename it to
    a hidden ``.tmp-`` name first (atomic; the next start removes such leftovers), then delete."""
    doomed = path.with_name(f".tmp-deleted-{path.name}-{os.getpid()}")
    shutil.rmtree(doomed, ignore_errors=True)
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _check_resume_config(saved: Mapping[str, Any], config: TrainConfig, path: Path, *,
                         saved_data: str | None = None, data: str | None = None) -> None:
    """Refuse to resume from the checkpoint at ``path`` when a setting that shapes the run
    differs from ``saved`` (its config). ``saved_data`` / ``data``: the digests
    (:func:`_load_data`) of the data the checkpoint was trained on and of the data now; where
    the checkpoint has one, the data are compared by content, so the same genomes by another path
    resume and changed ones at the same path are refused (a run of an older version, without one,
    compares the paths)."""
    now = config.to_dict()
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    saved = {**{k: v for k, v in defaults.items() if k not in saved}, **saved}  # settings newer than the run
    by_content = saved_data is not None and data is not None
    diffs = sorted(k for k in set(saved) | set(now)
                   if k not in _RESUMABLE_CHANGES and saved.get(k) != now.get(k)
                   and not (by_content and k in ("fasta", "genome_split")))
    if diffs:
        detail = "; ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {now.get(k)!r}" for k in diffs)
        hint = ""
        if "steps" in diffs or "lr" in diffs or "warmup_steps" in diffs or "min_lr_ratio" in diffs:
            # the schedule is the run's: training on past its end is a new run that starts from it
            hint = (f"; to train on from this model with a new schedule, start a new run from it "
                    f"(--init {path.parent.parent}, another --out)")
        raise CheckpointError(f"cannot resume from {path}: the run's settings differ ({detail}){hint}")
    if by_content and saved_data != data:
        raise CheckpointError(f"cannot resume from {path}: the training data differ from the checkpoint's (fasta: "
                              f"checkpoint {saved.get('fasta')!r} vs now {now.get('fasta')!r}; their content digests "
                              f"{saved_data[:12]} vs {data[:12]}): a genome was changed, added or left out")


def _rewrite_metrics(path: Path, upto_step: int) -> None:
    """Drop metric lines past ``upto_step`` (logged after the checkpoint we resume from)."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= upto_step:
                keep.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a torn last line from a killed process
    atomic_write_text(path, "".join(x + "\n" for x in keep))


# ----------------------------------------------------------------------------- training


def _load_data(config: TrainConfig) -> tuple[list[str], list[int], list[tuple[str, str]], str]:
    """``(train_seqs, genome index of each, [(val_seq, preceding_seq)], digest)`` from the
    genomes of ``config.fasta`` (see :class:`TrainConfig`: splits by record tail, or by genus);
    ``digest``: the SHA-256 of what was read (each training or validation genome's role, record
    ids and bases, in order), which a checkpoint keeps to tell the same data from other data on
    resume."""
    files = genome_files(config.fasta)
    split = _genome_split(config.genome_split) if config.genome_split else {}
    train, groups, val = [], [], []
    digest = hashlib.sha256()
    for g, path in enumerate(files):
        role = split.get(path.name, "train")
        if role == "test":
            continue
        digest.update(f"genome\0{role}\0".encode())
        for rid, seq in read_genome(path):
            digest.update(f"{rid}\0{len(seq)}\0".encode())
            digest.update(seq.encode("ascii"))
            try:
                tr, va = train_val_split(seq, config.val_fraction)
            except ValueError as exc:
                raise InputError(f"{path}: record {rid!r}: {exc}") from None
            if role == "train":
                train.append(tr)
                groups.append(g)
            if role == "valid" or not split:
                val.append((f"{path.name}: {rid}", va, tr))
    if not train:
        raise InputError(f"no training genome in {config.fasta!r} (every one is held out by {config.genome_split})")
    if not val:
        raise InputError(f"no validation genome in {config.fasta!r}: {config.genome_split} holds out none of them")
    logger.info("%d genome file(s): %d training record(s), %d validation record(s)", len(files), len(train), len(val))
    return train, groups, _validation_parts(val, config), digest.hexdigest()


def _validation_parts(val: list[tuple[str, str, str]], config: TrainConfig) -> list[tuple[str, str]]:
    """What the held-out bits/base score: ``[(part, preceding_seq)]`` from ``[(name,
    val_seq, preceding_seq)]``, in order, the first ``eval_max_bases`` bases in all; a record
    whose part is all N (nothing to score: an assembly gap) is left out with a warning, before
    any step rather than at the first evaluation. Raises :class:`InputError` when none is left."""
    budget = config.eval_max_bases
    parts, all_n = [], []
    for name, seq, prefix in val:
        if budget is not None and budget <= 0:
            break
        part = seq if budget is None else seq[:budget]
        if part.count("N") == len(part):
            all_n.append(name)
            continue
        parts.append((part, prefix))
        if budget is not None:
            budget -= len(part)
    within = "" if config.eval_max_bases is None else f" (its first {config.eval_max_bases} bases: --eval-max-bases)"
    if not parts:
        where = config.fasta if isinstance(config.fasta, str) else ", ".join(map(str, config.fasta))
        raise InputError(f"{where}: the held-out part (the last {config.val_fraction:g}) of every validation "
                         f"record{within} is all N: nothing to score; give other genomes or a larger --val-fraction")
    if all_n:
        logger.warning("held-out bits/base skip %d record(s) whose held-out part%s is all N: %s", len(all_n), within,
                       ", ".join(all_n[:5]) + (", ..." if len(all_n) > 5 else ""))
    return parts


def _genome_split(path: str) -> dict[str, str]:
    """file name -> 'train' | 'valid' | 'test' from a genome split JSON."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        out = {name: entry["split"] for name, entry in data["genomes"].items()}
    except FileNotFoundError:
        raise MissingFileError(f"genome split not found: {path}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: not a genome split (a JSON object whose 'genomes' maps file names to "
                         f"{{'split': 'train' | 'valid' | 'test'}}): {exc}") from None
    bad = sorted({v for v in out.values()} - {"train", "valid", "test"})
    if bad:
        raise InputError(f"{path}: unknown split names {bad}")
    return out


def _validate(model: DNALanguageModel, val: list[tuple[str, str]], config: TrainConfig,
              device: torch.device) -> float:
    """Held-out bits/base over the validation parts (:func:`_validation_parts`)."""
    total, n = 0.0, 0
    for seq, prefix in val:
        res = heldout_bits_per_base(model, seq, context=config.seq_len, stride=max(1, config.seq_len // 2),
                                    prefix=prefix, batch_size=config.eval_batch_size, device=device,
                                    autocast_bf16=device.type == "cuda")
        total += res.bits_per_base * res.n_scored
        n += res.n_scored
    return total / n


def _param_groups(model: DNALanguageModel, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on ``nn.Linear`` weights only (not embeddings, norms, biases or priors)."""
    decay_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if id(p) in decay_ids else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def train_lm(config: TrainConfig) -> TrainResult:
    """Train (or resume training) a DNA language model; see the module docstring.

    Raises:
        ValueError: unreadable / invalid FASTA (naming the file and record), a sequence
            too short for ``seq_len``, an ``out_dir`` that already holds checkpoints, or the
            files of a run stopped before its first checkpoint, without ``resume``
            (:func:`check_out_dir`), an aligner's run or model directory as ``out_dir``, a resume
            whose settings differ from the checkpoint's, or one from a damaged checkpoint (a
            :class:`CheckpointError` naming the file; :class:`MissingFileError`, a
            ``FileNotFoundError``, for a missing one).
        InputError: ``device="cuda"`` without CUDA.
        TrainingInterrupted: SIGINT or SIGTERM during the steps; raised after the step that was
            running finished and its checkpoint was written.
    """
    return _train_lm(config, None)


def _train_lm(config: TrainConfig, stop: StopFlag | None) -> TrainResult:
    """:func:`train_lm`; ``stop`` is the flag of signal handlers a DDP worker installed (``None``:
    installed here, around the steps)."""
    if not isinstance(config, TrainConfig):
        raise InputError(f"config must be a TrainConfig, got {type(config).__name__}")
    if config.device == "cuda" and not torch.cuda.is_available():
        raise InputError("device='cuda' requested but CUDA is not available")
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    device = torch.device(config.device)
    dinfo = _setup_distributed(device)
    rank, world = dinfo.rank, dinfo.world_size
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    try:
        return _train(config, device, rank, world, stop)
    finally:
        if dinfo.owns_group:
            dist.destroy_process_group()


def _run_files(out_dir: Path) -> list[str]:
    """What an earlier run left in ``out_dir`` (its log, its ``checkpoints/`` folder), by name."""
    found = [METRICS] if (out_dir / METRICS).exists() else []
    root = out_dir / "checkpoints"
    if root.is_dir() and any(root.iterdir()):
        found.append("checkpoints/")
    return found


def _aside_name(path: Path) -> Path:
    """The first of ``path.1``, ``path.2``, ... that does not exist."""
    n = 1
    while (dest := path.with_name(f"{path.name}.{n}")).exists():
        n += 1
    return dest


def check_out_dir(out_dir: str | os.PathLike, *, resume: bool, cli: bool = False) -> Path | None:
    """Whether :func:`train_lm` may train in ``out_dir``: returns its newest checkpoint (``None``:
    there is none), or raises :class:`CheckpointError` for an ``out_dir`` that holds checkpoints, or
    the files of a run stopped before its first checkpoint, without ``resume``, and for an aligner's
    run or model directory (:func:`~sinkalign.lm.checkpoints.aligner_layout`) whatever ``resume``.

    ``train_lm`` checks this itself; ``cli``: the messages name the command-line options
    (``--resume``, ``--out``) instead of the ``TrainConfig`` fields, for ``sinkalign lm train``
    to check before it starts.
    """
    resume_opt, out_opt = ("--resume", "--out") if cli else ("resume=True", "out_dir")
    out_dir = Path(out_dir)
    if shipped_path(out_dir):
        raise CheckpointError(f"{out_dir} is inside the models shipped with sinkalign ({SHIPPED_DATA}); choose "
                              f"another {out_opt}")
    latest = find_latest_checkpoint(out_dir)
    kind = aligner_layout(out_dir) if latest is None else None
    if kind is not None:  # its metrics.jsonl would be renamed and LM checkpoints written beside its own
        raise CheckpointError(f"{not_a_genome_lm(out_dir, kind)}; choose another {out_opt}")
    if latest is not None and not resume:
        raise CheckpointError(f"{out_dir} already holds checkpoints ({latest.name}); pass {resume_opt} "
                              f"to continue, or choose another {out_opt}")
    earlier = _run_files(out_dir) if latest is None else []
    if earlier and not resume:  # a run stopped before its first checkpoint: never append to its log
        kept = f" (its {METRICS} is kept as {_aside_name(out_dir / METRICS).name})" if METRICS in earlier else ""
        raise CheckpointError(f"{out_dir} holds an earlier training run ({', '.join(earlier)}) stopped before its "
                              f"first checkpoint; pass {resume_opt} to start over there from scratch{kept}, "
                              f"remove those files, or choose another {out_opt}")
    return latest


def _damaged(latest: Path, problem: str) -> str:
    """The message of a resume that cannot read the checkpoint ``latest``: ``problem`` (which
    names the damaged file) and what to do about it."""
    return damaged_checkpoint_message(latest, problem, previous_checkpoint(latest))


_STATE_FIELDS = {"step": int, "tokens_seen": int, "world_size": int, "optimizer": dict, "scheduler": dict,
                 "train_config": dict}


def _read_trainer_state(latest: Path) -> dict[str, Any]:
    """The checkpoint's ``trainer_state.json``; :class:`CheckpointError` naming it when it is unreadable."""
    path = latest / TRAINER_STATE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingFileError(_damaged(latest, f"{path}: not found")) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(_damaged(latest, f"{path}: unreadable training state ({exc})")) from None
    if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
        raise CheckpointError(_damaged(latest, f"{path}: not a sinkalign.lm training state"))
    bad = [k for k, kind in _STATE_FIELDS.items()
           if not isinstance(state.get(k), kind) or isinstance(state.get(k), bool)]
    if bad:
        raise CheckpointError(_damaged(latest, f"{path}: training state without a valid {', '.join(bad)}"))
    return state


def _train(config: TrainConfig, device: torch.device, rank: int, world: int, stop: StopFlag | None) -> TrainResult:
    out_dir = Path(config.out_dir)
    is_main = rank == 0
    latest = check_out_dir(out_dir, resume=config.resume)
    model_cfg = config.model_config()
    init = None  # (path, checkpoint) of the model this run starts from
    if config.init is not None and not (config.resume and latest is not None):
        init = _init_checkpoint(config.init)  # before the data are read: a wrong model fails fast
        _check_init(config.init, init[0], init[1].config, model_cfg)
    train_seqs, groups, val, data_digest = _load_data(config)
    sampler = WindowSampler(train_seqs, config.seq_len + 1, seed=config.seed, rank=rank,
                            max_n_fraction=config.max_n_fraction, groups=groups if config.balance == "genome" else None,
                            reverse_complement=config.reverse_complement)
    del train_seqs

    if config.resume and latest is None and is_main:
        kept = None
        if (out_dir / METRICS).exists():  # never appended to, never deleted: renamed
            kept = _aside_name(out_dir / METRICS)
            os.rename(out_dir / METRICS, kept)
        for leftover in (out_dir / "checkpoints").glob(".tmp-*"):  # a first checkpoint a kill left half-written
            shutil.rmtree(leftover, ignore_errors=True)
        logger.warning("resume requested but %s holds no checkpoint; starting from scratch%s", out_dir,
                       f" with a new {METRICS} (the earlier one is kept as {kept.name})" if kept else "")

    torch.manual_seed(config.seed)  # identical initialisation on every rank
    model = DNALanguageModel(model_cfg)
    if init is not None:
        model.load_state_dict(init[1].model.state_dict())
        logger.info("starting from the weights of %s", init[0])
        init = None
    model = model.to(device)
    opt = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr,
                            betas=(config.beta1, config.beta2))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_multiplier(s, steps=config.steps, warmup_steps=config.warmup_steps,
                                     min_lr_ratio=config.min_lr_ratio))
    torch.manual_seed(config.seed * 1_000_003 + 7919 * (rank + 1))  # per-rank dropout stream
    start_step, tokens_seen = 0, 0

    if config.resume and latest is not None:
        state = _read_trainer_state(latest)
        _check_resume_config(state["train_config"], config, latest, saved_data=state.get("data_sha256"),
                             data=data_digest)
        try:
            ckpt = load_checkpoint(latest, map_location=device)
        except (MissingFileError, CheckpointError) as exc:  # they name the file
            raise type(exc)(_damaged(latest, str(exc))) from None
        try:
            model.load_state_dict(ckpt.model.state_dict())
        except RuntimeError as exc:
            raise CheckpointError(_damaged(latest, f"{latest / 'config.json'}: describes another model than the "
                                                   f"run's {TRAINER_STATE} ({exc})")) from None
        opt_path = latest / OPTIMIZER_STATE
        try:
            tensors = safetensors.torch.load(opt_path.read_bytes())
        except FileNotFoundError:
            raise MissingFileError(_damaged(latest, f"{opt_path}: not found")) from None
        except Exception as exc:  # safetensors raises its own SafetensorError
            raise CheckpointError(_damaged(latest, f"{opt_path}: corrupt safetensors file ({exc})")) from None
        try:
            _load_optimizer(opt, tensors, state["optimizer"], device)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(_damaged(latest, f"{opt_path}: optimizer state that does not fit the model or "
                                                   f"its {TRAINER_STATE} ({exc})")) from None
        try:
            sched.load_state_dict(state["scheduler"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(_damaged(latest, f"{latest / TRAINER_STATE}: unreadable scheduler state ({exc})")) \
                from None
        start_step, tokens_seen = state["step"], state["tokens_seen"]
        if start_step >= config.steps:  # nothing to train: return the run as it is, rewriting nothing
            logger.info("%s is already at step %d of %d; nothing to train", out_dir, start_step, config.steps)
            return TrainResult(step=start_step, start_step=start_step, train_loss=float("nan"),
                               val_bits_per_base=None, tokens_seen=tokens_seen, elapsed_s=0.0,
                               checkpoint_dir=str(latest), metrics_path=str(out_dir / METRICS), rank=rank,
                               world_size=world, weights_sha256=_weights_digest(model))
        if state["world_size"] == world and f"rng.torch.rank{rank}" in tensors:
            try:
                torch.set_rng_state(tensors[f"rng.torch.rank{rank}"])
                if device.type == "cuda" and f"rng.cuda.rank{rank}" in tensors:
                    torch.cuda.set_rng_state(tensors[f"rng.cuda.rank{rank}"], device)
            except (RuntimeError, TypeError) as exc:
                raise CheckpointError(_damaged(latest, f"{opt_path}: unusable random-number state ({exc})")) \
                    from None
        else:
            logger.warning("checkpoint was written by %s process(es), now %d: a step now takes %d windows (%d before: "
                           "--batch-size is per process) and the dropout RNG is reseeded", state["world_size"], world,
                           config.batch_size * world, config.batch_size * state["world_size"])
        if is_main:
            _rewrite_metrics(out_dir / METRICS, start_step)
            for leftover in (out_dir / "checkpoints").glob(".tmp-*"):
                shutil.rmtree(leftover, ignore_errors=True)
        logger.info("resumed from %s at step %d", latest, start_step)

    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        runner: nn.Module = DistributedDataParallel(_LossModule(model),
                                                    device_ids=[device] if device.type == "cuda" else None)
    else:
        runner = _LossModule(model)

    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        logger.info("training %s: %d parameters, %d process(es), steps %d..%d", config.attention,
                    model.num_parameters(), world, start_step, config.steps)
    metrics_path = out_dir / METRICS
    use_bf16 = device.type == "cuda"
    tokens_per_step = config.batch_size * config.seq_len * world
    t_start = time.perf_counter()
    interval_loss, interval_steps, interval_time = 0.0, 0, 0.0
    last_loss = float("nan")
    val_bpb: float | None = None
    ckpt_dir = latest if latest is not None and config.resume else None
    bar = tqdm(total=config.steps, initial=start_step, disable=not (is_main and config.progress),
               desc=f"train {config.attention}", unit="step", dynamic_ncols=True)
    model.train()
    done = start_step
    interrupted = 0  # the signal that ended the run before config.steps
    with contextlib.ExitStack() as stack:
        stack.callback(bar.close)
        if stop is None:  # a single process: a second signal aborts; under torchrun repeats are ignored
            stop = stack.enter_context(stop_on_signals(StopFlag(), repeat_aborts=world == 1))
        for step in range(start_step, config.steps):
            t0 = time.perf_counter()
            tokens = sampler.batch(step, config.batch_size).to(device, non_blocking=True)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                loss = runner(tokens)
            loss.backward()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            lr_now = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if not math.isfinite(loss_value := float(loss.detach())):
                raise DivergedError(f"training diverged: the loss became {loss_value} at step {step + 1}; start again "
                                    f"with a lower --lr (now {config.lr:g}) or --grad-clip, or a longer --warmup-steps, "
                                    "or go on from a checkpoint before it with --init CHECKPOINT --out NEW (a resume "
                                    "repeats the same steps)")
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            interval_time += time.perf_counter() - t0
            interval_loss += loss_value
            interval_steps += 1
            tokens_seen += tokens_per_step
            done = step + 1
            bar.update(1)

            late, signum = _stop_requests(config, t_start, device, rank, world, stop)
            interrupted = signum if done < config.steps else 0
            if interrupted and is_main:
                logger.warning("%s received: stopping after step %d and writing a checkpoint",
                               signal.Signals(interrupted).name, done)
            final = done == config.steps or late or bool(interrupted)
            record: dict[str, Any] | None = None
            if done % config.log_every == 0 or final:
                mean = torch.tensor([interval_loss, float(interval_steps)], dtype=torch.float64)
                if world > 1:
                    dist.all_reduce(mean)  # sum over ranks; each rank ran the same number of steps
                last_loss = float(mean[0] / mean[1])
                record = {"step": done, "loss": last_loss, "bits_per_base": last_loss / _LN2, "lr": lr_now,
                          "tokens_per_s": interval_steps * tokens_per_step / max(interval_time, 1e-9),
                          "tokens_seen": tokens_seen, "elapsed_s": time.perf_counter() - t_start}
                interval_loss, interval_steps, interval_time = 0.0, 0, 0.0
            if (config.eval_every and done % config.eval_every == 0) or (final and not interrupted):
                if is_main:
                    val_bpb = _validate(model, val, config, device)
                    record = record or {"step": done}
                    record["val_bits_per_base"] = val_bpb
                    bar.set_postfix(val_bpb=f"{val_bpb:.4f}")
                if world > 1:
                    dist.barrier()
            if record is not None and is_main:
                with open(metrics_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record) + "\n")
                bar.set_postfix(loss_bpb=f"{record.get('bits_per_base', float('nan')):.4f}",
                                **({"val_bpb": f"{val_bpb:.4f}"} if val_bpb is not None else {}))
            if (config.save_every and done % config.save_every == 0) or final:
                rng = [torch.get_rng_state()]
                cuda_rng = [torch.cuda.get_rng_state(device)] if device.type == "cuda" else []
                if world > 1:
                    gathered: list[Any] = [None] * world
                    dist.all_gather_object(gathered, (rng[0], cuda_rng[0] if cuda_rng else None))
                    rng = [g[0] for g in gathered]
                    cuda_rng = [g[1] for g in gathered] if cuda_rng else []
                if is_main:
                    ckpt_dir = _save_training_checkpoint(
                        out_dir, done, model, opt, sched, sampler.state(done), rng, cuda_rng, config,
                        tokens_seen, world, config.keep_checkpoints, data_digest)
                if world > 1:
                    dist.barrier()
            if final:
                break

    if ckpt_dir is None:  # a rank other than 0: the checkpoint rank 0 wrote
        ckpt_dir = find_latest_checkpoint(out_dir)
    result = TrainResult(
        step=max(start_step, done), start_step=start_step, train_loss=last_loss,
        val_bits_per_base=val_bpb, tokens_seen=tokens_seen, elapsed_s=time.perf_counter() - t_start,
        checkpoint_dir=str(ckpt_dir) if ckpt_dir is not None else "", metrics_path=str(metrics_path),
        rank=rank, world_size=world, weights_sha256=_weights_digest(model))
    if interrupted:
        raise TrainingInterrupted(interrupted, result)
    return result


def _stop_requests(config: TrainConfig, t_start: float, device: torch.device, rank: int, world: int,
                   stop: StopFlag) -> tuple[bool, int]:
    """``(late, signum)``: whether the time limit has passed (rank 0's clock decides) and the stop
    signal received (0: none; under DDP the largest any rank received), the same on every rank."""
    late = config.time_limit_minutes is not None and \
        time.perf_counter() - t_start >= 60.0 * config.time_limit_minutes
    if world == 1:
        return late, stop.signum
    flags = torch.tensor([float(late and rank == 0), float(stop.signum)],
                         device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return bool(flags[0].item()), int(flags[1].item())


# ----------------------------------------------------------------------------- DDP launcher


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ddp_worker(rank: int, config_dict: dict[str, Any], world: int, port: int, queue: Any) -> None:
    # signal handlers first: a SIGINT / SIGTERM at any time from here on stops every rank after one step
    with stop_on_signals(StopFlag(), repeat_aborts=False) as stop:
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                           "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)})
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.WARNING)
        try:
            result = _train_lm(TrainConfig.from_dict(config_dict), stop)
        except TrainingInterrupted as exc:
            queue.put((exc.signum, None if exc.result is None else tuple(exc.result)))
        except SinkalignError as exc:  # a user error (bad data, a damaged checkpoint): the launcher raises it
            queue.put(("error", exc))
            raise
        else:
            queue.put((0, tuple(result)))


def train_lm_ddp(config: TrainConfig, nprocs: int) -> list[TrainResult]:
    """Run :func:`train_lm` in ``nprocs`` spawned processes joined by DDP (gloo on CPU).

    Returns the per-rank results in rank order. Each process takes ``batch_size`` windows
    per step; rank 0 alone writes metrics and checkpoints. A SIGINT or SIGTERM to this process
    is passed on to the workers, which stop after the same step, write a checkpoint and end;
    then :class:`TrainingInterrupted` is raised here with rank 0's result. A worker that ends with a
    :class:`~sinkalign.errors.SinkalignError` (bad data, a damaged checkpoint) has it raised here.
    Called from a line of the main script's top level outside ``if __name__ == "__main__":``,
    where spawned workers cannot start, it raises :class:`~sinkalign.errors.SinkalignError`
    before any process starts.
    """
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise InputError(f"{nprocs=} must be a positive integer")
    if config.device == "cuda" and torch.cuda.device_count() < nprocs:
        raise InputError(f"{nprocs=} exceeds the {torch.cuda.device_count()} visible CUDA device(s)")
    if unguarded_main_call():  # torch's own error came from each worker, after the spawn, in a traceback apiece
        raise SinkalignError(
            f"train_lm_ddp(nprocs={nprocs}) from the top level of the main script: each worker process runs "
            "the main script again as it starts (Python's 'spawn' start method), where this line would start "
            "worker processes in turn, which Python refuses. Put the script's work under "
            "`if __name__ == \"__main__\":`")
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    workers: list[Any] = []

    def forward(signum: int) -> None:  # SIGTERM, which the workers take from their first line on
        for proc in workers:
            if proc.exitcode is None:
                os.kill(proc.pid, signal.SIGTERM)

    with stop_on_signals(StopFlag(), repeat_aborts=False, forward=forward) as stop:
        # The workers start with SIGINT ignored: a terminal's Ctrl-C reaches the whole process
        # group, and while a worker imports (seconds) it would end it in tracebacks. This
        # process takes it and passes it on as SIGTERM (during the few milliseconds of the
        # spawn itself a Ctrl-C is lost; press it again).
        main = threading.current_thread() is threading.main_thread()
        before = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            context = mp.start_processes(_ddp_worker, args=(config.to_dict(), nprocs, _free_port(), queue),
                                         nprocs=nprocs, join=False, start_method="spawn")
        finally:
            if main:
                signal.signal(signal.SIGINT, before)
        workers.extend(context.processes)
        if stop.signum:  # it came while the workers were starting
            forward(stop.signum)
        try:
            while not context.join():
                pass
        except Exception as exc:  # a worker failed: killed by the signal before it could take it, or a real error
            got = []
            while not queue.empty():
                got.append(queue.get())
            if stop.signum:  # rank 0 may have written its checkpoint and said so before another rank died
                # (under load a stopped gloo worker can abort as it exits): the run is named as saved then
                results = [TrainResult(*r) for s, r in got if s != "error" and r is not None]
                rank0 = next((r for r in results if r.rank == 0), None)
                raise TrainingInterrupted(stop.signum, rank0) from exc
            for item in got:  # the user error a worker ended with, as train_lm raises it
                if item[0] == "error":
                    raise item[1] from None
            raise
    got = []
    while not queue.empty():
        got.append(queue.get())
    results = sorted((TrainResult(*r) for _, r in got if r is not None), key=lambda r: r.rank)
    stopped = max((s for s, _ in got), default=0)  # the workers' (SIGTERM when passed on from here)
    signum = (stop.signum or stopped) if stopped or len(got) < nprocs else 0  # named as this process got it
    if signum:
        raise TrainingInterrupted(signum, next((r for r in results if r.rank == 0), None))
    if len(results) != nprocs:  # pragma: no cover - a worker that ended without a result or an error
        raise RuntimeError(f"{nprocs - len(results)} DDP worker(s) ended without a result")
    return results
