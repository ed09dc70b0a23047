"""A wheel (non-editable install) carries what ``corpusforge build`` without CONFIG needs: the demo config and samples."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from corpusforge.core.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_ships_the_demo_config_whose_paths_resolve_inside_the_package(tmp_path):
    source = Path(
        shutil.copytree(
            ROOT, tmp_path / "src", ignore=shutil.ignore_patterns(".venv", ".git", "out", "*.egg-info", "__pycache__", "tests", "bench")
        )
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("corpusforge-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    demo = site / "corpusforge" / "configs" / "demo.toml"
    assert demo.is_file(), "the wheel lacks corpusforge/configs/demo.toml"
    cfg = load_config(demo)
    assert all(Path(p).is_dir() for p in cfg.books.paths) and all(Path(p).is_file() for p in cfg.wikipedia.paths)
    assert str(site) in str(cfg.books.paths[0])  # the installed samples, not the checkout's
    assert (ROOT / "configs" / "demo.toml").read_text() == demo.read_text()  # the README's command uses the same file
