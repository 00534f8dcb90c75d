"""The optimal-transport aligner: features -> Q/K/V -> dustbin Sinkhorn -> transport plan.

Scores. A pair (query a, target b) is scored by ``S = Q K^T / eps`` with two parts
concatenated along the feature axis:

* a *diagonal substitution* part: ``Q_sub[i] = concat_k onehot(a[i+k])`` and
  ``K_sub[j] = concat_k M_k onehot(b[j+k])`` for offsets ``k = -K..K``, so that
  ``S_sub[i, j] = sum_k M_k[a[i+k], b[j+k]]``: a learned, position-specific substitution
  score summed along the diagonal. Initialised to BLOSUM62 / 16 with triangular weights
  ``1 - |k| / (K + 1)`` (protein) or +2/-3 / 16 (DNA): the hand-made score that already
  matches Needleman-Wunsch on this data (``../design/sinkhorn_tail.md``); per-residue scores
  alone lose half of the accuracy because transport has no sense of order.
* a *learned context* part from the embedder's features (built-in or ESM-2): a
  position-wise projection plus residual dilated 1-D convolutions, then linear maps to Q
  and K (initialised small, so training starts from the substitution score).

Gaps. A learned dustbin token per side (the band-preserving variant, dustbin mass = the
other side's length by default) takes the mass of residues that align to nothing.

Symmetry. With ``symmetric`` (every shipped model) a pair's scores are the mean of its two
directions' of the same parameters (:func:`queries_keys`), and
:class:`~sinkalign.align.aligner.Aligner` solves each pair in one order of its two sequences, so
that aligning b to a gives exactly the transpose of aligning a to b.

Outputs. The operator returns ``O = P V`` with the exact tail-refinement gradient. With
``V = [I | X_b]`` (identity over target positions and the dustbin, then target features),
``O`` holds each query row of the plan, including its dustbin column, and the
transported target features, so every loss below is a function of ``O``:

* ``ce`` (sparse cross-entropy): ``-log P[i, t(i)]`` for each valid query residue, where
  ``t(i)`` is its reference partner or the dustbin, and likewise ``-log P[s(j), j]`` for each
  target residue (the target-side dustbin mass is ``1 - sum_i P[i, j]``, exact because the
  last half-step is a column step). Averaged over residues. Without dustbins only aligned
  residues contribute.
* ``recon`` (reconstruction): ``|| sum_j P[i, j] x_b[j] + P[i, db] v_db - x_a[i] ||^2``
  averaged over query residues: the target, transported onto the query, should reproduce
  the query's features.
* ``mono`` (monotonicity): with ``c_i`` the expected target position of query ``i``
  (``sum_j j P[i, j] / sum_j P[i, j]``), ``mean_i relu(c_i - c_{i+1}) / Lk``: the expected
  alignment path should not run backwards.
* ``f1`` (soft F1, off by default): ``1 - 2 TP / (R + S)`` over the batch's query residues with
  a known reference state, where ``TP = sum_i P[i, t(i)]`` over those aligned in the reference,
  ``R`` their number and ``S = sum_i sum_j P[i, j]`` the expected number of pairs the plan
  aligns them to: the F1 of the plan read as expected counts, bounded where the cross-entropy
  is not. It still rewards sharper plans, and fine-tuning the shipped model with it lowered
  MEA F1 as the cross-entropy did (BENCHMARKS.md, "Fine-tuning the shipped model").
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sinkalign.errors import InputError
from sinkalign.sinkhorn import DustbinConfig, SinkhornConfig
from sinkalign.sinkhorn import core as sk_core
from sinkalign.sinkhorn.checks import check_int
from sinkalign.sinkhorn.dustbin import augment

__all__ = [
    "ALPHABETS",
    "PRESETS",
    "AlignerConfig",
    "Batch",
    "encode_residues",
    "init_params",
    "shrink_params",
    "forward",
    "loss_fn",
    "loss_from_outputs",
    "make_batch",
    "pair_plan",
    "plans",
    "preset",
]

ALPHABETS = {"protein": "ARNDCQEGHILKMFPSTWYVX", "dna": "ACGTN"}
LOSSES = ("ce", "recon", "mono", "f1")
# what the MEA identity tie-break may do with gaps (AlignerConfig.decode_identity_gaps)
IDENTITY_GAPS = ("add", "move")


# Settings of the operator's own configs that an AlignerConfig takes by their flat names (in
# presets, --model-option KEY=VALUE, replace() and the checkpoints written before the configs
# were nested): each is read from and written to ``sinkhorn`` or ``dustbin``, never stored twice.
SOLVER_SETTINGS = ("eps", "n_iters", "tail", "band", "backward", "backend")
DUSTBIN_SETTINGS = ("dustbin", "dustbin_mass")  # "banded" | "paper" | "none"; "unit" | "length"


@dataclass(frozen=True, kw_only=True)
class AlignerConfig:
    """Architecture, solver and loss settings of the aligner (JSON round-trippable).

    The operator is configured by the operator's own configs: ``sinkhorn``
    (:class:`~sinkalign.sinkhorn.SinkhornConfig`: eps, n_iters, tail, band, backward, backend)
    and ``dustbin`` (:class:`~sinkalign.sinkhorn.DustbinConfig`, or ``None`` for a balanced
    problem without dustbins). :meth:`create`, :meth:`replace` and :meth:`from_dict` also take
    their settings by flat name (``eps=6``, ``dustbin="paper"``, ``dustbin_mass="unit"``).
    """

    alphabet: str = "protein"
    embedder: dict = field(default_factory=lambda: {"name": "builtin"})
    feature_dim: int = 0
    window: int = 8
    ctx_dim: int = 32
    ctx_layers: int = 2
    ctx_kernel: int = 5
    qk_ctx_dim: int = 32
    sinkhorn: SinkhornConfig = field(default_factory=SinkhornConfig)
    dustbin: DustbinConfig | None = field(default_factory=DustbinConfig)
    losses: dict = field(default_factory=lambda: {"ce": 1.0, "recon": 0.0, "mono": 0.1})
    decode_gap_weight: float = 0.0
    # MEA tie-break towards identical residues: tau * [a_i == b_j] added to the decoding's gain
    # (sinkalign.align.decode.identity_gain); 0 = off
    decode_identity_weight: float = 0.0
    # ... applied only to the pairs whose first decoding is at least this identical (0: to all)
    decode_identity_min: float = 0.0
    # ... "add": it may open gaps the plain decoding lacks; "move": it only moves the plain
    # decoding's gaps (sinkalign.align.decode.keep_gaps)
    decode_identity_gaps: str = "add"
    # ... and, moving gaps only, for the pairs at least this identical below decode_identity_min (0: none)
    decode_identity_move_min: float = 0.0
    # built-in residue encoder (no embedder, no pretrained weights): residual dilated 1-D
    # convolutions over one-hot + BLOSUM62-row features; 0 channels = off
    res_ctx_dim: int = 0
    res_ctx_layers: int = 4
    res_ctx_kernel: int = 5
    res_qk_dim: int = 32
    gap_head: bool = False  # position-specific gap (dustbin) scores from the residue encoder
    # score each pair as the mean of its two directions: aligning b to a is then aligning a to b
    # transposed (see queries_keys); the parameters are those of the one-directional model
    symmetric: bool = False

    def __post_init__(self) -> None:
        # every check is an InputError (a ValueError) whatever the value's type: settings come
        # from users (`sinkalign train --model-option KEY=VALUE` parses any JSON value)
        if not isinstance(self.alphabet, str) or self.alphabet not in ALPHABETS:
            raise InputError(f"alphabet={self.alphabet!r} is not one of {tuple(ALPHABETS)}")
        if not isinstance(self.sinkhorn, SinkhornConfig):
            raise InputError(f"sinkhorn must be a SinkhornConfig, got {type(self.sinkhorn).__name__}")
        if self.dustbin is not None and not isinstance(self.dustbin, DustbinConfig):
            raise InputError(f"dustbin must be a DustbinConfig or None, got {type(self.dustbin).__name__}")
        for name in ("feature_dim", "window", "res_ctx_dim", "res_qk_dim"):
            check_int(name, getattr(self, name), 0)
        if self.feature_dim:
            check_int("ctx_dim", self.ctx_dim, 1)
            check_int("ctx_layers", self.ctx_layers, 0)
            check_int("ctx_kernel", self.ctx_kernel, 1)
            check_int("qk_ctx_dim", self.qk_ctx_dim, 1)
        for name in ("decode_gap_weight", "decode_identity_weight", "decode_identity_min", "decode_identity_move_min"):
            gw = getattr(self, name)
            if isinstance(gw, bool) or not isinstance(gw, numbers.Real) or not math.isfinite(gw) or gw < 0:
                raise InputError(f"{name}={gw!r} must be a finite number >= 0")
        for name in ("decode_identity_min", "decode_identity_move_min"):
            if getattr(self, name) > 1:
                raise InputError(f"{name}={getattr(self, name)!r} must be at most 1 (a share)")
        if not isinstance(self.decode_identity_gaps, str) or self.decode_identity_gaps not in IDENTITY_GAPS:
            raise InputError(f"decode_identity_gaps={self.decode_identity_gaps!r} is not one of {IDENTITY_GAPS}")
        if self.res_ctx_dim:
            check_int("res_ctx_layers", self.res_ctx_layers, 0)
            check_int("res_ctx_kernel", self.res_ctx_kernel, 1)
            check_int("res_qk_dim", self.res_qk_dim, 1)
        if not isinstance(self.symmetric, bool):
            raise InputError(f"symmetric={self.symmetric!r} must be true or false")
        if self.gap_head and not (self.res_ctx_dim and self.dustbin is not None):
            raise InputError("gap_head needs the residue encoder (res_ctx_dim > 0) and dustbins")
        if not isinstance(self.losses, dict) or not all(
            isinstance(w, numbers.Real) and not isinstance(w, bool) for w in self.losses.values()
        ):
            raise InputError(f"losses={self.losses!r} must map loss terms {LOSSES} to numbers")
        unknown = set(self.losses) - set(LOSSES)
        if unknown:
            raise InputError(f"unknown loss terms {sorted(unknown)}; valid: {LOSSES}")
        if not any(w > 0 for w in self.losses.values()):
            raise InputError(f"losses={self.losses} has no positive weight")
        if self.sinkhorn.backend == "pallas":  # importing the kernels registers them as the operator's backend
            import sinkalign.kernels.pallas  # noqa: F401

    # ------------------------------------------------------------------ flat settings
    @classmethod
    def setting_names(cls) -> list[str]:
        """Every name :meth:`create` / :meth:`replace` take (the nested configs by their settings)."""
        own = [n for n in cls.__dataclass_fields__ if n not in ("sinkhorn", "dustbin")]
        return sorted(own + list(SOLVER_SETTINGS) + list(DUSTBIN_SETTINGS))

    @classmethod
    def create(cls, **settings) -> AlignerConfig:
        """An AlignerConfig from field values and/or flat operator settings (``eps=6``,
        ``band=64``, ``dustbin="paper"``, ``dustbin_mass="unit"``, ``backend="pallas"``)."""
        return cls()._with(settings)

    def replace(self, **changes) -> AlignerConfig:
        """A copy with ``changes`` applied (fields, or flat operator settings as in :meth:`create`)."""
        return self._with(changes)

    def _with(self, changes: dict) -> AlignerConfig:
        unknown = sorted(set(changes) - set(self.setting_names()) - {"sinkhorn", "dustbin"})
        if unknown:
            raise InputError(f"unknown AlignerConfig settings {unknown}; valid: {self.setting_names()}")
        db, mass = changes.get("dustbin"), changes.get("dustbin_mass")
        if not (db is None or isinstance(db, (str, DustbinConfig))):
            raise InputError(f"dustbin={db!r} is not one of ('banded', 'paper', 'none')")
        if not (mass is None or isinstance(mass, str)):
            raise InputError(f"dustbin_mass={mass!r} is not one of ('unit', 'length')")
        # dustbin="paper" is the flat setting; dustbin=DustbinConfig(...) or None the field itself
        flat = set(SOLVER_SETTINGS) | {"dustbin_mass"} | ({"dustbin"} if isinstance(changes.get("dustbin"), str) else set())
        own = {k: v for k, v in changes.items() if k not in flat}
        solver = {k: changes[k] for k in SOLVER_SETTINGS if k in changes}
        sinkhorn = own.pop("sinkhorn", self.sinkhorn)
        if solver:
            sinkhorn = sinkhorn.replace(**solver)
        dustbin = own.pop("dustbin", self.dustbin)
        flat_db = {k: changes[k] for k in DUSTBIN_SETTINGS if k in changes and isinstance(changes[k], str)}
        if flat_db:
            variant = flat_db.get("dustbin", "none" if dustbin is None else dustbin.variant)
            if variant not in ("banded", "paper", "none"):
                raise InputError(f"dustbin={variant!r} is not one of ('banded', 'paper', 'none')")
            if variant == "none":
                dustbin = None
            else:
                mass = flat_db.get("dustbin_mass", "length" if dustbin is None else dustbin.mass)
                base = dustbin or DustbinConfig()
                dustbin = replace(base, variant=variant, mass="unit" if variant == "paper" else mass)
        return replace(self, sinkhorn=sinkhorn, dustbin=dustbin, **own)

    def differences(self, other: AlignerConfig) -> list[str]:
        """The settings in which ``other`` differs from this config, as ``name: mine -> other's``
        lines, by the flat names of :meth:`setting_names` (``eps``, not ``sinkhorn.eps``)."""
        def flat(cfg: AlignerConfig) -> dict:
            d = cfg.to_dict()
            solver, db = d.pop("sinkhorn"), d.pop("dustbin")
            d.update(solver)
            d["dustbin"] = "none" if db is None else db["variant"]
            d.update({f"dustbin_{k}": v for k, v in (db or {}).items() if k != "variant"})
            return d

        a, b = flat(self), flat(other)
        return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]

    # ------------------------------------------------------------------ derived
    @property
    def dustbin_variant(self) -> str:
        """``banded``, ``paper`` or ``none``."""
        return "none" if self.dustbin is None else self.dustbin.variant

    @property
    def n_symbols(self) -> int:
        return len(ALPHABETS[self.alphabet])

    @property
    def sub_dim(self) -> int:
        return (2 * self.window + 1) * self.n_symbols

    @property
    def qk_dim(self) -> int:
        return (self.sub_dim + (self.qk_ctx_dim if self.feature_dim else 0)
                + (self.res_qk_dim if self.res_ctx_dim else 0) + (2 if self.gap_head else 0))

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        """JSON form: the nested configs as dicts (``dustbin``: null without dustbins)."""
        return asdict(self)  # asdict recurses into the nested dataclasses

    @classmethod
    def from_dict(cls, data: dict) -> AlignerConfig:
        """Inverse of :meth:`to_dict`; also reads the flat form that checkpoints written before the
        nesting hold (``eps``, ..., ``impl`` for ``backend``, ``dustbin: "banded"``, ``dustbin_mass``)."""
        data = dict(data)
        if "impl" in data:  # the flat form's name of the operator backend
            data["backend"] = data.pop("impl")
        nested = {}
        if isinstance(data.get("sinkhorn"), dict):
            nested["sinkhorn"] = SinkhornConfig(**data.pop("sinkhorn"))
        if "dustbin" in data and (data["dustbin"] is None or isinstance(data["dustbin"], dict)):
            db = data.pop("dustbin")
            nested["dustbin"] = None if db is None else DustbinConfig(**db)
        known = set(cls.setting_names())
        unknown = set(data) - known
        if unknown:
            raise InputError(f"unknown AlignerConfig keys {sorted(unknown)}")
        return cls(**nested)._with(data)


# The paper's four screen configurations, and the shipped default.
PRESETS: dict[str, dict] = {
    "k2_eps1": {"tail": 2, "eps": 1.0, "backward": "one_reference", "dustbin": "none",
                "losses": {"recon": 1.0}},
    "k4_eps1": {"tail": 4, "eps": 1.0, "backward": "staircase", "dustbin": "none", "losses": {"recon": 1.0}},
    "muot_dustbin_mono": {"tail": 2, "eps": 1.0, "dustbin": "paper", "losses": {"recon": 1.0, "mono": 1.0}},
    "muot_dustbin_hybrid": {"tail": 2, "eps": 1.0, "dustbin": "paper",
                            "losses": {"recon": 1.0, "ce": 1.0, "mono": 1.0}},
    # the shipped model's settings: window and eps fitted on the Pfam training families
    "default": {"tail": 2, "eps": 6.0, "window": 16, "dustbin": "banded", "dustbin_mass": "length",
                "losses": {"ce": 1.0, "mono": 0.1}},
}


def preset(name: str, **overrides) -> AlignerConfig:
    """An :class:`AlignerConfig` from a named preset (see ``PRESETS``) plus overrides.

    An unknown preset or setting, or a bad setting value, is an :class:`~sinkalign.errors.InputError`.
    """
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; valid: {sorted(PRESETS)}")
    return AlignerConfig.create(**{**PRESETS[name], **overrides})


# --------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------
def _substitution_init(alphabet: str) -> np.ndarray:
    symbols = ALPHABETS[alphabet]
    if alphabet == "protein":
        from Bio.Align import substitution_matrices

        blosum = substitution_matrices.load("BLOSUM62")
        m = np.array([[blosum[a, b] for b in symbols] for a in symbols], dtype=np.float64)
    else:
        m = np.where(np.eye(len(symbols), dtype=bool), 2.0, -3.0)
        m[-1, :] = m[:, -1] = 0.0  # N matches nothing in particular
    return m / 16.0


def init_params(config: AlignerConfig, seed: int = 0, *, substitution: np.ndarray | None = None) -> dict:
    """Initial parameters: BLOSUM62-diagonal substitution, small learned context part.

    ``substitution`` (``[A, A]`` over ``ALPHABETS[config.alphabet]``) replaces the default
    per-residue score (BLOSUM62 / 16 or +2/-3 / 16); the triangular diagonal weights apply
    to it the same way.
    """
    rng = np.random.default_rng(seed)
    K = config.window
    w = 1.0 - np.abs(np.arange(-K, K + 1)) / (K + 1)
    base = _substitution_init(config.alphabet) if substitution is None else np.asarray(substitution, np.float64)
    if base.shape != (config.n_symbols, config.n_symbols):
        raise ValueError(f"substitution has shape {base.shape}, expected {(config.n_symbols,) * 2}")
    sub = w[:, None, None] * base[None]
    params = {"sub": sub.astype(np.float32)}
    if config.feature_dim:
        C, F = config.ctx_dim, config.feature_dim
        params["ctx_in"] = (rng.normal(size=(F, C)) / math.sqrt(F)).astype(np.float32)
        params["ctx_conv"] = (rng.normal(size=(config.ctx_layers, config.ctx_kernel, C, C))
                              / math.sqrt(C * config.ctx_kernel)).astype(np.float32)
        params["ctx_scale"] = np.ones((config.ctx_layers, C), np.float32)
        params["wq"] = (0.01 * rng.normal(size=(C, config.qk_ctx_dim))).astype(np.float32)
        params["wk"] = (0.01 * rng.normal(size=(C, config.qk_ctx_dim))).astype(np.float32)
    if config.res_ctx_dim:
        # the residual pair score (h_a wq)(h_b wk)^T starts at 0 (wk = 0): step 0 is the
        # substitution model, and wk still gets a gradient through wq
        C, F, k = config.res_ctx_dim, 2 * config.n_symbols, config.res_ctx_kernel
        params["res_in"] = (rng.normal(size=(F, C)) / math.sqrt(F)).astype(np.float32)
        params["res_conv"] = (rng.normal(size=(config.res_ctx_layers, k, C, C)) / math.sqrt(C * k)).astype(np.float32)
        params["res_scale"] = np.ones((config.res_ctx_layers, C), np.float32)
        params["res_wq"] = (rng.normal(size=(C, config.res_qk_dim)) / math.sqrt(C)).astype(np.float32)
        params["res_wk"] = np.zeros((C, config.res_qk_dim), np.float32)
        if config.gap_head:
            params["gap_w"] = np.zeros((C, 2), np.float32)  # query-side, target-side gap score
            params["gap_b"] = np.zeros((2,), np.float32)
    if config.dustbin is not None:
        params["q_dustbin"] = np.zeros(config.qk_dim, np.float32)
        params["k_dustbin"] = np.zeros(config.qk_dim, np.float32)
        if config.gap_head:  # the last two features carry the gap scores (see queries_keys)
            params["k_dustbin"][-2] = 1.0
            params["q_dustbin"][-1] = 1.0
        params["v_dustbin"] = np.zeros(config.feature_dim, np.float32)
    return jax.tree_util.tree_map(jnp.asarray, params)


SHRINK_KEYS = ("sub", "res_wk", "gap_w", "gap_b", "q_dustbin", "k_dustbin")


def shrink_params(params: dict, config: AlignerConfig, alpha: float, *, seed: int = 0) -> dict:
    """Trained parameters pulled back towards the initialisation: ``init + alpha (trained - init)``
    for the parameters that enter the scores linearly (the substitution window, the residual's
    key map, the gap head and the dustbin tokens); the encoder itself is kept. ``alpha = 0``
    is the initial (shipped BLOSUM-window) model, 1 the trained one; in between the residual
    pair and gap scores are scaled by ``alpha`` exactly."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha} must be in [0, 1]")
    init = init_params(config, seed=seed)
    return {k: (init[k] + alpha * (v - init[k]) if k in SHRINK_KEYS else v) for k, v in params.items()}


