"""The README's commands, pasted in order as a new user would, on the bundled demo.

Every ``.venv/bin/corpusforge`` line of the README's ``bash`` blocks runs in order in a fresh folder that
looks like a checkout (``.venv``, ``configs`` and ``../shared/data`` linked), so a command that needs an
earlier one's output (train -> export -> finetune -> generate) fails here when the README's names disagree.
Only the size flags the README itself shows are made small (``--steps``, ``--epochs``,
``--max-train-examples``, ``--max-new-tokens``); ``torchrun`` lines need GPUs and are left out. The
``pip install`` set-up lines are what ``.ci/run`` already ran.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SMALL = {"--steps": "4", "--epochs": "1", "--max-train-examples": "64", "--max-new-tokens": "8"}
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def readme_commands(text: str) -> list[str]:
    """The corpusforge command lines of the README's bash blocks, in order, comments removed."""
    commands = []
    for block in FENCE.findall(text):
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.split("  #")[0].split(" # ")[0].strip()
                if part.startswith(".venv/bin/corpusforge "):
                    commands.append(part)
    return commands


def made_small(command: str) -> list[str]:
    words = shlex.split(command)
    return [SMALL.get(words[i - 1], word) if i else word for i, word in enumerate(words)]


def test_the_readme_lists_the_chain_from_build_to_generate() -> None:
    commands = readme_commands((ROOT / "README.md").read_text())
    verbs = [shlex.split(c)[1] for c in commands]
    for verb in ("build", "train", "export", "finetune", "generate"):
        assert verb in verbs, f"no `corpusforge {verb}` line in the README"
    assert verbs.index("build") < verbs.index("train") < verbs.index("finetune")


def test_the_size_flags_are_found_and_made_small() -> None:
    assert made_small(".venv/bin/corpusforge train --steps 300 --out x") == [".venv/bin/corpusforge", "train", "--steps", "4", "--out", "x"]
    assert readme_commands("```bash\na && .venv/bin/corpusforge build c.toml  # note\n```\n") == [".venv/bin/corpusforge build c.toml"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_readme_commands_run_in_order(tmp_path: Path, shared_data: Path) -> None:
    home = tmp_path / "checkout"
    home.mkdir()
    (home / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (home / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "shared").symlink_to(shared_data.parent)
    env = {**os.environ, "CORPUSFORGE_CACHE": str(tmp_path / "cache")}
    commands = readme_commands((ROOT / "README.md").read_text())
    assert len(commands) >= 10
    for command in commands:
        done = subprocess.run(made_small(command), cwd=home, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"README command failed ({done.returncode}): {command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert (home / "out" / "report.html").is_file()
