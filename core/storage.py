"""Every file the project reads or writes goes through here: local paths and URIs (``s3://``, ``gs://``, ...).

Paths are strings. A local path is opened with Python's own ``open`` (nothing added on the hot path);
any URI with a scheme goes through fsspec, the library ``datasets``, Dask and pandas use, so whatever
backend is installed works (``pip install 'corpusforge[s3]'`` brings s3fs, ``[gcs]`` gcsfs). Credentials
and endpoints come from the backend's usual environment (``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``),
never from our configuration.

Writes are whole or nothing: locally the bytes go to ``<name>.tmp-<uuid>`` beside the target and are
renamed into place; on an object store one PUT is already all-or-nothing, so the object is written
under its final name. An interrupted local run leaves only ``*.tmp-*`` debris, which
``is_temporary`` recognises.
"""

from __future__ import annotations

import fcntl
import glob as _glob
import hashlib
import json
import os
import posixpath
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any, NamedTuple

PathLike = str | os.PathLike
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_TEMP = re.compile(r"\.tmp-[0-9a-f]{32}")


# --- names ---------------------------------------------------------------------------------------


def scheme(path: PathLike) -> str | None:
    """``"s3"`` for ``s3://b/k``; None for a local path (``file://`` URIs count as local)."""
    found = _SCHEME.match(os.fspath(path))
    return None if found is None or found.group(1) == "file" else found.group(1)


def is_local(path: PathLike) -> bool:
    return scheme(path) is None


def resolve(path: PathLike) -> str:
    """The canonical string of a path: local ones absolute with symlinks resolved, URIs as given."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text.removeprefix("file://")
    if scheme(text) is None:
        return os.path.realpath(os.path.expanduser(text))
    return text.rstrip("/")


def _local(path: PathLike) -> str:
    """A local path as the OS takes it: ``file://`` dropped, ``~`` expanded (no realpath: that costs more
    than opening and reading a small file)."""
    text = os.fspath(path)
    return os.path.expanduser(text.removeprefix("file://"))


def join(base: PathLike, *parts: str) -> str:
    base = os.fspath(base)
    return os.path.join(base, *parts) if is_local(base) else posixpath.join(base, *parts)


def name(path: PathLike) -> str:
    return posixpath.basename(os.fspath(path).rstrip("/"))


def parent(path: PathLike) -> str:
    text = os.fspath(path).rstrip("/")
    return os.path.dirname(text) if is_local(text) else posixpath.dirname(text)


def relative(path: PathLike, start: PathLike) -> str:
    """``path`` relative to ``start``, with forward slashes (what manifests record)."""
    path, start = os.fspath(path), os.fspath(start)
    if is_local(path):
        return os.path.relpath(path, start).replace(os.sep, "/")
    return posixpath.relpath(path, start)


def is_temporary(path: PathLike) -> bool:
    """Whether a name is one of the atomic writers' temporaries (``<name>.tmp-<uuid>[suffix]``)."""
    return bool(_TEMP.search(name(path)))


def temp_name(path: PathLike, suffix: str = "") -> str:
    return f"{os.fspath(path)}.tmp-{uuid.uuid4().hex}{suffix}"


def filesystem(path: PathLike) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it): for libraries that take a filesystem object (pyarrow, Beam)."""
    import fsspec.core

    fs, inner = fsspec.core.url_to_fs(os.fspath(path))
    fs.invalidate_cache()  # other processes write the same store: a listing remembered from before may be stale
    return fs, inner


def arrow_filesystem(path: PathLike) -> tuple[Any, str]:
    """(pyarrow filesystem, path inside it): for pyarrow's writers and datasets (``filesystem=``)."""
    import pyarrow.fs as pafs

    if is_local(path):
        return pafs.LocalFileSystem(), os.path.abspath(_local(path))
    fs, inner = filesystem(path)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), inner


# --- reading -------------------------------------------------------------------------------------


def arrow_input(path: PathLike) -> Any:
    """A pyarrow input file for Arrow/Parquet readers: memory-mapped locally, streamed from a store."""
    import pyarrow as pa

    if is_local(path):
        return pa.memory_map(_local(path), "r")
    return pa.PythonFile(open_file(path, "rb"), mode="r")


def open_file(path: PathLike, mode: str = "rb", **kwargs: Any) -> IO:
    """Open for reading or appending; whole-file writes go through ``writing`` (atomic)."""
    if is_local(path):
        return open(_local(path), mode, **kwargs)
    fs, inner = filesystem(path)
    return fs.open(inner, mode, **kwargs)


