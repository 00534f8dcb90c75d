"""Shared fixtures. JAX runs in float64-capable mode for every test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax

jax.config.update("jax_enable_x64", True)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ``../shared/data``; tests using it skip cleanly when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA
