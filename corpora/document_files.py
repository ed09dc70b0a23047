"""The documents job's Parquet parts, read one row group at a time.

``ParquetFile.iter_batches`` over a whole file reads ahead across row groups: streaming 400 MB of
1 MB books through it peaked at 840 MB. A row group at a time holds one row group (about 8 MB of
text as the documents job writes them) and peaked at 182 MB; parts are read with plain reads, not
memory-mapped, for the same reason (``storage.arrow_input_unmapped``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
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


# Python's whitespace (``str.isspace``) beyond ASCII, written out (found by scanning every code point, that is 0.1 s at
# each import; tests/test_document_word_counts.py scans them), UTF-8 encoded, as big-endian ints by length: 2 or 3
# bytes, the first >= 0xC2 (``_WIDE_LEAD``). ASCII's (0x09-0x0D, 0x1C-0x20) by a table.
_WIDE_SPACES = [
    char.encode()
    for char in "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
]
_WIDE_CODES = [(n, np.array([int.from_bytes(b, "big") for b in _WIDE_SPACES if len(b) == n], dtype=np.uint32)) for n in (2, 3)]
_WIDE_LEAD = 0xC2
_ASCII_SPACES = np.array([chr(c).isspace() for c in range(0x21)])


def word_counts(texts: pa.ChunkedArray) -> pa.ChunkedArray:
    """Whitespace-separated words per text, exactly ``len(text.split())`` (int32, null for a null text).

    Counted on the UTF-8 bytes: a word starts at each non-space byte after a space or at its text's start. Arrow's
    ``utf8_split_whitespace`` counted the same words but built every word as a string first (1.2-1.4 CPU-s per
    121 MB against 0.24-0.33 here for 1 MB books, 0.34-0.52 for 400 B pages; ``bench/word_counts.py``), and
    counted a text's leading or trailing space as an empty word."""
    return pa.chunked_array([_chunk_word_counts(chunk) for chunk in texts.chunks], type=pa.int32())


def _chunk_word_counts(texts: pa.Array) -> pa.Array:
    _, offsets_buffer, data = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if pa.types.is_large_string(texts.type) else np.int32)
    offsets = offsets[texts.offset : texts.offset + len(texts) + 1].astype(np.int64) if len(texts) else np.zeros(1, np.int64)
    base = int(offsets[0])
    offsets -= base
    raw = np.frombuffer(data, dtype=np.uint8, count=int(offsets[-1]), offset=base) if offsets[-1] else np.zeros(0, np.uint8)
    space = _spaces(raw)
    starts = np.empty(len(raw), dtype=bool)
    np.less(space[1:], space[:-1], out=starts[1:])  # a space, then not one
    firsts = offsets[:-1][offsets[:-1] < len(raw)]
    starts[firsts] = ~space[firsts]  # a text's first byte starts a word unless it is a space
    counts = np.diff(np.searchsorted(np.flatnonzero(starts), offsets)).astype(np.int32)  # word starts in each text's bytes
    return pa.array(counts, mask=texts.is_null().to_numpy(zero_copy_only=False) if texts.null_count else None)


def _spaces(raw: np.ndarray) -> np.ndarray:
    """Whether each byte of UTF-8 text is (part of) a character ``str.isspace`` holds true."""
    space = raw <= 0x20
    controls = np.flatnonzero(raw < 0x20)  # line breaks mostly: few, and most of them spaces
    space[controls] = _ASCII_SPACES[raw[controls]]
    leads = np.flatnonzero(raw >= _WIDE_LEAD)  # every character's first byte that could start one: the codes decide
    if len(leads):
        # A 2-byte character that ends the text reads its last byte again as a third: no 3-byte space starts 0xC2-0xDF.
        code = (
            raw[leads].astype(np.uint32) << 16 | raw.take(leads + 1, mode="clip").astype(np.uint32) << 8 | raw.take(leads + 2, mode="clip")
        )
        for width, codes in _WIDE_CODES:
            found = leads[np.isin(code >> (8 * (3 - width)), codes)]
            for k in range(width):
                space[found + k] = True
    return space
