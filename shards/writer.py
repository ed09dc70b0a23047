"""Write globally shuffled, balanced Arrow IPC stream shards and their manifest (layout in ``shards.format``).

The global shuffle scales by range partitioning with spill files, as external shuffles do: every
example carries a random 64-bit key, bucket ``b = key * B >> 64`` holds an ordered range of the
global order, and whoever makes examples writes each bucket's share straight to disk
(``spill_pieces``, run inside Beam workers) instead of sending it through the runner's shuffle,
which the in-memory runner would hold in memory several times over. A final pass in the launching
process (``iter_sorted_buckets`` into ``write_shards``) sorts one bucket at a time from memory maps
and cuts the global order into S shards whose example counts differ by at most one. Memory is
bounded by one bucket plus one shard (each shard is one record batch, so readers get contiguous
columns), whatever the corpus size.

Every file is written under a temporary name and renamed into place; the manifest is removed
before and written after all shards, so a directory without ``manifest.json`` is never complete.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import uuid
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from shards.format import MANIFEST_NAME, SHARD_PATTERN

KEY = "key"


def _temp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    temp = _temp_path(path)
    temp.write_bytes(data)
    os.replace(temp, path)


def write_ipc(path: Path, table: pa.Table, compression: str | None = None) -> None:
    """One Arrow IPC stream, one record batch, written under a temporary name then renamed.

    The stream flavour because it is the one ``datasets.Dataset.from_file`` reads; memory-mapped,
    an uncompressed stream is read as zero-copy as an IPC file.
    """
    temp = _temp_path(path)
    options = pa.ipc.IpcWriteOptions(compression=compression)
    try:
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_stream(sink, table.schema, options=options) as writer:
            for batch in table.combine_chunks().to_batches(max_chunksize=max(table.num_rows, 1)):
                writer.write_batch(batch)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


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


def spill_pieces(directory: Path, origin: str, keys: np.ndarray, columns: dict[str, np.ndarray], schema: pa.Schema, num_buckets: int) -> None:
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
    """The global order: bucket by bucket, its spill files memory-mapped and sorted by key, without the key column."""
    for paths in _spill_buckets(directory):
        table = pa.concat_tables(pa.ipc.open_stream(pa.memory_map(str(path), "r")).read_all() for path in paths)
        order = np.argsort(table.column(KEY).to_numpy(), kind="stable")
        yield from table.drop_columns([KEY]).take(pa.array(order)).to_batches()


def spilled_rows(directory: Path) -> int:
    """Examples in all spill files, from the batch headers (memory-mapped: the columns are not read)."""
    return sum(batch.num_rows for paths in _spill_buckets(directory) for path in paths for batch in pa.ipc.open_stream(pa.memory_map(str(path), "r")))


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
    pending = _rechunk(batches, sizes)
    with tqdm(total=num_examples, unit="ex", desc="shards", disable=None) as progress:
        for index, size in enumerate(sizes):
            table = pa.Table.from_batches(next(pending), schema=schema) if size else schema.empty_table()
            path = out_dir / SHARD_PATTERN.format(index=index, count=len(sizes))
            write_ipc(path, table, codec)
            entries.append(
                {
                    "file": path.name,
                    "examples": table.num_rows,
                    "tokens": int(np.sum(table.column("length").to_numpy(), dtype=np.int64)),
                    "bytes": path.stat().st_size,
                    "sha256": file_sha256(path),
                }
            )
            progress.update(table.num_rows)
    if next(pending, None) is not None:
        raise ValueError(f"more than the announced {num_examples} examples")
    manifest = dict(manifest, shards=entries)
    manifest["totals"] = dict(manifest.get("totals", {}), examples=sum(e["examples"] for e in entries), tokens=sum(e["tokens"] for e in entries))
    atomic_write_bytes(out_dir / MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    return manifest


def _rechunk(batches: Iterable[pa.RecordBatch], sizes: Sequence[int]) -> Iterator[list[pa.RecordBatch]]:
    """Slices of the stream grouped into lists holding exactly ``sizes[i]`` rows (zero sizes skipped)."""
    stream = iter(batches)
    current: pa.RecordBatch | None = None
    for size in sizes:
        if size == 0:
            continue
        group, need = [], size
        while need:
            if current is None or current.num_rows == 0:
                current = next(stream, None)
                if current is None:
                    raise ValueError(f"fewer examples than announced (short by {need} in a shard of {size})")
                continue
            take = min(need, current.num_rows)
            group.append(current.slice(0, take))
            current, need = current.slice(take), need - take
        yield group
    for rest in [current, *stream]:
        if rest is not None and rest.num_rows:
            yield [rest]


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
