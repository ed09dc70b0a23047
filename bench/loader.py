"""Loader throughput: ShardStream whole-batch slicing vs HF datasets + per-example DataLoader collate.

Both sides read the same memory-mapped Arrow IPC shards (BERT, seq 128, 20 predictions) written by
tests/shard_factory.py into a temporary directory. The reference is the standard recipe: a map-style
``datasets.Dataset`` in torch format, shuffled, batched by DataLoader's default per-example collate.
The reference opens each shard with ``datasets.Dataset.from_file`` (memory-mapped) and concatenates them.

    .venv/bin/python bench/loader.py                      # 200k examples, 0/1/2 workers
    .venv/bin/python bench/loader.py --examples 50000 --workers 0 2
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from shard_factory import random_bert_columns, write_shards  # noqa: E402

from corpusforge.shards.reader import read_manifest  # noqa: E402
from corpusforge.trainer.data import ShardStream  # noqa: E402

CHUNK = 20_000  # examples generated at a time, to bound the factory's memory


def make_shards(directory: Path, examples: int, shards: int) -> Path:
    parts = [random_bert_columns(min(CHUNK, examples - start), seed=start) for start in range(0, examples, CHUNK)]
    columns = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    base, extra = divmod(examples, shards)
    return write_shards(directory, columns, [base + (i < extra) for i in range(shards)])


def reference_dataset(directory: Path) -> datasets.Dataset:
    manifest = read_manifest(directory)
    parts = [datasets.Dataset.from_file(str(manifest.shard_path(e))) for e in manifest.shards]
    return datasets.concatenate_datasets(parts).with_format("torch")


def examples_per_second(loader: DataLoader, batch_size: int, max_batches: int) -> float:
    """Steady-state rate: the clock starts after the first batch (worker start-up excluded)."""
    iterator = iter(loader)
    next(iterator)
    began = time.perf_counter()
    batches = sum(1 for _ in itertools.islice(iterator, max_batches))
    return batches * batch_size / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--reference-batches", type=int, default=40, help="batches timed for the slow reference")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration; medians are printed")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        directory = make_shards(Path(tmp), args.examples, args.shards)
        print(
            f"{args.examples:,} BERT examples (seq 128) in {args.shards} shards, written in {time.perf_counter() - began:.1f}s; batch {args.batch_size}"
        )
        reference = reference_dataset(directory)
        print(f"medians of {args.repeats} interleaved runs")
        print(f"{'workers':>7} {'ours ex/s':>12} {'ours batch/s':>13} {'reference ex/s':>15} {'ratio':>7}")
        for workers in args.workers:
            ours, theirs = [], []
            for _ in range(args.repeats):  # interleaved, so both sides see the same machine load
                stream = ShardStream(directory, args.batch_size, seed=0, epochs=None)
                ours.append(
                    examples_per_second(
                        DataLoader(stream, batch_size=None, num_workers=workers), args.batch_size, args.examples // args.batch_size
                    )
                )
                loader = DataLoader(reference, batch_size=args.batch_size, shuffle=True, num_workers=workers, drop_last=True)
                theirs.append(examples_per_second(loader, args.batch_size, args.reference_batches))
            ours_rate, theirs_rate = float(np.median(ours)), float(np.median(theirs))
            print(
                f"{workers:>7} {ours_rate:>12,.0f} {ours_rate / args.batch_size:>13,.1f} {theirs_rate:>15,.0f} {ours_rate / theirs_rate:>6.1f}x"
            )


if __name__ == "__main__":
    main()
