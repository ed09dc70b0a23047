"""Files written whole or not at all, and their checksums: one implementation for every stage.

A writer puts bytes under ``<name>.tmp-<uuid>`` beside the target and renames it into place, so a
reader never sees half a file and an interrupted run leaves only ``*.tmp-*`` debris that verify flags.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def temp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary name beside ``path`` to write to: renamed onto ``path`` if the block succeeds, removed if not."""
    temp = temp_path(Path(path))
    try:
        yield temp
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as temp:
        temp.write_bytes(data)


def write_json_atomic(data: dict[str, Any], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(data, indent=2, default=str) + "\n").encode("utf-8"))
    return path


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
