"""A bounded local cache of the shards that live behind a URI (``s3://``, ``gs://``, ...).

Why a cache: the trainer memory-maps a shard and slices it in a shuffled order of blocks; on an
object store every slice would be a ranged request. One sequential download per shard, checked
against the manifest's sha256 on the way, then memory-mapped like a local shard, reads each byte once.

Files are named by their sha256, so a shard is downloaded once per machine: later runs, other ranks and
other processes reuse it, whatever URI it came from. A download goes to a temporary name and is renamed
into place only if its checksum matches the manifest's; a mismatch is a ``ShardError`` naming the object.
A cached file is trusted by name and size (its checksum was checked when it arrived).

The folder is kept under a size limit by deleting the least recently used files (each use touches a
file's mtime), never one this process holds (``local_copy`` pins a file, ``release`` unpins it): files
in use may push the folder over the limit, with a warning. Local shard folders never pass through here.

Where and how big: ``train --cache-dir/--cache-gb`` (``using``), else ``$CORPUSFORGE_CACHE`` and
``$CORPUSFORGE_CACHE_GB``, else ``~/.cache/corpusforge/shards`` and 20 GB.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pyarrow as pa

from corpusforge.core import storage
from corpusforge.shards.reader import Manifest, ShardEntry, ShardError, open_shard

logger = logging.getLogger(__name__)

DIR_ENV, GB_ENV = "CORPUSFORGE_CACHE", "CORPUSFORGE_CACHE_GB"
DEFAULT_DIR = os.path.join("~", ".cache", "corpusforge", "shards")
DEFAULT_GB = 20.0
SUFFIX, LOCK_SUFFIX = ".arrow", ".lock"
CHUNK = 8 << 20
STALE_S = 600.0  # a temporary nobody wrote to for this long is a killed download's
WAIT_S = 0.1  # polling interval while another process downloads the same shard
SHA256 = re.compile(r"[0-9a-f]{64}")

_pins: Counter[str] = Counter()  # cached files this process holds, by local path
_chosen: ShardCache | None = None  # set by ``using`` (the command line's choice)


@dataclass(frozen=True)
class ShardCache:
    """A cache folder and its size limit in bytes; picklable, so DataLoader workers share the main process's choice."""

    directory: str
    limit: int

    def path_of(self, sha256: str) -> str:
        return storage.join(self.directory, sha256 + SUFFIX)

    def local_copy(self, uri: str, sha256: str, size: int) -> str:
        """The local path of the shard at ``uri``, downloaded and checked unless cached; pinned until ``release``."""
        if not SHA256.fullmatch(sha256):  # it names a file here: never a path
            raise ShardError(f"{uri}: the manifest's sha256 {sha256!r} is not a sha256 digest")
        target = self.path_of(sha256)
        _pins[target] += 1
        try:
            with self._entry_lock(sha256):
                if storage.is_file(target) and storage.size(target) == size:
                    os.utime(target)  # most recently used
                else:
                    self._make_room(size)
                    download(uri, target, sha256, size)
        except BaseException:
            release(target)
            raise
        return target

    @contextmanager
    def _entry_lock(self, sha256: str) -> Iterator[None]:
        """One downloader per shard across the processes of a machine; the others wait, then reuse its file."""
        storage.makedirs(self.directory)
        held = ExitStack()
        while True:
            try:
                held.enter_context(storage.lock(storage.join(self.directory, sha256 + LOCK_SUFFIX)))
                break
            except storage.LockedError:
                time.sleep(WAIT_S)
        with held:
            yield

    def _make_room(self, incoming: int) -> None:
        """Delete least recently used files until ``incoming`` more bytes fit under the limit; pinned ones stay."""
        entries = self._entries()
        total = incoming + sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.limit:
                return
            if path.endswith(SUFFIX) and not _pins[path] and self._evict(path):
                total -= size
        if total > self.limit:
            logger.warning(
                "%s: %.3g GB with the shards in use, over the cache limit of %.3g GB", self.directory, total / 1e9, self.limit / 1e9
            )

    def _entries(self) -> list[tuple[int, int, str]]:
        """(mtime, size, path) of every cached file and download under way; a killed download's debris is removed."""
        entries = []
        for path in storage.listdir(self.directory):
            if path.endswith(LOCK_SUFFIX):
                continue
            try:
                found = storage.stat(path)
            except FileNotFoundError:  # another process removed or renamed it meanwhile
                continue
            mtime = found.mtime_ns or 0  # the cache folder is local: it has one
            if storage.is_temporary(path) and time.time_ns() - mtime > STALE_S * 1e9:
                storage.remove(path)
            else:
                entries.append((mtime, found.size, path))
        return entries

    def _evict(self, path: str) -> bool:
        """Remove a cached file unless another process is fetching or touching it right now."""
        lock = path.removesuffix(SUFFIX) + LOCK_SUFFIX
        try:
            with storage.lock(lock):
                storage.remove(path)
                storage.remove(lock)
        except storage.LockedError:
            return False
        return True


