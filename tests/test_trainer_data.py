"""ShardStream: exactly-once sharding over ranks x workers, seeded shuffle, exact resume, example ranges, model inputs."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shard_factory import FIRST_WORD_ID, random_bert_columns, random_gpt_columns, write_shards
from torch.utils.data import DataLoader

from corpusforge.trainer.data import DataWaitTimer, ShardStream, epoch_order, holdout_split, shard_bounds, to_model_inputs

N = 1000
SHARDS = [600, 400]


def labelled_columns(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random BERT examples whose second token is FIRST_WORD_ID + example index (a readable id)."""
    columns = random_bert_columns(count, max_seq_length=32, max_predictions=5, seed=seed)
    columns["input_ids"][:, 1] = FIRST_WORD_ID + np.arange(count)
    return columns


def example_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    return (batch["input_ids"][:, 1].long() - FIRST_WORD_ID).tolist()


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory) -> Path:
    # several record batches per shard, so batches also cross record-batch boundaries
    return write_shards(tmp_path_factory.mktemp("bert"), labelled_columns(N), SHARDS, batch_rows=96)


def read_all(stream: ShardStream, workers: int, limit: int | None = None) -> list[list[int]]:
    loader = DataLoader(stream, batch_size=None, num_workers=workers)
    return [example_ids(batch) for batch in itertools.islice(loader, limit)]


def global_order(epoch: int, seed: int, block_size: int = 64) -> list[int]:
    """Example ids of an epoch's global order, from the block table (ids = shard offset + row)."""
    offsets = np.concatenate([[0], np.cumsum(SHARDS)])
    order = epoch_order(SHARDS, seed, epoch, block_size)
    return [int(offsets[shard]) + row for shard, first, end in order for row in range(first, end)]


def test_every_example_once_per_epoch_across_3_ranks_x_2_workers(shard_dir):
    world, batch_size = 3, 16
    per_rank = [read_all(ShardStream(shard_dir, batch_size, rank=r, world_size=world, seed=7), workers=2) for r in range(world)]
    seen = [i for batches in per_rank for batch in batches for i in batch]
    stream = ShardStream(shard_dir, batch_size, world_size=world, seed=7)
    assert len(seen) == len(set(seen)) == N - stream.dropped_per_epoch == stream.batches_per_epoch * world * batch_size
    # global batch g is the next G examples of the global order, split contiguously among ranks
    order = global_order(0, seed=7)
    for g in range(stream.batches_per_epoch):
        assert [i for r in range(world) for i in per_rank[r][g]] == order[g * 48 : (g + 1) * 48]
    assert set(order) - set(seen) == set(order[stream.batches_per_epoch * 48 :])  # only the drop_last tail


def test_train_and_held_out_ranges_split_every_example_once_across_3_ranks_x_2_workers(shard_dir):
    world, batch_size, cut = 3, 16, 700  # the cut is row 100 of shard 1: inside the block [64, 128)
    covered = []
    for example_range in [(0, cut), (cut, N)]:
        per_rank = [
            read_all(ShardStream(shard_dir, batch_size, rank=r, world_size=world, seed=7, example_range=example_range), workers=2)
            for r in range(world)
        ]
        stream = ShardStream(shard_dir, batch_size, world_size=world, seed=7, example_range=example_range)
        served = [i for g in range(stream.batches_per_epoch) for r in range(world) for i in per_rank[r][g]]
        assert stream.examples == example_range[1] - example_range[0]
        assert len(served) == len(set(served)) == stream.examples - stream.dropped_per_epoch == stream.batches_per_epoch * 48
        # the restricted order is the full order with the other range taken out (straddling blocks clipped)
        order = [i for i in global_order(0, seed=7) if example_range[0] <= i < example_range[1]]
        assert served == order[: len(served)]
        covered += order  # served, then this range's drop_last tail
    assert sorted(covered) == list(range(N))
    train_blocks = epoch_order(SHARDS, 7, 0, 64, bounds=shard_bounds(SHARDS, (0, cut))).tolist()
    held_blocks = epoch_order(SHARDS, 7, 0, 64, bounds=shard_bounds(SHARDS, (cut, N))).tolist()
    assert [1, 64, 100] in train_blocks and [1, 100, 128] in held_blocks
    assert all(shard == 1 and first >= 100 for shard, first, _ in held_blocks)


