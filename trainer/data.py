"""Stream whole batches from a shard directory into PyTorch, with exact mid-epoch resume.

Contract for the training loop
------------------------------
    stream = ShardStream(shard_dir, batch_size=32, rank=rank, world_size=world, seed=seed, epochs=None)
    stream.load_state_dict(checkpoint["data"])            # optional: resume exactly where it stopped
    loader = DataLoader(stream, batch_size=None, num_workers=k, pin_memory=True)
    timer = DataWaitTimer()
    for batches_consumed, batch in enumerate(timer.wrap(loader), start=1):
        inputs = to_model_inputs(batch, device, stream.task)
        ...
        checkpoint["data"] = stream.state_dict(batches_consumed)   # batches this loop took from `loader`
        log(data_wait=timer.fraction()); timer.reset()

Batches (``dict[str, torch.Tensor]``, the shard columns of ``shards/format.py``, dtypes as stored:
ids uint16 or int32, so host memory and the host-to-device copy stay small):
  BERT: input_ids [B,L], length [B], a_length [B], masked_lm_positions [B,P], masked_lm_ids [B,P],
        masked_lm_weights [B,P] float32, next_sentence_label [B] int8
  GPT:  input_ids [B,T] (T = seq_len + 1), length [B]
With num_workers=0 a batch that is one contiguous slice is a read-only view of the memory-mapped
shard (no copy at all): never write to it in place; ``to_model_inputs`` copies. In a DataLoader
worker a batch is copied once into one shared-memory buffer (one segment per batch, not one per
column). Slicing costs next to nothing, so num_workers=0 is often the fastest choice; workers help
when the main process is busy (page faults on a cold disk, a Python-heavy training step).

A shard directory behind a URI (``s3://bucket/run/shards/bert``) is read the same way from local
copies: ``shards.cache`` downloads each shard the first time it is needed, checks it against the
manifest's sha256, and keeps it in a bounded cache that later runs reuse. A stream keeps only the
shard it is reading open (an epoch reads each shard's blocks consecutively), so the cache may evict
the ones it has moved past.

``to_model_inputs(batch, device, task)`` gives what the models take (non-blocking copies, dtype
conversion on the device):
  BERT: input_ids long [B,L], attention_mask bool [B,L] (pos < length), token_type_ids long [B,L]
        (a_length <= pos < length), masked_lm_positions long [B,P], masked_lm_ids long [B,P],
        masked_lm_weights float [B,P] (0.0 on padding predictions), next_sentence_label long [B]
  GPT:  input_ids long [B,T], length long [B]; the model uses x = ids[:, :-1], y = ids[:, 1:] and
        ignores targets at positions >= length - 1 (the padding of a final partial window).

Order, sharding and resume (the rules this module guarantees)
--------------------------------------------------------------
* The global order of epoch e depends only on (seed, e) and the manifest: shards in a seeded random
  order, each cut into blocks of ``block_size`` consecutive examples (64) in a seeded random order.
  Batches are therefore a few contiguous slices (usually one), read without per-example work.
* Global batch g covers global positions [start + g*G, start + (g+1)*G) with G = batch_size *
  world_size; rank r takes the contiguous part [r*B, (r+1)*B) of it; DataLoader worker w of k takes
  global batches g = w, w+k, w+2k, ..., which is exactly the order DataLoader hands batches out, so
  the loop sees the same sequence for any num_workers. Any ranks x workers works with any number of
  shards; every example is read exactly once per epoch across all readers except the epoch's last
  N mod G examples (drop_last: ``dropped_per_epoch``), which are skipped that epoch only.
* ``example_range=(lo, hi)`` restricts the stream to examples [lo, hi) of manifest order (shards in
  manifest order, rows in file order) before anything else: the blocks are the unrestricted ones
  clipped to the range (empty ones dropped), then shuffled, sharded and dropped-last as above with
  N = hi - lo. Rows outside the range are never read. Shards are shuffled globally when written,
  so a tail range is a uniform random sample: ``holdout_split`` cuts train / held-out that way.
* The state is (seed, epoch, position = examples of the epoch's order already consumed), computed in
  O(1) from ``batches_consumed``; no data is replayed and nothing lives in /dev/shm or the workers.
  A resumed run starts at ``position`` with its own batch_size and world_size, so resuming with a
  different world size neither repeats nor skips an example (when position is not a multiple of the
  new G, that epoch simply ends at a different drop_last tail).
* ``epochs=None`` streams forever (epoch after epoch; train by steps); ``epochs=n`` stops after n
  epochs counted from the starting one. Each ``iter(loader)`` restarts from the stream's current
  state, so do not use ``persistent_workers=True`` together with ``set_epoch``/``load_state_dict``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from corpusforge.core import storage
from corpusforge.shards.cache import ShardCache, default_cache, open_cached
from corpusforge.shards.reader import Manifest, chunk_views, read_manifest

Batch = dict[str, torch.Tensor]
OPEN_SHARDS = 1  # an epoch reads a shard's blocks consecutively: once it moves on, the previous shard can go


def holdout_split(examples: int, holdout: int) -> dict[str, Any]:
    """Training and held-out ranges of manifest order: the last h = min(holdout, N // 10) examples are held out.

    The cap keeps 90% of a tiny corpus for training; h = 0 (holdout 0, or N < 10) holds nothing out.
    Plain lists, so the split goes into state.json and eval.json as it is.
    """
    held = min(holdout, examples // 10)
    return {"examples": examples, "train": [0, examples - held], "held_out": [examples - held, examples] if held else None}


def shard_bounds(sizes: Sequence[int], example_range: tuple[int, int]) -> list[tuple[int, int]]:
    """Each shard's rows [first, end) inside ``example_range`` of manifest order (first == end: none)."""
    lo, hi = example_range
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    return [(int(np.clip(lo - offsets[s], 0, size)), int(np.clip(hi - offsets[s], 0, size))) for s, size in enumerate(sizes)]


def epoch_order(
    sizes: Sequence[int],
    seed: int,
    epoch: int,
    block_size: int,
    shuffle: bool = True,
    bounds: Sequence[tuple[int, int]] | None = None,
) -> np.ndarray:
    """The epoch's global order as blocks: int64 rows of (shard index, first example, end example).

    Shard order is drawn from (seed, epoch), block order within shard s from (seed, epoch, s), so the
    order never depends on which process computes it. ``bounds`` (``shard_bounds``) clips the blocks
    to a range after the draw, so a restricted stream keeps the full stream's order of what it keeps.
    """
    shard_order = np.random.default_rng([seed, epoch]).permutation(len(sizes)) if shuffle else np.arange(len(sizes))
    blocks = []
    for shard in shard_order:
        starts = np.arange(0, sizes[shard], block_size, dtype=np.int64)
        if shuffle:
            starts = np.random.default_rng([seed, epoch, int(shard)]).permutation(starts)
        ends = np.minimum(starts + block_size, sizes[shard])
        if bounds is not None:
            first, end = bounds[shard]
            starts, ends = np.maximum(starts, first), np.minimum(ends, end)
            starts, ends = starts[starts < ends], ends[starts < ends]
        blocks.append(np.stack([np.full_like(starts, shard), starts, ends], axis=1))
    return np.concatenate(blocks) if blocks else np.empty((0, 3), dtype=np.int64)


class _OpenShard:
    """One memory-mapped shard (a URI's through the cache) with per-record-batch column views and their row offsets."""

    def __init__(self, manifest: Manifest, index: int, columns: Sequence[str], cache: ShardCache):
        table = open_cached(manifest, manifest.shards[index], cache, schema=manifest.arrow_schema())
        self.views = {name: chunk_views(table, name) for name in columns}
        lengths = [len(view) for view in self.views[columns[0]]]
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.table = table  # keeps the memory map (and a cached file's pin) alive as long as the views

    def ranges(self, start: int, end: int) -> Iterator[tuple[_OpenShard, int, int, int]]:
        """Rows [start, end) as (shard, record batch, first row, end row) within record batches."""
        chunk = int(np.searchsorted(self.offsets, start, side="right")) - 1
        while start < end:
            chunk_end = min(end, int(self.offsets[chunk + 1]))
            base = int(self.offsets[chunk])
            yield self, chunk, start - base, chunk_end - base
            start, chunk = chunk_end, chunk + 1


class ShardStream(IterableDataset):
    """Whole batches from a shard directory, sharded by example ranges over a seeded global order."""

    def __init__(
        self,
        shard_dir: storage.PathLike,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        block_size: int = 64,
        epochs: int | None = 1,
        columns: Sequence[str] | None = None,
        example_range: tuple[int, int] | None = None,
        cache: ShardCache | None = None,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of size {world_size}")
        self.manifest = read_manifest(shard_dir)
        self.task = self.manifest.task
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size
        self.seed, self.shuffle, self.block_size, self.epochs = seed, shuffle, block_size, epochs
        self.columns = list(columns or self.manifest.arrow_schema().names)
        self.sizes = [entry.examples for entry in self.manifest.shards]
        lo, hi = example_range if example_range is not None else (0, sum(self.sizes))
        if not 0 <= lo <= hi <= sum(self.sizes):
            raise ValueError(f"{shard_dir}: example range [{lo}, {hi}) outside the manifest's {sum(self.sizes)} examples")
        self.example_range = (int(lo), int(hi))
        self.bounds = shard_bounds(self.sizes, self.example_range)
        self.examples = self.example_range[1] - self.example_range[0]
        self.global_batch_size = batch_size * world_size
        if self.examples < self.global_batch_size:
            raise ValueError(f"{shard_dir}: {self.examples} examples, fewer than one global batch of {self.global_batch_size}")
        self.epoch, self.position = 0, 0
        self.cache = cache or default_cache()  # chosen here, in the main process; workers get it pickled
        self._shards: dict[int, _OpenShard] = {}  # opened lazily in each worker process, never pickled; oldest first

    @property
    def batches_per_epoch(self) -> int:
        return self.examples // self.global_batch_size

    @property
    def dropped_per_epoch(self) -> int:
        """Examples past the last full global batch of an epoch started at position 0 (drop_last)."""
        return self.examples % self.global_batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def state_dict(self, batches_consumed: int) -> dict[str, Any]:
        """Where the stream stands after the loop took ``batches_consumed`` batches since it started."""
        epoch, position = self._locate(batches_consumed)
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "block_size": self.block_size,
            "examples": self.examples,
            "example_range": list(self.example_range),
            "epoch": epoch,
            "position": position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ours = {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "block_size": self.block_size,
            "examples": self.examples,
            "example_range": list(self.example_range),
        }
        theirs = {"example_range": [0, state["examples"]], **state}  # states before ranges covered the whole manifest
        theirs["example_range"] = list(theirs["example_range"])
        for key, value in ours.items():
            if theirs[key] != value:
                raise ValueError(f"cannot resume: {key} was {theirs[key]!r}, this stream has {value!r}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def _locate(self, batches_consumed: int) -> tuple[int, int]:
        """(epoch, position) after ``batches_consumed`` global batches from the current state, in O(1)."""
        first = (self.examples - self.position) // self.global_batch_size
        if batches_consumed < first:
            return self.epoch, self.position + batches_consumed * self.global_batch_size
        later = batches_consumed - first
        return self.epoch + 1 + later // self.batches_per_epoch, (later % self.batches_per_epoch) * self.global_batch_size

    def _global_batches(self) -> Iterator[tuple[int, int]]:
        """(epoch, first global position of this rank's slice) of every global batch, in order."""
        epoch, position = self.epoch, self.position
        while self.epochs is None or epoch < self.epoch + self.epochs:
            while position + self.global_batch_size <= self.examples:
                yield epoch, position + self.rank * self.batch_size
                position += self.global_batch_size
            epoch, position = epoch + 1, 0

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        order_epoch, order, block_ends = None, None, None
        for index, (epoch, start) in enumerate(self._global_batches()):
            if index % workers != worker:
                continue
            if epoch != order_epoch:
                order = epoch_order(self.sizes, self.seed, epoch, self.block_size, self.shuffle, self.bounds)
                block_ends = np.cumsum(order[:, 2] - order[:, 1])
                order_epoch = epoch
            yield self._read(order, block_ends, start, start + self.batch_size)

    def _read(self, order: np.ndarray, block_ends: np.ndarray, start: int, end: int) -> Batch:
        """Global positions [start, end) as tensors: one view when a single slice, else one copy."""
        slices = []
        block = int(np.searchsorted(block_ends, start, side="right"))
        while start < end:
            shard, first, _ = (int(v) for v in order[block])
            block_start = int(block_ends[block - 1]) if block else 0
            take = min(end, int(block_ends[block])) - start
            row = first + start - block_start
            slices.append((shard, row, row + take))
            start += take
            block += 1
        ranges = [piece for shard, a, b in slices for piece in self._shard(shard).ranges(a, b)]
        pieces = {name: [shard.views[name][chunk][a:b] for shard, chunk, a, b in ranges] for name in self.columns}
        if get_worker_info() is not None:
            return _packed(pieces)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return {name: torch.from_numpy(p[0] if len(p) == 1 else np.concatenate(p)) for name, p in pieces.items()}

    def _shard(self, index: int) -> _OpenShard:
        """Shard ``index``, opened unless it is among the ``OPEN_SHARDS`` last used; those beyond are closed first,
        so the cache may evict their files to make room for this one."""
        shard = self._shards.pop(index, None)
        if shard is None:
            while len(self._shards) >= OPEN_SHARDS:
                del self._shards[next(iter(self._shards))]
            shard = _OpenShard(self.manifest, index, self.columns, self.cache)
        self._shards[index] = shard
        return shard

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_shards"] = {}  # memory maps stay in the process that opened them
        return state


def _packed(pieces: dict[str, list[np.ndarray]]) -> Batch:
    """Copy a batch once into a single shared-memory buffer and return typed views of it.

    A DataLoader worker hands tensors to the main process through shared memory; one segment per
    batch instead of one per column (plus a copy each) is what makes workers faster, not slower.
    """
    layout, total = [], 0
    for name, parts in pieces.items():
        shape = (sum(len(part) for part in parts), *parts[0].shape[1:])
        nbytes = int(np.prod(shape)) * parts[0].itemsize
        layout.append((name, parts, shape, total, nbytes))
        total += -(-nbytes // 8) * 8  # keep every column 8-byte aligned
    buffer = torch.empty(total, dtype=torch.uint8).share_memory_()
    host = buffer.numpy()
    batch = {}
    for name, parts, shape, offset, nbytes in layout:
        np.concatenate(parts, out=host[offset : offset + nbytes].view(parts[0].dtype).reshape(shape))
        dtype = torch.from_numpy(np.empty(0, parts[0].dtype)).dtype
        batch[name] = buffer[offset : offset + nbytes].view(dtype).view(shape)  # views of the shared storage
    return batch


def to_model_inputs(batch: Batch, device: torch.device | str, task: str) -> dict[str, torch.Tensor]:
    """Copy a stored batch to ``device`` (non-blocking) and convert it to the models' dtypes there."""

    def move(name: str, dtype: torch.dtype) -> torch.Tensor:
        return batch[name].to(device, non_blocking=True).to(dtype)

    input_ids = move("input_ids", torch.long)
    length = move("length", torch.long)
    if task == "gpt":
        return {"input_ids": input_ids, "length": length}
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
    attention_mask = positions < length[:, None]
    second_segment = positions >= move("a_length", torch.long)[:, None]
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": (attention_mask & second_segment).long(),
        "masked_lm_positions": move("masked_lm_positions", torch.long),
        "masked_lm_ids": move("masked_lm_ids", torch.long),
        "masked_lm_weights": move("masked_lm_weights", torch.float),
        "next_sentence_label": move("next_sentence_label", torch.long),
    }


class DataWaitTimer:
    """How much of the loop's wall time goes to waiting for the next batch (input-bound if high)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.waited = 0.0
        self.started = time.perf_counter()

    def wrap(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        iterator = iter(batches)
        while True:
            began = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.waited += time.perf_counter() - began
            yield batch

    def fraction(self) -> float:
        """Share of wall time since the last reset spent waiting for data."""
        elapsed = time.perf_counter() - self.started
        return self.waited / elapsed if elapsed > 0 else 0.0
