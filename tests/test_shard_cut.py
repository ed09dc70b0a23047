"""Cutting spilled examples into shards in worker processes or Beam steps: the plan, byte-identical output, errors surfacing."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from shard_factory import random_bert_columns

from corpusforge.pipeline.examples_stage import cut_with_beam
from corpusforge.pipeline.forked_workers import forkserver, forkserver_scope
from corpusforge.pipeline.options import LOCAL_RUNNER
from corpusforge.shards.format import MANIFEST_NAME, bert_schema
from corpusforge.shards.reader import open_shard, read_manifest
from corpusforge.shards.writer import (
    iter_sorted_buckets,
    plan_cut,
    row_bytes,
    spill_pieces,
    spilled_rows,
    write_shards,
    write_spilled_shards,
)

SCHEMA = bert_schema(32, 5, 30522)
MANIFEST = {
    "format_version": 1,
    "task": "bert",
    "params": {"test": True},
    "vocab": {"kind": "wordpiece", "path": "vocab", "sha256": "0" * 64, "size": 30522, "special_ids": {"pad": 0}},
    "schema": {"max_seq_length": 32, "max_predictions_per_seq": 5, "id_type": "uint16"},
    "totals": {"documents": 7},
}
EXAMPLES, PRODUCERS, BUCKETS = 1200, 6, 5


@pytest.fixture(scope="module")
def spilled(tmp_path_factory) -> tuple:
    """Six producers' examples spilled into five range buckets; returns (folder, keys, columns)."""
    folder = tmp_path_factory.mktemp("spill")
    keys = np.random.default_rng(3).integers(0, 2**64, EXAMPLES, dtype=np.uint64)
    columns = random_bert_columns(EXAMPLES, max_seq_length=32, max_predictions=5, seed=3)
    for producer, rows in enumerate(np.array_split(np.arange(EXAMPLES), PRODUCERS)):
        spill_pieces(folder, f"p{producer}", keys[rows], {k: v[rows] for k, v in columns.items()}, SCHEMA, BUCKETS)
    return folder, keys, columns


def outputs(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_local_spill_files_are_written_uncompressed(spilled):
    """Compression is for spills that travel to an object store (the cloud build's test reads those back);
    on a local disk it only cost CPU: the files hold their rows' full bytes."""
    folder, keys, _ = spilled
    for path in sorted(folder.glob("bucket-*/*.arrow")):
        with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
            table = reader.read_all()
        assert path.stat().st_size >= table.nbytes > 0
    assert spilled_rows(folder) == len(keys)


def test_plan_cuts_the_global_order_into_balanced_shards_that_straddle_buckets(spilled):
    folder, _, _ = spilled
    plan = plan_cut(folder, SCHEMA, target_bytes=row_bytes(SCHEMA) * 170)
    assert plan.sizes == [150] * 8 and len(plan.buckets) == BUCKETS
    covered = [(bucket, row) for shard in plan.pieces for bucket, first, rows in shard for row in range(first, first + rows)]
    bucket_rows = [sum(pa.ipc.open_stream(pa.memory_map(str(p))).read_next_batch().num_rows for p in paths) for paths in plan.buckets]
    assert covered == [(bucket, row) for bucket, count in enumerate(bucket_rows) for row in range(count)]  # each row once, in order
    assert [sum(rows for _, _, rows in shard) for shard in plan.pieces] == plan.sizes
    assert any(len(shard) > 1 for shard in plan.pieces)  # a shard straddles buckets
    feeds = [sum(any(b == bucket for b, _, _ in shard) for shard in plan.pieces) for bucket in range(BUCKETS)]
    assert max(feeds) > 1  # a bucket feeds several shards


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_worker_processes_write_the_same_bytes_as_one_process(spilled, tmp_path, compression):
    folder, keys, columns = spilled
    options = dict(target_bytes=row_bytes(SCHEMA) * 170, max_examples=None, compression=compression)
    write_shards(iter_sorted_buckets(folder), spilled_rows(folder), SCHEMA, tmp_path / "stream", MANIFEST, **options)
    for workers in (1, 2):
        write_spilled_shards(folder, SCHEMA, tmp_path / str(workers), MANIFEST, workers=workers, **options)
    with forkserver_scope():  # a build's processes: forked from its forkserver, not spawned
        write_spilled_shards(folder, SCHEMA, tmp_path / "forked", MANIFEST, workers=2, processes=forkserver(), **options)
    reference = outputs(tmp_path / "stream")
    assert len(reference) == 9 and MANIFEST_NAME in reference
    assert outputs(tmp_path / "1") == reference and outputs(tmp_path / "2") == reference and outputs(tmp_path / "forked") == reference

    manifest = read_manifest(tmp_path / "2")
    order = np.argsort(keys, kind="stable")
    tables = [open_shard(manifest.shard_path(entry), expected=entry, check_sha=True) for entry in manifest.shards]
    assert all(table.column("input_ids").num_chunks == 1 for table in tables)
    got = np.concatenate([table.column("input_ids").combine_chunks().flatten().to_numpy().reshape(-1, 32) for table in tables])
    np.testing.assert_array_equal(got, columns["input_ids"][order])
    assert manifest.totals["examples"] == EXAMPLES and manifest.totals["documents"] == 7


def test_beam_steps_cut_the_same_bytes_as_worker_processes(spilled, tmp_path):
    """The cut of a distributed runner (one Beam step per shard), here on the in-process runner."""
    folder, _, _ = spilled
    options = dict(target_bytes=row_bytes(SCHEMA) * 170, compression="zstd")
    write_spilled_shards(folder, SCHEMA, tmp_path / "processes", MANIFEST, workers=2, **options)
    beam = PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode="in_memory")
    (tmp_path / "temp").mkdir()
    write_spilled_shards(folder, SCHEMA, tmp_path / "beam", MANIFEST, cut=partial(cut_with_beam, beam, str(tmp_path / "temp")), **options)
    reference = outputs(tmp_path / "processes")
    assert len(reference) == 9 and outputs(tmp_path / "beam") == reference  # shards and manifest


