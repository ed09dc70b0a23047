"""Write globally shuffled, balanced Arrow IPC stream shards and their manifest (layout in ``shards.format``).

The global shuffle scales by range partitioning with spill files, as external shuffles do: every
example carries a random 64-bit key, bucket ``b = key * B >> 64`` holds an ordered range of the
global order, and whoever makes examples writes each bucket's share straight to disk
(``spill_pieces``, run inside Beam workers) instead of sending it through the runner's shuffle,
which the in-memory runner would hold in memory several times over. ``write_spilled_shards`` then
cuts the global order into S shards whose example counts differ by at most one: the launching
process only plans the cut from a listing of the spill files (``plan_cut``: which rows of which
sorted buckets each shard takes; every file's name carries its row count) and hands one
self-contained job per shard (``ShardJob``) to a pool of spawned worker processes, or to whatever
``cut`` it is given (Beam steps on a distributed runner's workers). A job sorts the keys of each
bucket it needs and copies its rows straight into the shard's columns (each shard is one record
batch, so readers get contiguous columns), so a worker holds one shard plus one bucket's keys plus
one spill file, whatever the corpus size, and the launcher holds only the plan.

Every file is written under a temporary name and renamed into place; the manifest is removed
before and written after all shards, so a directory without ``manifest.json`` is never complete.
"""

from __future__ import annotations

import fnmatch
import json
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from corpusforge.core import storage
from corpusforge.shards.format import MANIFEST_NAME, OLD_SHARD_GLOB, SHARD_PATTERN, numpy_dtype

KEY = "key"
# Spill files in an object store are zstd-compressed: BERT examples shrink to about half (padding, weights
# of 1.0, small positions), and there they are the shard stages' largest traffic. On a local disk they are
# written as they are: compressing the many small per-bucket files cost ~15% of the BERT stage's CPU on 4 KB
# articles (zstd at ~180 MB/s on these columns, then decompressed again by the cut), for half the temporary disk.
SPILL_COMPRESSION = "zstd"


def write_ipc(path: storage.PathLike, table: pa.Table, compression: str | None = None, digest: dict[str, Any] | None = None) -> None:
    """One Arrow IPC stream, one record batch, written under a temporary name then renamed (``digest``: see
    ``storage.arrow_output``).

    The stream flavour because it is the one ``datasets.Dataset.from_file`` reads; memory-mapped,
    an uncompressed stream is read as zero-copy as an IPC file.
    """
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with storage.arrow_output(path, digest) as sink:
        with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
            for batch in table.combine_chunks().to_batches(max_chunksize=max(table.num_rows, 1)):
                writer.write_batch(batch)


def record_batch(schema: pa.Schema, columns: dict[str, np.ndarray]) -> pa.RecordBatch:
    """Numpy columns (2-D for fixed-size lists) as a record batch of ``schema``, copying as little as possible."""
    arrays = []
    for field in schema:
        values = np.ascontiguousarray(columns[field.name])
        if pa.types.is_fixed_size_list(field.type):
            flat = pa.array(values.reshape(-1), type=field.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, field.type.list_size))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def keyed_schema(schema: pa.Schema) -> pa.Schema:
    return schema.insert(0, pa.field(KEY, pa.uint64()))


def range_buckets(keys: np.ndarray, num_buckets: int) -> np.ndarray:
    """Bucket of each 64-bit key: ``key * B >> 64`` (on the top 32 bits), so buckets are ordered ranges."""
    return ((keys.astype(np.uint64) >> np.uint64(32)) * np.uint64(num_buckets)) >> np.uint64(32)


def spill_pieces(
    directory: storage.PathLike, origin: str, keys: np.ndarray, columns: dict[str, np.ndarray], schema: pa.Schema, num_buckets: int
) -> None:
    """Write the examples of one producer as ``directory/bucket-<b>/<origin>.<rows>.arrow``, one file per range bucket.

    A file's name depends only on its bucket, ``origin`` (a stable name of the producer) and its
    row count, which a retried bundle reproduces (every key is drawn from stable ids), so the retry
    replaces its own files, atomically, rather than adding copies. The count in the name lets the
    cut be planned from a listing alone: no spill file is read by the launcher, even on a store.
    """
    batch = record_batch(keyed_schema(schema), {KEY: keys, **columns})
    compression = None if storage.is_local(directory) else SPILL_COMPRESSION
    owner = range_buckets(keys, num_buckets)
    order = np.argsort(owner, kind="stable")
    for rows in np.split(order, np.flatnonzero(np.diff(owner[order])) + 1):
        if len(rows):
            folder = storage.join(directory, f"bucket-{int(owner[rows[0]]):08d}")
            storage.makedirs(folder)
            table = pa.Table.from_batches([batch.take(pa.array(rows))])
            write_ipc(storage.join(folder, f"{origin}.{len(rows)}.arrow"), table, compression)