def read_chunks(path: PathLike, chunk: int = 8 << 20) -> Iterator[bytes]:
    """The file's bytes in order, ``chunk`` at a time; from a store one ranged request per chunk, without
    fsspec's read-ahead block (s3fs's 50 MB cache beside the chunk doubled a download's memory)."""
    with open(_local(path), "rb") if is_local(path) else _open_without_readahead(path) as handle:
        while data := handle.read(chunk):
            yield data


def _open_without_readahead(path: PathLike) -> IO:
    """A store's object opened so that each read is one ranged request for exactly its bytes."""
    fs, inner = filesystem(path)
    return fs.open(inner, "rb", cache_type="none")


def read_bytes(path: PathLike) -> bytes:
    with open_file(path, "rb") as handle:
        return handle.read()


def read_range(path: PathLike, start: int, size: int) -> bytes:
    """``size`` bytes of a file from byte ``start``: one ranged request on a store."""
    if is_local(path):
        with open(_local(path), "rb") as handle:
            handle.seek(start)
            data = handle.read(size)
    else:
        fs, inner = filesystem(path)
        data = fs.cat_file(inner, start=start, end=start + size)
    if len(data) != size:
        raise OSError(f"{path}: {len(data)} bytes at {start}, expected {size}")
    return data


def read_text(path: PathLike) -> str:
    return read_bytes(path).decode("utf-8")


def read_json(path: PathLike) -> Any:
    return json.loads(read_bytes(path))


def exists(path: PathLike) -> bool:
    if is_local(path):
        return os.path.exists(_local(path))
    fs, inner = filesystem(path)
    return fs.exists(inner)


def is_file(path: PathLike) -> bool:
    if is_local(path):
        return os.path.isfile(_local(path))
    fs, inner = filesystem(path)
    return fs.isfile(inner)


def is_dir(path: PathLike) -> bool:
    if is_local(path):
        return os.path.isdir(_local(path))
    fs, inner = filesystem(path)
    return fs.isdir(inner)


def size(path: PathLike) -> int:
    if is_local(path):
        return os.path.getsize(_local(path))
    fs, inner = filesystem(path)
    return int(fs.size(inner))


CONTENT_TAGS = ("ETag", "etag", "generation")  # S3's entity tag, GCS's (new at every write), a generation number


class Stat(NamedTuple):
    size: int
    mtime_ns: int | None  # local files
    content_tag: str | None  # an object store's own tag of the content (S3's ETag, GCS's etag): another when the content changes


def stat(path: PathLike) -> Stat:
    """A file's size and what tells that it was written again: a local file's mtime, an object's content tag (one
    request to the store, where ``size`` and a second look-up would be two)."""
    if is_local(path):
        found = os.stat(_local(path))
        return Stat(found.st_size, found.st_mtime_ns, None)
    fs, inner = filesystem(path)
    info = fs.info(inner)
    return Stat(int(info["size"]), None, next((str(info[key]) for key in CONTENT_TAGS if info.get(key)), None))


def _full(path: str, found: str) -> str:
    """A path fsspec returned (no scheme) as a URI of ``path``'s scheme."""
    protocol = scheme(path)
    return found if protocol is None or scheme(found) else f"{protocol}://{found}"


def listdir(path: PathLike) -> list[str]:
    """The sorted full paths directly inside a folder (empty when there is none)."""
    if is_local(path):
        root = _local(path)
        return sorted(os.path.join(root, entry) for entry in os.listdir(root)) if os.path.isdir(root) else []
    fs, inner = filesystem(path)
    if not fs.isdir(inner):
        return []
    return sorted(
        _full(os.fspath(path), entry.rstrip("/")) for entry in fs.ls(inner, detail=False) if entry.rstrip("/") != inner.rstrip("/")
    )


def glob(pattern: PathLike) -> list[str]:
    """Sorted paths matching a glob pattern (``**`` spans folders)."""
    pattern = os.fspath(pattern)
    if is_local(pattern):
        return sorted(_glob.glob(os.path.expanduser(pattern), recursive=True))
    fs, inner = filesystem(pattern)
    return sorted(_full(pattern, found) for found in fs.glob(inner))


def files_under(root: PathLike) -> list[str]:
    """Every finished file below a folder, sorted (an atomic writer's temporaries left out)."""
    return [path for path, _ in sized_files_under(root)]


def sized_files_under(root: PathLike) -> list[tuple[str, int]]:
    """``files_under`` with each file's size in bytes, from the one listing (a store's LIST carries sizes:
    no request per file)."""
    root = os.fspath(root)
    if is_local(root):
        top = _local(root)
        paths = [os.path.join(folder, f) for folder, _, files in os.walk(top) for f in files]
        found = [(path, os.path.getsize(path)) for path in paths if not is_temporary(path)]
    else:
        fs, inner = filesystem(root)
        listed = fs.find(inner, detail=True) if fs.isdir(inner) else {}
        found = [(_full(root, f), int(info["size"])) for f, info in listed.items() if not is_temporary(f)]
    return sorted(found)


