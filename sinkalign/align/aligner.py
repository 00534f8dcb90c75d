"""The user-facing aligner: load a trained model, align pairs, decode with confidences."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import jax
import numpy as np

from sinkalign.align import model as M
from sinkalign.align.calibration import Calibration
from sinkalign.align.decode import Alignment, mea_from_posteriors, plan_posteriors
from sinkalign.align.checkpoints import BUCKETS, load_checkpoint

__all__ = ["Aligner", "PairResult", "default_model_path"]

log = logging.getLogger(__name__)

BACKENDS = ("reference", "pallas")
MAX_LENGTH = 8192  # residues per sequence; the plan is dense, [L + 1, L + 1] per pair
LONG_STEP = 512


def padded_length(longest: int) -> int:
    """The padded length a chunk is computed at: the training buckets up to 1024 residues,
    then multiples of 512 (pairs that long are aligned one at a time)."""
    if longest <= BUCKETS[-1]:
        return next(b for b in BUCKETS if longest <= b)
    return -(-longest // LONG_STEP) * LONG_STEP


_DEFAULT_MODELS = {"protein": "aligner_default", "dna": "aligner_dna"}


def default_model_path(alphabet: str = "protein") -> Path:
    """The model shipped inside the package for ``alphabet``: ``protein`` (fitted on the Pfam
    training families of ../shared/data) or ``dna`` (fitted on MADE1 sequences)."""
    if alphabet not in _DEFAULT_MODELS:
        raise ValueError(f"alphabet={alphabet!r} is not one of {tuple(_DEFAULT_MODELS)}")
    return Path(__file__).resolve().parents[1] / "data" / _DEFAULT_MODELS[alphabet]


@dataclass(frozen=True)
class PairResult:
    """One aligned pair: ids, sequences, the decoded alignment and (optionally) the plan."""

    query_id: str
    query: str
    target_id: str
    target: str
    alignment: Alignment
    plan: np.ndarray | None = None

    def as_record(self):
        return (self.query_id, self.query, self.target_id, self.target, self.alignment, self.alignment.score)


class Aligner:
    """A trained OT aligner.

    Args:
        params: model parameters; config: its :class:`~sinkalign.align.model.AlignerConfig`.
        embedder: the feature embedder (built from ``config.embedder`` when omitted).
        backend: ``reference`` (pure JAX) or ``pallas`` (blockwise kernels).
        gap_weight: MEA gap weight (0 = gaps free, the decoding the model was tuned with).
        calibration: maps raw plan posteriors to calibrated probabilities (see
            :mod:`sinkalign.align.calibration`); a model directory carries its own, and
            ``None`` reports the raw posteriors.
    """

    def __init__(self, params: dict, config: M.AlignerConfig, *, embedder=None, backend: str = "reference",
                 gap_weight: float | None = None, calibration: Calibration | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
        self.config = config
        self.params = params
        self.backend = backend
        self.gap_weight = config.decode_gap_weight if gap_weight is None else float(gap_weight)
        if self.gap_weight < 0:
            raise ValueError(f"gap_weight={self.gap_weight} must be >= 0")
        self._embedder = embedder
        self.calibration = calibration
        self.provenance = ""  # how the model was made (set by :meth:`load` from its state.json)
        run_cfg = config.replace(impl=backend)
        self._plans = jax.jit(lambda p, b: M.forward(p, b, run_cfg)[0])

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, **kwargs) -> "Aligner":
        """Load a checkpoint (a training run directory or a model directory); default: shipped."""
        path = Path(path) if path is not None else default_model_path()
        if not path.exists():
            raise FileNotFoundError(f"model {path} does not exist")
        params, state, _ = load_checkpoint(path)
        if "model" not in state:
            raise ValueError(f"{path}/state.json has no 'model' config")
        if "calibration" in state and "calibration" not in kwargs:
            try:
                kwargs["calibration"] = Calibration.from_dict(state["calibration"])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}/state.json: bad calibration: {exc}") from exc
        aligner = cls(params, M.AlignerConfig.from_dict(state["model"]), **kwargs)
        aligner.provenance = state.get("provenance", "")
        return aligner

    @property
    def embedder(self):
        if self._embedder is None and self.config.feature_dim:
            from sinkalign.align.embed import embedder_from_config  # noqa: PLC0415

            self._embedder = embedder_from_config(self.config.embedder)
        return self._embedder

    def _features(self, seqs: list[str]):
        if not self.config.feature_dim:
            return [None] * len(seqs)
        feats = self.embedder.embed(seqs)
        if feats and feats[0].shape[-1] != self.config.feature_dim:
            raise ValueError(f"embedder gives {feats[0].shape[-1]}-dim features, the model expects "
                             f"{self.config.feature_dim}")
        return feats

    def align(self, query: str, target: str, *, query_id: str = "query", target_id: str = "target",
              keep_plan: bool = False) -> PairResult:
        """Align one pair of sequences."""
        return next(self.align_many([(query_id, query, target_id, target)], keep_plan=keep_plan))

    def align_many(self, pairs: Iterable[tuple[str, str, str, str]], *, batch_size: int = 8,
                   keep_plan: bool = False) -> Iterator[PairResult]:
        """Align ``(query_id, query, target_id, target)`` tuples; results come in input order.

        Pairs are processed in chunks of ``batch_size`` padded to a common length bucket,
        so a long stream runs in bounded memory.
        """
        if batch_size < 1:
            raise ValueError(f"{batch_size=} must be >= 1")
        chunk: list = []
        for item in pairs:
            longest = max(len(item[1]), len(item[3]))
            if longest > MAX_LENGTH:
                raise ValueError(f"pair {item[0]} / {item[2]}: a sequence of {longest} residues is longer than "
                                 f"the {MAX_LENGTH} the aligner takes (its plan is dense: O(L^2) memory); "
                                 "split the sequence into domains first")
            if longest > BUCKETS[-1]:  # long pairs go one at a time, in input order
                if chunk:
                    yield from self._align_chunk(chunk, keep_plan)
                    chunk = []
                yield from self._align_chunk([item], keep_plan)
                continue
            chunk.append(item)
            if len(chunk) == batch_size:
                yield from self._align_chunk(chunk, keep_plan)
                chunk = []
        if chunk:
            yield from self._align_chunk(chunk, keep_plan)

    def _align_chunk(self, chunk, keep_plan):
        L = padded_length(max(max(len(q), len(t)) for _, q, _, t in chunk))
        feats = self._features([q for _, q, _, _ in chunk] + [t for _, _, _, t in chunk])
        n = len(chunk)
        items = [(q, t, feats[i], feats[n + i], None) for i, (_, q, _, t) in enumerate(chunk)]
        batch = M.make_batch(items, self.config, L, L)
        rows = np.asarray(self._plans(self.params, batch), np.float64)
        for i, (qid, q, tid, t) in enumerate(chunk):
            m, k = len(q), len(t)
            plan = M.pair_plan(rows[i], m, k)
            post = plan_posteriors(plan)
            aln = mea_from_posteriors(post.match, post.query_gap, post.target_gap, gap_weight=self.gap_weight)
            if self.calibration is not None:
                aln = self.calibration.apply(aln, post.match)
            yield PairResult(qid, q, tid, t, aln, plan if keep_plan else None)