# --------------------------------------------------------------------------------------
# batches
# --------------------------------------------------------------------------------------
def encode_residues(seq: str, alphabet: str) -> np.ndarray:
    """Residue indices into ``ALPHABETS[alphabet]``; unknown/ambiguous symbols map to X / N."""
    symbols = ALPHABETS[alphabet]
    table = np.full(256, len(symbols) - 1, np.int32)
    for i, c in enumerate(symbols):
        table[ord(c)] = i
        table[ord(c.lower())] = i
    if alphabet == "dna":
        table[ord("U")] = table[ord("u")] = symbols.index("T")
    return table[np.frombuffer(seq.encode("ascii", "replace"), np.uint8)]


class Batch(NamedTuple):
    """A padded batch of pairs. Shapes: B pairs, query length Lq, target length Lk.

    Attributes:
        a, b: residue indices [B, Lq], [B, Lk] (padding 0, masked).
        xa, xb: embedder features [B, Lq, F], [B, Lk, F] (F may be 0).
        ma, mb: validity masks [B, Lq], [B, Lk].
        ta: reference partner of each query residue [B, Lq]: target index, ``Lk`` for a
            gap (dustbin), -1 for padding or unknown. tb: the same for targets [B, Lk].
    """

    a: np.ndarray
    b: np.ndarray
    xa: np.ndarray
    xb: np.ndarray
    ma: np.ndarray
    mb: np.ndarray
    ta: np.ndarray
    tb: np.ndarray


