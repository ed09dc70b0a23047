"""Package versions for the run manifest (its inputs and outputs come from the stage markers: ``corpusforge.markers``)."""

from __future__ import annotations

import platform
from importlib import metadata

PACKAGES = (
    "corpusforge",
    "apache-beam",
    "pyarrow",
    "mwparserfromhell",
    "ftfy",
    "py3langid",
    "blingfire",
    "tokenizers",
    "torch",
    "trafilatura",
    "datasketch",
    "dask",
)


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