def test_no_spilled_examples_give_one_empty_shard_as_before(tmp_path):
    (tmp_path / "spill").mkdir()
    write_shards(iter_sorted_buckets(tmp_path / "spill"), 0, SCHEMA, tmp_path / "stream", MANIFEST, target_bytes=10**6)
    write_spilled_shards(tmp_path / "spill", SCHEMA, tmp_path / "cut", MANIFEST, target_bytes=10**6, workers=2)
    assert outputs(tmp_path / "cut") == outputs(tmp_path / "stream")
    assert read_manifest(tmp_path / "cut").totals["examples"] == 0


def test_a_failing_shard_job_raises_its_message_here_and_leaves_no_manifest(spilled, tmp_path):
    folder, _, _ = spilled
    spill = tmp_path / "spill"
    spill_pieces(spill, "p0", *spilled_part(spilled, 0, 600), SCHEMA, BUCKETS)
    foreign = bert_schema(32, 5, 70000)  # int32 ids: same columns, other types
    spill_pieces(spill, "p1", *spilled_part(spilled, 600, 1200, schema=foreign), foreign, BUCKETS)
    out = tmp_path / "out"
    write_spilled_shards(folder, SCHEMA, out, MANIFEST, target_bytes=row_bytes(SCHEMA) * 300)
    assert (out / MANIFEST_NAME).is_file()
    with pytest.raises(ValueError, match=r"p1\.\d+\.arrow: spill file columns .*input_ids: fixed_size_list<item: int32>\[32\]"):
        write_spilled_shards(spill, SCHEMA, out, MANIFEST, target_bytes=row_bytes(SCHEMA) * 300, workers=2)
    assert not (out / MANIFEST_NAME).exists()
    assert not list(out.glob("*.tmp-*"))


def test_an_unreadable_spill_file_is_named_in_the_error(spilled, tmp_path):
    spill = tmp_path / "spill"
    spill_pieces(spill, "p0", *spilled_part(spilled, 0, 600), SCHEMA, BUCKETS)
    broken = sorted(spill.rglob("*.arrow"))[2]
    broken.write_bytes(broken.read_bytes()[:-100])
    with pytest.raises(ValueError, match=rf"{broken.name}: unreadable spill file"):
        write_spilled_shards(spill, SCHEMA, tmp_path / "out", MANIFEST, target_bytes=10**6, workers=2)
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


def spilled_part(spilled: tuple, start: int, stop: int, schema: pa.Schema = SCHEMA) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Keys and columns of examples ``start:stop``; ids widened to int32 for a schema with int32 ids."""
    _, keys, columns = spilled
    dtype = np.int32 if schema.field("input_ids").type.value_type == pa.int32() else np.uint16
    part = {name: values[start:stop] for name, values in columns.items()}
    part.update(input_ids=part["input_ids"].astype(dtype), masked_lm_ids=part["masked_lm_ids"].astype(dtype))
    return keys[start:stop], part


def test_a_spill_short_of_the_announced_examples_fails_before_anything_is_written(spilled, tmp_path):
    folder, _, _ = spilled
    with pytest.raises(RuntimeError, match=f"spill files hold {EXAMPLES} examples, the example stage made {EXAMPLES + 1}"):
        write_spilled_shards(folder, SCHEMA, tmp_path / "out", MANIFEST, target_bytes=10**6, expected=EXAMPLES + 1)
    assert not (tmp_path / "out").exists()
