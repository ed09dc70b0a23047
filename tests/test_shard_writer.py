"""Shard writer: balanced shard sizes, global order through sort buckets, checksums, atomic manifest."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpusforge.core import storage
from corpusforge.shards.format import MANIFEST_NAME, bert_schema, gpt_schema
from corpusforge.shards.reader import open_shard, read_manifest
from corpusforge.shards.writer import (
    iter_sorted_buckets,
    plan_shard_sizes,
    range_buckets,
    record_batch,
    row_bytes,
    spill_pieces,
    spilled_rows,
    write_shards,
    write_spilled_shards,
)

SEQ_LEN = 15
SCHEMA = gpt_schema(SEQ_LEN, 50257)
BASE_MANIFEST = {
    "format_version": 1,
    "task": "gpt",
    "params": {"test": True},
    "vocab": {"kind": "bpe", "path": "vocab", "sha256": "0" * 64, "size": 50257, "special_ids": {"eot": 50256}},
    "schema": {"seq_len": SEQ_LEN, "id_type": "uint16"},
    "totals": {"dropped_tokens": 0},
}


def windows(count: int, start: int = 0) -> dict[str, np.ndarray]:
    """Example i holds the value start + i in every slot, so order and content are easy to check."""
    values = np.arange(start, start + count, dtype=np.uint16)
    return {"input_ids": np.repeat(values[:, None], SEQ_LEN + 1, axis=1), "length": np.full(count, SEQ_LEN + 1, dtype=np.uint32)}


def batches(total: int, size: int):
    for start in range(0, total, size):
        yield record_batch(SCHEMA, windows(min(size, total - start), start))


@given(st.integers(0, 10**6), st.integers(1, 10**4), st.integers(10**5, 10**9), st.one_of(st.none(), st.integers(100, 10**6)))
@settings(max_examples=300, deadline=None)
def test_shard_plan_is_balanced_and_within_limits(examples, bytes_each, target, max_examples):
    sizes = plan_shard_sizes(examples, bytes_each, target, max_examples)
    assert sum(sizes) == examples and len(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1
    if max_examples:
        assert max(sizes) <= max_examples
    if len(sizes) > 1 and (not max_examples or examples / (len(sizes) - 1) <= max_examples):
        assert examples * bytes_each > (len(sizes) - 1) * target  # no more shards than the size needs


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=200), st.integers(1, 5000))
@settings(max_examples=200, deadline=None)
def test_range_buckets_are_ordered_ranges(keys, buckets):
    keys = np.sort(np.asarray(keys, dtype=np.uint64))
    owner = range_buckets(keys, buckets)
    assert (np.diff(owner.astype(np.int64)) >= 0).all() and owner.max() < buckets


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=200), st.integers(1, 5000))
@settings(max_examples=200, deadline=None)
def test_range_bucket_is_the_keys_share_of_the_key_range(highs, buckets):
    """A key with zero low bits is exactly at ``high / 2**32`` of the range: its bucket is ``floor(key * B / 2**64)``."""
    keys = np.asarray([high << 32 for high in highs], dtype=np.uint64)
    assert range_buckets(keys, buckets).tolist() == [(high << 32) * buckets >> 64 for high in highs]


def test_range_buckets_span_all_buckets():
    assert range_buckets(np.array([0, 2**63, 2**64 - 1], dtype=np.uint64), 7).tolist() == [0, 3, 6]
    keys = np.random.default_rng(0).integers(0, 2**64, 7000, dtype=np.uint64)
    assert np.bincount(range_buckets(keys, 7), minlength=7).min() > 800  # about 1000 each


def test_write_shards_balances_checksums_and_reads_back(tmp_path):
    manifest = write_shards(batches(1003, 100), 1003, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=10**9, max_examples=250)
    counts = [s["examples"] for s in manifest["shards"]]
    assert counts == [201, 201, 201, 200, 200]
    assert [s["file"] for s in manifest["shards"]][0] == "train-00000-of-00005.arrow"
    read = read_manifest(tmp_path)
    seen = []
    for entry in read.shards:
        path = read.shard_path(entry)
        assert entry.sha256 == storage.sha256(path) and entry.bytes == storage.size(path)
        table = open_shard(path, expected=entry, check_sha=True, schema=read.arrow_schema())
        assert table.column("input_ids").num_chunks == 1  # one record batch: zero-copy columns
        seen.extend(table.column("input_ids").combine_chunks().flatten().to_numpy()[:: SEQ_LEN + 1].tolist())
    assert seen == list(range(1003))
    assert read.totals["examples"] == 1003 and read.totals["tokens"] == 1003 * (SEQ_LEN + 1) and read.totals["dropped_tokens"] == 0
    assert not list(tmp_path.glob("*.tmp-*"))


def test_shard_bytes_do_not_depend_on_how_the_input_is_batched(tmp_path):
    """Shards inside one input batch are written from zero-copy slices, the others from filled copies."""
    digests = {}
    for size in (1003, 600, 100, 7):
        manifest = write_shards(
            batches(1003, size), 1003, SCHEMA, tmp_path / str(size), BASE_MANIFEST, target_bytes=10**9, max_examples=250
        )
        digests[size] = [s["sha256"] for s in manifest["shards"]]
    assert len(digests[1003]) == 5 and all(d == digests[1003] for d in digests.values())


def test_target_bytes_sets_the_shard_count(tmp_path):
    manifest = write_shards(batches(1000, 64), 1000, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=row_bytes(SCHEMA) * 300)
    assert [s["examples"] for s in manifest["shards"]] == [250, 250, 250, 250]


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_shards_read_back(tmp_path, codec):
    manifest = write_shards(batches(500, 128), 500, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=10**9, compression=codec)
    table = pa.ipc.open_stream(pa.memory_map(str(tmp_path / manifest["shards"][0]["file"]))).read_all()
    assert table.column("input_ids").to_pylist() == record_batch(SCHEMA, windows(500)).column("input_ids").to_pylist()
    assert manifest["shards"][0]["bytes"] < row_bytes(SCHEMA) * 500 / 4


def test_interrupted_write_leaves_no_manifest_and_no_temporary_files(tmp_path):
    write_shards(batches(100, 10), 100, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=10**9)
    assert (tmp_path / MANIFEST_NAME).is_file()

    def failing():
        yield from batches(150, 10)
        raise OSError("disk vanished")

    with pytest.raises(OSError, match="disk vanished"):
        write_shards(failing(), 300, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=10**9, max_examples=100)
    assert not (tmp_path / MANIFEST_NAME).exists()  # the earlier run's manifest is gone too
    assert not list(tmp_path.glob("*.tmp-*"))
    assert [p.name for p in tmp_path.glob("*.arrow")] == ["train-00000-of-00003.arrow"]  # whole, but unlisted


def test_announced_count_must_match(tmp_path):
    with pytest.raises(ValueError, match="fewer examples"):
        write_shards(batches(90, 10), 100, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=10**9)
    with pytest.raises(ValueError, match="more than"):
        write_shards(batches(110, 10), 100, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=10**9)
    assert not (tmp_path / MANIFEST_NAME).exists()


@pytest.mark.parametrize("buckets", [1, 4, 37])
def test_spill_files_give_one_global_order_whatever_the_producer_order(tmp_path, buckets):
    rng = np.random.default_rng(buckets)
    keys = rng.integers(0, 2**64, 2000, dtype=np.uint64)
    keys[1000] = keys[10]  # a tie between two producers: broken by producer name, not by arrival
    columns = windows(2000)
    outputs = {}
    for name, order in (("forward", 1), ("backward", -1)):
        for start in range(0, 2000, 250)[::order]:  # eight producers, each spreading its examples over the buckets
            rows = slice(start, start + 250)
            spill_pieces(tmp_path / name, f"producer-{start:04d}", keys[rows], {k: v[rows] for k, v in columns.items()}, SCHEMA, buckets)
        spill_pieces(tmp_path / name, "producer-0000", keys[:250], {k: v[:250] for k, v in columns.items()}, SCHEMA, buckets)  # a retry
        assert spilled_rows(tmp_path / name) == 2000
        assert len(list((tmp_path / name).glob("bucket-*"))) == len(np.unique(range_buckets(keys, buckets)))
        outputs[name] = pa.Table.from_batches(list(iter_sorted_buckets(tmp_path / name)))
    assert outputs["forward"].equals(outputs["backward"])
    assert outputs["forward"].column_names == SCHEMA.names
    expected = np.argsort(keys, kind="stable")
    got = outputs["forward"].column("input_ids").combine_chunks().flatten().to_numpy()[:: SEQ_LEN + 1]
    np.testing.assert_array_equal(got, expected)
    assert not list(tmp_path.rglob("*.tmp-*"))


def test_manifest_is_valid_json_with_the_format_layout(tmp_path):
    write_shards(batches(10, 10), 10, SCHEMA, tmp_path, BASE_MANIFEST, target_bytes=10**9)
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert set(data) == {"format_version", "task", "params", "vocab", "schema", "shards", "totals"}
    assert set(data["shards"][0]) == {"file", "examples", "tokens", "bytes", "sha256"}


def test_row_bytes_are_the_bytes_of_one_example():
    assert row_bytes(SCHEMA) == (SEQ_LEN + 1) * 2 + 4 and isinstance(row_bytes(SCHEMA), int)  # uint16 ids, uint32 length
    assert record_batch(SCHEMA, windows(10)).nbytes == 10 * row_bytes(SCHEMA)
    assert row_bytes(gpt_schema(SEQ_LEN, 70_000)) == (SEQ_LEN + 1) * 4 + 4  # int32 ids past 65,535 tokens
    assert row_bytes(bert_schema(128, 20, 30522)) == 128 * 2 + 2 + 2 + 20 * 2 + 20 * 2 + 20 * 4 + 1


def test_shards_go_into_a_folder_that_does_not_exist_yet(tmp_path):
    out = tmp_path / "run" / "shards" / "gpt"
    write_shards(batches(10, 10), 10, SCHEMA, out, BASE_MANIFEST, target_bytes=10**9)
    assert read_manifest(out).totals["examples"] == 10


def test_spill_files_and_shards_may_live_behind_a_uri(tmp_path):
    """fsspec's memory:// stands in for s3:// or gs://: the same spill files and shard bytes as on local disk."""
    keys = np.random.default_rng(5).integers(0, 2**64, 600, dtype=np.uint64)
    manifests = {}
    for root in (str(tmp_path), f"memory://{tmp_path.name}"):
        spill = storage.join(root, ".work", "gpt")
        for start in range(0, 600, 200):
            rows = slice(start, start + 200)
            spill_pieces(spill, f"producer-{start:04d}", keys[rows], {k: v[rows] for k, v in windows(600).items()}, SCHEMA, 4)
        out = storage.join(root, "shards", "gpt")
        manifests[root] = write_spilled_shards(spill, SCHEMA, out, BASE_MANIFEST, target_bytes=10**9, max_examples=250, workers=1)
        read = read_manifest(out)
        assert [open_shard(read.shard_path(e), expected=e, check_sha=True).num_rows for e in read.shards] == [200, 200, 200]
    local, remote = manifests.values()
    assert remote["shards"] == local["shards"]  # same files, same bytes
    names = [storage.name(path) for path in storage.listdir(f"memory://{tmp_path.name}/shards/gpt")]
    assert names == [MANIFEST_NAME, *(entry["file"] for entry in local["shards"])]  # no temporaries left behind