def make_batch(items, config: AlignerConfig, lq: int, lk: int) -> Batch:
    """Pad ``items`` (each ``(seq_a, seq_b, feats_a | None, feats_b | None, pairs | None)``, optionally
    with a sixth element ``(core_a, core_b)``: per-residue trust masks of a structure-based
    reference, whose untrusted residues get target -1 (no loss)."""
    B, F = len(items), config.feature_dim
    a = np.zeros((B, lq), np.int32)
    b = np.zeros((B, lk), np.int32)
    xa = np.zeros((B, lq, F), np.float32)
    xb = np.zeros((B, lk, F), np.float32)
    ma = np.zeros((B, lq), bool)
    mb = np.zeros((B, lk), bool)
    ta = np.full((B, lq), -1, np.int32)
    tb = np.full((B, lk), -1, np.int32)
    for n, (sa, sb, fa, fb, pairs, *rest) in enumerate(items):
        cores = rest[0] if rest else None
        la, lb = len(sa), len(sb)
        if la > lq or lb > lk:
            raise ValueError(f"pair {n} ({la} x {lb}) does not fit the batch shape {lq} x {lk}")
        a[n, :la] = encode_residues(sa, config.alphabet)
        b[n, :lb] = encode_residues(sb, config.alphabet)
        ma[n, :la] = True
        mb[n, :lb] = True
        if F:
            xa[n, :la] = fa
            xb[n, :lb] = fb
        if pairs is not None:
            pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
            ta[n, :la] = lk
            tb[n, :lb] = lq
            ta[n, pairs[:, 0]] = pairs[:, 1]
            tb[n, pairs[:, 1]] = pairs[:, 0]
            if cores is not None and cores[0] is not None:
                ta[n, :la][~np.asarray(cores[0], bool)] = -1
                tb[n, :lb][~np.asarray(cores[1], bool)] = -1
    return Batch(a, b, xa, xb, ma, mb, ta, tb)


