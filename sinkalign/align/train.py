"""Training the aligner on Pfam pair shards: optax, data parallel, atomic checkpoints, resume.

Data parallelism: the batch axis is sharded over every local device with
``jax.sharding`` (a 1-D mesh named ``data``); parameters and optimiser state are
replicated, and XLA inserts the gradient all-reduce. For several hosts call
:func:`init_distributed` first (``jax.distributed.initialize``), then every host runs
the same loop on its own slice of the data.

Checkpoints: ``OUT/checkpoints/step_00000100/`` holds ``params.safetensors``,
``opt_state.safetensors`` (leaves of the optax state, in tree order) and ``state.json``
(step, config, data position). A checkpoint is written to a temporary directory and
renamed into place, then ``OUT/checkpoints/latest`` is replaced atomically, so an
interrupted run always resumes from a complete checkpoint. Metrics are JSON lines in
``OUT/metrics.jsonl``. Whenever validation F1 (MEA decoding, core columns for structure-based
references) beats every earlier evaluation, the parameters are also written to ``OUT/best/``
(a model directory, with ``val_f1`` and ``step`` in its ``state.json``): checkpoint selection
on the validation split. Run-directory logic lives in :mod:`sinkalign.align.checkpoints`.

Starting point: the model's initial parameters (the BLOSUM62 window, zero residual scores),
or with ``init`` the weights of a trained model (fine-tuning, e.g. the shipped ``learned``
model on a user's own reference alignments; its optimiser state is not taken). ``anchor``
adds ``anchor / 2 * |theta - theta_0|^2`` to the loss, ``theta_0`` the starting weights (the
L2-SP penalty of transfer learning): training on few pairs stays near what the starting model
knows. The penalty is reported as the metric ``anchor`` (its ``|theta - theta_0|^2``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import time
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sinkalign.align import model as M
from sinkalign.align.checkpoints import (
    BUCKETS,
    METRICS,
    check_run_dir,
    clean_leftovers,
    discard_previous_run,
    export_model,
    find_latest_checkpoint,
    load_checkpoint,
    previous_checkpoint,
    read_best,
    restore_previous_run,
    rewrite_metrics,
    save_best,
    save_checkpoint,
)
from sinkalign.errors import CheckpointError, DivergedError, InputError, Interrupted
from sinkalign.utils import StopFlag, damaged_checkpoint_message, stop_on_signals

__all__ = ["TrainConfig", "TrainResult", "train", "save_checkpoint", "load_checkpoint", "init_distributed",
           "evaluate_split", "export_model", "BUCKETS", "crop_example", "flank_example", "flanked_copies",
           "save_best", "read_best", "anchor_drift", "starting_params"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Settings of one training run (the model's settings live in ``model``)."""

    shards: str
    out: str
    model: M.AlignerConfig = field(default_factory=M.AlignerConfig)
    steps: int = 1000
    batch_size: int = 8
    lr: float = 3e-3
    warmup: int = 50
    weight_decay: float = 1e-4
    clip_norm: float = 1.0
    seed: int = 0
    checkpoint_every: int = 100
    eval_every: int = 100
    eval_pairs: int = 64
    certify_every: int = 0
    certify_tau: float = 1e-3
    max_length: int = 512
    keep_checkpoints: int = 3
    crop: bool = False  # crop longer pairs to a max_length window around a reference pair (else skip them)
    freeze: tuple[str, ...] = ()  # parameter names kept at their initial values (e.g. "sub")
    init: str | None = None  # a trained model (model, checkpoint or run directory) whose weights start the run
    anchor: float = 0.0  # L2-SP weight: anchor / 2 * |theta - theta_0|^2 is added to the loss
    flank: float = 0.0  # share of training pairs whose longer side is put inside unrelated sequence
    flank_ratio: float = 8.0  # at most this many times the shorter side's length (log-uniform)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "checkpoint_every", "eval_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("lr", "clip_norm"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise InputError(f"{name}={getattr(self, name)} must be a finite number > 0")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise InputError(f"weight_decay={self.weight_decay} must be a finite number >= 0")
        if not (math.isfinite(self.anchor) and self.anchor >= 0):
            raise InputError(f"anchor={self.anchor} must be a finite number >= 0")
        if self.max_length > BUCKETS[-1]:
            raise InputError(f"max_length={self.max_length} must be <= {BUCKETS[-1]}")
        _check_flank(self.flank, self.flank_ratio)
        object.__setattr__(self, "freeze", tuple(self.freeze))
        unknown = sorted(set(self.freeze) - set(M.init_params(self.model)))
        if unknown:
            raise InputError(f"freeze={list(self.freeze)}: the model has no parameters {unknown}; it has "
                             f"{sorted(M.init_params(self.model))}")