def _matching(folder: storage.PathLike, pattern: str) -> list[str]:
    """The sorted paths directly in ``folder`` whose name matches ``pattern`` (the folder's own name is taken literally)."""
    return [path for path in storage.listdir(folder) if fnmatch.fnmatchcase(storage.name(path), pattern)]


def _spill_buckets(directory: storage.PathLike) -> Iterator[list[str]]:
    """Each non-empty bucket's spill files, buckets in key order (names are zero-padded), files in origin-name
    order: equal keys (vanishingly rare) then always tie the same way."""
    for folder in _matching(directory, "bucket-*"):
        paths = _matching(folder, "*.arrow")
        if paths:
            yield paths


def iter_sorted_buckets(directory: storage.PathLike) -> Iterator[pa.RecordBatch]:
    """The global order: one record batch per bucket, sorted by key, without the key column."""
    for paths in _spill_buckets(directory):
        schema = _open_spill(paths[0]).schema.remove(0)
        rows = sum(_spill_rows(path) for path in paths)
        columns = _empty_columns(schema, rows)
        _copy_sorted(paths, 0, rows, schema, columns, 0)
        yield record_batch(schema, columns)


def _copy_sorted(paths: Sequence[str], first: int, rows: int, schema: pa.Schema, columns: dict[str, np.ndarray], at: int) -> None:
    """Copy rows ``first .. first + rows`` of the bucket's key order (ties: file order) into ``columns[at:]``.

    Only the keys are sorted; each spill file is then read in turn and its rows in the range
    scattered straight to their places, so a bucket costs its keys plus one spill file.
    """
    with storage.local_copies(paths) as local:  # read twice below: from a store, downloaded once
        keys = np.concatenate([_spill_keys(path) for path in local])
        if len(keys) < first + rows:
            raise ValueError(f"{storage.parent(paths[0])}: {len(keys)} examples in the spill files, the cut needs {first + rows}")
        destination = np.empty(len(keys), dtype=np.int64)
        destination[np.argsort(keys, kind="stable")] = np.arange(len(keys)) - first
        start = 0
        for path in local:
            batch = _open_spill(path, schema)
            places = destination[start : start + batch.num_rows]
            inside = (places >= 0) & (places < rows)
            taken = slice(None) if inside.all() else np.flatnonzero(inside)  # a whole file: its columns as they are, no copy
            targets = at + places[taken]
            for name, column in columns.items():
                column[targets] = _column_view(batch.column(name))[taken]
            start += batch.num_rows


def _open_spill(path: str, schema: pa.Schema | None = None) -> pa.RecordBatch:
    """A spill file's one record batch; with ``schema``, checked to hold the key plus exactly its columns."""
    batches = _read_spill(path)
    if len(batches) != 1:
        raise ValueError(f"{path}: {len(batches)} record batches in a spill file, expected one")
    if schema is not None and not batches[0].schema.equals(keyed_schema(schema)):
        raise ValueError(
            f"{path}: spill file columns ({_columns(batches[0].schema)}) differ from the key plus the shard's ({_columns(schema)})"
        )
    return batches[0]


def _spill_keys(path: str) -> np.ndarray:
    """A spill file's sort keys alone: only the key column's buffers are read and decompressed (the rows
    are read once, after the keys are sorted)."""
    batches = _read_spill(path, pa.ipc.IpcReadOptions(included_fields=[0]))
    if len(batches) != 1 or batches[0].schema.names != [KEY]:
        raise ValueError(f"{path}: expected one record batch whose first column is {KEY!r}")
    return batches[0].column(0).to_numpy()


