"""Parquet files of documents and rejects: schema, atomic writes to any storage path, listing.

Each output file holds the documents whose id hashes to its part number, sorted by id, so file bytes
do not depend on the runner, the worker count or the bundle order.
"""

from __future__ import annotations

import heapq
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from fnmatch import fnmatch

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpusforge.core import storage
from corpusforge.corpora.document import META_FIELDS, Document, Reject

DOCUMENT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("title", pa.string()),
        ("url", pa.string()),
        ("text", pa.string()),
        ("meta", pa.struct([(name, pa.string()) for name in META_FIELDS])),
    ]
)
REJECT_SCHEMA = pa.schema(
    [("id", pa.string()), ("source", pa.string()), ("reason", pa.string()), ("detail", pa.string()), ("key", pa.string())]
)
PART_PATTERN = "part-{index:05d}-of-{count:05d}.parquet"


def part_of(record_id: str, parts: int) -> int:
    """Part number from the id's own hex digest (``make_id``), the same in every process."""
    return int(record_id[:8], 16) % parts


def documents_table(docs: Iterable[Document], sort: bool = True) -> pa.Table:
    """Documents as an Arrow table, sorted by id unless ``sort`` is false (spill files keep their row order)."""
    rows = sorted(docs, key=lambda d: d.id) if sort else list(docs)
    return pa.Table.from_pydict(
        {
            "id": [d.id for d in rows],
            "source": [d.source for d in rows],
            "title": [d.title for d in rows],
            "url": [d.url for d in rows],
            "text": [d.text for d in rows],
            "meta": [{name: d.meta.get(name) for name in META_FIELDS} for d in rows],
        },
        schema=DOCUMENT_SCHEMA,
    )


def rejects_table(rejects: Iterable[Reject]) -> pa.Table:
    rows = sorted(rejects, key=lambda r: (r.id, r.reason, r.key))
    return pa.Table.from_pydict(
        {
            "id": [r.id for r in rows],
            "source": [r.source for r in rows],
            "reason": [r.reason for r in rows],
            "detail": [r.detail for r in rows],
            "key": [r.key for r in rows],
        },
        schema=REJECT_SCHEMA,
    )


ROW_GROUP_TEXT_BYTES = 8 << 20  # a row group is one task of the examples stages and one read in the launcher


def write_table_atomic(table: pa.Table, path: str, order: pa.Array | None = None) -> str:
    """Write Parquet to ``path`` (a local path or a URI) whole or not at all (``storage.arrow_output``).

    Row groups hold about ``ROW_GROUP_TEXT_BYTES`` (``content_bytes``: the bytes depend on the rows only,
    not on how they are chunked): later stages read a part in parallel, a row group at a time. ``order`` (row
    indices) writes the rows in that order, taking one row group at a time, so a part is never copied
    whole to be sorted; the file is streamed out rather than built in memory.
    """
    rows_per_group = row_group_rows(table.num_rows, content_bytes(table))
    with storage.arrow_output(path) as sink, pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        if order is None or table.num_rows == 0:
            writer.write_table(table, row_group_size=rows_per_group)
        else:
            for start in range(0, table.num_rows, rows_per_group):
                writer.write_table(table.take(order.slice(start, rows_per_group)), row_group_size=rows_per_group)
    return path


def row_group_rows(rows: int, nbytes: int) -> int:
    """Rows per row group of a table of ``rows`` rows and ``nbytes`` bytes (about ``ROW_GROUP_TEXT_BYTES``)."""
    return max(1, int(ROW_GROUP_TEXT_BYTES * rows / max(1, nbytes)))


def content_bytes(table: pa.Table) -> int:
    """The UTF-8 bytes of a table's strings (struct fields included), summed: the same however its rows are
    chunked, where Arrow's ``nbytes`` adds each chunk's offsets and validity bitmaps (a part written from one
    spill per small book had other row groups than the same rows from one spill per thousand books)."""
    return sum(_string_bytes(column) for column in table.columns)


def _string_bytes(column: pa.ChunkedArray | pa.Array) -> int:
    if pa.types.is_struct(column.type):
        return sum(_string_bytes(pc.struct_field(column, [index])) for index in range(column.type.num_fields))
    return pc.sum(pc.binary_length(column)).as_py() or 0


RUN_BYTES = 16 << 20  # bytes of rows a sorting writer holds before it writes them out as one sorted run
MERGE_BATCH_BYTES = 1 << 20  # a run is read back this much at a time while the runs are merged
# rows merged through Python at a time: a whole row group's (key..., run, batch, row) tuples at once (66,167
# reject rows in 300 MB of 400 B pages) took the rejects writer from 527 to 577 MB; in chunks it peaks at 535 MB
MERGE_CHUNK_ROWS = 8_192


