"""Shard reader: manifest errors, memory-mapped zero-copy views, damaged files named in errors, interop."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shard_factory import random_bert_columns, random_gpt_columns, write_shards

from corpusforge.shards.format import bert_schema
from corpusforge.shards.reader import ShardError, chunk_views, column_view, open_shard, read_manifest
from corpusforge.shards.verify import verify
from corpusforge.shards.writer import record_batch
from corpusforge.shards.writer import write_shards as writer_write_shards
from corpusforge.trainer.data import ShardStream

COLUMNS = random_bert_columns(300, max_seq_length=64, max_predictions=10, seed=4)


@pytest.fixture
def shard_dir(tmp_path) -> Path:
    return write_shards(tmp_path / "bert", COLUMNS, [200, 100])


def first_shard(directory: Path) -> tuple[Path, object]:
    manifest = read_manifest(directory)
    return Path(manifest.shard_path(manifest.shards[0])), manifest.shards[0]


def test_manifest_fields(shard_dir):
    manifest = read_manifest(shard_dir)
    assert manifest.task == "bert" and manifest.examples == 300 and manifest.root == str(shard_dir)
    assert manifest.tokens == int(COLUMNS["length"].astype(np.int64).sum()) == manifest.totals["tokens"]
    assert manifest.arrow_schema() == bert_schema(64, 10, 30522)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "manifest missing"),
        ("{not json", "not valid JSON"),
        (json.dumps({"format_version": 99}), "unknown format_version 99"),
        (json.dumps({"format_version": 1, "task": "bert"}), "invalid manifest: vocab"),
    ],
)
def test_bad_manifests_raise_shard_error_naming_the_file(tmp_path, content, message):
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(ShardError, match=message) as error:
        read_manifest(tmp_path)
    assert str(error.value).startswith(str(tmp_path / "manifest.json"))


def test_open_shard_is_zero_copy(shard_dir):
    path, entry = first_shard(shard_dir)
    assert not path.read_bytes().startswith(b"ARROW1")  # the IPC stream flavour of shards.format
    allocated = pa.total_allocated_bytes()
    table = open_shard(path, expected=entry, check_sha=True, schema=read_manifest(shard_dir).arrow_schema())
    views = {name: column_view(table, name) for name in table.column_names}
    assert pa.total_allocated_bytes() == allocated  # every column points into the memory map
    assert sum(view.nbytes for view in views.values()) > 0.9 * entry.bytes
    ids = views["input_ids"]
    assert ids.shape == (200, 64) and ids.dtype == np.uint16 and not ids.flags.writeable
    assert ids.ctypes.data == table.column("input_ids").chunks[0].values.buffers()[1].address
    np.testing.assert_array_equal(ids, COLUMNS["input_ids"][:200])
    np.testing.assert_array_equal(column_view(table, "next_sentence_label"), COLUMNS["next_sentence_label"][:200])


def test_truncated_shard_names_the_file(shard_dir):
    path, entry = first_shard(shard_dir)
    path.write_bytes(path.read_bytes()[: entry.bytes // 2])
    with pytest.raises(ShardError, match="truncated") as error:
        open_shard(path, expected=entry)
    assert str(error.value).startswith(f"{path}: ")
    with pytest.raises(ShardError, match="not a readable Arrow IPC file") as error:
        open_shard(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_checksum_mismatch_names_the_file(shard_dir):
    path, entry = first_shard(shard_dir)
    data = bytearray(path.read_bytes())
    data[entry.bytes // 2] ^= 0x01
    path.write_bytes(bytes(data))
    open_shard(path, expected=entry)  # same size: only the checksum can tell
    with pytest.raises(ShardError, match=f"^{path}: sha256 mismatch"):
        open_shard(path, expected=entry, check_sha=True)
    assert any(problem.startswith(f"{path}: sha256 mismatch") for problem in verify(shard_dir))


def test_wrong_schema_and_count_name_the_file(shard_dir):
    path, entry = first_shard(shard_dir)
    with pytest.raises(ShardError, match=f"^{path}: schema differs"):
        open_shard(path, schema=bert_schema(128, 20, 30522))
    with pytest.raises(ShardError, match=f"^{path}: 200 examples, manifest says 201"):
        open_shard(path, expected=entry.model_copy(update={"examples": 201}))


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(0, 50), width=st.integers(1, 9), batch_rows=st.integers(1, 20))
def test_column_views_cover_every_record_batch(tmp_path_factory, rows, width, batch_rows):
    values = np.arange(rows * width, dtype=np.int32).reshape(rows, width)
    schema = pa.schema([("ids", pa.list_(pa.int32(), width))])
    array = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width)
    path = tmp_path_factory.mktemp("views") / "t.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in pa.Table.from_arrays([array], schema=schema).to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)
    table = open_shard(path)
    np.testing.assert_array_equal(column_view(table, "ids"), values)
    views = chunk_views(table, "ids")
    assert sum(len(view) for view in views) == rows and all(not view.flags.owndata for view in views)


def test_shards_open_with_plain_pyarrow_and_hf_datasets(shard_dir, tmp_path):
    path, _ = first_shard(shard_dir)
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_stream(source).read_all()
    assert table.num_rows == 200 and table.column("length").to_pylist() == COLUMNS["length"][:200].tolist()
    assert_hf_rows(datasets.Dataset.from_file(str(path)), offset=0)
    dataset = datasets.load_dataset("arrow", data_files=[str(path)], split="train", cache_dir=str(tmp_path / "hf"))
    assert_hf_rows(dataset, offset=0)


def test_ipc_file_flavour_shards_still_open_with_the_reader(tmp_path):
    directory = write_shards(tmp_path / "file", COLUMNS, [200, 100], ipc="file")
    path = directory / read_manifest(directory).shards[1].file
    assert path.read_bytes().startswith(b"ARROW1")
    allocated = pa.total_allocated_bytes()
    np.testing.assert_array_equal(column_view(open_shard(path), "input_ids"), COLUMNS["input_ids"][200:])
    assert pa.total_allocated_bytes() == allocated
    (directory / "tokenizer.json").write_text("{}")
    assert verify(directory) == []
    ids = np.concatenate([batch["input_ids"].numpy() for batch in ShardStream(directory, 30, shuffle=False)])
    np.testing.assert_array_equal(ids, COLUMNS["input_ids"])


def assert_hf_rows(dataset: datasets.Dataset, offset: int) -> None:
    row = dataset[17]
    assert row["input_ids"] == COLUMNS["input_ids"][offset + 17].tolist()
    assert row["masked_lm_weights"] == COLUMNS["masked_lm_weights"][offset + 17].tolist()
    assert row["next_sentence_label"] == COLUMNS["next_sentence_label"][offset + 17]
    assert dataset.num_rows == (200 if offset == 0 else 100)


def test_reads_shards_written_by_the_real_writer(tmp_path):
    columns = random_gpt_columns(50, seq_len=16, vocab_size=70000, seed=8)  # int32 ids
    schema = pa.schema([("input_ids", pa.list_(pa.int32(), 17)), ("length", pa.uint32())])
    (tmp_path / "tokenizer.json").write_text("{}")
    manifest = {
        "format_version": 1,
        "task": "gpt",
        "params": {"seq_len": 16},
        "vocab": {"kind": "bpe", "path": str(tmp_path / "tokenizer.json"), "sha256": "", "size": 70000, "special_ids": {"eot": 50256}},
        "schema": {"seq_len": 16, "id_type": "int32"},
    }
    batches = [record_batch(schema, {k: v[i : i + 20] for k, v in columns.items()}) for i in range(0, 50, 20)]
    writer_write_shards(batches, 50, schema, tmp_path, manifest, target_bytes=1500)
    assert read_manifest(tmp_path).shard_schema.id_type == "int32" and len(read_manifest(tmp_path).shards) > 1
    assert verify(tmp_path) == []
    stream = ShardStream(tmp_path, 10, shuffle=False)
    ids = np.concatenate([batch["input_ids"].numpy() for batch in stream])
    np.testing.assert_array_equal(ids, columns["input_ids"])
