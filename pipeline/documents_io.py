"""Parquet files of documents and rejects: schema, atomic writes to any storage path, listing.

Each output file holds the documents whose id hashes to its part number, sorted by id, so file bytes
do not depend on the runner, the worker count or the bundle order.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatch

import pyarrow as pa
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

    Row groups hold about ``ROW_GROUP_TEXT_BYTES`` (from the table's own size, so the bytes depend on
    the content only): later stages read a part in parallel, a row group at a time. ``order`` (row
    indices) writes the rows in that order, taking one row group at a time, so a part is never copied
    whole to be sorted; the file is streamed out rather than built in memory.
    """
    rows_per_group = max(1, int(ROW_GROUP_TEXT_BYTES * table.num_rows / max(1, table.nbytes)))
    with storage.arrow_output(path) as sink, pq.ParquetWriter(sink, table.schema, compression="zstd") as writer:
        if order is None or table.num_rows == 0:
            writer.write_table(table, row_group_size=rows_per_group)
        else:
            for start in range(0, table.num_rows, rows_per_group):
                writer.write_table(table.take(order.slice(start, rows_per_group)), row_group_size=rows_per_group)
    return path


def output_files(directory: storage.PathLike) -> list[str]:
    """The Parquet parts of a documents or rejects folder, in part order."""
    return [path for path in storage.listdir(directory) if fnmatch(storage.name(path), "part-*.parquet")]