# --------------------------------------------------------------------------------------
# the forward pass
# --------------------------------------------------------------------------------------
def _windows(onehot: jnp.ndarray, K: int) -> jnp.ndarray:
    """[B, L, A] -> [B, L, 2K+1, A]: the one-hots at offsets -K..K (zero beyond the ends)."""
    L = onehot.shape[-2]
    padded = jnp.pad(onehot, ((0, 0), (K, K), (0, 0)))
    return jnp.stack([padded[:, k : k + L] for k in range(2 * K + 1)], axis=-2)


def _context(params, x, mask, config):
    """Position-wise projection + residual dilated convolutions: [B, L, F] -> [B, L, C]."""
    h = jax.nn.gelu(x @ params["ctx_in"]) * mask[..., None]
    for layer in range(config.ctx_layers):
        dil = 2**layer
        kern = params["ctx_conv"][layer]  # [k, C, C]
        y = jax.lax.conv_general_dilated(
            h, kern, window_strides=(1,), padding="SAME", rhs_dilation=(dil,),
            dimension_numbers=("NWC", "WIO", "NWC"),
        )
        y = y / jnp.sqrt(jnp.mean(y * y, -1, keepdims=True) + 1e-6) * params["ctx_scale"][layer]
        h = (h + jax.nn.gelu(y)) * mask[..., None]
    return h


