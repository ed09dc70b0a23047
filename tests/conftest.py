"""Shared test fixtures: where the real public data lives and the bundled sample."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "corpusforge" / "samples"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"shared data not found at {SHARED} (it must sit beside the checkout)")
    return SHARED


@pytest.fixture(scope="session")
def samples() -> Path:
    return SAMPLES
