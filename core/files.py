"""Files written whole or not at all, and their checksums: one implementation for every stage.

A writer puts bytes under ``<name>.tmp-<uuid>`` beside the target and renames it into place, so a
reader never sees half a file and an interrupted run leaves only ``*.tmp-*`` debris that verify flags.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WORK_DIR = ".work"  # spill files of a build's running stages, inside its output folder; removed when a stage ends


def temp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")


@contextmanager
def atomic_path(path: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write (a file or a whole directory); rename it into place on success.

    On an exception the temporary is removed and ``path`` is untouched. ``suffix`` keeps an extension
    for writers that pick the format from it (matplotlib's savefig). Replacing an existing directory
    is the caller's decision: ``os.replace`` only renames a directory over a missing or empty one.
    """
    path = Path(path)
    temp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}{suffix}")
    try:
        yield temp
        os.replace(temp, path)
    except BaseException:
        if temp.is_dir():
            shutil.rmtree(temp, ignore_errors=True)
        else:
            temp.unlink(missing_ok=True)
        raise


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