def _read_spill(path: str, options: pa.ipc.IpcReadOptions | None = None) -> list[pa.RecordBatch]:
    """A spill file's record batches (decompressed), or a one-line error."""
    try:
        return list(pa.ipc.open_stream(storage.arrow_input(path), options=options))
    except (OSError, pa.ArrowException) as error:
        raise ValueError(f"{path}: unreadable spill file ({error})") from error


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)


def _spill_rows(path: str) -> int:
    """A spill file's examples, from its name (``<origin>.<rows>.arrow``, see ``spill_pieces``)."""
    try:
        return int(storage.name(path).rsplit(".", 2)[1])
    except (IndexError, ValueError):
        raise ValueError(f"{path}: not a spill file name (<origin>.<rows>.arrow)") from None


def _empty_columns(schema: pa.Schema, rows: int) -> dict[str, np.ndarray]:
    return {field.name: np.empty((rows, *_row_shape(field.type)), dtype=numpy_dtype(field.type)) for field in schema}


def _row_shape(kind: pa.DataType) -> tuple[int, ...]:
    return (kind.list_size,) if pa.types.is_fixed_size_list(kind) else ()


def _column_view(array: pa.Array) -> np.ndarray:
    """A fixed-size column as numpy, zero-copy (2-D for fixed-size lists)."""
    if pa.types.is_fixed_size_list(array.type):
        return array.flatten().to_numpy().reshape(len(array), array.type.list_size)
    return array.to_numpy()


def spilled_rows(directory: storage.PathLike) -> int:
    """Examples in all spill files, from their names: no file is read."""
    return sum(_spill_rows(path) for paths in _spill_buckets(directory) for path in paths)


def row_bytes(schema: pa.Schema) -> int:
    """Bytes per example: every shard column is fixed-size."""
    total = 0
    for field in schema:
        width = field.type.list_size if pa.types.is_fixed_size_list(field.type) else 1
        value = field.type.value_type if pa.types.is_fixed_size_list(field.type) else field.type
        total += width * value.bit_width // 8
    return total


def plan_shard_sizes(num_examples: int, bytes_per_example: int, target_bytes: int, max_examples: int | None) -> list[int]:
    """Examples per shard: as few shards as the limits allow, counts differing by at most one."""
    count = max(1, math.ceil(num_examples * bytes_per_example / target_bytes))
    if max_examples:
        count = max(count, math.ceil(num_examples / max_examples))
    base, extra = divmod(num_examples, count)
    return [base + (index < extra) for index in range(count)]


def clear_outputs(out_dir: storage.PathLike) -> None:
    """Remove a previous run's manifest (first: the directory is then visibly incomplete) and shards."""
    storage.remove(storage.join(out_dir, MANIFEST_NAME))
    for stale in [*_matching(out_dir, "train-*-of-*.arrow*"), *_matching(out_dir, OLD_SHARD_GLOB)]:
        storage.remove(stale)


def write_shards(
    batches: Iterable[pa.RecordBatch],
    num_examples: int,
    schema: pa.Schema,
    out_dir: storage.PathLike,
    manifest: dict,
    *,
    target_bytes: int,
    max_examples: int | None = None,
    compression: str = "none",
) -> dict:
    """Cut the globally ordered ``batches`` into balanced shards here, in order, then write the manifest last.

    ``manifest`` holds everything but "shards" and the example/token totals, which are filled here.
    """
    out_dir = os.fspath(out_dir)
    storage.makedirs(out_dir)
    clear_outputs(out_dir)
    sizes = plan_shard_sizes(num_examples, row_bytes(schema), target_bytes, max_examples)
    codec = None if compression == "none" else compression
    entries = []
    pending = _fill_shards(batches, sizes, schema)
    with tqdm(total=num_examples, unit="ex", desc="shards", disable=None) as progress:
        for index, size in enumerate(sizes):
            table = pa.Table.from_batches([next(pending)]) if size else schema.empty_table()
            path = storage.join(out_dir, SHARD_PATTERN.format(index=index, count=len(sizes)))
            entries.append(_write_shard_file(path, table, codec))
            progress.update(table.num_rows)
            del table  # before the next shard is filled: one shard in memory at a time
    if next(pending, None) is not None:
        raise ValueError(f"more than the announced {num_examples} examples")
    return _write_manifest(out_dir, manifest, entries)


Piece = tuple[int, int, int]  # (bucket, first row within the bucket's sorted order, rows)


