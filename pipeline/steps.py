"""The documents job's Beam steps: read and clean each input task and spill it, de-duplicate on
references, write sorted Parquet parts sized by bytes.

One step shape: every read task runs ``ReadCleanSpill``, which turns a task into records through a
Beam-free reader, passes each document through the per-document filters (``corpora.clean.Cleaner``:
a document or a reject with its reason), spills the survivors (``pipeline.document_spill``) and emits
``(kind, value)`` pairs: ``ref`` (a ``DocRef``), ``reject`` and one ``counters`` dict per task. Routing
and counting happen there and nowhere else; the counters travel as data into the run manifest.
Multi-output steps use ``(kind, value)`` pairs split by ``pipeline.counters.only`` rather than tagged
outputs, which every runner handles alike.
"""

from __future__ import annotations

import logging
import math
import pickle
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from corpusforge.core import storage
from corpusforge.core.config import BooksConfig, CleanConfig, NearDedupConfig, WikipediaConfig
from corpusforge.core.hashing import stable_hash
from corpusforge.corpora.books import list_book_sizes, read_book
from corpusforge.corpora.clean import Cleaner
from corpusforge.corpora.document import Document, Reject
from corpusforge.corpora.wikipedia import plan_ranges, read_range
from corpusforge.pipeline.collector import release_freed_memory
from corpusforge.pipeline.counters import COUNTERS, only
from corpusforge.pipeline.document_spill import DocRef, RefMaker, scatter
from corpusforge.pipeline.documents_io import (
    PART_PATTERN,
    REJECT_SCHEMA,
    documents_table,
    part_of,
    rejects_table,
    write_sorted,
)
from corpusforge.pipeline.file_shuffle import FileCoGroupByKey, FileGroupByKey
from corpusforge.pipeline.summary import record_recount

log = logging.getLogger(__name__)
REF, REJECT = "ref", "reject"
CLEAN_BATCH_CHARS = 1 << 18  # characters of documents a reading worker cleans together (a book: alone)
BOOK_TASK_BYTES = 1 << 20  # small book files read as one task up to this size (about one ~1 MB book's work)
Reader = Callable[[object, Counter], Iterable[Document | Reject]]  # (task, counts) -> records; counts["inputs"] where read


def split_kinds(records: beam.PCollection, label: str) -> tuple[beam.PCollection, beam.PCollection, beam.PCollection]:
    """(refs, rejects, counters) of a ``ReadCleanSpill`` output."""
    return tuple(records | f"{label}{kind.title().removesuffix('s')}s" >> beam.FlatMap(only, kind) for kind in (REF, REJECT, COUNTERS))  # type: ignore[return-value]


class ReadCleanSpill(beam.DoFn):
    """A task -> its records through ``reader`` -> cleaned -> spilled; emits refs, rejects, counters.

    With ``completions`` (a folder), a finished task records what it emitted there after its spill is
    written (as datatrove's ``completions/`` markers do); a task found finished is not read again, its
    recorded output is emitted instead, so a re-run after a lost launcher skips the work already done.
    """

    def __init__(
        self,
        source: str,
        reader: Reader,
        spill_dir: str,
        clean: CleanConfig | None,
        near: NearDedupConfig | None,
        completions: str | None = None,
    ) -> None:
        self.source, self.reader, self.spill_dir, self.clean, self.near = source, reader, spill_dir, clean, near
        self.completions = completions

    def setup(self) -> None:
        self.cleaner = Cleaner(self.clean) if self.clean is not None else None
        self.refs = RefMaker(self.near)

    def process(self, task: object) -> Iterator[tuple[str, object]]:
        if self.completions is None:
            yield from self._read(task)
            return
        done = storage.join(self.completions, f"{self.source}-{stable_hash(self.source, repr(task)):016x}.pickle")
        if storage.is_file(done):
            yield from pickle.loads(storage.read_bytes(done))
            return
        emitted = list(self._read(task))
        storage.write_bytes(done, pickle.dumps(emitted, protocol=pickle.HIGHEST_PROTOCOL))
        yield from emitted

    def _read(self, task: object) -> Iterator[tuple[str, object]]:
        counters: Counter[str] = Counter()
        read: Counter[str] = Counter()
        docs: list[Document] = []
        batch: list[Document] = []  # documents read, to be cleaned together (short pages clean faster so)
        size = 0
        for record in self.reader(task, read):
            counters[f"{record.source}.records"] += 1
            if isinstance(record, Document) and self.cleaner is not None:
                batch.append(record)
                size += len(record.text)
                if size >= CLEAN_BATCH_CHARS:
                    yield from self._sort_out(self.cleaner.clean_many(batch), docs, counters)
                    batch, size = [], 0
            else:
                yield from self._sort_out([record], docs, counters)
        if batch:
            yield from self._sort_out(self.cleaner.clean_many(batch), docs, counters)
        if "inputs" in read:  # counted by the reader where it read them, independently of what it yielded
            counters[f"{self.source}.inputs"] += read["inputs"]
        if docs:
            name = f"{docs[0].source}-{stable_hash(*(d.id for d in docs)):016x}.arrow"
            for ref in self.refs.spill(storage.join(self.spill_dir, name), docs):
                yield REF, ref
        yield COUNTERS, dict(counters)

    @staticmethod
    def _sort_out(records: list[Document | Reject], docs: list[Document], counters: Counter[str]) -> Iterator[tuple[str, object]]:
        """Rejects out (counted), documents onto ``docs`` in the order read."""
        for record in records:
            if isinstance(record, Reject):
                counters[f"{record.source}.rejects.{record.reason}"] += 1
                yield REJECT, record
            else:
                docs.append(record)


