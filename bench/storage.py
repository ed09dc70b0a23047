"""Local-file throughput: plain ``open`` vs fsspec vs pyarrow.fs vs Beam's FileSystems vs ``corpusforge.core.storage``.

Why: the project's storage seam (core/storage.py) lets every path be a local path or a URI. It opens
local paths with Python's own ``open`` and sends only URIs through fsspec, instead of routing every
path through one of the general file-system layers (fsspec, pyarrow.fs, Apache Beam's FileSystems).
This bench is the evidence for that choice: it measures what each layer costs on local disk, for
the access patterns the project has.

    (a) one large file, written then read back in 1 MB chunks (shards, documents, vocab files);
    (b) many small files, each written then read whole (manifests, stage records, JSON reports);
    (c) listing the folder of those small files (resume checks, manifests, ``files_under``);
    (d) the sha256 of the large file (the demo's recorded digests, shard checksums).

Each library writes its own files, so ``storage`` pays for its atomic write (a temporary renamed into
place), as it does in the project. Nothing is fsynced and reads follow writes, so the page cache
serves them: the figures are each layer's overhead on top of the kernel, not the disk's speed.
The libraries run interleaved in rounds (A B C D E, A B C D E, ...) and the table gives each one's
median over the rounds and its ratio to plain ``open``.

    .venv/bin/python bench/storage.py                     # 256 MB file, 2,000 files of 16 KB
    .venv/bin/python bench/storage.py --mb 64 --files 500
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import fsspec
import pyarrow as pa
import pyarrow.fs as pafs

logging.getLogger().setLevel(logging.ERROR)  # Beam warns at import about optional GCP clients
import apache_beam  # noqa: E402
from apache_beam.io.filesystems import FileSystems  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpusforge.core import storage  # noqa: E402

MB = 1 << 20
CHUNK = MB
SMALL = 16 << 10
ROUNDS = 3
LIST_REPEATS = 10  # one listing of a few thousand entries takes milliseconds: time several


@dataclass(frozen=True)
class Library:
    """How one library opens, creates, lists and hashes local files."""

    name: str
    reading: Callable[[str], Any]
    writing: Callable[[str], Any]
    listing: Callable[[str], list]
    digest: Callable[[str], str]


def _file_digest(opener: Callable[[str], Any]) -> Callable[[str], str]:
    def digest(path: str) -> str:
        with opener(path) as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()

    return digest


def libraries() -> list[Library]:
    fs = fsspec.filesystem("file")
    arrow = pafs.LocalFileSystem()

    def plain_read(path: str) -> IO:
        return open(path, "rb")

    def fsspec_read(path: str) -> IO:
        return fs.open(path, "rb")

    return [
        Library(
            "open",
            plain_read,
            lambda path: open(path, "wb"),
            lambda folder: sorted(os.path.join(folder, entry) for entry in os.listdir(folder)),
            _file_digest(plain_read),
        ),
        Library(
            "fsspec",
            fsspec_read,
            lambda path: fs.open(path, "wb"),
            lambda folder: fs.ls(folder, detail=False),
            _file_digest(fsspec_read),
        ),
        Library(
            "pyarrow",
            arrow.open_input_stream,
            arrow.open_output_stream,
            lambda folder: arrow.get_file_info(pafs.FileSelector(folder)),
            _file_digest(arrow.open_input_stream),
        ),
        Library(
            "beam",
            FileSystems.open,
            FileSystems.create,
            lambda folder: FileSystems.match([FileSystems.join(folder, "*")])[0].metadata_list,
            _file_digest(FileSystems.open),
        ),
        Library(
            "storage",
            storage.open_file,
            storage.writing,
            storage.listdir,
            storage.sha256,
        ),
    ]


# --- one round of one library ---------------------------------------------------------------------


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = action()
    return time.perf_counter() - began, result


def write_large(lib: Library, path: str, megabytes: int, block: bytes) -> None:
    with lib.writing(path) as handle:
        for _ in range(megabytes):
            handle.write(block)


def read_large(lib: Library, path: str) -> int:
    total = 0
    with lib.reading(path) as handle:
        while chunk := handle.read(CHUNK):
            total += len(chunk)
    return total


def write_small(lib: Library, paths: list[str], payload: bytes) -> None:
    for path in paths:
        with lib.writing(path) as handle:
            handle.write(payload)


def read_small(lib: Library, paths: list[str]) -> int:
    total = 0
    for path in paths:
        with lib.reading(path) as handle:
            total += len(handle.read())
    return total


def list_repeatedly(lib: Library, folder: str) -> int:
    return sum(len(lib.listing(folder)) for _ in range(LIST_REPEATS))


@dataclass(frozen=True)
class Workload:
    """What every library writes: ``megabytes`` copies of ``block``, ``files`` copies of ``payload``."""

    megabytes: int
    files: int
    block: bytes
    payload: bytes
    digest: str


def workload(megabytes: int, files: int) -> Workload:
    block = os.urandom(CHUNK)
    digest = hashlib.sha256()
    for _ in range(megabytes):
        digest.update(block)
    return Workload(megabytes, files, block, os.urandom(SMALL), digest.hexdigest())


def one_round(lib: Library, scratch: str, work: Workload) -> dict[str, float]:
    """Rates for one library: MB/s for the large file and its digest, files/s for the rest."""
    large = os.path.join(scratch, f"{lib.name}.bin")
    seconds = {}
    seconds["large write"], _ = timed(lambda: write_large(lib, large, work.megabytes, work.block))
    seconds["large read"], read = timed(lambda: read_large(lib, large))
    seconds["sha256"], digest = timed(lambda: lib.digest(large))
    check(read == work.megabytes * MB, f"{lib.name} read {read} bytes of {work.megabytes * MB}")
    check(digest == work.digest, f"{lib.name} hashed {digest}, not {work.digest}")
    os.unlink(large)

    folder = os.path.join(scratch, lib.name)
    os.makedirs(folder)
    paths = [os.path.join(folder, f"{i:06d}.json") for i in range(work.files)]
    seconds["small write"], _ = timed(lambda: write_small(lib, paths, work.payload))
    seconds["small read"], read = timed(lambda: read_small(lib, paths))
    seconds["list"], listed = timed(lambda: list_repeatedly(lib, folder))
    check(read == work.files * SMALL, f"{lib.name} read {read} bytes of {work.files * SMALL}")
    check(listed == work.files * LIST_REPEATS, f"{lib.name} listed {listed} entries")
    shutil.rmtree(folder)

    done = {"large write": work.megabytes, "large read": work.megabytes, "sha256": work.megabytes}
    done |= {"small write": work.files, "small read": work.files, "list": work.files * LIST_REPEATS}
    return {key: done[key] / seconds[key] for key in seconds}


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"wrong result: {message}")


# --- report --------------------------------------------------------------------------------------

UNITS = {
    "large write": "MB/s",
    "large read": "MB/s",
    "sha256": "MB/s",
    "small write": "files/s",
    "small read": "files/s",
    "list": "files/s",
}


def table(medians: dict[str, dict[str, float]]) -> str:
    """One row per measurement, one column per library: the median rate and its ratio to plain open."""
    names = list(medians)
    rows = [["measurement", *names]]
    for key, unit in UNITS.items():
        base = medians["open"][key]
        rows.append([f"{key} ({unit})", *(f"{medians[n][key]:,.0f} ({medians[n][key] / base:.2f}x)" for n in names)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256, help="size of the large file in MB")
    parser.add_argument("--files", type=int, default=2000, help="number of 16 KB files")
    args = parser.parse_args()

    libs, work = libraries(), workload(args.mb, args.files)
    rates: dict[str, list[dict[str, float]]] = {lib.name: [] for lib in libs}
    with tempfile.TemporaryDirectory(prefix="bench-storage-", dir="/tmp") as scratch:
        for round_ in range(ROUNDS):
            for lib in libs:
                rates[lib.name].append(one_round(lib, scratch, work))
            print(f"round {round_ + 1}/{ROUNDS} done", flush=True)

    medians = {name: {key: statistics.median(r[key] for r in runs) for key in UNITS} for name, runs in rates.items()}
    print(
        f"{args.mb} MB file in {CHUNK // MB} MB chunks; {args.files} files of {SMALL >> 10} KB; "
        f"listing x{LIST_REPEATS}; median of {ROUNDS} interleaved rounds; ratio to plain open in brackets"
    )
    print(f"python {sys.version.split()[0]}, fsspec {fsspec.__version__}, pyarrow {pa.__version__}, beam {apache_beam.__version__}")
    print(table(medians))


if __name__ == "__main__":
    main()