@dataclass
class TrainResult:
    step: int
    params: dict
    last_metrics: dict
    out: Path


def init_distributed() -> None:
    """Multi-host setup (``jax.distributed.initialize`` reads the coordinator from the env)."""
    jax.distributed.initialize()


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def _bucket(n: int) -> int:
    for b in BUCKETS:
        if n <= b:
            return b
    raise ValueError(f"length {n} exceeds the largest bucket {BUCKETS[-1]}")


def _fits(example, max_length: int) -> bool:
    return max(len(example.pair.query_seq), len(example.pair.target_seq)) <= max_length


def crop_example(example, max_length: int, rng: np.random.Generator):
    """A pair longer than ``max_length`` cut to windows of at most ``max_length`` residues per side.

    The windows are centred (with random jitter) on one reference pair drawn at random, so
    the two windows cover homologous stretches; reference pairs, core masks and embeddings
    are cut to match. Shorter pairs are returned unchanged.
    """
    import dataclasses

    pair = getattr(example, "pair", example)
    lq, lt = len(pair.query_seq), len(pair.target_seq)
    if max(lq, lt) <= max_length:
        return example
    if pair.n_aligned:
        i, j = (int(x) for x in pair.pairs[rng.integers(pair.n_aligned)])
    else:
        i, j = int(rng.integers(lq)), int(rng.integers(lt))
    off = int(rng.integers(-max_length // 4, max_length // 4 + 1))

    def window(center: int, length: int) -> tuple[int, int]:
        lo = min(max(0, center - max_length // 2 + off), max(0, length - max_length))
        return lo, min(length, lo + max_length)

    q0, q1 = window(i, lq)
    t0, t1 = window(j, lt)
    p = pair.pairs
    keep = (p[:, 0] >= q0) & (p[:, 0] < q1) & (p[:, 1] >= t0) & (p[:, 1] < t1)
    cores = {}
    if pair.query_core is not None:
        cores = {"query_core": pair.query_core[q0:q1].copy(), "target_core": pair.target_core[t0:t1].copy()}
    else:
        cores = {"query_core": np.ones(q1 - q0, bool), "target_core": np.ones(t1 - t0, bool)}
    # residues whose reference partner was cut away are not trusted gaps: drop them from the loss
    lost_q = p[(p[:, 0] >= q0) & (p[:, 0] < q1) & ~keep, 0] - q0
    lost_t = p[(p[:, 1] >= t0) & (p[:, 1] < t1) & ~keep, 1] - t0
    cores["query_core"][lost_q] = False
    cores["target_core"][lost_t] = False
    new_pair = dataclasses.replace(pair, query_seq=pair.query_seq[q0:q1], target_seq=pair.target_seq[t0:t1],
                                   pairs=(p[keep] - np.array([q0, t0])).astype(np.int32), **cores)
    if not hasattr(example, "pair"):
        return new_pair
    qe, te = example.query_embedding, example.target_embedding
    return dataclasses.replace(example, pair=new_pair, query_embedding=None if qe is None else qe[q0:q1],
                               target_embedding=None if te is None else te[t0:t1])


def _check_flank(share: float, max_ratio: float) -> None:
    """The flank settings of training (:class:`TrainConfig`) and calibration (:func:`flanked_copies`)."""
    if not 0.0 <= share <= 1.0:
        raise InputError(f"flank={share} must be a share of the pairs, in [0, 1]")
    if not (math.isfinite(max_ratio) and max_ratio > 1.0):
        raise InputError(f"flank_ratio={max_ratio} must be a finite number > 1")


def flank_example(example, donors, max_length: int, max_ratio: float, rng: np.random.Generator):
    """``example`` with its longer side put inside stretches of unrelated sequence: a pair as a
    search meets it (a domain against a whole protein, a gene against a contig).

    A length ratio ``R`` is drawn log-uniformly from ``[1, max_ratio]``; when the shorter side
    times ``R`` would pass ``max_length``, the pair is first cut (:func:`crop_example`) to
    ``max_length / R`` residues a side. The longer side (either, at random, when they are equal)
    then gets ``R`` times the shorter side's length, the added residues split at random
    between its two ends and copied from windows of ``donors`` (other training examples, of
    other families). The added residues are aligned to nothing in the reference and trusted
    (core) gaps: the loss asks the plan to send them to the dustbin. Reference pairs, core
    masks and embeddings move with the residues; a pair that cannot grow is returned as it is.
    """
    import dataclasses

    pair = getattr(example, "pair", example)
    ratio = float(np.exp(rng.uniform(0.0, np.log(max_ratio))))
    short = min(len(pair.query_seq), len(pair.target_seq))
    if short * ratio > max_length:
        example = crop_example(example, max(1, int(max_length / ratio)), rng)
        pair = getattr(example, "pair", example)
    lq, lt = len(pair.query_seq), len(pair.target_seq)
    side = 0 if lq > lt else 1 if lt > lq else int(rng.integers(2))  # 0: flank the query
    long_len = (lq, lt)[side]
    extra = min(max_length, int(round(min(lq, lt) * ratio))) - long_len
    family = getattr(pair, "family", None)
    donors = [d for d in donors if getattr(getattr(d, "pair", d), "family", None) != family or family is None]
    if extra <= 0 or not donors:
        return example
    pieces, embeds = [], []
    while sum(map(len, pieces)) < extra:  # windows of donor sequences (either side) until there is enough
        donor = donors[int(rng.integers(len(donors)))]
        dpair = getattr(donor, "pair", donor)
        which = int(rng.integers(2))
        seq = (dpair.query_seq, dpair.target_seq)[which]
        emb = (getattr(donor, "query_embedding", None), getattr(donor, "target_embedding", None))[which]
        need = extra - sum(map(len, pieces))
        start = int(rng.integers(max(1, len(seq) - need + 1)))
        pieces.append(seq[start:start + need])
        embeds.append(None if emb is None else emb[start:start + need])
    flank = "".join(pieces)
    left = int(rng.integers(extra + 1))
    seqs = [pair.query_seq, pair.target_seq]
    seqs[side] = flank[:left] + seqs[side] + flank[left:]
    cores = [pair.query_core, pair.target_core]
    if cores[0] is not None:
        cores[side] = np.concatenate([np.ones(left, bool), cores[side], np.ones(extra - left, bool)])
    shift = np.zeros(2, dtype=np.int32)
    shift[side] = left
    new_pair = dataclasses.replace(pair, query_seq=seqs[0], target_seq=seqs[1],
                                   pairs=(pair.pairs + shift).astype(np.int32), query_core=cores[0],
                                   target_core=cores[1])
    if not hasattr(example, "pair"):
        return new_pair
    embs = [example.query_embedding, example.target_embedding]
    if embs[side] is not None:
        if any(e is None for e in embeds):
            raise InputError(f"pair {pair.query_id}/{pair.target_id}: a flank donor has no embeddings")
        fill = np.concatenate(embeds)
        embs[side] = np.concatenate([fill[:left], embs[side], fill[left:]]).astype(embs[side].dtype)
    return dataclasses.replace(example, pair=new_pair, query_embedding=embs[0], target_embedding=embs[1])


def flanked_copies(pairs, share: float, max_length: int, max_ratio: float, seed: int = 0) -> list:
    """Flanked copies (:func:`flank_example`, donors: the other families of ``pairs``) of a
    ``share`` of ``pairs``, each chosen with that probability in turn (``seed``); the pairs
    themselves are not changed. What ``sinkalign calibrate --flank`` fits on besides them."""
    _check_flank(share, max_ratio)
    pairs = list(pairs)
    rng = np.random.default_rng(seed)
    return [flank_example(p, pairs, max_length, max_ratio, rng) for p in pairs if rng.random() < share]


def examples_to_batch(examples, config: M.AlignerConfig, size: int | None = None) -> M.Batch:
    """Pad a list of ShardExample (or ReferencePair) into one square bucket."""
    items = []
    for ex in examples:
        pair = getattr(ex, "pair", ex)
        fa = getattr(ex, "query_embedding", None)
        fb = getattr(ex, "target_embedding", None)
        if config.feature_dim and (fa is None or fb is None):
            raise InputError(f"pair {pair.query_id}/{pair.target_id} has no embeddings but the model needs "
                             f"{config.feature_dim}-dim features; run `sinkalign shards embed` first")
        items.append((pair.query_seq, pair.target_seq, fa, fb, pair.pairs, (pair.query_core, pair.target_core)))
    longest = max(max(len(a), len(b)) for a, b, *_ in items)
    L = size or _bucket(longest)
    return M.make_batch(items, config, L, L)


def _batches(dataset, cfg: TrainConfig, start_step: int, position: tuple[int, int] | None = None):
    """Deterministic stream of ``(step, examples, position)``: epoch e uses seed (cfg.seed, e);
    ``position`` is ``(epoch, batch)`` of the batch after this one, what a checkpoint records
    so that a resumed run reads on from there. A batch whose pairs are all longer than
    ``max_length`` gives no step, so steps and batches drift apart: without a recorded
    ``position`` (checkpoints before 2026-11-29) the start is taken as one batch per step, which
    is right only when no batch was skipped."""
    if position is None:  # skip whole epochs, then batches, to reach start_step without touching data
        epoch, skip = divmod(start_step, max(1, len(dataset) // cfg.batch_size))
    else:
        epoch, skip = position
    step = start_step
    while True:
        given = False  # an epoch that gives no batch would give none ever after: refuse, not spin
        for n, items in enumerate(dataset.iter_batches(cfg.batch_size, seed=cfg.seed, epoch=epoch, drop_last=True)):
            if n < skip:
                continue
            if cfg.crop:
                rng = np.random.default_rng([cfg.seed, epoch, n])
                items = [crop_example(ex, cfg.max_length, rng) for ex in items]
            if cfg.flank:
                rng = np.random.default_rng([cfg.seed, epoch, n, 1])
                chosen = rng.random(len(items)) < cfg.flank
                items = [flank_example(ex, items[:k] + items[k + 1:], cfg.max_length, cfg.flank_ratio, rng)
                         if chosen[k] else ex for k, ex in enumerate(items)]
            items = [ex for ex in items if _fits(ex, cfg.max_length)]
            if not items:
                continue
            while len(items) < cfg.batch_size:  # keep shapes static: repeat to fill
                items = items + items[: cfg.batch_size - len(items)]
            given = True
            yield step, items, (epoch, n + 1)
            step += 1
        if not given and not skip:
            raise InputError(f"no training pair fits --max-length {cfg.max_length} (each has a longer side); pass "
                             "--crop to train on windows of the long pairs, or raise --max-length")
        skip = 0
        epoch += 1


# --------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------
def evaluate_split(params, dataset, config: M.AlignerConfig, *, n_pairs: int = 64, batch_size: int = 8,
                   gap_weight: float = 0.0) -> dict:
    """Held-out loss terms and alignment F1 (MEA decoding) over the first ``n_pairs`` pairs."""
    from sinkalign.align.decode import mea_align
    from sinkalign.align.metrics import core_pair_scores, micro_average

    # A fixed random subset (seed 0) so that every family of the split is represented.
    idx = np.sort(np.random.default_rng(0).choice(len(dataset), size=min(n_pairs, len(dataset)), replace=False))
    examples = [dataset[int(i)] for i in idx]
    examples = [ex for ex in examples if _fits(ex, BUCKETS[-1])]
    sums: dict[str, float] = {}
    scores = []
    loss_jit = jax.jit(lambda p, b: M.loss_fn(p, b, config)[1])
    for lo in range(0, len(examples), batch_size):
        chunk = examples[lo : lo + batch_size]
        batch = examples_to_batch(chunk, config)
        for name, value in loss_jit(params, batch).items():
            sums[name] = sums.get(name, 0.0) + float(value) * len(chunk)
        rows = np.asarray(M.forward(params, batch, config)[0], np.float64)
        for n, ex in enumerate(chunk):
            plan = M.pair_plan(rows[n], len(ex.pair.query_seq), len(ex.pair.target_seq))
            scores.append(core_pair_scores(mea_align(plan, gap_weight=gap_weight).pairs, ex.pair))
    n = max(len(examples), 1)
    out = {f"val_{k}": v / n for k, v in sums.items()}
    # Monotonicity violation, reported as the mono term; alignment F1 micro-averaged.
    out["val_f1"] = micro_average(scores)["f1"] if scores else float("nan")
    out["val_pairs"] = len(examples)
    return out


def certified_depth(params, batch: M.Batch, config: M.AlignerConfig, *, tau: float, r_max: int = 4):
    """Corollary 2 on a training batch: the smallest tail depth whose omitted gradient <= tau."""
    from sinkalign.sinkhorn import certificates

    if config.dustbin is None:
        return None
    _, _, _, aug = M.transport_problem(params, batch, config)
    lq, lk = batch.a.shape[1], batch.b.shape[1]

    def loss_of_output(out):
        rows, transported = out[:, :lq, : lk + 1], out[:, :lq, lk + 1 :]
        return M.loss_from_outputs(rows, transported, batch, config)[0]

    out = jax.jit(lambda *a: M.sk_core.tail_operator(*a, aug.support, aug.config))(
        aug.q, aug.k, aug.v, aug.q_valid, aug.k_valid, aug.log_a, aug.log_b)
    g = jax.grad(loss_of_output)(out)
    return certificates.select_tail_depth(aug.q, aug.k, aug.v, aug.q_valid, aug.k_valid, aug.log_a, aug.log_b, g,
                                          aug.support, aug.config, tau=tau, r_max=r_max)


# --------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------
def starting_params(cfg: TrainConfig) -> dict:
    """``theta_0``: the weights of ``cfg.init`` (a model, checkpoint or run directory), which
    must have the names and shapes of ``cfg.model``'s parameters, or the model's initial
    parameters (seed ``cfg.seed``)."""
    fresh = M.init_params(cfg.model, seed=cfg.seed)
    if cfg.init is None:
        return fresh
    params, _, _ = load_checkpoint(cfg.init)
    shapes = {k: tuple(np.shape(v)) for k, v in params.items()}
    wanted = {k: tuple(np.shape(v)) for k, v in fresh.items()}
    if shapes != wanted:
        diff = sorted(k for k in set(shapes) | set(wanted) if shapes.get(k) != wanted.get(k))
        raise CheckpointError(f"--init {cfg.init}: its parameters do not fit this model's configuration ("
                              + ", ".join(f"{k}: {shapes.get(k, 'absent')} there, {wanted.get(k, 'absent')} here"
                                          for k in diff) + "); train with the model's own settings")
    return {k: jnp.asarray(v, dtype=fresh[k].dtype) for k, v in params.items()}


def anchor_drift(params: dict, anchor: dict, frozen=()) -> jax.Array:
    """``|theta - theta_0|^2`` over the trained (not ``frozen``) parameters."""
    return sum(jnp.sum(jnp.square(params[k] - anchor[k])) for k in sorted(params) if k not in frozen)


def _optimizer(cfg: TrainConfig):
    warmup = max(1, min(cfg.warmup, cfg.steps - 1))
    # optax needs at least one decay step after the warm-up (a 1-step run included)
    schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warmup, max(cfg.steps, warmup + 1),
                                                  end_value=cfg.lr * 0.05)
    tx = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), optax.adamw(schedule, weight_decay=cfg.weight_decay))
    if cfg.freeze:
        labels = {k: ("freeze" if k in cfg.freeze else "train") for k in M.init_params(cfg.model)}
        tx = optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()}, labels)
    return tx, schedule


def train(cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False, progress: bool = True,
          stop_after: int | None = None) -> TrainResult:
    """Train (or resume) and return the final parameters. ``stop_after`` ends early (tests).

    An ``out`` that already holds a run is refused unless ``resume`` (continue from its newest
    complete checkpoint) or ``overwrite`` (delete its metrics and checkpoints first).

    Raises:
        Interrupted: SIGINT or SIGTERM (in the main thread) during the steps: the step under
            way finishes, is logged and checkpointed, then the run stops (``resume`` continues
            it from there). A second signal aborts at once.
    """
    from sinkalign.io.shards import INDEX_NAME, ShardDataset

    out = Path(cfg.out)
    if resume and overwrite:
        raise CheckpointError("--resume and --overwrite contradict each other; pass one")
    try:
        train_set = ShardDataset(cfg.shards, "train", load_embeddings=bool(cfg.model.feature_dim))
    except FileNotFoundError as exc:  # the message names the missing file and how to build (or embed) it
        if (Path(cfg.shards) / INDEX_NAME).is_file():  # a shard or its embeddings gone: the message says which
            raise
        raise InputError(f"{cfg.shards} holds no pair shards: {exc}") from exc
    if len(train_set) == 0:
        raise InputError(f"{cfg.shards}: the train split is empty")
    if len(train_set) < cfg.batch_size:  # batches are full (static shapes): there would be none
        raise InputError(f"{cfg.shards}: the train split holds {len(train_set)} pairs, fewer than --batch-size "
                         f"{cfg.batch_size}; lower --batch-size")
    if not train_set.any_aligned():  # every target would be "unaligned"; validation F1 reads 1 all the same
        raise InputError(f"{cfg.shards}: no reference alignment of the train split aligns a residue pair (all-lower-"
                         "case Stockholm rows are insert columns, aligned to nothing: `shards build` warned); "
                         "upper-case the rows if their case means nothing, and build the shards again")
    kinds = {f["alphabet"] for f in train_set.index.get("families", {}).values()
             if f.get("split") == "train" and f.get("alphabet")}  # (indexes of old builds may lack it)
    if kinds and cfg.model.alphabet not in kinds:
        raise InputError(f"{cfg.shards}: the train split holds {sorted(kinds)} families, and the model is for "
                         f"{cfg.model.alphabet} (--init of the other alphabet, or --model-option alphabet=...)")
    if len(kinds) > 1:
        log.warning("%s: the train split mixes %s families; the model reads every sequence as %s", cfg.shards,
                    sorted(kinds), cfg.model.alphabet)
    # shards without a validation split train without validation (and keep no best/); a
    # validation split that is there but unreadable is an error, not silently skipped
    if "valid" in train_set.index["splits"]:
        val_set = ShardDataset(cfg.shards, "valid", load_embeddings=bool(cfg.model.feature_dim))
    else:
        val_set = None
    if val_set is not None and len(val_set) and not val_set.any_aligned():
        log.warning("%s: no reference alignment of the validation split aligns a residue pair (all-lower-case "
                    "rows?): training without validation (no best/ checkpoint)", cfg.shards)
        val_set = None
    elif val_set is None or len(val_set) == 0:  # shards build writes the split even when no family fell in it
        val_set = None
        log.warning("%s has %s validation split: training without validation (no best/ checkpoint)", cfg.shards,
                    "an empty" if "valid" in train_set.index["splits"] else "no")
    devices = jax.local_devices()
    n_dev = len(devices)
    if cfg.batch_size % n_dev:
        raise InputError(f"batch_size={cfg.batch_size} must be a multiple of the {n_dev} local devices")
    theta_0 = starting_params(cfg)  # a bad --init is an error before the run directory is touched
    # after every input check: --overwrite sets the old run aside (OUT/.previous-run) until the first checkpoint
    check_run_dir(out, resume=resume, overwrite=overwrite)
    try:
        out.mkdir(parents=True, exist_ok=True)
        clean_leftovers(out)
        mesh = Mesh(np.asarray(devices), ("data",))
        data_sharding = NamedSharding(mesh, PartitionSpec("data"))
        replicated = NamedSharding(mesh, PartitionSpec())

        tx, schedule = _optimizer(cfg)
        params = theta_0
        opt_state = tx.init(params)
        start, position = 0, None
        latest = find_latest_checkpoint(out) if resume else None
        if latest is not None:
            try:
                params, state, flat = load_checkpoint(latest)
            except CheckpointError as exc:  # a damaged file: say which checkpoint to delete to go on
                raise CheckpointError(damaged_checkpoint_message(latest, str(exc), previous_checkpoint(latest))) from None
            run_model = M.AlignerConfig.from_dict(state.get("model") or {})  # flat (older) or nested form
            if run_model != cfg.model:
                raise CheckpointError(f"{latest}: the checkpoint's model config differs from this run's ("
                                      f"{'; '.join(run_model.differences(cfg.model))}); resume with the run's settings "
                                      "(`sinkalign train --resume` takes them when --config, --model-option and "
                                      "--embedder are left out), or start a new run in another --out")
            _check_resumed_settings(latest, state.get("train") or {}, cfg)
            leaves, treedef = jax.tree_util.tree_flatten(opt_state)
            if not isinstance(state.get("step"), int) or flat is None or len(flat) != len(leaves):
                raise CheckpointError(damaged_checkpoint_message(
                    latest, f"{latest}: not a resumable training checkpoint (state.json needs 'step' and "
                    f"opt_state.safetensors {len(leaves)} optimiser leaves)", previous_checkpoint(latest)))
            opt_state = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(flat[f"{i:05d}"]) for i in range(len(leaves))])
            start = int(state["step"])
            position = _data_position(latest, state)
            log.info("resumed from %s (step %d)", latest, start)
        elif resume:
            log.warning("--resume: %s holds no complete checkpoint; starting from step 0", out)
        params = jax.device_put(params, replicated)
        opt_state = jax.device_put(opt_state, replicated)
        theta_0 = jax.device_put(theta_0, replicated) if cfg.anchor else None

        def objective(params, batch, theta_0):
            loss, terms = M.loss_fn(params, batch, cfg.model)
            if cfg.anchor:
                drift = anchor_drift(params, theta_0, cfg.freeze)
                loss, terms = loss + 0.5 * cfg.anchor * drift, {**terms, "anchor": drift}
            return loss, terms

        @jax.jit
        def step_fn(params, opt_state, batch, theta_0):
            (loss, terms), grads = jax.value_and_grad(objective, has_aux=True)(params, batch, theta_0)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss, terms, optax.tree.norm(grads)

        stream = _batches(train_set, cfg, start, position)
        stream = itertools.chain([next(stream)], stream)  # the first batch before any file: data giving none refused here
        metrics_path = out / METRICS
        rewrite_metrics(metrics_path, start)  # steps after the checkpoint are re-run: no duplicate lines
        last: dict = {}
        from tqdm import tqdm

        best_f1 = _best_so_far(out, metrics_path, start) if resume else -math.inf
        train_record = _train_dict(cfg)  # once: the shards' digest is the one this run started (or resumed) on
        bar = tqdm(total=cfg.steps, initial=start, disable=not progress, desc="train", unit="step")
        t_window, n_window = time.perf_counter(), 0
        end = cfg.steps if stop_after is None else min(cfg.steps, start + stop_after)
        step = start
        with open(metrics_path, "a") as metrics_file, stop_on_signals(StopFlag(), repeat_aborts=True) as stop:
            while step < end:
                step, items, position = next(stream)
                batch = examples_to_batch(items, cfg.model)
                batch = jax.device_put(batch, data_sharding)
                params, opt_state, loss, terms, gnorm = step_fn(params, opt_state, batch, theta_0)
                step += 1
                n_window += len(items)
                # the loss term "f1" is 1 - soft F1: logged as f1_loss, not to be read as an F1 beside val_f1
                record = {"step": step, "loss": float(loss),
                          **{("f1_loss" if k == "f1" else k): float(v) for k, v in terms.items()},
                          "grad_norm": float(gnorm), "lr": float(schedule(step))}
                if not math.isfinite(record["loss"]):
                    raise DivergedError(f"training diverged: the loss became {record['loss']} at step {step} (gradient "
                                        f"norm {record['grad_norm']:.3g}, learning rate {record['lr']:.3g}); start again "
                                        f"with a lower --lr (now {cfg.lr:g}) or a longer --warmup (--overwrite), or "
                                        "go on from a checkpoint before it with --init CHECKPOINT --out NEW (a "
                                        "resume repeats the same steps)")
                if step % cfg.eval_every == 0 or step == end:
                    dt = time.perf_counter() - t_window
                    record["examples_per_s"] = n_window / dt if dt > 0 else None
                    t_window, n_window = time.perf_counter(), 0
                    if val_set is not None and len(val_set):
                        record.update(evaluate_split(params, val_set, cfg.model, n_pairs=cfg.eval_pairs))
                if cfg.certify_every and step % cfg.certify_every == 0:
                    sel = certified_depth(params, batch, cfg.model, tau=cfg.certify_tau)
                    if sel is not None:
                        record["certified_depth"] = sel.depth
                        record["certificate_norms"] = {str(k): v for k, v in sel.norms.items()}
                if record.get("val_f1") is not None and math.isfinite(record["val_f1"]) and record["val_f1"] > best_f1:
                    best_f1 = record["val_f1"]
                    record["best"] = True
                    save_best(out, step, params, {"model": cfg.model.to_dict(), "train": train_record,
                                                  "val_f1": best_f1, "val_pairs": record.get("val_pairs")})
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                last = record
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.3f}")
                if step % cfg.checkpoint_every == 0 or step == end or stop.signum:
                    saved = save_checkpoint(out, step, params, opt_state,
                                            {"model": cfg.model.to_dict(), "train": train_record,
                                             "data_position": list(position)}, keep=cfg.keep_checkpoints)
                    discard_previous_run(out)  # (none once gone: the first checkpoint removes it)
                if stop.signum:  # SIGINT / SIGTERM: this step is done and saved; stop before the next
                    bar.close()
                    raise Interrupted(stop.signum, step, saved)
        bar.close()
        return TrainResult(step, params, last, out)
    except BaseException:  # stopped before its first checkpoint: a run set aside is put back (none after it)
        restore_previous_run(out)
        raise