@contextmanager
def local_copies(paths: Sequence[str]) -> Iterator[list[str]]:
    """``paths`` as local files for the block: local paths as they are, a store's objects downloaded once
    into a private temporary folder removed afterwards (for readers that pass over a file more than once)."""
    remote = [path for path in paths if not is_local(path)]
    if not remote:
        yield [_local(path) for path in paths]
        return
    with tempfile.TemporaryDirectory(prefix="corpusforge-") as scratch:
        copies = {}
        for index, path in enumerate(remote):
            fs, inner = filesystem(path)
            copies[path] = os.path.join(scratch, f"{index}-{name(path)}")
            fs.get_file(inner, copies[path])
        yield [copies.get(path) or _local(path) for path in paths]


def sha256(path: PathLike) -> str:
    digest = hashlib.sha256()
    for chunk in read_chunks(path):
        digest.update(chunk)
    return digest.hexdigest()


# --- writing -------------------------------------------------------------------------------------


def makedirs(path: PathLike) -> None:
    """Create a folder and its parents (object stores have no folders: nothing to do there)."""
    if is_local(path):
        os.makedirs(_local(path), exist_ok=True)


@contextmanager
def writing(path: PathLike, mode: str = "wb") -> Iterator[IO]:
    """A handle whose bytes appear at ``path`` only when the block ends without an exception."""
    with local_output(path) as temp, open(temp, mode) as handle:  # an object store: uploaded once finished
        yield handle


@contextmanager
def local_output(path: PathLike, suffix: str = "") -> Iterator[str]:
    """A local temporary (file or folder) to write, published at ``path`` when the block ends normally.

    For libraries that write by local path (tokenizers' ``save``, matplotlib's ``savefig``). Locally it is a
    sibling renamed into place; for a URI it is a local temporary uploaded once finished. ``suffix``
    keeps an extension for writers that choose the format from it. Replacing an existing folder is the
    caller's decision: a rename only replaces a missing or empty one.
    """
    if is_local(path):
        target = _local(path)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)  # a bare file name: the current folder
        temp = temp_name(target, suffix)
        try:
            yield temp
            os.replace(temp, target)
        except BaseException:
            _remove_local(temp)
            raise
        return
    with tempfile.TemporaryDirectory(prefix="corpusforge-") as scratch:
        temp = os.path.join(scratch, name(path) + suffix)
        yield temp
        upload(temp, path)


def upload(local: str, path: PathLike) -> None:
    """Copy a finished local file or folder to ``path``."""
    if is_local(path):
        target = _local(path)
        if os.path.isdir(local):
            shutil.copytree(local, target, dirs_exist_ok=True)
        else:
            with local_output(target) as temp:
                shutil.copyfile(local, temp)
        return
    fs, inner = filesystem(path)
    if os.path.isdir(local):
        for folder, _, files in os.walk(local):
            for f in files:
                source = os.path.join(folder, f)
                fs.put_file(source, posixpath.join(inner, os.path.relpath(source, local).replace(os.sep, "/")))
    else:
        fs.put_file(local, inner)


def write_bytes(path: PathLike, data: bytes) -> None:
    with writing(path) as handle:
        handle.write(data)


def write_text(path: PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: PathLike, data: Any) -> str:
    write_bytes(path, (json.dumps(data, indent=2, default=str) + "\n").encode("utf-8"))
    return os.fspath(path)


def rename(source: PathLike, target: PathLike) -> None:
    """Move a file into place (a rename locally; a copy then delete on object stores)."""
    if is_local(source):
        os.replace(_local(source), _local(target))
        return
    fs, inner = filesystem(source)
    fs.mv(inner, filesystem(target)[1])


def remove(path: PathLike) -> None:
    """Delete one file; a missing one is not an error."""
    if is_local(path):
        try:
            os.unlink(_local(path))
        except FileNotFoundError:
            pass
        return
    fs, inner = filesystem(path)
    if fs.exists(inner):
        fs.rm_file(inner)


def remove_tree(path: PathLike) -> None:
    """Delete a folder and everything below it; a missing one is not an error."""
    if is_local(path):
        shutil.rmtree(_local(path), ignore_errors=True)
        return
    fs, inner = filesystem(path)
    if fs.exists(inner):
        fs.rm(inner, recursive=True)