def _residue_features(config: AlignerConfig) -> np.ndarray:
    """[A, 2A] per-symbol input of the residue encoder: one-hot, then the symbol's
    substitution-matrix row (BLOSUM62 / 4 for protein)."""
    A = config.n_symbols
    return np.concatenate([np.eye(A), _substitution_init(config.alphabet) * 4.0], 1).astype(np.float32)


def residue_context(params, idx, mask, config: AlignerConfig):
    """The built-in residue encoder: [B, L] residue indices -> [B, L, C] (residual dilated convs)."""
    x = jnp.asarray(_residue_features(config))[idx] * mask[..., None]
    h = jax.nn.gelu(x @ params["res_in"]) * mask[..., None]
    for layer in range(config.res_ctx_layers):
        y = jax.lax.conv_general_dilated(
            h, params["res_conv"][layer], window_strides=(1,), padding="SAME", rhs_dilation=(2**layer,),
            dimension_numbers=("NWC", "WIO", "NWC"),
        )
        y = y / jnp.sqrt(jnp.mean(y * y, -1, keepdims=True) + 1e-6) * params["res_scale"][layer]
        h = (h + jax.nn.gelu(y)) * mask[..., None]
    return h


def _side(params, idx, mask, x, config: AlignerConfig) -> dict:
    """What one sequence brings to a pair, unscaled: its one-hot windows ``win`` [B, L, (2K+1) A]
    and, per part of the model, its features as a query and as a target (``ctx_q``/``ctx_k``:
    the embedder context, ``res_q``/``res_k``: the residue encoder, ``gap_q``/``gap_k`` [B, L]:
    the gap head's scores with the other side's dustbin)."""
    A, K = config.n_symbols, config.window
    w = _windows(jax.nn.one_hot(idx, A) * mask[..., None], K)  # [B, L, 2K+1, A]
    side = {"win": w.reshape(w.shape[:2] + (-1,))}
    if config.feature_dim:
        h = _context(params, x, mask, config)
        side["ctx_q"], side["ctx_k"] = h @ params["wq"], h @ params["wk"]
    if config.res_ctx_dim:
        r = residue_context(params, idx, mask, config)
        side["res_q"], side["res_k"] = r @ params["res_wq"], r @ params["res_wk"]
        if config.gap_head:
            side["gap_q"] = (r @ params["gap_w"][:, 0] + params["gap_b"][0]) * mask
            side["gap_k"] = (r @ params["gap_w"][:, 1] + params["gap_b"][1]) * mask
    return side


