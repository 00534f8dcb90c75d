"""The score cache's shared rule (sinkalign.kernels.cache): its slot count against brute force."""

from __future__ import annotations

import itertools

import pytest

from sinkalign.kernels.cache import band_tile_slots


def _brute_slots(rows, row_block, cols, col_block, band):
    """Count, for every query block, the key tiles that hold a key within the band of one of its
    queries (every pair enumerated); the largest count, at least 1."""
    most = 0
    for r0 in range(0, rows, row_block):
        tiles = {j // col_block for i in range(r0, min(r0 + row_block, rows)) for j in range(cols)
                 if band is None or abs(i - j) <= band}
        if tiles:  # the band is a diagonal strip: the tiles met are consecutive, so a cache slot per tile
            assert tiles == set(range(min(tiles), max(tiles) + 1))
            most = max(most, max(tiles) - min(tiles) + 1)
    return max(most, 1)


@pytest.mark.parametrize("row_block,col_block", [(16, 16), (16, 32), (32, 16), (8, 64), (64, 8)])
def test_band_tile_slots_counts_every_tile_the_band_meets(row_block, col_block):
    """Over lengths that are and are not block multiples, Lq != Lk both ways, bands from 0 to past
    both lengths, and dense."""
    for rows, cols, band in itertools.product((1, 15, 16, 17, 70, 131), (1, 16, 33, 64, 97),
                                              (0, 1, 5, 16, 31, 100, 300, None)):
        want = _brute_slots(rows, row_block, cols, col_block, band)
        assert band_tile_slots(rows, row_block, cols, col_block, band) == want, (rows, row_block, cols, col_block,
                                                                                 band)


def test_both_kernel_families_size_their_cache_by_it():
    """The Pallas launch (padded lengths) and the Triton launch (true lengths) ask the shared rule."""
    from sinkalign.kernels.pallas.kernels import Launch

    launch = Launch(16, 32, 5, 3, 20, 1.0, False, "interpret", cache="row")
    assert launch.cache_slots() == _brute_slots(80, 16, 96, 32, 20) == 3
    assert launch.swap().cache_slots() == _brute_slots(96, 32, 80, 16, 20) == 5
    assert Launch(16, 32, 5, 3, None, 1.0, False, "interpret").cache_slots() == 3