def release(path: str) -> None:
    """Unpin a file ``local_copy`` returned: the cache may evict it again."""
    _pins[path] -= 1
    if _pins[path] <= 0:
        del _pins[path]


def download(uri: str, target: str, sha256: str, size: int) -> None:
    """Copy ``uri`` to ``target`` hashing on the way; ``target`` appears only if size and sha256 are the manifest's."""
    with storage.writing(target) as sink:
        _stream_checked(uri, sha256, size, sink.write)


def checked_bytes(uri: str, sha256: str, size: int) -> pa.Buffer:
    """The bytes of ``uri``, checked like a download, for a one-off read (``shards verify``): nothing touches the disk."""
    data = bytearray()
    _stream_checked(uri, sha256, size, data.extend)
    return pa.py_buffer(data)


def _stream_checked(uri: str, sha256: str, size: int, write: Callable[[bytes], object]) -> None:
    """Pass the object's bytes to ``write`` in chunks, then raise ``ShardError`` unless they are the manifest's."""
    actual_size = storage.size(uri)
    if actual_size != size:
        raise ShardError(f"{uri}: {actual_size} bytes, manifest says {size} (truncated or rewritten)")
    digest = hashlib.sha256()
    for chunk in storage.read_chunks(uri, CHUNK):
        digest.update(chunk)
        write(chunk)
    if digest.hexdigest() != sha256:
        raise ShardError(f"{uri}: sha256 mismatch (manifest {sha256}, object {digest.hexdigest()}); the download was discarded")


def default_cache() -> ShardCache:
    """The cache ``using`` chose, else the one the environment names, else ~/.cache/corpusforge/shards of 20 GB."""
    if _chosen is not None:
        return _chosen
    return shard_cache(os.environ.get(DIR_ENV) or DEFAULT_DIR, float(os.environ.get(GB_ENV) or DEFAULT_GB))


@contextmanager
def using(directory: storage.PathLike | None = None, gigabytes: float | None = None) -> Iterator[ShardCache]:
    """Make ``default_cache`` this folder and limit for the block (None: the environment's or the default)."""
    global _chosen
    base = default_cache()
    chosen = shard_cache(directory or base.directory, base.limit / 1e9 if gigabytes is None else gigabytes)
    previous, _chosen = _chosen, chosen
    try:
        yield chosen
    finally:
        _chosen = previous


def shard_cache(directory: storage.PathLike, gigabytes: float) -> ShardCache:
    """A cache in a local folder (shards are memory-mapped from it) holding up to ``gigabytes`` (10^9 bytes)."""
    if not storage.is_local(directory):
        raise ValueError(f"{directory}: the shard cache must be a local folder")
    if gigabytes < 0:
        raise ValueError(f"the shard cache's size must not be negative, got {gigabytes} GB")
    return ShardCache(storage.resolve(directory), round(gigabytes * 1e9))


def open_cached(manifest: Manifest, entry: ShardEntry, cache: ShardCache | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """One shard of ``manifest``: a local folder's in place, a URI's from its cached copy (pinned while the table lives).

    Errors name the shard as the manifest places it (the object's URI), not the cached copy.
    """
    path = manifest.shard_path(entry)
    if storage.is_local(path):
        return open_shard(path, expected=entry, schema=schema)
    local = (cache or default_cache()).local_copy(path, entry.sha256, entry.bytes)
    try:
        table = open_shard(path, expected=entry, schema=schema, local=local)
    except BaseException:
        release(local)
        raise
    weakref.finalize(table, release, local)
    return table
