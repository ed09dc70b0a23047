"""The documents job's Parquet parts, read one row group at a time.

``ParquetFile.iter_batches`` over a whole file reads ahead across row groups: streaming 400 MB of
1 MB books through it peaked at 840 MB. A row group at a time holds one row group (about 8 MB of
text as the documents job writes them) and peaked at 182 MB.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq


def iter_rows(paths: Sequence[Path], columns: Sequence[str]) -> Iterator[tuple]:
    """The rows of ``paths`` (in sorted order) as tuples of ``columns``."""
    for path in sorted(paths):
        parquet = pq.ParquetFile(path)
        for group in range(parquet.num_row_groups):
            table = parquet.read_row_group(group, columns=list(columns))
            yield from zip(*(table.column(name).to_pylist() for name in columns))


def text_bytes(paths: Sequence[Path], column: str = "text") -> int:
    """UTF-8 bytes of a string column over all ``paths``."""
    total = 0
    for path in paths:
        parquet = pq.ParquetFile(path)
        for group in range(parquet.num_row_groups):
            texts = parquet.read_row_group(group, columns=[column]).column(column)
            total += pc.sum(pc.binary_length(texts.cast("large_binary"))).as_py() or 0
    return total
