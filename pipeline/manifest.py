"""The run manifest: inputs with checksums, the full configuration, package versions, counters, outputs."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("corpusforge", "apache-beam", "pyarrow", "mwparserfromhell", "ftfy", "py3langid", "blingfire",
            "tokenizers", "torch", "trafilatura", "datasketch", "dask")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def describe_files(paths: list[Path], root: Path | None = None) -> list[dict[str, Any]]:
    described = []
    for path in sorted(paths):
        name = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)
        described.append({"path": name, "bytes": path.stat().st_size, "sha256": sha256_file(path)})
    return described


def write_json_atomic(data: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
