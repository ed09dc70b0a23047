"""Records source: documents that are already text, one per record of JSON lines, Parquet, or a
folder written by HF ``datasets``' ``save_to_disk``.

``record_tasks`` expands each ``records.paths`` entry (a file, or a folder searched for supported
files in sorted path order) into tasks read in parallel: one per JSON lines file (``.jsonl``,
``.json``, ``.ndjson``, each also ``.gz`` or ``.zst``), one per Parquet row group, one per Arrow
file of a ``save_to_disk`` folder (recognised by its ``state.json`` / ``dataset_info.json``, its
``data-*.arrow`` stream files read in the order ``state.json`` lists them). ``RecordReader`` reads
one task. The text is kept exactly as given: cleaning is a later stage.

Ids are ``make_id("records", key)``. With ``id_field`` set the key is that field's value (a string
as is, anything else as JSON spells it: ``7`` in JSON lines and an int64 ``7`` in Parquet agree).
Without it the key is ``<entry>:<n>``: ``<entry>`` the entry's name without format and compression
suffixes (``corpus.jsonl.zst``, ``corpus.parquet`` and a folder ``corpus/`` all give ``corpus``),
``n`` the record's 0-based position among all records of the entry, counted over its files in
reading order (blank JSON lines are not records). So the same ordered records get the same ids in
every format, however they are split into files, row groups or shards; renaming the entry or
inserting records changes them, which ``id_field`` avoids. Numbering a file needs the record counts
of the entry's files before it, which planning takes from Parquet footers, by reading Arrow streams
and by reading JSON lines files (every file of an entry but its last).

Every record read counts one into ``counts["inputs"]`` and ends as a Document or a Reject:
``not_json`` (a line that is not a JSON object), ``missing_id`` (``id_field`` set, the value
missing, null or ""), ``missing_text`` (no text field, or not a string), ``empty`` (text of only
white space, as books and Wikipedia reject it) and ``corrupt_input`` (damage or a cut in a
compressed or Arrow file: one reject for the rest of the task, after the records before it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from corpusforge.core import storage
from corpusforge.core.config import RecordsConfig
from corpusforge.corpora.compressed import CORRUPTION as FILE_CORRUPTION
from corpusforge.corpora.compressed import decompressed_chunks
from corpusforge.corpora.document import Document, InputFormatError, Reject, count_input, make_id

SOURCE = "records"
BATCH_ROWS = 1024  # Parquet rows converted to Python at a time: bounded memory for any row group size
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = (".gz", ".zst", ".xz", ".bz2")
DATASET_MARKERS = ("state.json", "dataset_info.json")  # what save_to_disk writes beside its Arrow files
NOT_RECORDS = (*DATASET_MARKERS, "dataset_dict.json")  # datasets' own .json files are no records
CORRUPTION = (*FILE_CORRUPTION, pa.ArrowException)
Kind = Literal["jsonl", "parquet", "arrow"]


@dataclass(frozen=True, slots=True)
class RecordTask:
    """What one worker reads: a JSON lines file, one row group of a Parquet file, or one Arrow file."""

    path: str
    kind: Kind
    file: str  # meta["file"]: the path relative to the entry folder (the file's name when the entry is a file)
    entry: str  # the entry's name without suffixes, the first half of positional keys
    first: int  # position of the task's first record among all records of its entry
    offset: int = 0  # row of the task's first record within its file (Parquet row groups)
    row_group: int = 0


def record_tasks(cfg: RecordsConfig) -> list[RecordTask]:
    """The tasks of every ``cfg.paths`` entry; a missing path or one without a supported file raises
    a one-line ValueError naming it, and so do two entries of one name when positions make the ids."""
    tasks: list[RecordTask] = []
    seen: dict[str, str] = {}
    for path in cfg.paths:
        entry = _entry_name(path)
        if cfg.id_field is None and entry in seen:
            raise ValueError(
                f"records paths {seen[entry]} and {path} share the name {entry!r}, so their ids would collide: rename one or set id_field"
            )
        seen[entry] = path
        tasks.extend(_entry_tasks(path, entry))
    return tasks


def _entry_name(path: str) -> str:
    """``corpus`` for ``corpus.jsonl.zst``, ``corpus.parquet`` or a folder ``corpus/``."""
    found = storage.name(storage.resolve(path))
    for suffixes in (COMPRESSIONS, (*JSON_SUFFIXES, ".parquet")):
        found = next((found[: -len(s)] for s in suffixes if found.lower().endswith(s)), found)
    return found


def record_files(cfg: RecordsConfig) -> list[str]:
    """Every file the records are read from, with the ``state.json`` that orders a dataset's files
    (what the stage's fingerprint records); the same one-line errors as ``record_tasks``."""
    listed = [item for path in cfg.paths for item in _listed(path)[1]]
    states = {storage.join(storage.parent(file), "state.json") for kind, file in listed if kind == "arrow"}
    return [file for _, file in listed] + sorted(states)


def _listed(path: str) -> tuple[str, list[tuple[Kind, str]]]:
    """(the entry's resolved root, its records files), or a one-line ValueError naming ``path``."""
    root = storage.resolve(path)
    if not storage.exists(root):
        raise ValueError(f"records path does not exist: {path}")
    files = _entry_files(root)
    if not files:
        raise ValueError(
            f"no records files in {path}: expected .jsonl/.json/.ndjson (optionally .gz or .zst), .parquet, or a datasets save_to_disk folder"
        )
    return root, files


def _entry_tasks(path: str, entry: str) -> list[RecordTask]:
    """Tasks of one entry, numbered on from the record counts of the files before each."""
    root, files = _listed(path)
    tasks: list[RecordTask] = []
    first = 0
    for index, (kind, file) in enumerate(files):
        label = storage.name(root) if file == root else storage.relative(file, root)
        if kind == "parquet":
            groups, rows = _row_group_tasks(file, label, entry, first)
            tasks.extend(groups)
            first += rows
            continue
        tasks.append(RecordTask(file, kind, label, entry, first))
        if index < len(files) - 1:  # the last file's count numbers nothing
            first += _count(file, kind)
    return tasks


def _entry_files(root: str) -> list[tuple[Kind, str]]:
    """(kind, path) of the records files of an entry, in reading order."""
    if storage.is_file(root):
        kind = _kind(root)
        return [(kind, root)] if kind else []
    files = storage.files_under(root)
    datasets = {storage.parent(f) for f in files if storage.name(f) in DATASET_MARKERS}  # the entry, or a DatasetDict's splits
    found: list[tuple[Kind, str]] = []
    listed: set[str] = set()
    for file in files:
        home = storage.parent(file)
        if home in datasets:
            if home not in listed:  # a dataset is read where its first file sorts, in its own order
                listed.add(home)
                found.extend(_dataset_files(home))
        elif (kind := _kind(file)) is not None:
            found.append((kind, file))
    return found


def _kind(path: str) -> Kind | None:
    file = storage.name(path).lower()
    if file in NOT_RECORDS:
        return None
    if file.endswith(".parquet"):
        return "parquet"
    bare = next((file[: -len(s)] for s in COMPRESSIONS if file.endswith(s)), file)
    return "jsonl" if bare.endswith(JSON_SUFFIXES) else None


def _dataset_files(folder: str) -> list[tuple[Kind, str]]:
    """The Arrow stream files of a ``save_to_disk`` folder, in the order its ``state.json`` lists them."""
    state = storage.join(folder, "state.json")
    if not storage.is_file(state):
        raise ValueError(f"datasets folder without state.json (not written by save_to_disk?): {folder}")
    listed = storage.read_json(state).get("_data_files") or []
    if not listed:
        raise ValueError(f"{state} lists no _data_files")
    return [("arrow", storage.join(folder, item["filename"])) for item in listed]


def _row_group_tasks(path: str, label: str, entry: str, first: int) -> tuple[list[RecordTask], int]:
    """One task per row group, from the file's footer, and the file's row count."""
    try:
        with storage.arrow_input(path) as source:
            meta = pq.ParquetFile(source).metadata
    except CORRUPTION as error:
        raise InputFormatError(f"{path}: not a readable Parquet file ({_describe(error)})") from None
    tasks: list[RecordTask] = []
    offset = 0
    for group in range(meta.num_row_groups):
        tasks.append(RecordTask(path, "parquet", label, entry, first + offset, offset, group))
        offset += meta.row_group(group).num_rows
    return tasks, offset


def _count(path: str, kind: Kind) -> int:
    """The records reading a whole file yields (a damaged remainder as one), to number the next file's."""
    sizes = (1 for _ in _json_lines(path)) if kind == "jsonl" else (batch.num_rows for batch in _arrow_batches(path, None))
    total = 0
    try:
        for size in sizes:
            total += size
    except CORRUPTION:
        total += 1
    return total


class RecordReader:
    """Picklable reader of one ``RecordTask``: ``(task, counts) -> records``, as the documents job calls it."""

    def __init__(self, cfg: RecordsConfig) -> None:
        self.text_field, self.id_field, self.title_field = cfg.text_field, cfg.id_field, cfg.title_field

    def __call__(self, task: RecordTask, counts: Counter[str] | None = None) -> Iterator[Document | Reject]:
        """One Document or Reject per record, each counted into ``counts["inputs"]`` where read."""
        position = task.first
        try:
            for where, row in self._rows(task):
                count_input(counts)
                yield self._record(row, f"{task.entry}:{position}", where, task.entry)
                position += 1
        except CORRUPTION as error:
            count_input(counts)
            detail = f"{_describe(error)} after {position - task.first} records"
            yield Reject(make_id(SOURCE, f"{task.entry}:{position}"), SOURCE, "corrupt_input", detail, task.file)

    def _rows(self, task: RecordTask) -> Iterator[tuple[str, dict | str]]:
        """(where, row) per record: ``where`` finds it again (``file:line``, 1-based, or ``file#row``,
        0-based in the file); ``row`` its fields, or for a line that is not a JSON object why not."""
        if task.kind == "jsonl":
            for number, line in _json_lines(task.path):
                yield f"{task.file}:{number}", _json_object(line, number)
            return
        columns = list(dict.fromkeys(f for f in (self.text_field, self.id_field, self.title_field) if f))
        row = task.offset
        for batch in _parquet_batches(task, columns) if task.kind == "parquet" else _arrow_batches(task.path, columns):
            for fields in batch.to_pylist():
                yield f"{task.file}#{row}", fields
                row += 1

    def _record(self, row: dict | str, position: str, where: str, entry: str) -> Document | Reject:
        """A document's ``meta.file`` is its entry's name, the same in every format, so the same records give
        byte-identical documents from JSON lines, Parquet or a datasets folder; a reject's key says where it was."""
        if isinstance(row, str):
            return Reject(make_id(SOURCE, position), SOURCE, "not_json", row, where)
        key = position if self.id_field is None else _id_key(row.get(self.id_field))
        if key is None:
            return Reject(make_id(SOURCE, position), SOURCE, "missing_id", f"no {self.id_field!r} value", where)
        doc_id = make_id(SOURCE, key)
        text = row.get(self.text_field)
        if not isinstance(text, str):
            return Reject(doc_id, SOURCE, "missing_text", f"no string {self.text_field!r} field", where)
        if not text.strip():
            return Reject(doc_id, SOURCE, "empty", "text is only white space", where)
        title = row.get(self.title_field) if self.title_field else ""
        return Document(id=doc_id, source=SOURCE, title=title if isinstance(title, str) else "", text=text, meta={"file": entry})


def _id_key(value: object) -> str | None:
    """A record's own key: a string as is, anything else as JSON spells it; None when there is none."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _json_object(line: bytes, number: int) -> dict | str:
    """The line's object, or a short reason why it is not one."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        return f"line {number}: {_describe(error)}"[:200]
    return row if isinstance(row, dict) else f"line {number}: a JSON {type(row).__name__}, not an object"


def _json_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of every non-blank line, never holding more than one line in memory."""
    pending = bytearray()
    number = 0
    for chunk in decompressed_chunks(path):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            number += 1
            pending += chunk[start:end]
            if pending.strip():
                yield number, bytes(pending)
            pending.clear()
            start = end + 1
        pending += chunk[start:]
    if pending.strip():
        yield number + 1, bytes(pending)


def _parquet_batches(task: RecordTask, columns: list[str]) -> Iterator[pa.RecordBatch]:
    with storage.arrow_input(task.path) as source:
        parquet = pq.ParquetFile(source)
        present = [c for c in columns if c in parquet.schema_arrow.names]
        yield from parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[task.row_group], columns=present)


def _arrow_batches(path: str, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
    """The batches of an Arrow IPC stream file (what save_to_disk writes), only ``columns`` of them."""
    with storage.arrow_input(path) as source:
        stream = pa.ipc.open_stream(source)
        present = None if columns is None else [c for c in columns if c in stream.schema.names]
        for batch in stream:
            yield batch if present is None else batch.select(present)


def _describe(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())
