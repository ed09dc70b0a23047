"""Write small, valid shard directories (exactly shards/format.py) for tests and benchmarks.

Random BERT examples look like create_pretraining_data.py output: [CLS] A [SEP] B [SEP] [PAD]...,
about 15% of the real tokens masked (80% [MASK], 10% random, 10% unchanged), sorted positions.
Given columns are written as they are, so a test can know every figure in advance.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from tokenizers.implementations import BertWordPieceTokenizer, ByteLevelBPETokenizer

from corpusforge.core.config import BertConfig, ShardsConfig
from corpusforge.pipeline.examples_stage import (
    TOKENIZE_BATCH_CHARS,
    Job,
    ReadBatches,
    bert_examples,
    bert_layout,
    bert_sort_buckets,
    corpus_size,
    run_job,
    spill_folder,
)
from corpusforge.shards.format import FORMAT_VERSION, MANIFEST_NAME, SHARD_PATTERN, bert_schema, gpt_schema, id_type

BERT_SPECIAL = {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
GPT_SPECIAL = {"eot": 50256}
FIRST_WORD_ID = 999  # bert-base-uncased: ids below are [unused], specials and single characters


def random_bert_columns(
    count: int, *, max_seq_length: int = 128, max_predictions: int = 20, vocab_size: int = 30522, seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    L, P = max_seq_length, max_predictions
    positions = np.arange(L)[None, :]
    length = rng.integers(L // 2, L + 1, size=count)
    a_length = rng.integers(3, length - 2)  # "[CLS] A [SEP]" with A and B non-empty
    original = rng.integers(FIRST_WORD_ID, vocab_size, size=(count, L))
    original[:, 0] = BERT_SPECIAL["cls"]
    original[np.arange(count), a_length - 1] = BERT_SPECIAL["sep"]
    original[np.arange(count), length - 1] = BERT_SPECIAL["sep"]
    original[positions >= length[:, None]] = BERT_SPECIAL["pad"]

    special = (positions == 0) | (positions == (a_length - 1)[:, None]) | (positions >= (length - 1)[:, None])
    keys = np.where(special, np.inf, rng.random((count, L)))
    wanted = np.clip(np.rint(0.15 * (length - 3)), 1, P).astype(np.int64)
    keep = np.arange(P)[None, :] < wanted[:, None]
    picked = np.where(keep, np.argsort(keys, axis=1)[:, :P], L)  # L sorts after every chosen position
    picked = np.sort(picked, axis=1)
    masked_positions = np.where(picked < L, picked, 0)
    rows = np.arange(count)[:, None]
    masked_ids = np.where(keep, original[rows, masked_positions], 0)

    input_ids = original.copy()
    action = rng.random((count, P))
    replacement = np.where(
        action < 0.8, BERT_SPECIAL["mask"], np.where(action < 0.9, masked_ids, rng.integers(FIRST_WORD_ID, vocab_size, size=(count, P)))
    )
    input_ids[np.broadcast_to(rows, (count, P))[keep], masked_positions[keep]] = replacement[keep]
    dtype = np.uint16 if vocab_size <= 65535 else np.int32
    return {
        "input_ids": input_ids.astype(dtype),
        "length": length.astype(np.uint16),
        "a_length": a_length.astype(np.uint16),
        "masked_lm_positions": masked_positions.astype(np.uint16),
        "masked_lm_ids": masked_ids.astype(dtype),
        "masked_lm_weights": keep.astype(np.float32),
        "next_sentence_label": rng.integers(0, 2, size=count).astype(np.int8),
    }


def random_gpt_columns(
    count: int, *, seq_len: int = 64, vocab_size: int = 50257, partial_last: bool = True, seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab_size - 1, size=(count, seq_len + 1))
    length = np.full(count, seq_len + 1, dtype=np.uint32)
    if partial_last and count:
        length[-1] = (seq_len + 1) // 3
        ids[-1, length[-1] :] = GPT_SPECIAL["eot"]
    dtype = np.uint16 if vocab_size <= 65535 else np.int32
    return {"input_ids": ids.astype(dtype), "length": length}


def bert_tokenizer_json(vocab_txt: Path, directory: Path) -> Path:
    path = Path(directory) / "tokenizer.json"
    BertWordPieceTokenizer(str(vocab_txt), lowercase=True).save(str(path))
    return path


def gpt_tokenizer_json(vocab_json: Path, merges_txt: Path, directory: Path) -> Path:
    path = Path(directory) / "tokenizer.json"
    ByteLevelBPETokenizer(str(vocab_json), str(merges_txt)).save(str(path))
    return path


def write_shards(
    directory: Path,
    columns: dict[str, np.ndarray],
    shard_sizes: list[int],
    *,
    task: str = "bert",
    tokenizer_json: Path | None = None,
    vocab_size: int | None = None,
    batch_rows: int | None = None,
    ipc: str = "stream",
    vocab: dict | None = None,
) -> Path:
    """Write ``columns`` split into shards of ``shard_sizes`` rows plus the manifest; returns the directory.

    ``batch_rows`` splits each shard into record batches of that many rows (default: one batch);
    ``ipc="file"`` writes the IPC file flavour instead of the format's IPC stream; ``vocab``
    replaces the manifest's "vocab" entry (e.g. the build's ``corpusforge.encoding.vocab.vocab_manifest``).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    total = len(columns["length"])
    assert sum(shard_sizes) == total, (shard_sizes, total)
    width = columns["input_ids"].shape[1]
    if task == "bert":
        vocab_size = vocab_size or 30522
        max_predictions = columns["masked_lm_positions"].shape[1]
        schema = bert_schema(width, max_predictions, vocab_size)
        schema_info = {"max_seq_length": width, "max_predictions_per_seq": max_predictions}
        special, kind = BERT_SPECIAL, "wordpiece"
    else:
        vocab_size = vocab_size or 50257
        schema = gpt_schema(width - 1, vocab_size)
        schema_info = {"seq_len": width - 1}
        special, kind = GPT_SPECIAL, "bpe"
    schema_info["id_type"] = str(id_type(vocab_size))

    entries, start = [], 0
    for index, size in enumerate(shard_sizes):
        name = SHARD_PATTERN.format(index=index, count=len(shard_sizes))
        part = {key: value[start : start + size] for key, value in columns.items()}
        table = pa.Table.from_arrays([_arrow(part[field.name], field.type) for field in schema], schema=schema)
        path = directory / name
        _atomic_write(path, lambda tmp, table=table: _write_ipc(tmp, table, batch_rows, ipc))
        entries.append(
            {
                "file": name,
                "examples": size,
                "tokens": int(part["length"].astype(np.int64).sum()),
                "bytes": path.stat().st_size,
                "sha256": _sha256(path),
            }
        )
        start += size

    vocab_path = tokenizer_json.name if tokenizer_json and tokenizer_json.parent == directory else str(tokenizer_json or "tokenizer.json")
    manifest = {
        "format_version": FORMAT_VERSION,
        "task": task,
        "params": {"factory": "tests/shard_factory.py"},
        "vocab": vocab
        or {
            "kind": kind,
            "path": vocab_path,
            "sha256": _sha256(tokenizer_json) if tokenizer_json else "",
            "size": vocab_size,
            "special_ids": special,
        },
        "schema": schema_info,
        "shards": entries,
        "totals": {"examples": total, "tokens": sum(entry["tokens"] for entry in entries)},
    }
    _atomic_write(directory / MANIFEST_NAME, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8"))
    return directory


def write_bert_shards_from_sentences(
    pipeline_options: PipelineOptions,
    docs: Iterable[tuple[str, list[str]]],
    vocab_dir: Path,
    out_dir: Path,
    bert: BertConfig,
    shards: ShardsConfig,
    seed: int,
) -> dict:
    """BERT shards through the real Beam stage from documents already split into sentences; returns the manifest.

    ``docs`` may be a generator: it is consumed once, into a Parquet file, one row group per
    ``TOKENIZE_BATCH_CHARS`` of text (one Beam task each), rather than through ``beam.Create``,
    which would pickle (and bz2) the corpus into the graph.
    """
    layout = bert_layout(vocab_dir, bert, shards, seed, [])
    with tempfile.TemporaryDirectory() as scratch, spill_folder(out_dir) as temp:
        path = str(Path(scratch) / "sentences.parquet")
        _write_sentences(docs, path)
        size = corpus_size([path], "sentences")
        job = Job(str(vocab_dir), temp, bert_sort_buckets(size[1], layout, bert, shards), seed)
        return run_job(
            pipeline_options, ReadBatches([path], ("id", "sentences")), bert_examples(job, bert, size), job, out_dir, layout, shards
        )


def _write_sentences(docs: Iterable[tuple[str, list[str]]], path: str) -> None:
    schema = pa.schema([("id", pa.string()), ("sentences", pa.list_(pa.string()))])
    with pq.ParquetWriter(path, schema) as writer:
        group: list[tuple[str, list[str]]] = []
        chars = 0
        for doc_id, sentences in docs:
            group.append((doc_id, list(sentences)))
            chars += sum(map(len, group[-1][1]))
            if chars >= TOKENIZE_BATCH_CHARS:
                writer.write_table(_sentences_table(group, schema))
                group, chars = [], 0
        if group:
            writer.write_table(_sentences_table(group, schema))


def _sentences_table(group: list[tuple[str, list[str]]], schema: pa.Schema) -> pa.Table:
    return pa.table({"id": [doc_id for doc_id, _ in group], "sentences": [sentences for _, sentences in group]}, schema=schema)


def assert_hf_reads_like_pyarrow(path: Path, cache_dir: Path) -> None:
    """``datasets.Dataset.from_file`` and ``load_dataset("arrow")`` give the rows plain pyarrow reads."""
    with pa.memory_map(str(path)) as source:
        expected = pa.ipc.open_stream(source).read_all().to_pylist()
    assert expected, f"{path} holds no rows"
    from_file = datasets.Dataset.from_file(str(path))
    loaded = datasets.load_dataset("arrow", data_files=[str(path)], split="train", cache_dir=str(cache_dir))
    for dataset in (from_file, loaded):
        assert dataset.num_rows == len(expected)
        assert dataset.features.arrow_schema.names == list(expected[0])
        assert dataset[: len(expected)] == {name: [row[name] for row in expected] for name in expected[0]}


def _arrow(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    if pa.types.is_fixed_size_list(arrow_type):
        flat = pa.array(np.ascontiguousarray(values).reshape(-1), type=arrow_type.value_type)
        return pa.FixedSizeListArray.from_arrays(flat, arrow_type.list_size)
    return pa.array(values, type=arrow_type)


def _write_ipc(path: Path, table: pa.Table, batch_rows: int | None, ipc: str) -> None:
    new_writer = pa.ipc.new_file if ipc == "file" else pa.ipc.new_stream
    with pa.OSFile(str(path), "wb") as sink, new_writer(sink, table.schema) as writer:
        if batch_rows:
            for batch in table.to_batches(max_chunksize=batch_rows):
                writer.write_batch(batch)
        else:
            writer.write_table(table, max_chunksize=max(1, table.num_rows))


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    write(tmp)
    os.replace(tmp, path)


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
