"""Read shard directories: the manifest, memory-mapped Arrow IPC shards, zero-copy numpy column views.

Every failure is a ``ShardError`` whose one-line message starts with the offending file, so a user
looking at a 500-shard directory knows which file to regenerate.

Writers should write one record batch per shard: then every column is one contiguous buffer and
``column_view`` is a true view. A shard with several record batches still reads correctly; use
``chunk_views`` for per-batch views, ``column_view`` then concatenates (one copy).
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from corpusforge.core import storage
from corpusforge.shards.format import FORMAT_VERSION, MANIFEST_NAME, bert_schema, gpt_schema, numpy_dtype

FILE_MAGIC = b"ARROW1"  # starts an Arrow IPC file; an IPC stream starts with a message length


class ShardError(Exception):
    """A shard directory, manifest or shard file that cannot be trusted; the message names the file."""


class VocabInfo(BaseModel):
    kind: Literal["wordpiece", "bpe"]
    path: str
    sha256: str
    size: int
    special_ids: dict[str, int]


class ShardSchemaInfo(BaseModel):
    max_seq_length: int | None = None  # BERT
    max_predictions_per_seq: int | None = None  # BERT
    seq_len: int | None = None  # GPT
    id_type: Literal["uint16", "int32"]


class ShardEntry(BaseModel):
    file: str
    examples: int
    tokens: int
    bytes: int
    sha256: str


class Manifest(BaseModel):
    format_version: int
    task: Literal["bert", "gpt"]
    params: dict[str, Any] = Field(default_factory=dict)
    vocab: VocabInfo
    shard_schema: ShardSchemaInfo = Field(alias="schema")
    shards: list[ShardEntry]
    totals: dict[str, Any] = Field(default_factory=dict)
    _root: str = PrivateAttr(default=".")

    @property
    def root(self) -> str:
        """The directory holding manifest.json; shard files and a relative vocab path live under it."""
        return self._root

    @property
    def examples(self) -> int:
        return sum(entry.examples for entry in self.shards)

    @property
    def tokens(self) -> int:
        return sum(entry.tokens for entry in self.shards)

    def shard_path(self, entry: ShardEntry) -> str:
        return storage.join(self._root, entry.file)

    def vocab_path(self) -> str:
        """The vocabulary: a URI or absolute path as recorded, a relative one (what the writer records) under the root."""
        path = self.vocab.path
        if not storage.is_local(path) or os.path.isabs(path):
            return path
        joined = storage.join(self._root, path)
        return joined if storage.is_local(joined) else storage.normpath(joined)  # a store takes ``..`` literally

    def tokenizer_path(self) -> str:
        """tokenizer.json: the vocab path itself, or the file of that name in a vocabulary directory."""
        path = self.vocab_path()
        return storage.join(path, "tokenizer.json") if storage.is_dir(path) else path

    def arrow_schema(self) -> pa.Schema:
        """The exact schema every shard must have (from shards.format)."""
        info = self.shard_schema
        if self.task == "bert":
            if info.max_seq_length is None or info.max_predictions_per_seq is None:
                raise ShardError(f"{storage.join(self._root, MANIFEST_NAME)}: bert schema needs max_seq_length and max_predictions_per_seq")
            return bert_schema(info.max_seq_length, info.max_predictions_per_seq, self.vocab.size)
        if info.seq_len is None:
            raise ShardError(f"{storage.join(self._root, MANIFEST_NAME)}: gpt schema needs seq_len")
        return gpt_schema(info.seq_len, self.vocab.size)


def read_manifest(directory: storage.PathLike, vocab: storage.PathLike | None = None) -> Manifest:
    """The manifest of a shard directory; ``vocab`` replaces its vocabulary path (shards moved without it)."""
    path = storage.join(directory, MANIFEST_NAME)
    if not storage.is_file(path):
        raise ShardError(f"{path}: manifest missing")
    try:
        data = json.loads(storage.read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ShardError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
        found = data.get("format_version") if isinstance(data, dict) else None
        raise ShardError(f"{path}: unknown format_version {found!r} (this reader knows {FORMAT_VERSION})")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ShardError(f"{path}: invalid manifest: {where}: {first['msg']} ({exc.error_count()} error(s))") from exc
    manifest._root = os.fspath(directory)
    if vocab is not None:
        manifest.vocab.path = storage.resolve(vocab)
    return manifest


def open_shard(
    path: storage.PathLike,
    *,
    expected: ShardEntry | None = None,
    check_sha: bool = False,
    schema: pa.Schema | None = None,
    local: storage.PathLike | None = None,
) -> pa.Table:
    """Memory-map one Arrow IPC shard; uncompressed shards come back zero-copy (pages load on touch).

    Both IPC flavours open: the stream format of shards.format (the only one
    ``datasets.Dataset.from_file`` reads) and the IPC file format of earlier shards. Either way the
    columns' buffers point into the memory map (a shard behind a URI is read into memory instead).

    ``expected`` (the manifest entry) checks size and example count before anything is trusted;
    ``check_sha`` reads the whole file once to compare its checksum; ``schema`` checks the columns.
    ``local`` is a local copy of ``path`` to read instead (``shards.cache``); messages still name ``path``.
    """
    path = os.fspath(path)
    read = os.fspath(local) if local is not None else path
    if not storage.is_file(read):
        raise ShardError(f"{path}: shard file missing")
    if expected is not None and storage.size(read) != expected.bytes:
        raise ShardError(f"{path}: {storage.size(read)} bytes, manifest says {expected.bytes} (truncated or rewritten)")
    if check_sha and expected is not None:
        actual = storage.sha256(read)
        if actual != expected.sha256:
            raise ShardError(f"{path}: sha256 mismatch (manifest {expected.sha256[:12]}…, file {actual[:12]}…)")
    return read_shard(path, read, expected=expected, schema=schema)


def read_shard(path: str, source: str | pa.Buffer, *, expected: ShardEntry | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """The table of a shard whose file checks passed: ``source`` is a file (memory-mapped) or the shard's bytes.

    ``expected`` checks the example count, ``schema`` the columns; messages name ``path``.
    """
    try:
        stream = pa.BufferReader(source) if isinstance(source, pa.Buffer) else storage.arrow_input(source)
        opener = pa.ipc.open_file if stream.read(len(FILE_MAGIC)) == FILE_MAGIC else pa.ipc.open_stream
        stream.seek(0)
        table = opener(stream).read_all()
    except (pa.ArrowException, OSError) as exc:
        message = " ".join(str(exc).split())
        raise ShardError(f"{path}: not a readable Arrow IPC file ({message})") from exc
    if schema is not None and not table.schema.equals(schema, check_metadata=False):
        raise ShardError(f"{path}: schema differs from the manifest's: got {_one_line(table.schema)}, want {_one_line(schema)}")
    if expected is not None and table.num_rows != expected.examples:
        raise ShardError(f"{path}: {table.num_rows} examples, manifest says {expected.examples}")
    return table


def _one_line(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)


def chunk_view(array: pa.Array) -> np.ndarray:
    """One record batch's column as numpy without copying: fixed-size lists become [rows, width]."""
    if array.null_count:
        raise ValueError(f"column of type {array.type} has {array.null_count} nulls; shard columns are never null")
    if pa.types.is_fixed_size_list(array.type):
        width = array.type.list_size
        return array.flatten().to_numpy(zero_copy_only=True).reshape(-1, width)
    return array.to_numpy(zero_copy_only=True)


def chunk_views(table: pa.Table, name: str) -> list[np.ndarray]:
    """Per-record-batch views of a column (zero-copy, whatever the number of batches)."""
    return [chunk_view(chunk) for chunk in table.column(name).chunks]


def column_view(table: pa.Table, name: str) -> np.ndarray:
    """A whole column as one array: a view for one-batch shards, one concatenating copy otherwise."""
    views = chunk_views(table, name)
    if len(views) == 1:
        return views[0]
    if not views:
        column_type = table.schema.field(name).type
        width = column_type.list_size if pa.types.is_fixed_size_list(column_type) else None
        return np.empty((0, width) if width else (0,), dtype=numpy_dtype(column_type))
    return np.concatenate(views)