@dataclass(frozen=True)
class CutPlan:
    """How the global order is cut: ``pieces[s]`` are the rows of shard ``s``, in order, ``buckets[b]`` the spill files of bucket ``b``."""

    buckets: list[list[str]]
    sizes: list[int]
    pieces: list[list[Piece]]


def plan_cut(directory: storage.PathLike, schema: pa.Schema, target_bytes: int, max_examples: int | None = None) -> CutPlan:
    """The shards of the spilled examples in ``directory`` and the bucket rows each takes, from a listing of the spill files alone.

    A shard may straddle buckets and a bucket may feed several shards (each job then sorts it).
    """
    buckets = list(_spill_buckets(directory))
    rows = [sum(_spill_rows(path) for path in paths) for paths in buckets]
    sizes = plan_shard_sizes(sum(rows), row_bytes(schema), target_bytes, max_examples)
    pieces: list[list[Piece]] = []
    bucket = first = 0
    for size in sizes:
        shard: list[Piece] = []
        while size:
            if first == rows[bucket]:
                bucket, first = bucket + 1, 0
                continue
            take = min(size, rows[bucket] - first)
            shard.append((bucket, first, take))
            first, size = first + take, size - take
        pieces.append(shard)
    return CutPlan(buckets, sizes, pieces)


def write_shard(path: str, pieces: Sequence[tuple[Sequence[str], int, int]], schema: pa.Schema, compression: str | None) -> dict:
    """One shard from (spill files of a bucket, first row in its sorted order, rows) pieces; returns its manifest entry.

    Run in a worker process or Beam worker. The columns are allocated once and filled by copies, never slices of
    a spill batch: the IPC writer records a slice's buffer lengths padded (see ``_fill_shards``).
    """
    size = sum(rows for _, _, rows in pieces)
    columns = _empty_columns(schema, size)
    at = 0
    for paths, first, rows in pieces:
        _copy_sorted(paths, first, rows, schema, columns, at)
        at += rows
    table = pa.Table.from_batches([record_batch(schema, columns)]) if size else schema.empty_table()
    return _write_shard_file(path, table, compression)


@dataclass(frozen=True)
class ShardJob:
    """One shard of a cut, self-contained (paths only), so any process or worker that reaches the files can write it."""

    path: str
    pieces: list[tuple[list[str], int, int]]  # (spill files of a bucket, first row in its sorted order, rows)
    schema: pa.Schema
    compression: str | None

    def write(self) -> dict:
        """Write the shard; returns its manifest entry (examples, tokens, bytes, sha256)."""
        return write_shard(self.path, self.pieces, self.schema, self.compression)


Cut = Callable[[list[ShardJob]], list[dict]]  # writes every job's shard, returns their entries in job order


def write_spilled_shards(
    directory: storage.PathLike,
    schema: pa.Schema,
    out_dir: storage.PathLike,
    manifest: dict,
    *,
    target_bytes: int,
    max_examples: int | None = None,
    compression: str = "none",
    workers: int | None = None,
    expected: int | None = None,
    cut: Cut | None = None,
    processes: BaseContext | None = None,
) -> dict:
    """Cut the spilled examples in ``directory`` into balanced shards, one job per shard, then write the manifest last.

    ``expected``: the examples the producers announced; the spill files must hold exactly that many.

    Here only the plan is made and the manifest written. ``cut`` runs the jobs (a distributed
    runner's workers, say); by default they run in ``workers`` processes of the ``processes`` context
    (one per shard up to the CPU count; spawned unless a forkserver is given, never forked from here:
    the launcher runs Beam's and gRPC's threads), or here when that is 1 (a process start costs more
    than it saves then). A job's error is raised here, with the worker's message; the manifest is then
    not written.
    """
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    plan = plan_cut(directory, schema, target_bytes, max_examples)
    if expected is not None and sum(plan.sizes) != expected:
        raise RuntimeError(f"spill files hold {sum(plan.sizes)} examples, the example stage made {expected}")
    out_dir = os.fspath(out_dir)
    storage.makedirs(out_dir)
    clear_outputs(out_dir)
    codec = None if compression == "none" else compression
    jobs = [
        ShardJob(
            storage.join(out_dir, SHARD_PATTERN.format(index=index, count=len(plan.sizes))),
            [(plan.buckets[bucket], first, rows) for bucket, first, rows in shard],
            schema,
            codec,
        )
        for index, shard in enumerate(plan.pieces)
    ]
    entries = cut(jobs) if cut else _cut_in_processes(jobs, min(len(jobs), workers or os.cpu_count() or 1), processes)
    if [entry["file"] for entry in entries] != [storage.name(job.path) for job in jobs]:
        raise RuntimeError(f"the cut returned {len(entries)} entries out of the planned shards' order ({len(jobs)} shards)")
    return _write_manifest(out_dir, manifest, entries)


