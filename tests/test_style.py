"""ruff's lint and format check run with the suite, so CI fails on a style regression."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]


def test_ruff_lint() -> None:
    run = subprocess.run([*RUFF, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_ruff_format() -> None:
    run = subprocess.run([*RUFF, "format", "--no-cache", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