def _remove_local(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# --- the build lock ------------------------------------------------------------------------------


class LockedError(ValueError):
    """Another process holds the lock."""


LEASE_S = 120.0  # an object-store lock not renewed for this long was left by a killed launcher
RENEW_S = 20.0


@contextmanager
def lock(path: PathLike, lease_s: float = LEASE_S) -> Iterator[None]:
    """Hold an exclusive lock named by ``path`` for the block, or raise ``LockedError`` at once.

    Locally an advisory ``flock``: the kernel drops it when the holder dies. On an object store a lease
    object created only if absent (S3 ``If-None-Match``, fsspec's exclusive ``xb`` mode), renewed every
    ``RENEW_S`` seconds while held and deleted at the end; a lease not renewed for ``LEASE_S`` seconds
    (its holder was killed) is taken over, by one taker only: each stale lease can be claimed once.
    """
    if not is_local(path):
        with _lease(os.fspath(path), lease_s):
            yield
        return
    target = _local(path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(target) from None
        yield


def create_exclusive(path: PathLike, data: bytes) -> bool:
    """Write ``data`` at ``path`` only if nothing is there; False when something is."""
    if is_local(path):
        try:
            with open(_local(path), "xb") as handle:
                handle.write(data)
            return True
        except FileExistsError:
            return False
    fs, inner = filesystem(path)
    try:
        with fs.open(inner, "xb") as handle:
            handle.write(data)
        return True
    except FileExistsError:
        return False


@contextmanager
def _lease(path: str, lease_s: float) -> Iterator[None]:
    import threading
    import time

    holder = uuid.uuid4().hex
    lease = lambda: json.dumps({"holder": holder, "renewed": time.time()}).encode()  # noqa: E731
    if not create_exclusive(path, lease()):
        try:
            current = read_json(path)
        except (OSError, ValueError):
            raise LockedError(path) from None
        if time.time() - float(current.get("renewed", 0)) < lease_s:
            raise LockedError(path)
        claim = f"{path}.taken-{current.get('holder')}-{current.get('renewed')}"
        if not create_exclusive(claim, holder.encode()):
            raise LockedError(path)
        write_bytes(path, lease())
        remove(claim)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(min(RENEW_S, lease_s / 4)):
            write_bytes(path, lease())

    renewer = threading.Thread(target=renew, daemon=True, name="lease-renewal")
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        remove(path)


def normpath(path: PathLike) -> str:
    """``a/b/../c`` as ``a/c``, a URI's scheme kept: an object store would take ``..`` as part of a key."""
    text = os.fspath(path)
    if is_local(text):
        return os.path.normpath(text)
    protocol, rest = text.split("://", 1)
    return f"{protocol}://{posixpath.normpath(rest)}"


def is_inside(path: PathLike, folder: PathLike) -> bool:
    """Whether ``path`` lies below ``folder`` (both as ``resolve`` gives them)."""
    path, folder = resolve(path), resolve(folder).rstrip("/")
    return path.startswith(folder + ("/" if not is_local(folder) else os.sep))


def arrow_input_unmapped(path: PathLike) -> Any:
    """A pyarrow input file read with plain reads, never memory-mapped (mapped pages count toward a
    worker's resident memory): for files read once, a batch or row group at a time. From a store without
    fsspec's read-ahead (s3fs fetches 50 MB blocks: a footer read cost a whole block)."""
    import pyarrow as pa

    if is_local(path):
        return pa.OSFile(_local(path), "rb")
    return pa.PythonFile(_open_without_readahead(path), mode="r")


@contextmanager
def arrow_output(path: PathLike, digest: dict[str, Any] | None = None) -> Iterator[Any]:
    """``writing`` for Arrow and Parquet writers: a pyarrow output stream (native writes locally) whose
    bytes appear at ``path`` only when the block ends normally. ``digest``, when given, receives the file's
    ``bytes`` and ``sha256``, taken from the local file before it is published (a store's copy is not read back)."""
    import pyarrow as pa

    with local_output(path) as temp:  # an object store: uploaded once finished
        with pa.OSFile(temp, "wb") as sink:
            yield sink
        if digest is not None:
            digest.update(bytes=os.path.getsize(temp), sha256=sha256(temp))


def walk(root: PathLike) -> list[str]:
    """Every file and folder below ``root``, temporaries included, sorted (for sweeping a killed build's debris)."""
    root = os.fspath(root)
    if is_local(root):
        top = _local(root)
        return sorted(os.path.join(folder, entry) for folder, dirs, files in os.walk(top) for entry in [*dirs, *files])
    fs, inner = filesystem(root)
    return (
        sorted(_full(root, found) for found in fs.find(inner, withdirs=True) if found.rstrip("/") != inner.rstrip("/"))
        if fs.isdir(inner)
        else []
    )
