"""A NumPy inference engine for the aligner: the same plans as the JAX forward pass, without JAX.

For every model without embedder features (``feature_dim == 0``: the shipped ``learned``,
``blosum`` and ``dna`` models) and with the band-preserving dustbin (``dustbin="banded"``),
the transport plan of one pair is computed here in float64, pair by pair, with no padding
and nothing to compile:

* **Window scores.** ``S[i, j] = sum_k sub[k][a[i+k], b[j+k]] / eps`` (see
  :mod:`sinkalign.align.model`). When ``sub[k] = w_k * base`` with triangular weights
  ``w_k = 1 - |k| / (K + 1)`` (how :func:`~sinkalign.align.model.init_params` makes it and
  how the ``blosum`` and ``dna`` models keep it, to the float32 resolution of their stored
  parameters), the sum along each diagonal is a triangular filter of ``base[a[p], b[q]]``:
  two box filters of width ``K + 1`` along the diagonals, ``O(m n log K)`` instead of the
  ``O(m n (2K + 1) A)`` of ``Q K^T``. The engine then uses ``base = sub[K]`` and the exact
  triangular weights, so for parameters stored in float32 its scores differ from a float64
  evaluation of the stored tensor by that tensor's own rounding (< 2^-23 relative; the
  float32 forward pass rounds more than that). Any other window (a trained one) is summed
  offset by offset: one row gather of a ``[A, n]`` table and one add per offset, in row
  tiles that stay in cache, ``O(m n (2K + 1))``.
* **Residue encoder** (``res_ctx_dim > 0``, the ``learned`` model): the built-in encoder
  (:func:`~sinkalign.align.model.residue_context`: a projection and residual dilated
  convolutions; the projection and the first convolution as tables over the symbols, each
  other layer one matrix product over the stacked taps) runs per sequence, not per pair;
  its low-rank pair score ``(h_a W_q)(h_b W_k)^T / eps`` and the gap head's dustbin scores
  are added. A sequence is kept from its second use in a cache bounded by residues
  (:data:`CACHE_RESIDUES`), so an all-against-all run encodes each sequence at most twice
  while the cache holds them, and a stream in which nothing recurs keeps nothing.
* **Dustbins.** The dustbin row and column scores are windowed lookups of the stored
  dustbin tokens plus their encoder parts (exact for any tokens).
* **Symmetric models** (``config.symmetric``, every shipped model): the window is that of
  ``(sub[k] + sub[k]^T) / 2``, the encoder's maps are ``[W_q | W_k]`` and ``[W_k | W_q]`` over
  sqrt(2), and each residue's dustbin scores (window, residual and gap head) are the mean of
  its two roles', so the scores are ``S(a, b) / 2 + S(b, a)^T / 2`` as in the JAX forward pass.
* **Solve.** The operator's forward (``T`` centred base steps from ``v = 0``, then ``R``
  tail steps; :mod:`sinkalign.sinkhorn.core`) in scaling form: with ``K = exp(S - max S)``
  a full step is ``x = a / (K y)``, ``y = b / (K^T x)`` and the plan is
  ``diag(x) K diag(y)``. This is the same iteration (centering is a gauge change that
  leaves every plan unchanged) and is exact to float64 rounding as long as ``exp`` neither
  overflows nor underflows, which holds when the pair's scores span at most
  :data:`MAX_SPREAD`. A pair whose scores span more (a very small ``eps``, an extreme
  learned score) is solved in the log domain instead, as the operator does: the same
  plan, 2 ``exp`` per cell and step instead of one per cell.

* **Corridors** (:meth:`NumpyEngine.solve_band`, :mod:`sinkalign.align.band`): the same
  scores on a monotone strip of cells only (computed in blocks of rows, each the dense
  computation of its rectangle), the same steps with the strip as a sparse matrix and the
  dustbin row and column whole: ``O(nnz)`` memory and time per step, for long pairs.

The plan returned is the one :meth:`sinkalign.align.aligner.Aligner` decodes:
``[m + 1, n + 1]`` with the real block, each query residue's dustbin mass in the last
column and ``1 - sum_i P[i, j]`` in the last row (:func:`sinkalign.align.model.pair_plan`).
``tests/test_aligner_engine.py`` checks it against the JAX operator run in float64.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, replace

import numpy as np

from sinkalign.align.band import BandMatrix, BandPosteriors
from sinkalign.align.decode import Posteriors
from sinkalign.align.model import ALPHABETS, AlignerConfig, encode_residues

__all__ = ["BandSolution", "CACHE_RESIDUES", "MAX_SPREAD", "NumpyEngine", "ResidueEncoder", "Solution", "engine_support"]

# Largest range of scores (natural-log units) the scaling form takes: exp(-MAX_SPREAD) and the
# scaling vectors stay far inside float64's range (e^-708) for any marginal up to the aligner's
# MAX_LENGTH, 131,072 (tests/test_aligner_engine.py checks that extreme against the log domain).
MAX_SPREAD = 300.0
_BAND_ROWS = 64  # query rows per block of a corridor's scores
_TILE = 2**17  # elements of one tile of the score filters (1 MiB of float64: cache-sized)
CACHE_RESIDUES = 2**16  # residues of encoded sequences the engine keeps (about 1 kB each: 68 MB)


def engine_support(params: dict, config: AlignerConfig) -> str | None:
    """``None`` when :class:`NumpyEngine` computes this model's plans, else the reason it cannot."""
    if config.feature_dim:
        return "the model has embedder features (feature_dim > 0)"
    if config.dustbin_variant != "banded":
        return f"dustbin={config.dustbin_variant!r} (the engine implements the 'banded' dustbin)"
    return None