# settings a resumed run must keep (the flag that sets each): they shape the optimisation, its
# data or what best/ is chosen on. --steps may change (it rescales the schedule's end), and so may
# how often the run evaluates, certifies and checkpoints.
_RESUME_FIXED = (("shards", "--pfam-shards"), ("batch_size", "--batch-size"), ("lr", "--lr"),
                 ("warmup", "--warmup"), ("weight_decay", "--weight-decay"), ("clip_norm", "--clip-norm"),
                 ("seed", "--seed"), ("max_length", "--max-length"), ("crop", "--crop"), ("freeze", "--freeze"),
                 ("eval_pairs", "--eval-pairs"), ("init", "--init"), ("anchor", "--anchor"), ("flank", "--flank"),
                 ("flank_ratio", "--flank-ratio"))


def _check_resumed_settings(checkpoint: Path, before: dict, cfg: TrainConfig) -> None:
    """:class:`CheckpointError` unless ``cfg`` keeps the settings of :data:`_RESUME_FIXED` the
    run started with (``before``: its checkpoint's ``train`` record; a setting an older
    checkpoint lacks is taken at its default). Shards are the same when their paths resolve
    to one directory or their ``index.json`` files are identical (the shards moved)."""
    fields = TrainConfig.__dataclass_fields__
    changed = []  # every setting that differs, named at once (not one per attempt)
    for name, flag in _RESUME_FIXED:
        field_ = fields[name]
        default = field_.default if field_.default is not MISSING else (
            None if field_.default_factory is MISSING else field_.default_factory())
        was, now = before.get(name, default), getattr(cfg, name)
        if name == "freeze":
            was, now = tuple(was or ()), tuple(now)
        if name == "shards" and was != now:
            a, b = Path(str(was)), Path(now)
            same = a.resolve() == b.resolve() or (
                (a / "index.json").is_file() and (b / "index.json").is_file()
                and (a / "index.json").read_bytes() == (b / "index.json").read_bytes())
            if same:
                continue
        if was != now:
            changed.append((flag, was, now))
    if changed:
        was_now = "; ".join(f"{flag} {was!r}, not {now!r}" for flag, was, now in changed)
        flags = [flag for flag, _, _ in changed]
        same = flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} and {flags[-1]}"
        raise CheckpointError(f"{checkpoint}: the run started with {was_now}; resume with the same {same} (or "
                              "start a new run in another --out)")
    was = before.get("shards_index_sha256")  # (checkpoints before 2026-11-29 lack it)
    if was is not None and _shards_digest(cfg.shards) != was:
        raise CheckpointError(f"{checkpoint}: the shards in {cfg.shards} are not the ones the run started with (their "
                              "index.json differs: rebuilt or replaced?), so its splits and validation pairs would "
                              "change mid-run; resume with those shards, or start a new run in another --out")


