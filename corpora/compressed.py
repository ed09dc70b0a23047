"""Decompressed bytes of a file, codec by suffix (.zst, .xz, .bz2, .gz, or none), streamed a chunk at a time.

Damage or a cut anywhere, in every codec, raises one of ``CORRUPTION`` after everything before it was
yielded, so a reader can keep what it read and reject the rest with its reason.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from collections.abc import Iterator
from typing import IO

import zstandard

from corpusforge.core import storage

ZSTD_MAX_WINDOW = 2**31  # Pushshift's dumps use long windows
READ_BYTES = 1 << 20
CORRUPTION = (OSError, EOFError, lzma.LZMAError, zlib.error, zstandard.ZstdError)
_OPENERS = {".xz": lzma.open, ".bz2": bz2.open, ".gz": gzip.open}


def decompressed_chunks(path: storage.PathLike) -> Iterator[bytes]:
    """The file's decompressed bytes, never read whole."""
    suffix = os.path.splitext(storage.name(path))[1].lower()
    with storage.open_file(path, "rb") as raw:
        if suffix == ".zst":
            yield from _zstd_chunks(raw)
        elif suffix in _OPENERS:
            with _OPENERS[suffix](raw, "rb") as stream:
                # read1: one raw read per call, so a cut raises after the data before it came out (read() drops it)
                yield from iter(lambda: stream.read1(READ_BYTES), b"")
        else:
            yield from iter(lambda: raw.read(READ_BYTES), b"")


def _zstd_chunks(raw: IO[bytes]) -> Iterator[bytes]:
    """zstandard's stream reader ends quietly at a cut frame; a decompressobj tells (``eof``)."""
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    frame = decompressor.decompressobj()
    started = False
    for data in iter(lambda: raw.read(READ_BYTES), b""):
        while data:
            started = True
            out = frame.decompress(data)
            if out:
                yield out
            data = b""
            if frame.eof:  # concatenated frames: the next one starts in the unused bytes
                data, frame, started = frame.unused_data, decompressor.decompressobj(), False
    if started:
        raise EOFError("zstd frame ended before its end (truncated file)")
