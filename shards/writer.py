"""Write globally shuffled, balanced Arrow IPC stream shards and their manifest (layout in ``shards.format``).

The global shuffle scales by range partitioning with spill files, as external shuffles do: every
example carries a random 64-bit key, bucket ``b = key * B >> 64`` holds an ordered range of the
global order, and whoever makes examples writes each bucket's share straight to disk
(``spill_pieces``, run inside Beam workers) instead of sending it through the runner's shuffle,
which the in-memory runner would hold in memory several times over. A final pass in the launching
process (``iter_sorted_buckets`` into ``write_shards``) sorts one bucket at a time from memory maps
and cuts the global order into S shards whose example counts differ by at most one. Memory is
bounded by one bucket plus one shard (each shard is one record batch, so readers get contiguous
columns) plus one spill file, whatever the corpus size.

Every file is written under a temporary name and renamed into place; the manifest is removed
before and written after all shards, so a directory without ``manifest.json`` is never complete.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from corpusforge.files import atomic_path, atomic_write_bytes, sha256_file
from corpusforge.shards.format import MANIFEST_NAME, SHARD_PATTERN, numpy_dtype

KEY = "key"


def write_ipc(path: Path, table: pa.Table, compression: str | None = None) -> None:
    """One Arrow IPC stream, one record batch, written under a temporary name then renamed.

    The stream flavour because it is the one ``datasets.Dataset.from_file`` reads; memory-mapped,
    an uncompressed stream is read as zero-copy as an IPC file.
    """
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with atomic_path(path) as temp, pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_stream(sink, table.schema, options=options) as writer:
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
    directory: Path, origin: str, keys: np.ndarray, columns: dict[str, np.ndarray], schema: pa.Schema, num_buckets: int
) -> None:
    """Write the examples of one producer as ``directory/bucket-<b>/<origin>.arrow``, one file per range bucket.

    A file's name depends only on its bucket and ``origin`` (a stable name of the producer), so a
    retried bundle replaces its own files, atomically, rather than adding copies.
    """
    batch = record_batch(keyed_schema(schema), {KEY: keys, **columns})
    owner = range_buckets(keys, num_buckets)
    order = np.argsort(owner, kind="stable")
    for rows in np.split(order, np.flatnonzero(np.diff(owner[order])) + 1):
        if len(rows):
            folder = Path(directory) / f"bucket-{int(owner[rows[0]]):08d}"
            folder.mkdir(parents=True, exist_ok=True)
            write_ipc(folder / f"{origin}.arrow", pa.Table.from_batches([batch.take(pa.array(rows))]))


def _spill_buckets(directory: Path) -> Iterator[list[Path]]:
    """Each non-empty bucket's spill files, buckets in key order (names are zero-padded), files in origin-name
    order: equal keys (vanishingly rare) then always tie the same way."""
    for folder in sorted(Path(directory).glob("bucket-*")):
        paths = sorted(folder.glob("*.arrow"))
        if paths:
            yield paths


def iter_sorted_buckets(directory: Path) -> Iterator[pa.RecordBatch]:
    """The global order: one record batch per bucket, sorted by key, without the key column.

    Each spill file is memory-mapped in turn and its rows scattered straight to their sorted
    places, so a bucket costs one copy of itself plus one spill file.
    """
    for paths in _spill_buckets(directory):
        keys = np.concatenate([_open_spill(path).column(KEY).to_numpy() for path in paths])
        destination = np.empty(len(keys), dtype=np.int64)
        destination[np.argsort(keys, kind="stable")] = np.arange(len(keys))
        schema = _open_spill(paths[0]).schema.remove(0)
        columns = {field.name: np.empty((len(keys), *_row_shape(field.type)), dtype=numpy_dtype(field.type)) for field in schema}
        start = 0
        for path in paths:
            batch = _open_spill(path)
            rows = destination[start : start + batch.num_rows]
            for name, column in columns.items():
                column[rows] = _column_view(batch.column(name))
            start += batch.num_rows
        yield record_batch(schema, columns)


def _open_spill(path: Path) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.memory_map(str(path), "r")).read_next_batch()


def _row_shape(kind: pa.DataType) -> tuple[int, ...]:
    return (kind.list_size,) if pa.types.is_fixed_size_list(kind) else ()


def _column_view(array: pa.Array) -> np.ndarray:
    """A fixed-size column as numpy, zero-copy (2-D for fixed-size lists)."""
    if pa.types.is_fixed_size_list(array.type):
        return array.flatten().to_numpy().reshape(len(array), array.type.list_size)
    return array.to_numpy()


def spilled_rows(directory: Path) -> int:
    """Examples in all spill files, from the batch headers (memory-mapped: the columns are not read)."""
    return sum(
        batch.num_rows
        for paths in _spill_buckets(directory)
        for path in paths
        for batch in pa.ipc.open_stream(pa.memory_map(str(path), "r"))
    )


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


def clear_outputs(out_dir: Path) -> None:
    """Remove a previous run's manifest (first: the directory is then visibly incomplete) and shards."""
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    for stale in out_dir.glob("shard-*-of-*.arrow*"):
        stale.unlink()


def write_shards(
    batches: Iterable[pa.RecordBatch],
    num_examples: int,
    schema: pa.Schema,
    out_dir: Path,
    manifest: dict,
    *,
    target_bytes: int,
    max_examples: int | None = None,
    compression: str = "none",
) -> dict:
    """Cut the globally ordered ``batches`` into balanced shards, then write the manifest last.

    ``manifest`` holds everything but "shards" and the example/token totals, which are filled here.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_outputs(out_dir)
    sizes = plan_shard_sizes(num_examples, row_bytes(schema), target_bytes, max_examples)
    codec = None if compression == "none" else compression
    entries = []
    pending = _fill_shards(batches, sizes, schema)
    with tqdm(total=num_examples, unit="ex", desc="shards", disable=None) as progress:
        for index, size in enumerate(sizes):
            table = pa.Table.from_batches([next(pending)]) if size else schema.empty_table()
            path = out_dir / SHARD_PATTERN.format(index=index, count=len(sizes))
            write_ipc(path, table, codec)
            entries.append(
                {
                    "file": path.name,
                    "examples": table.num_rows,
                    "tokens": int(np.sum(table.column("length").to_numpy(), dtype=np.int64)),
                    "bytes": path.stat().st_size,
                    "sha256": sha256_file(path),
                }
            )
            progress.update(table.num_rows)
            del table  # before the next shard is filled: one shard in memory at a time
    if next(pending, None) is not None:
        raise ValueError(f"more than the announced {num_examples} examples")
    manifest = dict(manifest, shards=entries)
    if "vocab" in manifest:  # relative to the shard folder, so a directory moved together with its vocabulary still verifies
        manifest["vocab"] = dict(manifest["vocab"], path=os.path.relpath(Path(manifest["vocab"]["path"]).resolve(), out_dir.resolve()))
    manifest["totals"] = dict(
        manifest.get("totals", {}), examples=sum(e["examples"] for e in entries), tokens=sum(e["tokens"] for e in entries)
    )
    atomic_write_bytes(out_dir / MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    return manifest


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
        columns = {field.name: np.empty((size, *_row_shape(field.type)), dtype=numpy_dtype(field.type)) for field in schema}
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