def test_rows_outside_the_range_are_never_read(shard_dir):
    stream = ShardStream(shard_dir, 10, seed=3, example_range=(650, 990))
    ids = [i for batch in read_all(stream, workers=0) for i in batch]
    assert sorted(ids) == list(range(650, 990)) and list(stream._shards) == [1]  # shard 0 never even opened
    with pytest.raises(ValueError, match="outside"):
        ShardStream(shard_dir, 10, example_range=(500, N + 1))


def test_holdout_split_takes_the_tail_capped_at_a_tenth():
    assert holdout_split(50_000, 1000) == {"examples": 50_000, "train": [0, 49_000], "held_out": [49_000, 50_000]}
    assert holdout_split(300, 1000) == {"examples": 300, "train": [0, 270], "held_out": [270, 300]}
    assert holdout_split(300, 0)["held_out"] is None and holdout_split(9, 1000) == {"examples": 9, "train": [0, 9], "held_out": None}


def test_sequence_is_the_same_for_any_number_of_workers(shard_dir):
    single = read_all(ShardStream(shard_dir, 24, seed=1), workers=0)
    assert read_all(ShardStream(shard_dir, 24, seed=1), workers=2) == single


def test_shuffle_is_seeded_differs_by_epoch_and_keeps_blocks_contiguous(shard_dir):
    def epoch(e: int, seed: int) -> list[int]:
        stream = ShardStream(shard_dir, 50, seed=seed)
        stream.set_epoch(e)
        return [i for batch in read_all(stream, workers=0) for i in batch]

    first = epoch(0, seed=3)
    assert first == epoch(0, seed=3)
    assert first != epoch(1, seed=3) and sorted(first) == sorted(epoch(1, seed=3))
    assert first != epoch(0, seed=4)
    assert first != sorted(first)
    runs = sum(1 for a, b in zip(first, first[1:]) if b != a + 1) + 1
    assert runs <= len(epoch_order(SHARDS, 3, 0, 64))  # rows stay consecutive inside a 64-example block


def test_unshuffled_stream_reads_in_file_order(shard_dir):
    batches = read_all(ShardStream(shard_dir, 100, shuffle=False), workers=0)
    assert [i for batch in batches for i in batch] == list(range(N))


def test_resume_mid_epoch_with_two_workers_continues_exactly(shard_dir):
    def stream() -> ShardStream:
        return ShardStream(shard_dir, 32, rank=1, world_size=2, seed=5, epochs=None)

    steps = 2 * stream().batches_per_epoch + 3  # crosses two epoch boundaries
    uninterrupted = read_all(stream(), workers=2, limit=steps)
    for stop in (7, 15, 17):  # mid-epoch, the last batch of an epoch, the next epoch
        before = read_all(stream(), workers=2, limit=stop)
        resumed = stream()
        resumed.load_state_dict(stream().state_dict(stop))
        assert before + read_all(resumed, workers=2, limit=steps - stop) == uninterrupted
    state = stream().state_dict(17)
    assert (state["epoch"], state["position"]) == (1, 2 * 64)  # 15 full global batches of 64 per epoch


def test_resume_mid_epoch_inside_an_example_range_continues_exactly(shard_dir):
    example_range = (130, 870)  # both ends inside blocks, one in each shard

    def stream() -> ShardStream:
        return ShardStream(shard_dir, 32, rank=1, world_size=2, seed=5, epochs=None, example_range=example_range)

    assert stream().batches_per_epoch == 740 // 64
    steps = 2 * stream().batches_per_epoch + 3
    uninterrupted = read_all(stream(), workers=2, limit=steps)
    assert all(130 <= i < 870 for batch in uninterrupted for i in batch)
    for stop in (5, 11, 13):  # mid-epoch, the last batch of an epoch, the next epoch
        before = read_all(stream(), workers=2, limit=stop)
        resumed = stream()
        resumed.load_state_dict(stream().state_dict(stop))
        assert before + read_all(resumed, workers=2, limit=steps - stop) == uninterrupted
    state = stream().state_dict(13)
    assert (state["epoch"], state["position"], state["example_range"]) == (1, 2 * 64, [130, 870])
    with pytest.raises(ValueError, match="example_range"):
        ShardStream(shard_dir, 32, seed=5, example_range=(100, 840)).load_state_dict(state)  # as many examples, others