def _window_keys(win, sub):
    """``K_sub[j] = concat_k sub[k] onehot(b[j+k])`` from the one-hot windows ``win`` [B, L, (2K+1) A]."""
    w = win.reshape(win.shape[:2] + sub.shape[:1] + sub.shape[2:])
    return jnp.einsum("blka,kca->blkc", w, sub).reshape(win.shape)


def _window_token(token, sub):
    """The window part of a token folded through ``sub``, so that
    ``_window_keys(win, sub) @ token == win @ _window_token(token, sub)`` without forming the keys."""
    n = sub.shape[0] * sub.shape[2]
    folded = jnp.einsum("kca,kc->ka", sub, jnp.reshape(token[:n], sub.shape[:2])).reshape(-1)
    return jnp.concatenate([folded, token[n:]])


def _one_way(params, side: dict, config: AlignerConfig, *, query: bool, raw_window: bool = False):
    """A side's one-way query (``query=True``, unscaled) or key features: window, embedder
    context, residue encoder, then the two gap features (the query's gap score and 0, or 0 and
    the key's gap score times ``sqrt(qk_dim)``: the dustbin tokens hold 1 in them). With
    ``raw_window`` a key keeps the one-hot window in place of its window keys (to meet a token
    folded by :func:`_window_token`)."""
    parts = [side["win"] if query or raw_window else _window_keys(side["win"], params["sub"])]
    role = "q" if query else "k"
    parts += [side[f"{part}_{role}"] for part in ("ctx", "res") if f"{part}_{role}" in side]
    if "gap_q" in side:
        zero = jnp.zeros_like(side["gap_q"])
        gaps = (side["gap_q"], zero) if query else (zero, side["gap_k"] * math.sqrt(config.qk_dim))
        parts += [g[..., None] for g in gaps]
    return jnp.concatenate(parts, -1)


def symmetric_dim(config: AlignerConfig) -> int:
    """Features of a symmetric model's queries and keys (see :func:`queries_keys`): the
    window, both roles of the embedder and residue-encoder features, and with dustbins three
    more for the dustbin scores."""
    return (config.sub_dim + 2 * (config.qk_ctx_dim if config.feature_dim else 0)
            + 2 * (config.res_qk_dim if config.res_ctx_dim else 0) + (3 if config.dustbin is not None else 0))


