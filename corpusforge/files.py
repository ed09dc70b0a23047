"""Files written whole or not at all, and their checksums: one implementation for every stage.

A writer puts bytes under ``<name>.tmp-<uuid>`` beside the target and renames it into place, so a
reader never sees half a file and an interrupted run leaves only ``*.tmp-*`` debris that verify flags.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WORK_DIR = ".work"  # spill files of a build's running stages, inside its output folder; removed when a stage ends

def temp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that streams: renamed onto ``path`` when the
    block ends normally, removed when it raises (so the target is never left half written)."""
    path = Path(path)
    temp = temp_path(path)
    try:
        yield temp
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    temp = temp_path(path)
    temp.write_bytes(data)
    os.replace(temp, path)


def write_json_atomic(data: dict[str, Any], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(data, indent=2, default=str) + "\n").encode("utf-8"))
    return path


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