def test_resume_with_a_different_world_size_neither_repeats_nor_skips(shard_dir):
    consumed_batches = 5
    before = [read_all(ShardStream(shard_dir, 24, rank=r, world_size=2, seed=9), workers=2, limit=consumed_batches) for r in range(2)]
    state = ShardStream(shard_dir, 24, world_size=2, seed=9).state_dict(consumed_batches)
    seen_before = [i for batches in before for batch in batches for i in batch]
    order = global_order(0, seed=9)
    assert sorted(seen_before) == sorted(order[:240])
    for world, batch_size in [(3, 16), (4, 12), (1, 36)]:
        after = []
        for rank in range(world):
            stream = ShardStream(shard_dir, batch_size, rank=rank, world_size=world, seed=9)
            stream.load_state_dict(state)
            after += [i for batch in read_all(stream, workers=2) for i in batch]
        full = (N - 240) // (world * batch_size) * world * batch_size
        assert not set(after) & set(seen_before)
        assert sorted(seen_before + after) == sorted(order[: 240 + full])


def test_resume_refuses_a_different_order(shard_dir):
    state = ShardStream(shard_dir, 16, seed=1).state_dict(3)
    with pytest.raises(ValueError, match="seed"):
        ShardStream(shard_dir, 16, seed=2).load_state_dict(state)


def test_a_state_from_before_ranges_resumes_the_whole_manifest(shard_dir):
    state = ShardStream(shard_dir, 16, seed=1).state_dict(3)
    del state["example_range"]
    ShardStream(shard_dir, 16, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="examples"):
        ShardStream(shard_dir, 16, seed=1, example_range=(0, 900)).load_state_dict(state)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 90), min_size=1, max_size=4),
    batch_size=st.integers(1, 9),
    world=st.integers(1, 4),
    block_size=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    cuts=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_property_ranks_partition_the_epoch(tmp_path_factory, sizes, batch_size, world, block_size, seed, cuts):
    total = sum(sizes)
    lo, hi = sorted(round(cut * total) for cut in cuts)
    if hi - lo < batch_size * world:
        return
    directory = write_shards(tmp_path_factory.mktemp("prop"), labelled_columns(total), sizes)
    seen = []
    for rank in range(world):
        stream = ShardStream(directory, batch_size, rank=rank, world_size=world, seed=seed, block_size=block_size, example_range=(lo, hi))
        seen += [i for batch in read_all(stream, workers=0) for i in batch]
    assert len(seen) == len(set(seen)) == (hi - lo) // (batch_size * world) * batch_size * world
    assert all(lo <= i < hi for i in seen)


@settings(max_examples=25, deadline=None)
@given(
    first=st.tuples(st.integers(1, 4), st.integers(1, 40)),  # (world size, batch size) before the stop
    second=st.tuples(st.integers(1, 4), st.integers(1, 40)),  # and after resuming
    consumed=st.integers(0, 60),
    seed=st.integers(0, 1000),
)
def test_property_resume_with_any_world_size_continues_the_same_order(shard_dir, first, second, consumed, seed):
    (world, batch_size), (new_world, new_batch_size) = first, second
    streams = [ShardStream(shard_dir, batch_size, rank=r, world_size=world, seed=seed, epochs=None) for r in range(world)]
    before = [i for step in zip(*(read_all(s, workers=0, limit=consumed) for s in streams)) for batch in step for i in batch]
    state = streams[0].state_dict(consumed)
    resumed = []
    for rank in range(new_world):
        stream = ShardStream(shard_dir, new_batch_size, rank=rank, world_size=new_world, seed=seed, epochs=1)
        stream.load_state_dict(state)
        resumed.append(read_all(stream, workers=0))
    after = [i for step in zip(*resumed) for batch in step for i in batch]
    order = global_order(state["epoch"], seed)
    assert after == order[state["position"] : state["position"] + len(after)]  # the same order, continued
    assert len(after) == (N - state["position"]) // (new_world * new_batch_size) * new_world * new_batch_size
    if state["epoch"] == 0:
        assert before == order[: state["position"]]  # nothing skipped, nothing repeated