def _triangular_weights(window: int) -> np.ndarray:
    return 1.0 - np.abs(np.arange(-window, window + 1)) / (window + 1)


def _triangular_base(sub: np.ndarray, window: int) -> np.ndarray | None:
    """``base`` with ``sub[k] == w_k * base`` to the float32 resolution of the stored
    parameters (``w_k`` triangular), or None."""
    base = sub[window]
    w = _triangular_weights(window)
    scale = float(np.abs(sub).max())
    if scale == 0.0:
        return base
    # each stored entry is the float32 rounding of w_k * base: off by at most 2^-24 relative
    tol = 2.0**-23 * scale
    return base if float(np.abs(sub - w[:, None, None] * base[None]).max()) <= tol else None


def _gelu(x: np.ndarray) -> np.ndarray:
    """``jax.nn.gelu`` (its default tanh form), as ``x * sigmoid(2 u)``: the same function
    (``(1 + tanh u) / 2 = sigmoid(2 u)``), one ``exp`` instead of a ``tanh`` (2x faster here),
    and no cancellation in ``1 + tanh u`` where ``u`` is very negative."""
    u = x * x
    u *= 0.044715 * x  # x * x * x: far faster than x**3 (a general power)
    u += x
    u *= -2.0 * math.sqrt(2.0 / math.pi)
    with np.errstate(over="ignore"):  # exp(-2 u) = inf: x / inf = -0, the limit
        np.exp(u, out=u)
    u += 1.0
    return np.divide(x, u, out=u)


@dataclass(frozen=True, eq=False)
class ResidueEncoder:
    """The built-in residue encoder in NumPy (:func:`sinkalign.align.model.residue_context`),
    with the aligner's maps from its output: the residual query and key features
    (``h W_q``, ``h W_k``) and the gap head's query- and target-side gap scores."""

    first: np.ndarray  # [A + 1, C]: the projection's output per symbol (gelu(x W_in)); row A, beyond the ends, 0
    first_taps: np.ndarray  # [k, A + 1, C]: the first convolution's taps applied to ``first``
    conv: tuple  # per layer: [k * C, C], the taps stacked (tap t reads position l + t * dil - lo)
    scale: np.ndarray  # [layers, C]
    kernel: int
    wq: np.ndarray  # [C, D]
    wk: np.ndarray  # [C, D]
    gap_w: np.ndarray | None  # [C, 2] or None without a gap head
    gap_b: np.ndarray | None  # [2]

    @classmethod
    def from_model(cls, params: dict, config: AlignerConfig) -> ResidueEncoder:
        from sinkalign.align.model import _residue_features

        f64 = lambda name: np.asarray(params[name], np.float64)  # noqa: E731
        conv = f64("res_conv")  # [layers, k, C, C]
        C = conv.shape[-1] if conv.size else f64("res_in").shape[1]
        # a position's input is one of A symbol rows, so the projection and the first layer's
        # taps are tables over symbols: lookups instead of matrix products
        first = np.zeros((config.n_symbols + 1, C))
        first[:-1] = _gelu(_residue_features(config).astype(np.float64) @ f64("res_in"))
        first_taps = np.einsum("sc,tcd->tsd", first, conv[0]) if len(conv) else np.zeros((0,) + first.shape)
        gap = config.gap_head
        return cls(first, first_taps, tuple(layer.reshape(-1, layer.shape[-1]) for layer in conv), f64("res_scale"),
                   config.res_ctx_kernel, f64("res_wq"), f64("res_wk"),
                   f64("gap_w") if gap else None, f64("gap_b") if gap else None)

    def context(self, idx: np.ndarray) -> np.ndarray:
        """``[L, C]`` encoder output for residue indices ``idx [L]`` (one unpadded sequence:
        the same as the padded, masked batch of the JAX model)."""
        null = len(self.first) - 1
        h = self.first[idx]
        L, C = h.shape
        for layer, w in enumerate(self.conv):
            dil = 2**layer
            lo = (self.kernel - 1) * dil // 2  # 'SAME' padding of the dilated kernel
            hi = (self.kernel - 1) * dil - lo
            if layer == 0:  # y[l] = sum_t (first W_t)[a[l + t * dil - lo]], zero beyond the ends
                padded_idx = np.concatenate([np.full(lo, null), idx, np.full(hi, null)])
                y = self.first_taps[0][padded_idx[:L]]
                for t in range(1, self.kernel):
                    y += self.first_taps[t][padded_idx[t * dil : t * dil + L]]
            else:  # the taps side by side (contiguous copies), one matrix product
                padded = np.zeros((L + lo + hi, C))
                padded[lo : lo + L] = h
                taps = np.empty((L, self.kernel * C))
                for t in range(self.kernel):
                    taps[:, t * C : (t + 1) * C] = padded[t * dil : t * dil + L]
                y = taps @ w
            y *= (self.scale[layer] / np.sqrt(np.mean(y * y, -1, keepdims=True) + 1e-6))
            h = h + _gelu(y)
        return h

    def sides(self, idx: np.ndarray) -> _Sides:
        """What a sequence contributes as a query and as a target. Each sequence is encoded
        alone: stacking short ones into one matrix product would be faster (2x at 12
        residues), but a sequence's features would then depend, in their last bits, on the
        sequences it was stacked with (and so on the cache and thread timing)."""
        h = self.context(idx)
        gq = gk = None
        if self.gap_w is not None:
            g = h @ self.gap_w + self.gap_b
            gq, gk = g[:, 0].copy(), g[:, 1].copy()
        return _Sides(np.asarray(idx), h @ self.wq, h @ self.wk, gq, gk)


