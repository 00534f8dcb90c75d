"""The operator's input checks, one wording for every backend.

The JAX reference (:func:`sinkalign.sinkhorn.core.prepare`), the Pallas kernels (through it),
the Triton kernels and their torch reference (:func:`sinkalign.kernels.triton.ref.prepare_inputs`)
and :class:`~sinkalign.sinkhorn.config.SinkhornConfig` check the solver settings and the
support here, on plain Python numbers and NumPy masks ([..., L] booleans, a few bytes per
token), so a bad input gets the same message whichever backend it was given to.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from sinkalign.errors import InputError

__all__ = ["F32_DOTS", "check_f32_dots", "check_int", "check_settings", "check_support", "partner_counts"]

# Precisions of float32 dots in the kernels: exact ("ieee"), or three / one TF32 tensor-core
# passes (natively on a GPU only).
F32_DOTS = ("ieee", "tf32x3", "tf32")


def check_int(name: str, value, minimum: int) -> int:
    """``value`` as an int; :class:`~sinkalign.errors.InputError` (a ValueError) unless it is an
    integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def check_bool(name: str, value) -> None:
    """A plain ValueError unless ``value`` is True or False (a flag: 1, 0 and None are refused)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be True or False")


def check_f32_dots(precision, *, native: bool, needs: str, here: str) -> None:
    """ValueError unless ``precision`` is one of :data:`F32_DOTS` and, when it is a TF32 mode,
    the kernels run ``native``ly (``needs``: what it needs; ``here``: what runs instead)."""
    if precision not in F32_DOTS:
        raise ValueError(f"precision={precision!r} is not one of {F32_DOTS}")
    if precision != "ieee" and not native:
        raise ValueError(f"precision={precision!r} (TF32 tensor-core dots) needs {needs}; {here} computes float32 "
                         "dots at full precision ('ieee')")


def check_shapes(q_shape, k_shape, v_shape) -> None:
    """ValueError unless ``q [..., Lq, d]``, ``k [..., Lk, d]`` and ``v [..., Lk, dv]`` agree
    (leading dims, feature dims, key lengths): the message every backend gives."""
    q_shape, k_shape, v_shape = (tuple(int(n) for n in s) for s in (q_shape, k_shape, v_shape))
    if not (q_shape[:-2] == k_shape[:-2] == v_shape[:-2]):
        raise ValueError(f"batch dims differ: q {q_shape}, k {k_shape}, v {v_shape}")
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(f"q and k feature dims differ: {q_shape[-1]} vs {k_shape[-1]}")
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(f"k and v lengths differ: {k_shape[-2]} vs {v_shape[-2]}")


def nonfinite(name: str, index) -> ValueError:
    """The error for a NaN or infinity in ``name`` at ``index`` (its first one), as every backend words it."""
    return ValueError(f"{name} has a non-finite value at index {tuple(int(i) for i in index)}")


def check_settings(*, eps, n_iters, tail, band) -> None:
    """The solver settings: eps finite > 0, n_iters and tail integers >= 0, band an integer
    >= 1 (half-width) or None (dense); :class:`~sinkalign.errors.InputError` (a ValueError) otherwise."""
    if not isinstance(eps, numbers.Real) and hasattr(eps, "shape"):  # a JAX or NumPy array, maybe a tracer
        raise InputError(f"eps must be a Python number, got {type(eps).__name__} {getattr(eps, 'shape', '')}: it is a "
                         f"static setting of the solve (fixed when the function is traced), neither traced nor "
                         f"differentiated; pass float(eps)")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps <= 0:
        raise InputError(f"eps={eps!r} must be a finite number > 0")
    check_int("n_iters", n_iters, 0)
    check_int("tail", tail, 0)
    if band is not None:
        check_int("band", band, 1)


def partner_counts(valid: np.ndarray, n_self: int, band: int | None) -> np.ndarray:
    """For each of ``n_self`` positions, how many ``valid`` partners lie within the band
    ([..., n_self]); prefix sums, O(batch L) memory, never [Lq, Lk]."""
    valid = np.asarray(valid, bool)
    if band is None:
        return np.broadcast_to(valid.sum(-1, keepdims=True), valid.shape[:-1] + (n_self,))
    cs = np.concatenate([np.zeros(valid.shape[:-1] + (1,), np.int64), np.cumsum(valid, -1)], -1)
    pos = np.arange(n_self)
    lo = np.clip(pos - band, 0, valid.shape[-1])
    hi = np.clip(pos + band + 1, 0, valid.shape[-1])
    return np.take(cs, hi, -1) - np.take(cs, lo, -1)


def check_support(q_valid, k_valid, band: int | None) -> None:
    """ValueError if a valid query has no active key, or a valid key no active query.

    ``q_valid`` [..., Lq] and ``k_valid`` [..., Lk]: boolean masks (True = real token) with the
    same batch dims; ``band``: half-width, or None for dense. The message names the batch
    index, the side and the position.
    """
    qv, kv = np.asarray(q_valid, bool), np.asarray(k_valid, bool)
    # batch axes after the first along which both masks repeat (a [B, L] mask broadcast over
    # heads) are not part of the batch index a user gave: [B, H, L] and [B, L] read alike
    for axis in range(min(qv.ndim, kv.ndim) - 2, 0, -1):
        if all(np.array_equal(m, np.take(m, [0], axis).repeat(m.shape[axis], axis)) for m in (qv, kv)):
            qv, kv = np.take(qv, 0, axis), np.take(kv, 0, axis)
    for side, mine, other, partner in (("query", qv, kv, "key"), ("key", kv, qv, "query")):
        empty = np.argwhere(mine & (partner_counts(other, mine.shape[-1], band) == 0))
        if empty.size:
            *batch, pos = (int(i) for i in empty[0])
            where = "at all" if band is None else f"within band={band} (|i - j| <= {band})"
            prefix = "" if not batch else f"batch {batch[0] if len(batch) == 1 else tuple(batch)}: "
            raise ValueError(f"{prefix}valid {side} position {pos} has no active {partner} {where}; "
                             "every valid row and column needs at least one active entry (mask it out or "
                             "widen the band)")
