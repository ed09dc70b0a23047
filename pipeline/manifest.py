"""The run manifest: inputs with checksums, the full configuration, package versions, counters, outputs."""
from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from corpusforge.files import sha256_file

PACKAGES = ("corpusforge", "apache-beam", "pyarrow", "mwparserfromhell", "ftfy", "py3langid", "blingfire",
            "tokenizers", "torch", "trafilatura", "datasketch", "dask")


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