def _data_position(checkpoint: Path, state: dict) -> tuple[int, int] | None:
    """The ``(epoch, batch)`` a checkpoint's run reads on from (``None``: an older checkpoint
    without one)."""
    pos = state.get("data_position")
    if pos is None:
        return None
    if (not isinstance(pos, list) or len(pos) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pos)):
        raise CheckpointError(f"{checkpoint}/state.json: bad data_position {pos!r} (expected [epoch, batch], "
                              "two integers >= 0)")
    return pos[0], pos[1]


def _best_so_far(out: Path, metrics_path: Path, start: int) -> float:
    """The validation F1 a resumed run's ``best/`` must beat: ``best/``'s own, or, when it was
    saved after the checkpoint the run resumes from (those steps are run again and their metric
    lines were dropped), the best ``val_f1`` of the lines kept, so the re-run steps are judged
    (and marked ``"best"``) as the first time."""
    step, f1 = read_best(out)
    if step is None or step <= start:
        return f1
    kept = []
    if metrics_path.is_file():
        for line in metrics_path.read_text(encoding="utf-8").splitlines():
            value = json.loads(line).get("val_f1")
            if value is not None and math.isfinite(value):
                kept.append(float(value))
    return max(kept, default=-math.inf)


def _train_dict(cfg: TrainConfig) -> dict:
    d = asdict(cfg)
    d["model"] = cfg.model.to_dict()
    d["shards_index_sha256"] = _shards_digest(cfg.shards)  # a resume checks the shards by content
    return d


def _shards_digest(shards: str) -> str | None:
    """The sha256 of ``shards``' ``index.json`` (it lists every shard file's own sha256 and the
    split), or None where there is none."""
    index = Path(shards) / "index.json"
    return hashlib.sha256(index.read_bytes()).hexdigest() if index.is_file() else None
