"""The documents job's Parquet parts, read one row group at a time.

``ParquetFile.iter_batches`` over a whole file reads ahead across row groups: streaming 400 MB of
1 MB books through it peaked at 840 MB. A row group at a time holds one row group (about 8 MB of
text as the documents job writes them) and peaked at 182 MB; parts are read with plain reads, not
memory-mapped, for the same reason (``storage.arrow_input_unmapped``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpusforge.core import storage


def iter_row_groups(paths: Sequence[storage.PathLike], columns: Sequence[str]) -> Iterator[pa.Table]:
    """``columns`` of ``paths`` (in sorted order), one row group at a time."""
    for path in sorted(map(os.fspath, paths)):
        with storage.arrow_input_unmapped(path) as source:
            parquet = pq.ParquetFile(source)
            for group in range(parquet.num_row_groups):
                yield parquet.read_row_group(group, columns=list(columns))


def iter_rows(paths: Sequence[storage.PathLike], columns: Sequence[str], batch_rows: int | None = None) -> Iterator[tuple]:
    """The rows of ``paths`` (in sorted order) as tuples of ``columns``, decoded into Python a row group at a
    time, or ``batch_rows`` at a time (for a reader that stops early)."""
    for table in iter_row_groups(paths, columns):
        for batch in table.to_batches(max_chunksize=batch_rows or max(table.num_rows, 1)):
            yield from zip(*(batch.column(name).to_pylist() for name in columns))


def text_bytes(paths: Sequence[storage.PathLike], column: str = "text") -> int:
    """UTF-8 bytes of a string column over all ``paths``."""
    return sum(pc.sum(pc.binary_length(table[column].cast("large_binary"))).as_py() or 0 for table in iter_row_groups(paths, [column]))


def word_counts(texts: pa.ChunkedArray) -> pa.Array:
    """Whitespace-separated words per text (``len(text.split())``), a row group's worth at a time."""
    return pc.list_value_length(pc.utf8_split_whitespace(texts))
