"""The layers never import upward, and everything is imported through the one ``corpusforge`` namespace.

bottom: config, files, hashing -> corpora -> examples -> shards -> pipeline (Beam) -> trainer -> CLI
and build orchestration. A module may import its own layer and those below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "corpora": "corpusforge.corpora",
    "examples": "corpusforge.examples",
    "shards": "corpusforge.shards",
    "pipeline": "corpusforge.pipeline",
    "trainer": "corpusforge.trainer",
    "corpusforge": "corpusforge",
}
LAYERS = [
    ("corpusforge.config", "corpusforge.files", "corpusforge.hashing"),
    ("corpusforge.corpora",),
    ("corpusforge.examples",),
    ("corpusforge.shards",),
    ("corpusforge.pipeline",),
    ("corpusforge.trainer",),
    (
        "corpusforge.build",
        "corpusforge.plan",
        "corpusforge.stages",
        "corpusforge.report",
        "corpusforge.report_page",
        "corpusforge.progress",
        "corpusforge.config_reference",
        "corpusforge.cli",
        "corpusforge.__main__",
    ),
]
OURS = ("corpusforge",) + tuple(FOLDERS)


def layer_of(module: str) -> int:
    if module == "corpusforge":  # the package itself: a docstring and the version
        return 0
    for level, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
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


@pytest.mark.parametrize(("module", "path"), modules(), ids=lambda v: str(v))
def test_no_upward_or_top_level_imports(module: str, path: Path) -> None:
    level = layer_of(module)
    for name in imports_of(path, module):
        assert name.split(".")[0] == "corpusforge", f"{path}: imports {name}; use corpusforge.{name}"
        assert layer_of(name) <= level, f"{path} ({LAYERS[level][0]} layer) imports {name} from a higher layer"


def test_layer_check_can_fail() -> None:
    assert layer_of("corpusforge.trainer.loop") > layer_of("corpusforge.shards.reader")
    assert imports_of(ROOT / "corpusforge" / "build.py", "corpusforge.build")  # it does see our imports