def test_batches_keep_stored_dtypes_and_view_the_memory_map(shard_dir):
    stream = ShardStream(shard_dir, 16, shuffle=False)
    batch = next(iter(stream))
    assert batch["input_ids"].dtype == torch.uint16 and batch["next_sentence_label"].dtype == torch.int8
    buffer = stream._shards[0].table.column("input_ids").chunks[0].values.buffers()[1]
    assert buffer.address <= batch["input_ids"].data_ptr() < buffer.address + buffer.size  # zero-copy


def test_bert_model_inputs(shard_dir):
    batch = next(iter(ShardStream(shard_dir, 8, seed=2)))
    inputs = to_model_inputs(batch, "cpu", "bert")
    assert {k: v.dtype for k, v in inputs.items()} == {
        "input_ids": torch.long,
        "attention_mask": torch.bool,
        "token_type_ids": torch.long,
        "masked_lm_positions": torch.long,
        "masked_lm_ids": torch.long,
        "masked_lm_weights": torch.float,
        "next_sentence_label": torch.long,
    }
    for row in range(8):
        length, a_length = int(batch["length"][row]), int(batch["a_length"][row])
        assert inputs["attention_mask"][row].tolist() == [p < length for p in range(32)]
        assert inputs["token_type_ids"][row].tolist() == [int(a_length <= p < length) for p in range(32)]
        assert inputs["input_ids"][row, a_length - 1] == inputs["input_ids"][row, length - 1] == 102
    assert torch.equal(inputs["masked_lm_ids"], batch["masked_lm_ids"].long())


def test_gpt_stream_and_model_inputs(tmp_path):
    columns = random_gpt_columns(40, seq_len=16, seed=3)
    directory = write_shards(tmp_path, columns, [25, 15], task="gpt")
    stream = ShardStream(directory, 8, shuffle=False)
    assert stream.task == "gpt"
    batches = [to_model_inputs(b, "cpu", "gpt") for b in DataLoader(stream, batch_size=None, num_workers=2)]
    ids = torch.cat([b["input_ids"] for b in batches])
    lengths = torch.cat([b["length"] for b in batches])
    assert ids.dtype == lengths.dtype == torch.long and ids.shape == (40, 17)
    assert torch.equal(ids, torch.from_numpy(columns["input_ids"].astype(np.int64)))
    assert lengths[-1] == 17 // 3 and (lengths[:-1] == 17).all()


def test_data_wait_timer_separates_waiting_from_computing():
    def slow_source():
        for i in range(5):
            time.sleep(0.03)
            yield i

    waiting = DataWaitTimer()
    assert list(waiting.wrap(slow_source())) == list(range(5))
    assert waiting.fraction() > 0.7

    computing = DataWaitTimer()
    for _ in computing.wrap(range(5)):
        time.sleep(0.03)
    assert computing.fraction() < 0.3
    computing.reset()
    assert computing.waited == 0.0


@given(st.lists(st.integers(0, 50), min_size=1, max_size=8), st.data())
@settings(max_examples=200, deadline=None)
def test_shard_bounds_cut_the_range_into_each_shards_rows(sizes, data):
    total = sum(sizes)
    lo = data.draw(st.integers(0, total))
    hi = data.draw(st.integers(lo, total))
    bounds = shard_bounds(sizes, (lo, hi))
    rows = [offset + row for offset, size, (first, end) in zip(np.cumsum([0, *sizes]), sizes, bounds) for row in range(first, end)]
    assert rows == list(range(lo, hi))
    assert all(0 <= first <= end <= size for size, (first, end) in zip(sizes, bounds))  # an empty share is (x, x), never (0, -1)


@pytest.mark.parametrize("example_range", [(-1, 100), (0, N + 1), (600, 500)])
def test_an_example_range_outside_the_manifest_is_refused(shard_dir, example_range):
    with pytest.raises(ValueError, match="outside the manifest's 1000 examples"):
        ShardStream(shard_dir, 8, example_range=example_range)
