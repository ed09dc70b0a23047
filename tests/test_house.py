"""The house rules a reviewer would otherwise check by hand, checked on the code itself:

- one storage seam: no product module but ``core/storage.py`` opens, lists, renames, deletes or locks
  files by path (so every path may be a URI);
- one place that knows stages by name: no product module but ``corpusforge/stages.py`` compares a value
  with a stage name.
Each check is shown failing on a planted line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("core", "corpora", "encoding", "shards", "pipeline", "trainer", "corpusforge")
STORAGE = ROOT / "core" / "storage.py"
DECLARATIONS = ROOT / "corpusforge" / "stages.py"

FORBIDDEN_MODULES = {"fcntl", "glob", "shutil", "tempfile"}
FORBIDDEN_CALLS = {  # module.function called on a path
    "os.replace", "os.rename", "os.remove", "os.unlink", "os.makedirs", "os.mkdir", "os.listdir", "os.scandir",
    "os.walk", "os.stat", "os.rmdir", "os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.getsize",
    "pa.memory_map", "pa.OSFile", "pa.input_stream", "pa.output_stream",
}  # fmt: skip
PATH_METHODS = {  # pathlib's file operations
    "read_text", "read_bytes", "write_text", "write_bytes", "mkdir", "rmdir", "unlink", "iterdir", "glob", "rglob",
    "touch", "rename", "replace", "exists", "is_file", "is_dir", "stat",
}  # fmt: skip
READERS = {"read_table", "ParquetFile", "read_schema", "read_metadata", "open_file", "open_stream", "ParquetWriter", "write_table"}
SOURCES_AND_STAGES = {
    "books", "wikipedia", "webtext", "records", "clean", "dedup", "near_dedup", "documents", "vocab", "bert", "gpt", "train",
}  # fmt: skip
# Not stage tests: a model family or shard format named like its stage, in the layers that build or train it.
FAMILY_LAYERS = ("shards", "trainer", "encoding")


def product_modules() -> list[Path]:
    return sorted(path for folder in PRODUCT for path in (ROOT / folder).rglob("*.py"))


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def file_access(source: str) -> list[str]:
    """Every line that touches files by path without going through ``storage``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{node.lineno}: import {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if name == "open" or name in FORBIDDEN_CALLS:
            found.append(f"{node.lineno}: {name}(")
        elif isinstance(node.func, ast.Attribute) and not name.startswith("storage."):
            method = node.func.attr
            if method in PATH_METHODS and _looks_like_path(node.func.value):
                found.append(f"{node.lineno}: .{method}(")
            elif method in READERS and name.split(".")[0] in ("pq", "ipc", "pa") and _reads_a_path(node):
                found.append(f"{node.lineno}: {name}(<path>)")
    return found


def _looks_like_path(value: ast.AST) -> bool:
    """A ``Path(...)`` expression, a ``/`` join, or a name or attribute that says it holds a path."""
    if isinstance(value, ast.Call) and dotted(value.func) in ("Path", "pathlib.Path"):
        return True
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div):
        return True
    text = dotted(value).lower()
    return any(word in text for word in ("path", "dir", "folder", "file", "out", "root", "temp", "spill", "target"))


def _reads_a_path(call: ast.Call) -> bool:
    """pyarrow given a path (string, Path, or a name) rather than a handle from ``storage`` or a ``filesystem=``."""
    if any(keyword.arg == "filesystem" for keyword in call.keywords) or not call.args:
        return False
    first = call.args[0]
    return not (isinstance(first, ast.Call) and dotted(first.func).startswith("storage.")) and not _is_handle(first)


def _is_handle(node: ast.AST) -> bool:
    text = dotted(node).lower()
    return any(word in text for word in ("handle", "source", "stream", "sink", "buffer", "reader", "fh", "raw"))


def stage_name_tests(source: str, allow_families: bool) -> list[str]:
    """Every comparison of a stage-holding value with a stage name (``stage == "bert"``, ``"webtext" in stages``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if not any(_names_a_stage(operand) for operand in operands):
            continue
        for operand in operands:
            names = _string_constants(operand) & SOURCES_AND_STAGES
            if allow_families:
                names -= {"bert", "gpt"}
            if names:
                found.append(f"{node.lineno}: compares with {sorted(names)}")
    return found


def _names_a_stage(node: ast.AST) -> bool:
    """An operand that holds stages or an example format: ``stage``, ``cfg.run.stages``, ``plan.requested``, ``task``."""
    text = dotted(node).lower()
    return any(word in text for word in ("stage", "requested", "task", "step", "family"))


def _string_constants(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


@pytest.mark.parametrize("path", [p for p in product_modules() if p != STORAGE], ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_storage_module_touches_files(path: Path) -> None:
    assert file_access(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", [p for p in product_modules() if p != DECLARATIONS], ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_declarations_compare_stage_names(path: Path) -> None:
    layer = path.relative_to(ROOT).parts[0]
    assert stage_name_tests(path.read_text(encoding="utf-8"), allow_families=layer in FAMILY_LAYERS) == []


def test_the_checks_catch_planted_lines() -> None:
    planted = (
        "import shutil\n"
        "from pathlib import Path\n"
        "def f(out_dir, handle):\n"
        "    open(out_dir / 'x')\n"
        "    (out_dir / 'y').write_text('z')\n"
        "    Path(out_dir).mkdir()\n"
        "    pq.read_table(out_dir)\n"
        "    pq.read_table(storage.arrow_input(out_dir))\n"
        "    storage.write_text(out_dir, 'fine')\n"
        "    if stage == 'gpt' or 'documents' in cfg.run.stages or kind == 'documents':\n"
        "        pass\n"
    )
    assert file_access(planted) == ["1: import shutil", "4: open(", "5: .write_text(", "6: .mkdir(", "7: pq.read_table(<path>)"]
    assert stage_name_tests(planted, allow_families=False) == ["10: compares with ['gpt']", "10: compares with ['documents']"]
    assert stage_name_tests(planted, allow_families=True) == ["10: compares with ['documents']"]
