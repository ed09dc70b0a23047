"""Documents spilled once to disk, so only small references travel through the documents job's shuffles.

Each read task (a book file, a Wikipedia byte range, a batch of WebText pages) writes its cleaned
documents to one Arrow IPC file named after the task (a retried task replaces its own file) and
emits a ``DocRef`` per document: id, sizes, the exact-dedup key and the MinHash band keys. Exact and
near dedup and Wikipedia removal decide which ids survive from these alone; texts are read back
only to verify candidate pairs. The final pass scatters each spill file's survivors into per-part
files and writes each part sorted by id (``documents_io.write_sorted``: a bounded share of the part in
memory, sorted runs merged past that), never the corpus.

The spill folder is any storage path (``corpusforge.core.storage``) every worker can reach: a local
folder they share, or a URI.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from corpusforge.core import storage
from corpusforge.core.config import NearDedupConfig
from corpusforge.corpora.clean import dedup_key
from corpusforge.corpora.document import Document
from corpusforge.corpora.minhash import MinHasher, band_keys, lsh_params
from corpusforge.pipeline.documents_io import DOCUMENT_SCHEMA, documents_table

SPILL_BATCH_BYTES = 8 << 20  # text per record batch: the unit read back to verify a candidate pair


BAND_KEY_BYTES = 10  # band index (2 bytes) + 8-byte digest of the band


@dataclass(frozen=True, slots=True)
class DocRef:
    """What the dedup shuffles carry instead of a document: a few hundred bytes, whatever the text size.

    The in-process runners hold every grouped value decoded in the launcher, so a reference is kept
    small there too: the band keys are one bytes object, and it pickles as a plain tuple whose
    repeated strings (source, spill file) are interned when it is read back.
    """

    id: str
    source: str
    key: str  # url or title, for reject records
    url: str
    nbytes: int  # UTF-8 bytes of the text: sizes the output parts
    chars: int  # characters: near-dup clusters keep the longest text
    text_key: str  # exact-dedup key of the normalised text
    bands: bytes  # MinHash LSH band keys, BAND_KEY_BYTES each (empty when near-dedup is off)
    spill: str  # spill file path
    row: int  # row in the spill file

    def band_keys(self) -> Iterator[bytes]:
        return (self.bands[i : i + BAND_KEY_BYTES] for i in range(0, len(self.bands), BAND_KEY_BYTES))

    def __reduce__(self) -> tuple:
        return _ref, (self.id, self.source, self.key, self.url, self.nbytes, self.chars, self.text_key, self.bands, self.spill, self.row)


def _ref(
    doc_id: str, source: str, key: str, url: str, nbytes: int, chars: int, text_key: str, bands: bytes, spill: str, row: int
) -> DocRef:
    """A ``DocRef`` read back from its pickle: every reference of one spill file shares its strings."""
    return DocRef(doc_id, sys.intern(source), key, url, nbytes, chars, text_key, bands, sys.intern(spill), row)


def write_spill(path: str, docs: list[Document]) -> None:
    """The task's documents as one Arrow IPC file (batches of ~``SPILL_BATCH_BYTES``), written atomically."""
    with storage.arrow_output(path) as sink, pa.ipc.new_file(sink, DOCUMENT_SCHEMA) as writer:
        batch: list[Document] = []
        size = 0
        for doc in docs:
            batch.append(doc)
            size += len(doc.text)
            if size >= SPILL_BATCH_BYTES:
                writer.write_table(documents_table(batch, sort=False))
                batch, size = [], 0
        if batch or not docs:
            writer.write_table(documents_table(batch, sort=False))


