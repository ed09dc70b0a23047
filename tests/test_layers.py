"""The layers never import upward, and everything is imported through the one ``corpusforge`` namespace.

bottom: core (config, storage, layout, hashing) -> corpora -> encoding -> shards -> pipeline (Beam) -> trainer
-> CLI and build orchestration (the ``corpusforge`` folder). A module may import its own layer and those below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "core": "corpusforge.core",
    "corpora": "corpusforge.corpora",
    "examples": "corpusforge.encoding",
    "shards": "corpusforge.shards",
    "pipeline": "corpusforge.pipeline",
    "trainer": "corpusforge.trainer",
    "corpusforge": "corpusforge",
}
LAYERS = [
    ("corpusforge.core",),
    ("corpusforge.corpora",),
    ("corpusforge.encoding",),
    ("corpusforge.shards",),
    ("corpusforge.pipeline",),
    ("corpusforge.trainer",),
    ("corpusforge",),  # the roof: every module of the corpusforge folder itself
]
OURS = ("corpusforge",) + tuple(FOLDERS)


def layer_of(module: str) -> int:
    if module == "corpusforge":  # the package itself: a docstring and the version
        return 0
    for level, prefixes in reversed(list(enumerate(LAYERS))[:-1]):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
    if module.startswith("corpusforge."):
        return len(LAYERS) - 1
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")


def modules() -> list[tuple[str, Path]]:
    found = []
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            found.append((name, path))
    return found


def imports_of(path: Path, module: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = (
                    module.split(".")[: -node.level]
                    if not path.name == "__init__.py"
                    else module.split(".")[: len(module.split(".")) - node.level + 1]
                )
                names.append(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.append(node.module)
    return [n for n in names if n.split(".")[0] in OURS]


def layer_problems(module: str, path: Path) -> list[str]:
    """Every import of ``module`` that reaches upward or names a checkout folder instead of the namespace."""
    level, problems = layer_of(module), []
    for name in imports_of(path, module):
        if name.split(".")[0] != "corpusforge":
            problems.append(f"{path}: imports {name}; use corpusforge.{name}")
        elif layer_of(name) > level:
            problems.append(f"{path} ({LAYERS[level][0]} layer) imports {name} from a higher layer")
    return problems


@pytest.mark.parametrize(("module", "path"), modules(), ids=lambda v: str(v))
def test_no_upward_or_top_level_imports(module: str, path: Path) -> None:
    assert layer_problems(module, path) == []


def test_the_check_catches_a_planted_upward_import(tmp_path: Path) -> None:
    """A copy of a real shards module with one planted import of the pipeline (a higher layer) fails the check."""
    source = ROOT / "shards" / "reader.py"
    assert layer_problems("corpusforge.shards.reader", source) == []
    planted = tmp_path / "reader.py"
    planted.write_text(source.read_text(encoding="utf-8") + "\nfrom corpusforge.pipeline.steps import COUNTERS\n", encoding="utf-8")
    assert layer_problems("corpusforge.shards.reader", planted) == [
        f"{planted} (corpusforge.shards layer) imports corpusforge.pipeline.steps from a higher layer"
    ]
    core = ROOT / "core" / "config.py"
    planted.write_text(core.read_text(encoding="utf-8") + "\nimport corpusforge.build\n", encoding="utf-8")
    assert len(layer_problems("corpusforge.core.config", planted)) == 1
    planted.write_text("from shards.reader import ShardReader\n", encoding="utf-8")
    assert layer_problems("corpusforge.trainer.data", planted) == [f"{planted}: imports shards.reader; use corpusforge.shards.reader"]
