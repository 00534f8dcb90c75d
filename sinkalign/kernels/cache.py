"""Whether the blockwise kernels cache the band's scores (``cache_scores``): the rule both families share.

With ``cache_scores=True`` a pass of the kernels (the forward's duals and output; the backward)
computes the band's score tiles ``S = Q K^T / (sqrt(d) eps)`` once into a float32 cache that
every sweep reads, instead of recomputing them in each of its 2 (T + R) + 1 forward and 6
backward sweeps. ``None``, the default, decides by the rule fixed before the kernels were timed
(BENCHMARKS.md, "A score cache for the Pallas kernels"): on a lent H200 (2026-11-27) the cache
made forward + backward 4.0x / 5.1x faster for the Pallas kernels and 2.8x / 3.2x for Triton's
with exact float32 dots at L = 16,384 / 65,536 (W = 1,024), past the rule's 1.5x at both
lengths; with tf32x3 dots it gained 1.0x / 1.3x (Pallas) and lost time in Triton, and with
bfloat16 it lost time in both (the rule asked 1.2x at both lengths). So the default caches
exactly where the dots are exact float32, and only while the cache stays within
:data:`AUTO_CACHE_MAX_BYTES`: the recomputing kernels need O(L d) memory, the cache O(L W) per
batch-head, so the default bounds what it adds (a larger cache is left to an explicit ``True``).
It counts every batch-head of a launch: the leading batch dims both operators take, and under
``jax.vmap`` the mapped axes too (the Pallas operator merges them into its batch and decides
for the whole of it).
"""

from __future__ import annotations

#: ``--cache-scores`` choices of the validation commands and the values they stand for
CHOICES = {"auto": None, "on": True, "off": False}

AUTO_CACHE_MAX_BYTES = 2 * 1024**3  # 2 GiB: 3 batch-heads at L = 65,536, W = 1,024 (545-554 MB each, padded tiles)


def check_cache_scores(value) -> None:
    """A plain ValueError unless ``value`` is True, False or None (1, 0 and strings are refused)."""
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"cache_scores={value!r} must be True, False or None (None: cache with exact float32 "
                         "dots, while the cache fits in 2 GiB)")


def choice(value) -> str:
    """The :data:`CHOICES` name of ``value`` (None, True or False)."""
    check_cache_scores(value)
    return next(name for name, v in CHOICES.items() if v is value)


def resolve_cache_scores(value, *, exact_f32: bool, floats) -> bool:
    """``cache_scores`` as a launch takes it: ``value`` where it is True or False; for None,
    True iff the dots are ``exact_f32`` (float32 inputs with ``precision="ieee"``) and the
    cache's ``floats`` float32 values (an int, or a callable that counts them, called only
    then) take at most :data:`AUTO_CACHE_MAX_BYTES`."""
    check_cache_scores(value)
    if value is not None:
        return value
    return bool(exact_f32) and 4 * int(floats() if callable(floats) else floats) <= AUTO_CACHE_MAX_BYTES


def band_tile_slots(rows: int, row_block: int, cols: int, col_block: int, band: int | None) -> int:
    """Key tiles the band of one query block meets at most: a score cache's slots per query block,
    both kernel families' (Pallas with its padded lengths, Triton with the true ones).

    Query block ``[r0, min(r0 + row_block, rows))`` meets keys ``j`` with ``|i - j| <= band``,
    ``0 <= j < cols``: the key tiles from ``max(r0 - band, 0) // col_block`` up to the one holding
    ``min(min(r0 + row_block, rows) - 1 + band, cols - 1)``. ``band=None``: dense, every key tile.
    At least 1 (a cache has a slot even where a block meets no key)."""
    n_cols = -(-cols // col_block)
    if band is None:
        return max(n_cols, 1)
    most = 0
    for r0 in range(0, rows, row_block):
        lo = max(r0 - band, 0) // col_block
        hi = -(-min(min(r0 + row_block, rows) + band, cols) // col_block)  # one past the last tile met
        most = max(most, hi - lo)
    return max(most, 1)