def _batches(path: str) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(first row, batch) of a spill file, read batch by batch (plain reads, not a memory map:
    mapped pages would count toward the worker's resident memory)."""
    with storage.arrow_input_unmapped(path) as source:
        reader = pa.ipc.open_file(source)
        first = 0
        for index in range(reader.num_record_batches):
            batch = reader.get_batch(index)
            yield first, batch
            first += batch.num_rows


def load_texts(locations: Iterable[tuple[str, str, int]]) -> dict[str, str]:
    """id -> text of the documents at ``(id, spill file, row)``, reading only the batches that hold them."""
    rows_by_file: defaultdict[str, dict[int, str]] = defaultdict(dict)
    for doc_id, spill, row in locations:
        rows_by_file[spill][row] = doc_id
    texts: dict[str, str] = {}
    for path, rows in rows_by_file.items():
        wanted = sorted(rows)
        for first, batch in _batches(path):
            inside = [row for row in wanted if first <= row < first + batch.num_rows]
            if inside:
                column = batch.column("text")
                for row in inside:
                    texts[rows[row]] = column[row - first].as_py()
    return texts


def iter_texts(path: str, rows: Iterable[int]) -> Iterator[tuple[int, str]]:
    """(row, text) of the wanted rows of one spill file, in row order, one record batch in memory at a time."""
    wanted = sorted(set(rows))
    at = 0
    for first, batch in _batches(path):
        end = first + batch.num_rows
        column = batch.column("text")
        while at < len(wanted) and wanted[at] < end:
            yield wanted[at], column[wanted[at] - first].as_py()
            at += 1
        if at == len(wanted):
            return


def scatter(path: str, kept: Iterable[tuple[int, int]], out_dir: str) -> list[tuple[int, str]]:
    """Copy the kept rows ``(row, part)`` of one spill file into one file per part; returns (part, file)."""
    part_of_row = dict(kept)
    name = os.path.splitext(storage.name(path))[0]
    pieces: defaultdict[int, list[pa.Table]] = defaultdict(list)
    for first, batch in _batches(path):
        rows = [r for r in range(first, first + batch.num_rows) if r in part_of_row]
        if not rows:
            continue
        taken = pa.Table.from_batches([batch]).take(pa.array([r - first for r in rows], type=pa.int64()))
        parts = pa.array([part_of_row[r] for r in rows], type=pa.int32())
        for part in sorted(set(parts.to_pylist())):
            pieces[part].append(taken.filter(pc.equal(parts, part)))
    written = []
    for part, tables in sorted(pieces.items()):
        target = storage.join(out_dir, f"{part:05d}", f"{name}.arrow")
        with storage.arrow_output(target) as sink, pa.ipc.new_file(sink, DOCUMENT_SCHEMA) as writer:
            for table in tables:
                writer.write_table(table)
        written.append((part, target))
    return written


class RefMaker:
    """Spills a task's documents and describes each by a ``DocRef`` (the MinHash signature is computed
    here, while the text is at hand, and only its band keys travel on)."""

    def __init__(self, near: NearDedupConfig | None) -> None:
        self.near = near
        if near is not None:
            self.hasher = MinHasher(near.num_perm, near.seed, near.ngram, base_hash=near.base_hash)
            self.bands, self.rows = banding(near)

    def band_keys(self, docs: list[Document]) -> list[bytes]:
        """Per document, band index + 8-byte digest of each band: candidates are verified, so digest collisions
        only cost a check. The task's signatures are computed together (short pages hash faster so)."""
        if self.near is None:
            return [b""] * len(docs)
        return [
            b"".join(key[:2] + hashlib.blake2b(key[2:], digest_size=8).digest() for key in band_keys(signature, self.bands, self.rows))
            for signature in self.hasher.signatures([doc.text for doc in docs])
        ]

    def spill(self, path: str, docs: list[Document]) -> list[DocRef]:
        write_spill(path, docs)
        return [
            DocRef(
                doc.id,
                doc.source,
                doc.url or doc.title,
                doc.url,
                len(doc.text.encode("utf-8")),
                len(doc.text),
                dedup_key(doc.text),
                bands,
                path,
                row,
            )
            for row, (doc, bands) in enumerate(zip(docs, self.band_keys(docs)))
        ]


def banding(cfg: NearDedupConfig) -> tuple[int, int]:
    """(bands, rows) from the configuration, or datasketch's optimum for its threshold."""
    if cfg.bands and cfg.rows:
        if cfg.bands * cfg.rows > cfg.num_perm:
            raise ValueError(f"bands x rows = {cfg.bands * cfg.rows} exceeds num_perm = {cfg.num_perm}")
        return cfg.bands, cfg.rows
    return lsh_params(cfg.threshold, cfg.num_perm, 1.0 - cfg.false_negative_weight, cfg.false_negative_weight)