def read_book_task(task: tuple[str, tuple[str, ...]], counts: Counter) -> Iterator[Document | Reject]:
    """The listed book files of one task (books count their inputs where the files are listed: ``book_tasks``)."""
    root, paths = task
    return (read_book(path, root) for path in paths)


def book_tasks(cfg: BooksConfig, counts: Counter) -> list[tuple[str, tuple[str, ...]]]:
    """``(root, files)`` read tasks: consecutive listed files up to ``BOOK_TASK_BYTES`` together, a larger
    file alone, so that a folder of thousands of small files is not thousands of tasks, spills and markers."""
    tasks: list[tuple[str, tuple[str, ...]]] = []
    for root in cfg.paths:
        group: list[str] = []
        size = 0
        for path, file_size in list_book_sizes(root, tuple(cfg.extensions), counts):
            if group and size + file_size > BOOK_TASK_BYTES:
                tasks.append((root, tuple(group)))
                group, size = [], 0
            group.append(path)
            size += file_size
        if group:
            tasks.append((root, tuple(group)))
    return tasks


def wikipedia_tasks(cfg: WikipediaConfig) -> list:
    """Dumps planned into independently readable byte ranges (multistream), read in parallel."""
    indexes = list(cfg.index_paths) + [None] * (len(cfg.paths) - len(cfg.index_paths))
    return [r for path, index in zip(cfg.paths, indexes) for r in plan_ranges(path, index or None, cfg.streams_per_range)]


class WikipediaReader:
    """Picklable reader of one planned byte range."""

    def __init__(self, cfg: WikipediaConfig) -> None:
        self.keep_headings, self.drop_disambiguation = cfg.keep_headings, cfg.drop_disambiguation

    def __call__(self, dump_range: object, counts: Counter) -> Iterable[Document | Reject]:
        return read_range(dump_range, keep_headings=self.keep_headings, drop_disambiguation=self.drop_disambiguation, counts=counts)


def records_of_batch(batch: list[Document | Reject], counts: Counter) -> list[Document | Reject]:
    """Reader of tasks that already are records (WebText pages after extraction)."""
    return batch


def read_tasks(
    p: beam.Pipeline,
    source: str,
    tasks: list,
    reader: Reader,
    spill_dir: str,
    clean: CleanConfig | None,
    near: NearDedupConfig | None,
    completions: str | None = None,
) -> beam.PCollection:
    """Tasks spread over the workers, each read, cleaned and spilled (and, with ``completions``, recorded)."""
    label = source.title()
    return (
        p
        | f"List{label}" >> beam.Create(tasks)
        | f"Spread{label}" >> beam.Reshuffle()
        | f"Read{label}" >> beam.ParDo(ReadCleanSpill(source, reader, spill_dir, clean, near, completions))
    )


def _keep_first(item: tuple[str, Iterable[DocRef]]) -> Iterator[tuple[str, object]]:
    """Keep the smallest id of an exact-duplicate group (deterministic), reject the rest."""
    _, group = item
    ordered = sorted(group, key=lambda r: r.id)
    yield REF, ordered[0]
    for dup in ordered[1:]:
        yield REJECT, Reject(dup.id, dup.source, "duplicate", f"duplicate of {ordered[0].id}", dup.key)