def queries_keys(params, batch: Batch, config: AlignerConfig):
    """Q [B, Lq, D] and K [B, Lk, D], pre-scaled so that the operator's S = Q K^T / eps.

    With ``config.symmetric`` the scores are the mean of the two directions' of the same
    parameters, ``S(a, b) / 2 + S(b, a)^T / 2``, so that aligning b to a scores the transpose
    exactly: the window keys use ``(sub[k] + sub[k]^T) / 2``; the embedder and residue-encoder
    scores are ``[q_a | k_a] [k_b | q_b]^T / 2``; and each residue's scores with the other
    side's dustbin (as a query and as a target, averaged) and the dustbins' own score become
    three features that :func:`dustbin_tokens` meet (D = :func:`symmetric_dim`).
    """
    sa = _side(params, batch.a, batch.ma, batch.xa, config)
    sb = _side(params, batch.b, batch.mb, batch.xb, config)
    if not config.symmetric:
        return _one_way(params, sa, config, query=True) * math.sqrt(config.qk_dim), \
            _one_way(params, sb, config, query=False)
    c = math.sqrt(0.5)
    sub = params["sub"]
    q = [sa["win"]]
    k = [_window_keys(sb["win"], 0.5 * (sub + jnp.swapaxes(sub, -1, -2)))]
    for part in ("ctx", "res"):
        if f"{part}_q" in sa:
            q += [c * sa[f"{part}_q"], c * sa[f"{part}_k"]]
            k += [c * sb[f"{part}_k"], c * sb[f"{part}_q"]]
    scale = math.sqrt(symmetric_dim(config))
    if config.dustbin is not None:
        zero = jnp.zeros_like(batch.ma, dtype=q[0].dtype)
        q += [_dustbin_score(params, sa, batch.ma, config)[..., None], zero[..., None], zero[..., None]]
        zero = jnp.zeros_like(batch.mb, dtype=q[0].dtype)
        k += [zero[..., None], _dustbin_score(params, sb, batch.mb, config)[..., None] * scale, zero[..., None]]
    return jnp.concatenate(q, -1) * scale, jnp.concatenate(k, -1)


def _dustbin_score(params, side: dict, mask, config: AlignerConfig):
    """[B, L]: each residue's one-way score with the other side's dustbin as a query and as a
    target, averaged (times eps)."""
    as_query = _one_way(params, side, config, query=True) @ params["k_dustbin"]
    as_key = (_one_way(params, side, config, query=False, raw_window=True)
              @ _window_token(params["q_dustbin"], params["sub"]) / math.sqrt(config.qk_dim))
    return 0.5 * (as_query + as_key) * mask


def dustbin_tokens(params, config: AlignerConfig):
    """The query- and key-side dustbin tokens as the operator takes them: the model's own, or
    for a symmetric model the ones meeting the dustbin features of :func:`queries_keys` (the
    last holds the dustbins' score with each other, the same in both directions)."""
    qd, kd = params["q_dustbin"], params["k_dustbin"]
    if not config.symmetric:
        return qd, kd
    D = symmetric_dim(config)
    corner = jnp.dot(qd, kd) / math.sqrt(config.qk_dim) * math.sqrt(D)
    q_tok = jnp.zeros(D, qd.dtype).at[D - 2].set(1.0).at[D - 1].set(1.0)
    k_tok = jnp.zeros(D, kd.dtype).at[D - 3].set(1.0).at[D - 1].set(corner)
    return q_tok, k_tok


def forward(params, batch: Batch, config: AlignerConfig):
    """O = P V with V = [I | X_b]: returns (plan_rows [B, Lq, Lk+1], transported [B, Lq, F]).

    ``plan_rows[:, i, :Lk]`` is the plan between residues, ``plan_rows[:, i, Lk]`` the
    mass query residue i sends to the target-side dustbin (0 without dustbins).
    """
    q, k, v, aug = transport_problem(params, batch, config)
    lk = batch.b.shape[1]
    cfg = config.sinkhorn
    if aug is None:
        qq, kk, vv, qv, kv, la, lb = sk_core.prepare(q, k, v, batch.ma, batch.mb, band=cfg.band,
                                                     check_empty=False)
        support = sk_core.Support.single(q.shape[1], lk, cfg.band, cfg.block)
        out = sk_core.tail_operator(qq, kk, vv, qv, kv, la, lb, support, cfg)
    else:
        out = sk_core.tail_operator(aug.q, aug.k, aug.v, aug.q_valid, aug.k_valid, aug.log_a, aug.log_b,
                                    aug.support, aug.config)[:, : aug.lq]
    return out[..., : lk + 1], out[..., lk + 1 :]


def transport_problem(params, batch: Batch, config: AlignerConfig):
    """``(q, k, v, aug)``: the aligner's transport problem for a batch. Queries and keys,
    ``V = [I | 0 | X_b]`` (identity over target positions, the target-side dustbin column, then
    target features) and, with dustbins, the augmented problem (``aug``; None without)."""
    q, k = queries_keys(params, batch, config)
    B, lk = batch.b.shape
    eye = jnp.broadcast_to(jnp.eye(lk, dtype=q.dtype), (B, lk, lk))
    v = jnp.concatenate([eye, jnp.zeros((B, lk, 1), q.dtype), batch.xb.astype(q.dtype)], -1)
    if config.dustbin is None:
        return q, k, v, None
    v_db = jnp.concatenate([jnp.zeros((lk,), q.dtype), jnp.ones((1,), q.dtype), params["v_dustbin"].astype(q.dtype)])
    q_db, k_db = dustbin_tokens(params, config)
    aug = augment(q, k, v, q_db, k_db, v_db, q_mask=batch.ma, k_mask=batch.mb,
                  config=config.sinkhorn, dustbin=config.dustbin)
    return q, k, v, aug