@dataclass(frozen=True, eq=False)
class _Sides:
    idx: np.ndarray  # residue indices [L]
    rq: np.ndarray | None = None  # residual query features [L, D] (as a query)
    rk: np.ndarray | None = None  # residual key features [L, D] (as a target)
    gq: np.ndarray | None = None  # gap score of each residue as a query [L]
    gk: np.ndarray | None = None  # as a target [L]


class _SequenceCache:
    """Encoded sequences by sequence, at most ``residues`` residues in all.

    A sequence is kept from the second time it is asked for: a stream in which nothing
    recurs (``--pairing zip`` over distinct records) leaves the cache empty and costs no
    memory, while a recurring one (a query against every target, the targets of an
    all-against-all run from the second query on) is encoded at most twice. When full, a
    new sequence replaces one chosen at random. Random rather than least-recently-used
    replacement: an all-against-all run cycles through its targets, and on a cycle longer
    than the cache LRU never hits, while random replacement keeps about the cache's share of
    it. Thread-safe (a sequence two threads encode at once is encoded twice, to the same values).
    """

    def __init__(self, residues: int, seed: int = 0) -> None:
        self.residues = residues
        self._items: dict = {}
        self._keys: list = []  # the same keys, for a uniform random choice
        self._size = 0
        self._seen: set = set()  # hashes of sequences asked for once (forgotten in bulk when large)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickled (for a worker process) empty: what it caches is rebuilt where it is used."""
        return {"residues": self.residues}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["residues"])

    def get(self, key: str, make):
        """The value of ``key``: cached, or ``make()`` (kept from the key's second use)."""
        return self.get_many([key], lambda _: make())[0]

    def get_many(self, keys: list, make) -> list:
        """The values of distinct ``keys``: cached ones, the others ``make(key)`` (each kept
        from its second use). All are looked up before any is kept, so what one task keeps
        never evicts a sequence that the same task is about to use."""
        with self._lock:
            found = {k: self._items[k][1] for k in keys if k in self._items}
        for key in keys:
            if key not in found:
                found[key] = make(key)
                self._admit(key, found[key])
        return [found[k] for k in keys]

    def _admit(self, key: str, value) -> None:
        if len(key) > self.residues:
            return
        with self._lock:
            if key in self._items:
                return
            tag = hash(key)
            if tag not in self._seen:  # first time: remember that it was asked for, keep nothing
                if len(self._seen) >= max(1024, self.residues // 2):
                    self._seen.clear()
                self._seen.add(tag)
                return
            while self._size + len(key) > self.residues:
                slot = int(self._rng.integers(len(self._keys)))
                old = self._keys[slot]
                last = self._keys.pop()
                if slot < len(self._keys):  # move the last key into the freed slot
                    self._keys[slot] = last
                    self._items[last] = (slot, self._items[last][1])
                del self._items[old]
                self._size -= len(old)
            self._items[key] = (len(self._keys), value)
            self._keys.append(key)
            self._size += len(key)

    def __len__(self) -> int:
        return len(self._items)


def _diag_box_flat(x: np.ndarray, stride: int, width: int) -> np.ndarray:
    """A box filter of ``width`` along the diagonals of a row-major matrix, on its flat buffer.

    With ``x`` the flat buffer of an ``[R, C]`` matrix and ``stride = C + 1``, one step down a
    diagonal is ``stride`` elements, so ``out[f] = sum_{s < width} x[f + s * stride]``
    (``len(x) - (width - 1) * stride`` entries). Entries whose diagonal leaves the matrix
    through its right edge wrap into the next row and hold garbage; callers read only
    entries whose whole window stays inside. By doubling: ``O(len(x) log width)``, every
    step one contiguous add.
    """
    out = None  # sum over the low bits of width seen so far
    span = 0  # how many diagonal steps ``out`` covers
    part, size = x, 1  # part[f] = sum_{s < size} x[f + s * stride]
    rest = width
    while True:
        if rest & 1:
            if out is None:
                out, span = part, size
            else:
                n = min(len(out), len(part) - span * stride)
                out = out[:n] + part[span * stride : span * stride + n]
                span += size
        rest >>= 1
        if not rest:
            return out
        part = part[: len(part) - size * stride] + part[size * stride :]
        size *= 2


@dataclass(frozen=True, eq=False)
class NumpyEngine:
    """Plans of a model without embedder features, with banded dustbins, in NumPy.

    Build with :meth:`from_model`; :meth:`solve` gives one pair's :class:`Solution`,
    :meth:`plan` its plan, :meth:`scores` its augmented score matrix (``[m + 1, n + 1]``,
    already divided by ``eps``).
    """

    alphabet: str
    window: int
    eps: float
    band: int | None
    length_mass: bool
    n_steps: int
    base: np.ndarray | None  # [A + 1, A + 1] for a triangular window (the extra symbol, beyond the ends, scores 0)
    sub: np.ndarray | None  # [2K + 1, A + 1, A + 1] for any other window
    to_kdb: np.ndarray  # [2K + 1, A + 1]: query residue at offset k -> its score with the key dustbin
    from_qdb: np.ndarray  # [2K + 1, A + 1]: the query dustbin's score with a target residue at offset k
    corner: float  # the two dustbins' score
    encoder: ResidueEncoder | None = None
    # the dustbin tokens' entries for the encoder's features (query-scaled, see from_model)
    kdb_res: np.ndarray | None = None  # [D]: S[i, db] gains rq_i . kdb_res
    qdb_res: np.ndarray | None = None  # [D]: S[db, j] gains rk_j . qdb_res
    kdb_gap: float = 0.0  # S[i, db] gains gq_i * kdb_gap
    qdb_gap: float = 0.0  # S[db, j] gains gk_j * qdb_gap
    cache_residues: int = CACHE_RESIDUES

    @classmethod
    def from_model(cls, params: dict, config: AlignerConfig, *, cache_residues: int = CACHE_RESIDUES) -> NumpyEngine:
        """Raises ``ValueError`` naming the reason when the model is outside the engine."""
        reason = engine_support(params, config)
        if reason is not None:
            raise ValueError(f"the NumPy engine cannot run this model: {reason}")
        K, A = config.window, config.n_symbols
        sub = np.asarray(params["sub"], np.float64)  # [2K + 1, A, A]
        n_sub = config.sub_dim
        qdb_all = np.asarray(params["q_dustbin"], np.float64)
        kdb_all = np.asarray(params["k_dustbin"], np.float64)
        qdb = qdb_all[:n_sub].reshape(2 * K + 1, A)
        kdb = kdb_all[:n_sub].reshape(2 * K + 1, A)
        sqrt_d = math.sqrt(config.qk_dim)
        # a symmetric model scores the mean of both directions (model.queries_keys): the window
        # of sub[k] and of its transpose; the dustbin parts are averaged below
        sub_scores = 0.5 * (sub + sub.transpose(0, 2, 1)) if config.symmetric else sub
        base = _triangular_base(sub_scores, K)
        if base is not None:
            base_x, sub_x = np.zeros((A + 1, A + 1)), None
            base_x[:A, :A] = base
        else:
            base_x, sub_x = None, np.zeros((2 * K + 1, A + 1, A + 1))
            sub_x[:, :A, :A] = sub_scores
        to_kdb = np.zeros((2 * K + 1, A + 1))
        to_kdb[:, :A] = kdb  # S[i, db] = sum_k kdb[k, a[i+k]] (q is pre-scaled by sqrt(d))
        from_qdb = np.zeros((2 * K + 1, A + 1))
        from_qdb[:, :A] = np.einsum("kc,kcb->kb", qdb, sub) / sqrt_d  # S[db, j] = q_db . k_j / sqrt(d)
        corner = float(np.dot(qdb_all, kdb_all)) / sqrt_d  # the same in both directions
        if config.symmetric:  # a residue's score with the other side's dustbin, as query and as target
            to_kdb = from_qdb = 0.5 * (to_kdb + from_qdb)
        extra: dict = {}
        if config.res_ctx_dim:
            # features after the window: [h W_q | g_q, 0] for queries, [h W_k | 0, g_k sqrt(d)] for
            # keys (model.queries_keys); the key dustbin meets the query's, the query dustbin the key's
            D = config.res_qk_dim
            encoder = ResidueEncoder.from_model(params, config)
            kdb_res, qdb_res = kdb_all[n_sub : n_sub + D].copy(), qdb_all[n_sub : n_sub + D] / sqrt_d
            kdb_gap = float(kdb_all[n_sub + D]) if config.gap_head else 0.0
            qdb_gap = float(qdb_all[n_sub + D + 1]) if config.gap_head else 0.0
            if config.symmetric:
                # (h_a W_q)(h_b W_k)^T / 2 + (h_a W_k)(h_b W_q)^T / 2 as one product of D * 2 features,
                # and each residue's dustbin scores the mean of its two roles'
                r2 = math.sqrt(0.5)
                gap = None
                if config.gap_head:
                    gap_w = 0.5 * (kdb_gap * encoder.gap_w[:, :1] + qdb_gap * encoder.gap_w[:, 1:])
                    gap_b = 0.5 * (kdb_gap * encoder.gap_b[0] + qdb_gap * encoder.gap_b[1])
                    gap = dict(gap_w=np.concatenate([gap_w, gap_w], 1), gap_b=np.array([gap_b, gap_b]))
                    kdb_gap = qdb_gap = 1.0
                encoder = replace(encoder, wq=np.concatenate([encoder.wq, encoder.wk], 1) * r2,
                                  wk=np.concatenate([encoder.wk, encoder.wq], 1) * r2, **(gap or {}))
                kdb_res, qdb_res = np.concatenate([kdb_res, qdb_res]) * r2, np.concatenate([qdb_res, kdb_res]) * r2
            extra = dict(encoder=encoder, kdb_res=kdb_res, qdb_res=qdb_res, kdb_gap=kdb_gap, qdb_gap=qdb_gap)
        sk = config.sinkhorn
        return cls(config.alphabet, K, float(sk.eps), sk.band, config.dustbin.mass == "length", sk.n_iters + sk.tail,
                   base_x, sub_x, to_kdb, from_qdb, corner, cache_residues=cache_residues, **extra)

    def encode(self, seq: str) -> np.ndarray:
        return encode_residues(seq, self.alphabet)

    def _padded(self, idx: np.ndarray) -> np.ndarray:
        null = len(ALPHABETS[self.alphabet])
        pad = np.full(self.window, null, np.intp)
        return np.concatenate([pad, idx.astype(np.intp), pad])

    @functools.cached_property
    def _cache(self) -> _SequenceCache:
        return _SequenceCache(self.cache_residues)

    def clear_cache(self) -> None:
        """Forget the encoded sequences (for timing; results do not depend on the cache)."""
        self.__dict__.pop("_cache", None)

    def sides(self, seq: str) -> _Sides:
        """A sequence's residue indices and, with an encoder, its encoded features (cached)."""
        return self.sides_many([seq])[0]

    def sides_many(self, seqs: list) -> list:
        """:meth:`sides` of several sequences, a sequence that recurs among them looked up
        (and encoded) once."""
        if self.encoder is None:
            return [_Sides(self.encode(seq)) for seq in seqs]
        distinct = list(dict.fromkeys(seqs))
        by_seq = dict(zip(distinct, self._cache.get_many(distinct, lambda seq: self.encoder.sides(self.encode(seq)))))
        return [by_seq[seq] for seq in seqs]

    def scores(self, a: np.ndarray | _Sides, b: np.ndarray | _Sides) -> np.ndarray:
        """Augmented scores ``[m + 1, n + 1]`` / eps for a query and a target: residue indices
        ``[m]``, ``[n]`` (for a model without an encoder) or :meth:`sides`."""
        sa = a if isinstance(a, _Sides) else self._index_sides(a)
        sb = b if isinstance(b, _Sides) else self._index_sides(b)
        ax, bx = self._padded(sa.idx), self._padded(sb.idx)
        m, n = len(sa.idx), len(sb.idx)
        S = np.empty((m + 1, n + 1))
        if self.base is not None:
            self._triangular_scores(ax, bx, S)
        else:
            self._window_scores(ax, bx, S)
        if self.encoder is not None:
            rq = sa.rq / self.eps
            rows = max(1, _TILE // n)  # in row tiles: no plan-sized temporary
            for r0 in range(0, m, rows):
                r1 = min(m, r0 + rows)
                S[r0:r1, :n] += rq[r0:r1] @ sb.rk.T
        S[:m, n], S[m, :n], S[m, n] = self._edge_scores(sa, sb, ax, bx)
        return S

    def _edge_scores(self, sa: _Sides, sb: _Sides, ax: np.ndarray, bx: np.ndarray) -> tuple:
        """The dustbin column ``[m]``, the dustbin row ``[n]`` and the corner of the augmented
        scores, divided by eps (``ax``, ``bx``: the padded residue indices)."""
        K = self.window
        m, n = len(sa.idx), len(sb.idx)
        if self._dustbin_scores:
            offsets = np.arange(2 * K + 1)
            win_a = ax[np.arange(m)[:, None] + offsets]  # [m, 2K + 1]
            win_b = bx[np.arange(n)[:, None] + offsets]
            col = self.to_kdb[offsets, win_a].sum(1)
            row = self.from_qdb[offsets, win_b].sum(1)
        else:
            col, row = np.zeros(m), np.zeros(n)
        if self.encoder is not None:
            col += sa.rq @ self.kdb_res
            row += sb.rk @ self.qdb_res
            if sa.gq is not None:
                col += self.kdb_gap * sa.gq
                row += self.qdb_gap * sb.gk
        return col / self.eps, row / self.eps, self.corner / self.eps

    def _block_scores(self, sa: _Sides, sb: _Sides, ax: np.ndarray, bx: np.ndarray, rows: tuple, cols: tuple) -> np.ndarray:
        """The real scores / eps of query rows ``rows = (r0, r1)`` against target columns
        ``cols = (c0, c1)``: the same numbers as that block of :meth:`scores` (the window's
        filters read only the residues around the block)."""
        (r0, r1), (c0, c1) = rows, cols
        K = self.window
        T = np.empty((r1 - r0 + 1, c1 - c0 + 1))
        block_a, block_b = ax[r0 : r1 + 2 * K], bx[c0 : c1 + 2 * K]
        if self.base is not None:
            self._triangular_scores(block_a, block_b, T)
        else:
            self._window_scores(block_a, block_b, T)
        out = T[:-1, :-1]
        if self.encoder is not None:
            out += (sa.rq[r0:r1] / self.eps) @ sb.rk[c0:c1].T
        return out

    def _index_sides(self, idx: np.ndarray) -> _Sides:
        if self.encoder is not None:
            return self.encoder.sides(np.asarray(idx))
        return _Sides(np.asarray(idx))

    def _triangular_scores(self, ax: np.ndarray, bx: np.ndarray, S: np.ndarray) -> None:
        """``S[:m, :n]`` of a triangular window, divided by eps."""
        K = self.window
        m, n = S.shape[0] - 1, S.shape[1] - 1
        C = n + 2 * K
        rows = max(64, _TILE // C)  # query rows per tile: the filters' temporaries stay small
        for r0 in range(0, m, rows):
            r1 = min(m, r0 + rows)
            # [r1 - r0 + 2K, C]: base[a[p], b[q]] / ((K + 1) eps) for the tile's windows
            pairs = np.take(self._scaled_base[ax[r0 : r1 + 2 * K]], bx, axis=1)
            # triangular weights (K + 1 - |k|) / (K + 1) = (box * box) / (K + 1), box of width
            # K + 1, both along the diagonals: S[r0 + i, j] = tri[i * C + j] (window at [i, j])
            tri = _diag_box_flat(_diag_box_flat(pairs.ravel(), C + 1, K + 1), C + 1, K + 1)
            assert len(tri) == (r1 - r0) * C - 2 * K
            S[r0:r1, :n] = np.lib.stride_tricks.as_strided(tri, shape=(r1 - r0, n),
                                                           strides=(C * tri.itemsize, tri.itemsize))

    def _window_scores(self, ax: np.ndarray, bx: np.ndarray, S: np.ndarray) -> None:
        """``S[:m, :n] = sum_k sub[k][a[i+k], b[j+k]] / eps``, offset by offset in row tiles."""
        m, n = S.shape[0] - 1, S.shape[1] - 1
        tables = [self._scaled_sub[k][:, bx[k : k + n]] for k in range(2 * self.window + 1)]  # [A + 1, n] per offset
        rows = max(1, _TILE // n)
        buf = np.empty((min(rows, m), n))
        for r0 in range(0, m, rows):
            r1 = min(m, r0 + rows)
            out = S[r0:r1, :n]
            np.take(tables[0], ax[r0:r1], axis=0, out=out)
            part = buf[: r1 - r0]
            for k in range(1, len(tables)):
                np.take(tables[k], ax[r0 + k : r1 + k], axis=0, out=part)
                out += part

    @functools.cached_property
    def _scaled_base(self) -> np.ndarray:
        return self.base / ((self.window + 1) * self.eps)

    @functools.cached_property
    def _scaled_sub(self) -> np.ndarray:
        return self.sub / self.eps

    @functools.cached_property
    def _dustbin_scores(self) -> bool:
        return bool(self.to_kdb.any() or self.from_qdb.any())

    def plan(self, query: str, target: str) -> np.ndarray:
        """The decoded plan ``[m + 1, n + 1]`` of one pair (see the module docstring)."""
        return self.solve(query, target).plan()

    def solve(self, query: str, target: str) -> Solution:
        """The operator's final duals for one pair (see :class:`Solution`)."""
        if not query or not target:
            raise ValueError(f"cannot align an empty sequence (query {len(query)}, target {len(target)} residues)")
        return self.solve_sides(*self.sides_many([query, target]))

    def solve_sides(self, query: _Sides, target: _Sides) -> Solution:
        """:meth:`solve` from :meth:`sides` (non-empty sequences)."""
        return self.solve_scores(self.scores(query, target))

    def solve_scores(self, S: np.ndarray) -> Solution:
        """:meth:`solve` from the augmented scores ``S [m + 1, n + 1]`` (overwritten): in
        scaling form when they span at most :data:`MAX_SPREAD`, else in the log domain."""
        m, n = S.shape[0] - 1, S.shape[1] - 1
        a = np.ones(m + 1)
        b = np.ones(n + 1)
        if self.length_mass:
            a[m], b[n] = n, m
        top = S.max()
        spread = top - S.min()  # (the band's own spread is at most this)
        if self.band is not None and self.band < max(m, n) - 1:
            i, j = np.ogrid[:m, :n]
            S[:m, :n][np.abs(i - j) > self.band] = -np.inf
        S -= top
        if not spread <= MAX_SPREAD:
            return _log_domain_solve(S, np.log(a), np.log(b), self.n_steps)
        Kx = np.exp(S, out=S)  # exp(-inf) = 0 outside the band
        y = np.ones(n + 1)
        x = a
        for _ in range(self.n_steps):  # T centred base steps + R tail steps; centring is a gauge
            x = a / (Kx @ y)
            y = b / (x @ Kx)
        return Solution(Kx, x, y)


    def solve_band(self, query: _Sides, target: _Sides, lo, hi) -> BandSolution:
        """The plan of one pair on the corridor ``lo[i] <= j < hi[i]`` (see
        :mod:`sinkalign.align.band`; ``query``, ``target`` from :meth:`sides`): the dense
        solve's iteration with the cells outside the corridor at score ``-inf`` (the dustbin
        row and column kept whole), in ``O(nnz)`` memory and time per step. Intersected with
        the model's own band when it has one."""
        m, n = len(query.idx), len(target.idx)
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        if lo.shape != (m,) or hi.shape != (m,):
            raise ValueError(f"lo and hi must be [{m}], got {lo.shape} and {hi.shape}")
        if self.band is not None:  # the model's |i - j| <= band
            i = np.arange(m)
            lo = np.clip(np.maximum(lo, i - self.band), 0, n)
            hi = np.maximum(np.clip(np.minimum(hi, i + self.band + 1), 0, n), lo)
        band = BandMatrix(lo, hi, np.empty(int((hi - lo).sum())), n)
        ax, bx = self._padded(query.idx), self._padded(target.idx)
        ptr, rows, cols = band.indptr, band.rows, band.cols
        for r0 in range(0, m, _BAND_ROWS):
            r1 = min(m, r0 + _BAND_ROWS)
            c0, c1 = int(lo[r0]), int(hi[r1 - 1])
            s, e = ptr[r0], ptr[r1]
            if e > s:
                block = self._block_scores(query, target, ax, bx, (r0, r1), (c0, c1))
                band.data[s:e] = block[rows[s:e] - r0, cols[s:e] - c0]
        col, row, corner = self._edge_scores(query, target, ax, bx)
        a, b = np.ones(m + 1), np.ones(n + 1)
        if self.length_mass:
            a[m], b[n] = n, m
        parts = [band.data, col, row, [corner]]
        top = max(float(np.max(p)) for p in parts if len(p))
        spread = top - min(float(np.min(p)) for p in parts if len(p))
        if not spread <= MAX_SPREAD:
            return _band_log_domain_solve(band, col, row, corner, np.log(a), np.log(b), self.n_steps)
        Kb = band.with_data(np.exp(band.data - top))
        kc, kr, kk = np.exp(col - top), np.exp(row - top), math.exp(corner - top)
        K = Kb.to_csr()
        KT = K.T.tocsr()
        y = np.ones(n + 1)
        x = a
        for _ in range(self.n_steps):  # as solve_scores, the corridor's cells and the dustbins apart
            x = a / np.append(K @ y[:n] + kc * y[n], kr @ y[:n] + kk * y[n])
            y = b / np.append(KT @ x[:m] + kr * x[m], kc @ x[:m] + kk * x[m])
        return BandSolution(Kb, kc, kr, kk, x, y)


def _band_log_domain_solve(band: BandMatrix, col, row, corner: float, log_a, log_b, n_steps: int) -> BandSolution:
    """:func:`_log_domain_solve` on a corridor: the plan itself as ``K`` (``x = y = 1``)."""
    m, n = band.shape
    rows, cols = band.rows, band.cols
    full = band.hi > band.lo  # rows with band cells; each one's cells start at its indptr
    starts = band.indptr[:-1][full]

    def row_lse(vals, edge):  # log-sum-exp of each row's band cells and its dustbin entry
        top = edge.copy()
        if band.nnz:
            top[full] = np.maximum(top[full], np.maximum.reduceat(vals, starts))
        sums = np.exp(edge - top)
        if band.nnz:
            sums[full] += np.add.reduceat(np.exp(vals - top[rows]), starts)
        return top + np.log(sums)

    def col_lse(vals, edge):  # of each column's band cells and its dustbin entry
        top = edge.copy()
        np.maximum.at(top, cols, vals)
        return top + np.log(np.exp(edge - top) + np.bincount(cols, np.exp(vals - top[cols]), minlength=n))

    u, v = np.zeros(m + 1), np.zeros(n + 1)
    S = band.data
    for _ in range(n_steps):
        u[:m] = log_a[:m] - row_lse(S + v[cols], col + v[n])
        u[m] = log_a[m] - np.logaddexp.reduce(np.append(row + v[:n], corner + v[n]))
        v[:n] = log_b[:n] - col_lse(S + u[rows], row + u[m])
        v[n] = log_b[n] - np.logaddexp.reduce(np.append(col + u[:m], corner + u[m]))
    P = band.with_data(np.exp(S + u[rows] + v[cols]))
    return BandSolution(P, np.exp(col + u[:m] + v[n]), np.exp(row + u[m] + v[:n]), math.exp(corner + u[m] + v[n]),
                        np.ones(m + 1), np.ones(n + 1))


def _log_domain_solve(S: np.ndarray, log_a: np.ndarray, log_b: np.ndarray, n_steps: int) -> Solution:
    """The operator's steps on log duals (``u = log a - LSE_j(S + v)``, then ``v``), for scores
    too spread out for the scaling form; returns the plan itself as ``K`` (``x = y = 1``)."""
    from scipy.special import logsumexp

    v = np.zeros(S.shape[1])
    u = np.zeros(S.shape[0])
    for _ in range(n_steps):
        u = log_a - logsumexp(S + v[None, :], axis=1)
        v = log_b - logsumexp(S + u[:, None], axis=0)
    P = np.exp(S + u[:, None] + v[None, :])
    return Solution(P, np.ones(S.shape[0]), np.ones(S.shape[1]))


@dataclass(frozen=True, eq=False)
class Solution:
    """One pair's final plan ``P = diag(x) K diag(y)`` (``K [m + 1, n + 1]``, the last row
    and column the dustbins), with what the aligner reads off it."""

    K: np.ndarray
    x: np.ndarray
    y: np.ndarray

    def plan(self) -> np.ndarray:
        """The decoded plan ``[m + 1, n + 1]``: the real block, each query residue's dustbin
        mass in the last column, ``1 - sum_i P[i, j]`` in the last row, 0 in the corner
        (:func:`sinkalign.align.model.pair_plan`)."""
        m, n = self.K.shape[0] - 1, self.K.shape[1] - 1
        P = self.K * self.x[:, None]
        P *= self.y[None, :]
        P[m, :n] = np.clip(1.0 - P[:m, :n].sum(0), 0.0, None)
        P[m, n] = 0.0
        return P

    def posteriors(self) -> Posteriors:
        """:func:`~sinkalign.align.decode.plan_posteriors` of :meth:`plan` (``normalise="row"``)
        without forming the plan: row and column masses are the scaling products
        ``x_i (K y)_i`` and ``y_j (x^T K)_j``, and the match posterior one rescaling of
        ``K``. Equal to the posteriors of the plan up to float64 rounding."""
        K, x, y = self.K, self.x, self.y
        m, n = K.shape[0] - 1, K.shape[1] - 1
        r = x[:m] * (K[:m] @ y)  # query residue masses, dustbin column included
        col = y[:n] * (x[:m] @ K[:m, :n])  # target residues' mass over the real rows
        td = np.clip(1.0 - col, 0.0, None)
        c = col + td
        row_scale = x[:m] / np.sqrt(r)
        match = K[:m, :n] * row_scale[:, None]
        match *= (y[:n] / np.sqrt(c))[None, :]
        np.minimum(match, 1.0, out=match)
        return Posteriors(match, x[:m] * K[:m, n] * y[n] / r, td / c)


@dataclass(frozen=True, eq=False)
class BandSolution:
    """One pair's final plan on a corridor: ``P = diag(x) K diag(y)`` with ``K`` the
    corridor's cells (:class:`~sinkalign.align.band.BandMatrix`), ``kc [m]`` the dustbin
    column, ``kr [n]`` the dustbin row and ``kk`` the corner (as :class:`Solution`)."""

    K: BandMatrix
    kc: np.ndarray
    kr: np.ndarray
    kk: float
    x: np.ndarray
    y: np.ndarray

    def plan(self) -> tuple[BandMatrix, np.ndarray, np.ndarray]:
        """The decoded plan as :meth:`Solution.plan` gives it, in parts: the real block on the
        corridor, each query residue's dustbin mass ``[m]`` and ``1 - sum_i P[i, j]`` ``[n]``."""
        m, n = self.K.shape
        real = self.K.with_data(self.K.data * self.x[self.K.rows] * self.y[self.K.cols])
        col_sums = np.bincount(real.cols, real.data, minlength=n)
        return real, self.x[:m] * self.kc * self.y[n], np.clip(1.0 - col_sums, 0.0, None)

    def dense_plan(self) -> np.ndarray:
        """:meth:`plan` as the dense ``[m + 1, n + 1]`` matrix of :meth:`Solution.plan` (0
        outside the corridor), e.g. to write it out."""
        real, query_dustbin, target_dustbin = self.plan()
        m, n = real.shape
        P = np.zeros((m + 1, n + 1))
        P[real.rows, real.cols] = real.data
        P[:m, n] = query_dustbin
        P[m, :n] = target_dustbin
        return P

    def posteriors(self) -> BandPosteriors:
        """:meth:`Solution.posteriors` on the corridor (the match posteriors 0 outside it)."""
        K, x, y = self.K, self.x, self.y
        m, n = K.shape
        Kc = K.to_csr()
        r = x[:m] * (Kc @ y[:n] + self.kc * y[n])
        col = y[:n] * (Kc.T @ x[:m])
        td = np.clip(1.0 - col, 0.0, None)
        c = col + td
        match = K.data * (x[:m] / np.sqrt(r))[K.rows]
        match *= (y[:n] / np.sqrt(c))[K.cols]
        np.minimum(match, 1.0, out=match)
        return BandPosteriors(K.with_data(match), x[:m] * self.kc * y[n] / r, td / c)