def _cut_in_processes(jobs: list[ShardJob], workers: int, processes: BaseContext | None) -> list[dict]:
    """Every job's shard written here (``workers`` 1) or in processes of ``processes`` (spawned by default), entries
    in job order; on the first error, pending jobs are cancelled."""
    with tqdm(total=sum(rows for job in jobs for _, _, rows in job.pieces), unit="ex", desc="shards", disable=None) as progress:
        if workers == 1:
            entries = []
            for job in jobs:
                entries.append(job.write())
                progress.update(entries[-1]["examples"])
            return entries
        with ProcessPoolExecutor(workers, mp_context=processes or multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(write_shard, job.path, job.pieces, job.schema, job.compression) for job in jobs]
            try:
                for future in as_completed(futures):
                    progress.update(future.result()["examples"])
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
            return [future.result() for future in futures]


def _write_shard_file(path: str, table: pa.Table, compression: str | None) -> dict:
    """Write one shard and return its manifest entry. Size and sha256 are taken from the finished local
    file before it is published: on an object store the shard is not downloaded again to be hashed."""
    digest: dict[str, Any] = {}
    write_ipc(path, table, compression, digest)
    return {
        "file": storage.name(path),
        "examples": table.num_rows,
        "tokens": int(np.sum(table.column("length").to_numpy(), dtype=np.int64)),
        "bytes": digest["bytes"],
        "sha256": digest["sha256"],
    }


def _write_manifest(out_dir: str, manifest: dict, entries: list[dict]) -> dict:
    """``manifest`` with the shard entries and totals, written atomically: the last file of a run."""
    manifest = dict(manifest, shards=entries)
    if "vocab" in manifest:  # relative to the shard folder, so a directory moved together with its vocabulary still verifies
        manifest["vocab"] = dict(manifest["vocab"], path=_vocab_from(out_dir, manifest["vocab"]["path"]))
    manifest["totals"] = dict(
        manifest.get("totals", {}), examples=sum(e["examples"] for e in entries), tokens=sum(e["tokens"] for e in entries)
    )
    storage.write_bytes(storage.join(out_dir, MANIFEST_NAME), json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    return manifest


def _vocab_from(out_dir: str, vocab: str) -> str:
    """The vocabulary's path relative to the shard folder; absolute when they are on different stores."""
    vocab, out_dir = storage.resolve(vocab), storage.resolve(out_dir)
    return storage.relative(vocab, out_dir) if storage.scheme(vocab) == storage.scheme(out_dir) else vocab


def _fill_shards(batches: Iterable[pa.RecordBatch], sizes: Sequence[int], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """One record batch of exactly ``sizes[i]`` rows per non-empty shard, then any rows left over.

    Each shard's columns are allocated once and filled in place, so an input batch is freed as soon
    as it is copied: a shard costs one copy of itself, not its pieces plus their concatenation.
    Always a fresh copy, never a slice of an input batch: the IPC writer records a slice's buffer
    lengths padded, so shard bytes would depend on how the input happened to be batched.
    """
    stream = iter(batches)
    current: pa.RecordBatch | None = None
    for size in sizes:
        if size == 0:
            continue
        columns = _empty_columns(schema, size)
        filled = 0
        while filled < size:
            if current is None or current.num_rows == 0:
                current = next(stream, None)
                if current is None:
                    raise ValueError(f"fewer examples than announced (short by {size - filled} in a shard of {size})")
            take = min(size - filled, current.num_rows)
            part = current.slice(0, take)
            for name, column in columns.items():
                column[filled : filled + take] = _column_view(part.column(name))
            current, filled = current.slice(take), filled + take
        yield record_batch(schema, columns)
    for rest in [current, *stream]:
        if rest is not None and rest.num_rows:
            yield rest
