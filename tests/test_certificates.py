"""Propositions 4, 5, 6 and Corollary 2."""

from __future__ import annotations

import numpy as np
import pytest

from sinkalign.sinkhorn import validation
from sinkalign.sinkhorn.certificates import projective_diameter


def test_bias_certificate_reconstructs_the_omitted_gradient():
    result = validation.certificate("float64", L=40, T=6, W=12, seeds=(0,), depths=(0, 1, 2), pad=3)
    assert result["max_residual"] <= 1e-12
    gaps = [r["gap"] for r in result["rows"]]
    assert gaps[0] > 1e-3  # a real gap is being reconstructed, not 0 - 0
    assert gaps[0] > gaps[1] > gaps[2]  # the omitted gradient decays with the tail depth


def test_certified_depth_selection_picks_the_first_depth_under_tau():
    result = validation.certificate("float64", L=32, T=6, W=None, seeds=(1,), depths=(0, 1, 2, 4), pad=2,
                                    qk_std=0.5, tau=1e-3)
    sel = result["selection"][0]
    norms = {int(r): n for r, n in sel["norms"].items()}
    chosen = sel["selected_R"]
    assert chosen is not None and norms[chosen] <= 1e-3
    assert all(norms[r] > 1e-3 for r in norms if r < chosen)


def test_orbit_reconstruction_float64_and_float32():
    r64 = validation.orbit("float64", L=48, T=5, seeds=(0,))
    r32 = validation.orbit("float32", L=48, T=5, seeds=(0,))
    assert r64["rows"][0]["n_plans"] == 2 * (5 + 2)
    assert r64["max_log_error"] < 1e-12
    assert 1e-9 < r32["max_log_error"] < 1e-5


def test_contraction_bound_holds_and_orders():
    result = validation.contraction("float64", sizes=(12,), eps_values=(1.0, 3.0), n_pairs=50, block_L=256, block_W=96)
    assert result["all_bounds_hold"]
    for row in result["rows"]:
        assert 0 <= row["max_observed_ratio"] <= row["rho_h"] <= row["rho_range"] <= 1
    assert result["blocks"]["n_blocks"] == 2


def test_projective_diameter_matches_brute_force():
    S = np.random.default_rng(0).normal(size=(5, 6))
    brute = max(S[i, j] + S[a, b] - S[i, b] - S[a, j]
                for i in range(5) for a in range(5) for j in range(6) for b in range(6))
    assert projective_diameter(S) == pytest.approx(brute, abs=1e-14)
    assert projective_diameter(S[:1]) == 0.0
    # a rank-one (in log space) score matrix is a single scaling orbit: diameter 0
    assert projective_diameter(np.add.outer(np.arange(4.0), np.arange(3.0))) == pytest.approx(0, abs=1e-14)