def write_sorted(
    pieces: Iterable[pa.Table],
    path: str,
    keys: Sequence[str],
    scratch: str,
) -> None:
    """The rows of ``pieces`` sorted by ``keys`` (stable: ties keep the pieces' order) as one Parquet file,
    the same bytes as ``write_table_atomic`` of the whole concatenated table in that order, holding about
    ``RUN_BYTES`` of rows, not the whole file: a part written whole had cost its worker three times its size
    (+125 MB for 30 MB of 400 B pages), growing with the corpus up to ``run.part_bytes``.

    Up to ``RUN_BYTES`` are sorted in memory; past that, sorted runs go to files in a new folder under
    ``scratch`` (any storage path; removed at the end) and are merged a row group at a time. Row groups are
    sized from the pieces' summed ``content_bytes``, which add up to the whole table's.
    """
    order_by = [(key, "ascending") for key in keys]
    temp = storage.join(scratch, uuid.uuid4().hex)
    try:
        runs: list[str] = []
        pending: list[pa.Table] = []
        schema, rows, total, held = None, 0, 0, 0
        for piece in pieces:
            schema, rows, total, held = piece.schema, rows + piece.num_rows, total + content_bytes(piece), held + piece.nbytes
            pending.append(piece)
            if held >= RUN_BYTES:
                runs.append(_write_run(pa.concat_tables(pending), order_by, storage.join(temp, f"{len(runs):06d}.arrow")))
                pending, held = [], 0
        if schema is None:
            raise ValueError(f"no pieces to write to {path}")
        rows_per_group = row_group_rows(rows, total)
        if not runs:  # it all fits: sorted here
            table = pa.concat_tables(pending)
            write_table_atomic(table, path, pc.sort_indices(table, order_by) if rows else None)
            return
        if pending:
            runs.append(_write_run(pa.concat_tables(pending), order_by, storage.join(temp, f"{len(runs):06d}.arrow")))
        pending = []
        with storage.arrow_output(path) as sink, pq.ParquetWriter(sink, schema, compression="zstd") as writer:
            for group in _merged(runs, keys, rows_per_group):
                writer.write_table(group, row_group_size=rows_per_group)
    finally:
        storage.remove_tree(temp)


def _write_run(table: pa.Table, order_by: list[tuple[str, str]], path: str) -> str:
    """One sorted run, in record batches of about ``MERGE_BATCH_BYTES``."""
    order = pc.sort_indices(table, order_by)
    step = max(1, int(MERGE_BATCH_BYTES * table.num_rows / max(1, table.nbytes)))
    with storage.arrow_output(path) as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for start in range(0, table.num_rows, step):
            writer.write_table(table.take(order.slice(start, step)))
    return path


def _run_rows(index: int, path: str, keys: Sequence[str], batches: dict[tuple[int, int], pa.RecordBatch]) -> Iterator[tuple]:
    """(sort key..., run, batch, row) of one run in order; each batch is kept in ``batches`` while it is read."""
    with storage.arrow_input_unmapped(path) as source:
        reader = pa.ipc.open_file(source)
        for number in range(reader.num_record_batches):
            batch = reader.get_batch(number)
            batches[(index, number)] = batch
            for row, key in enumerate(zip(*(batch.column(k).to_pylist() for k in keys))):
                yield (*key, index, number, row)


def _merged(runs: list[str], keys: Sequence[str], rows_per_group: int) -> Iterator[pa.Table]:
    """The sorted runs merged (ties: the earlier run first), ``rows_per_group`` rows at a time, each group
    taken from the runs ``MERGE_CHUNK_ROWS`` rows at a time."""
    batches: dict[tuple[int, int], pa.RecordBatch] = {}
    merged = heapq.merge(*(_run_rows(i, path, keys, batches) for i, path in enumerate(runs)))
    width = len(keys)
    while True:
        chunks, rows = [], 0
        while rows < rows_per_group:
            chosen = [entry[width:] for _, entry in zip(range(min(MERGE_CHUNK_ROWS, rows_per_group - rows)), merged)]
            if not chosen:
                break
            chunks.append(_taken(chosen, batches))
            rows += len(chosen)
        if not chunks:
            return
        yield pa.concat_tables(chunks).combine_chunks()  # one chunk, as a part written whole: chunks would cut pages elsewhere


def _taken(chosen: list[tuple[int, int, int]], batches: dict[tuple[int, int], pa.RecordBatch]) -> pa.Table:
    """The (run, batch, row) rows ``chosen``, in that order; batches before each run's last one are let go."""
    rows: defaultdict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for position, (run, number, row) in enumerate(chosen):
        rows[(run, number)].append((position, row))
    taken = [batches[at].take(pa.array([row for _, row in wanted], type=pa.int64())) for at, wanted in rows.items()]
    positions = np.fromiter((position for wanted in rows.values() for position, _ in wanted), dtype=np.int64, count=len(chosen))
    table = pa.Table.from_batches(taken).take(pa.array(np.argsort(positions, kind="stable")))
    last = {run: number for run, number, _ in chosen}  # a run's later rows are in this batch or after it
    for at in [at for at in batches if at[0] in last and at[1] < last[at[0]]]:
        del batches[at]
    return table


def output_files(directory: storage.PathLike) -> list[str]:
    """The Parquet parts of a documents or rejects folder, in part order."""
    return [path for path in storage.listdir(directory) if fnmatch(storage.name(path), "part-*.parquet")]