class ExactDedup(beam.PTransform):
    """Exact duplicates on normalised text (the key each ``DocRef`` carries), across all sources.

    With ``shuffle_dir`` the references are grouped through files there (``pipeline.file_shuffle``).
    """

    def __init__(self, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.shuffle_dir = shuffle_dir

    def expand(self, refs: beam.PCollection) -> tuple[beam.PCollection, beam.PCollection]:
        grouped = (
            refs
            | "ByTextKey" >> beam.Map(lambda r: (r.text_key, r))
            | "GroupByText" >> FileGroupByKey(self.shuffle_dir)
            | "KeepFirst" >> beam.FlatMap(_keep_first)
        )
        return grouped | "Kept" >> beam.FlatMap(only, REF), grouped | "Duplicates" >> beam.FlatMap(only, REJECT)


def parts_for(total: int, per_part: int) -> int:
    return max(1, math.ceil(total / per_part))


def _rows(item: tuple[str, Iterable[tuple[int, str, int]]]) -> tuple[str, list[tuple[int, str, int]]]:
    """A spill file's surviving (row, id, bytes)."""
    return item[0], sorted(item[1])


def _part_count(item: tuple[int, Iterable[tuple[str, int]]], part_bytes: int) -> Iterator[tuple[str, int]]:
    """Every spill file learns the part count from the survivors' total bytes (gathered under one key)."""
    files = list(item[1])
    parts = parts_for(sum(size for _, size in files), part_bytes)
    for spill, _ in files:
        yield spill, parts


def _scatter(item: tuple[str, dict[str, list]], scatter_dir: str) -> list[tuple[tuple[int, int], str]]:
    spill, group = item
    (parts,) = group["parts"]
    (rows,) = group["rows"]
    kept = [(row, part_of(doc_id, parts)) for row, doc_id, _ in rows]
    return [((part, parts), path) for part, path in scatter(spill, kept, scatter_dir)]


def _read_pieces(paths: Iterable[str], counts: Counter) -> Iterator[pa.Table]:
    """Scattered or spilled pieces in path order (the bytes written do not depend on how they were made),
    one in memory at a time; ``counts`` tallies what they hold."""
    for path in sorted(paths):
        with storage.arrow_input_unmapped(path) as source:
            table = pa.ipc.open_file(source).read_all()
        counts.update(f"{s}.{what}" for s, what in zip(table["source"].to_pylist(), _kinds(table)))
        yield table


def _kinds(table: pa.Table) -> Iterable[str]:
    """What each row counts as: documents, or rejects of its reason."""
    if "reason" in table.column_names:
        return (f"rejects.{reason}" for reason in table["reason"].to_pylist())
    return ("documents" for _ in range(table.num_rows))


def _write_part(pieces: Iterable[pa.Table], path: str, keys: list[str], scratch: str, recounts: str) -> None:
    """One documents or rejects part sorted by ``keys`` (``write_sorted``), then read back (``record_recount``).

    These are the last steps of the documents job, in workers that ran the near-dedup shuffles (or another
    part) before: what those freed goes back to the system first, so this part's peak does not stack on
    theirs (300 MB of 400 B pages, the documents stages alone: the largest worker 655 -> 577 MB).
    """
    release_freed_memory()
    write_sorted(pieces, path, keys, scratch)
    record_recount(path, recounts)


class _WriteDocumentPart(beam.DoFn):
    """(part, scattered pieces) -> one Parquet part sorted by id, written by ``write_sorted`` (a worker holds
    a bounded share of the part, not all of it), then read back (``record_recount``); yields its counters."""

    def __init__(self, directory: str, scratch: str, recounts: str) -> None:
        self.directory, self.scratch, self.recounts = directory, scratch, recounts

    def process(self, item: tuple[tuple[int, int], Iterable[str]]) -> Iterator[dict]:
        (index, parts), pieces = item
        counts: Counter[str] = Counter()
        tables = _read_pieces(pieces, counts) if pieces else iter([documents_table([])])
        path = storage.join(self.directory, PART_PATTERN.format(index=index, count=parts))
        _write_part(tables, path, ["id"], self.scratch, self.recounts)
        yield dict(counts)


class WriteDocuments(beam.PTransform):
    """Surviving refs -> ``ceil(bytes / part_bytes)`` Parquet parts, each holding the ids that hash to it.

    The part count comes from the survivors' total size, so parts are sized by bytes; each spill
    file's survivors are scattered to per-part pieces, then each part is gathered and sorted by id.
    Joins, not side inputs, carry the part count (the DaskRunner recomputes side inputs per task).
    Yields one counters dict per part.
    """

    def __init__(self, directory: str, scatter_dir: str, part_bytes: int, recounts: str, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.directory, self.scatter_dir, self.part_bytes, self.shuffle_dir = directory, scatter_dir, part_bytes, shuffle_dir
        self.recounts = recounts

    def expand(self, refs: beam.PCollection) -> beam.PCollection:
        rows = (
            refs
            | "BySpillFile" >> beam.Map(lambda r: (r.spill, (r.row, r.id, r.nbytes)))
            | "GroupSpill" >> FileGroupByKey(self.shuffle_dir)
            | "Rows" >> beam.Map(_rows)
        )
        parts = (
            rows
            | "FileBytes" >> beam.Map(lambda item: (0, (item[0], sum(size for _, _, size in item[1]))))
            | "AllFiles" >> beam.GroupByKey()
            | "PartCount" >> beam.FlatMap(_part_count, self.part_bytes)
        )
        return (
            {"rows": rows, "parts": parts}
            | "JoinPartCount" >> FileCoGroupByKey(self.shuffle_dir)  # every survivor's row: not through the launcher
            | "Scatter" >> beam.FlatMap(_scatter, self.scatter_dir)
            | "ByPart" >> beam.GroupByKey()
            | "WritePart" >> beam.ParDo(_WriteDocumentPart(self.directory, storage.join(self.scatter_dir, "runs"), self.recounts))
        )


REJECT_FLUSH = 20_000  # rejects a worker holds (~300 B each as objects) before writing them out


class _SpillRejects(beam.DoFn):
    """(part, reject) -> (part, file) for each file written: one Arrow file per part per flush, so only file
    names reach the writer's grouping (Beam's own would hold every reject of a part in the launcher and the
    writing worker: 130k of them at 100 MB of 400 B pages)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def start_bundle(self) -> None:
        self._pending: defaultdict[int, list[Reject]] = defaultdict(list)
        self._count = 0

    def process(self, item: tuple[int, Reject]) -> Iterator[tuple[int, str]]:
        self._pending[item[0]].append(item[1])
        self._count += 1
        if self._count >= REJECT_FLUSH:
            yield from self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for written in self._flush():
            yield WindowedValue(written, MIN_TIMESTAMP, [GlobalWindow()])

    def _flush(self) -> list[tuple[int, str]]:
        written = []
        for part, rejects in sorted(self._pending.items()):
            path = storage.join(self.folder, f"{part:05d}", f"{uuid.uuid4().hex}.arrow")
            with storage.arrow_output(path) as sink, pa.ipc.new_file(sink, REJECT_SCHEMA) as writer:
                writer.write_table(rejects_table(rejects))
            written.append((part, path))
        self._pending.clear()
        self._count = 0
        return written


class SpillRejects(beam.PTransform):
    """Reject streams -> (part, Arrow file) of each file their rejects were written to, each stream where it
    is produced: only the file names are flattened (a Flatten of the rejects themselves would gather every
    one of them in the in-process runners' launcher first)."""

    def __init__(self, parts: int, folder: str) -> None:
        super().__init__()
        self.parts, self.folder = parts, folder

    def expand(self, streams: Sequence[beam.PCollection]) -> beam.PCollection:
        parts = self.parts
        files = [
            stream | f"ByPart{i}" >> beam.Map(lambda r: (part_of(r.id, parts), r)) | f"Spill{i}" >> beam.ParDo(_SpillRejects(self.folder))
            for i, stream in enumerate(streams)
        ]
        return files | "Files" >> beam.Flatten()


class WriteRejects(beam.PTransform):
    """(part, file) from ``SpillRejects`` -> ``parts`` Parquet files by id hash, each sorted by (id, reason,
    key) by ``write_sorted`` (a bounded share of a part in memory), each read back (``record_recount``); yields
    per-part counters.

    A fixed count (rejects are ~100 bytes each), so no global count has to reach every record first.
    """

    def __init__(self, directory: str, parts: int, scratch: str, recounts: str) -> None:
        super().__init__()
        self.directory, self.parts, self.scratch, self.recounts = directory, parts, scratch, recounts

    def expand(self, files: beam.PCollection) -> beam.PCollection:
        directory, parts, scratch, recounts = self.directory, self.parts, self.scratch, self.recounts

        def write(item: tuple[int, Iterable[str]]) -> dict:
            index, pieces = item
            counts: Counter[str] = Counter()
            path = storage.join(directory, PART_PATTERN.format(index=index, count=parts))
            _write_part(_read_pieces(pieces, counts), path, ["id", "reason", "key"], scratch, recounts)
            return dict(counts)

        return files | "GroupParts" >> beam.GroupByKey() | "Write" >> beam.Map(write)


class SpillDocuments(beam.PTransform):
    """PCollection[Document] -> PCollection[DocRef]: documents already in a pipeline, spilled in batches
    (for graphs that start from documents, e.g. near-dedup on a prepared collection)."""

    def __init__(self, spill_dir: str, near: NearDedupConfig | None) -> None:
        super().__init__()
        self.spill_dir, self.near = spill_dir, near

    def expand(self, docs: beam.PCollection) -> beam.PCollection:
        return (
            docs
            | "Batches" >> beam.BatchElements(min_batch_size=1, max_batch_size=256)
            | "Spill" >> beam.ParDo(ReadCleanSpill("documents", records_of_batch, self.spill_dir, None, self.near))
            | "Refs" >> beam.FlatMap(only, REF)
        )