def loss_fn(params, batch: Batch, config: AlignerConfig):
    """Weighted sum of the configured loss terms; returns (loss, dict of every term)."""
    rows, transported = forward(params, batch, config)
    return loss_from_outputs(rows, transported, batch, config)


def loss_from_outputs(rows, transported, batch: Batch, config: AlignerConfig):
    """The loss terms as functions of the operator's output (see the module docstring)."""
    ma = batch.ma.astype(rows.dtype)
    lq, lk = batch.a.shape[1], batch.b.shape[1]
    tiny = 1e-9
    terms = {}
    # sparse cross-entropy, both directions
    has_db = config.dustbin is not None
    ta_ok = (batch.ta >= 0) & batch.ma & (has_db | (batch.ta < lk))
    p_a = jnp.take_along_axis(rows, jnp.clip(batch.ta, 0, lk)[..., None], -1)[..., 0]
    ce_a = -jnp.sum(jnp.where(ta_ok, jnp.log(jnp.maximum(p_a, tiny)), 0.0)) / jnp.maximum(ta_ok.sum(), 1)
    col_mass = jnp.einsum("bij,bi->bj", rows[..., :lk], ma)
    gap_b = 1.0 - col_mass
    tb_ok = (batch.tb >= 0) & batch.mb & (has_db | (batch.tb < lq))
    p_b_pair = jnp.take_along_axis(rows[..., :lk], jnp.clip(batch.tb, 0, lq - 1)[:, None, :], 1)[:, 0]
    p_b = jnp.where(batch.tb >= lq, gap_b, p_b_pair)
    ce_b = -jnp.sum(jnp.where(tb_ok, jnp.log(jnp.maximum(p_b, tiny)), 0.0)) / jnp.maximum(tb_ok.sum(), 1)
    terms["ce"] = 0.5 * (ce_a + ce_b)
    # reconstruction of the query features (or one-hots when there are no features)
    if config.feature_dim:
        target, recon = batch.xa, transported
    else:
        target = jax.nn.one_hot(batch.a, config.n_symbols)
        recon = jnp.einsum("bij,bja->bia", rows[..., :lk], jax.nn.one_hot(batch.b, config.n_symbols))
    err = jnp.sum((recon - target) ** 2, -1)
    terms["recon"] = jnp.sum(err * ma) / jnp.maximum(ma.sum(), 1)
    # monotonicity of the expected path
    real = rows[..., :lk]
    mass = real.sum(-1)
    pos = jnp.einsum("bij,j->bi", real, jnp.arange(lk, dtype=rows.dtype)) / jnp.maximum(mass, tiny)
    pair_ok = ma[:, :-1] * ma[:, 1:] * jnp.minimum(mass[:, :-1], mass[:, 1:])
    back = jax.nn.relu(pos[:, :-1] - pos[:, 1:]) / lk
    terms["mono"] = jnp.sum(back * pair_ok) / jnp.maximum(jnp.sum(ma[:, 1:]), 1)
    # soft F1 of the plan (expected counts) over the query residues with a known reference state
    aligned = ta_ok & (batch.ta < lk)
    tp = jnp.sum(jnp.where(aligned, p_a, 0.0))
    predicted = jnp.sum(jnp.where(ta_ok, mass, 0.0))
    terms["f1"] = 1.0 - 2.0 * tp / jnp.maximum(jnp.sum(aligned) + predicted, tiny)
    loss = sum(config.losses.get(name, 0.0) * terms[name] for name in LOSSES)
    return loss, terms


def pair_plan(rows: np.ndarray, m: int, k: int) -> np.ndarray:
    """One pair's plan [m+1, k+1] from its padded output rows [Lq, Lk+1] (see :func:`forward`).

    The last column is each query residue's dustbin mass; the last row each target residue's,
    ``1 - sum_i P[i, j]`` (exact: the last half-step is a column step).
    """
    width = rows.shape[-1] - 1
    plan = np.zeros((m + 1, k + 1))
    plan[:m, :k] = rows[:m, :k]
    plan[:m, k] = rows[:m, width]
    plan[m, :k] = np.clip(1.0 - rows[:m, :k].sum(0), 0.0, None)
    return plan


def plans(params, batch: Batch, config: AlignerConfig) -> np.ndarray:
    """Dense plans [B, Lq+1, Lk+1] with the dustbin row/column (for decoding)."""
    rows, _ = forward(params, batch, config)
    rows = np.asarray(rows, np.float64)
    lq, lk = batch.a.shape[1], batch.b.shape[1]
    out = np.zeros((rows.shape[0], lq + 1, lk + 1))
    out[:, :lq, :] = rows * batch.ma[..., None]
    col = np.einsum("bij,bi->bj", rows[..., :lk], batch.ma)
    out[:, lq, :lk] = np.clip(1.0 - col, 0.0, None) * batch.mb
    return out
