"""Shard cut: spilled examples cut into shards by spawned worker processes vs in the launching process.

Spills about ``--mb`` of BERT examples (seq 128, 20 predictions, ``tests/shard_factory.py`` columns,
random 64-bit keys) as ``--producers`` example-making bundles into range buckets of
``sort_bucket_bytes`` (64 MB, as the examples stage sizes them), then cuts them into shards of
``target_bytes`` (256 MB) three ways, each in a fresh process: "stream" is main's serial cut
(``write_shards`` over ``iter_sorted_buckets``, one bucket then one shard in the launcher),
"workers=1" is ``write_spilled_shards`` in-process, "workers=N" is it with N spawned workers.
psutil samples the RSS of the launcher and of each worker every 20 ms; CPU is the whole process
tree's user+system time
(interpreter start included), wall time the cut's alone. RSS includes the spill files' memory-mapped pages a process touched.

    nice -n 10 .venv/bin/python bench/shard_cut.py                # ~600 MB, stream vs 1 vs 2 workers
    nice -n 10 .venv/bin/python bench/shard_cut.py --mb 200 --workers 1 2 4
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from corpusforge.core.config import ShardsConfig  # noqa: E402
from corpusforge.shards.format import bert_schema  # noqa: E402
from corpusforge.shards.writer import iter_sorted_buckets, row_bytes, spill_pieces, spilled_rows, write_shards, write_spilled_shards  # noqa: E402

SCHEMA = bert_schema(128, 20, 30522)
MANIFEST = {"format_version": 1, "task": "bert", "params": {}, "schema": {}}


def spill(directory: Path, megabytes: int, producers: int) -> int:
    """About ``megabytes`` of examples spilled by ``producers`` bundles; returns the sort bucket count."""
    from shard_factory import random_bert_columns  # here: spawned workers re-import this module, and it imports datasets

    shards = ShardsConfig()
    examples = megabytes * 2**20 // row_bytes(SCHEMA)
    buckets = math.ceil(examples * row_bytes(SCHEMA) / shards.sort_bucket_bytes)
    rng = np.random.default_rng(0)
    for producer, rows in enumerate(np.array_split(np.arange(examples), producers)):
        columns = random_bert_columns(len(rows), seed=producer)
        keys = rng.integers(0, 2**64, len(rows), dtype=np.uint64)
        spill_pieces(directory, f"producer-{producer:04d}", keys, columns, SCHEMA, buckets)
    return buckets


def cut(spill_dir: Path, out_dir: Path, mode: str) -> None:
    """One cut, in this (fresh) process; prints its RSS before the cut (bytes) and the cut's wall time, as JSON lines."""
    shards = ShardsConfig()
    options = dict(target_bytes=shards.target_bytes, max_examples=shards.max_examples, compression=shards.compression)
    print(json.dumps({"start_rss": psutil.Process().memory_info().rss}), flush=True)
    began = time.perf_counter()
    if mode == "stream":
        write_shards(iter_sorted_buckets(spill_dir), spilled_rows(spill_dir), SCHEMA, out_dir, MANIFEST, **options)
    else:
        write_spilled_shards(spill_dir, SCHEMA, out_dir, MANIFEST, workers=int(mode), **options)
    print(json.dumps({"wall": time.perf_counter() - began}), flush=True)


class Sampler(threading.Thread):
    """Peak RSS of a process and, separately, of the largest of its descendants."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root, self.launcher, self.worker, self.workers, self.done = psutil.Process(pid), 0, 0, set(), threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.launcher = max(self.launcher, self.root.memory_info().rss)
                for child in self.root.children(recursive=True):
                    self.worker = max(self.worker, child.memory_info().rss)
                    self.workers.add(child.pid)
            except psutil.Error:
                pass
            time.sleep(0.02)


def measure(spill_dir: Path, out_dir: Path, mode: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = subprocess.Popen([sys.executable, __file__, "--cut", str(spill_dir), str(out_dir), mode], stdout=subprocess.PIPE, text=True)
    sampler = Sampler(child.pid)
    sampler.start()
    start_rss = json.loads(child.stdout.readline())["start_rss"]
    wall = json.loads(child.stdout.readline())["wall"]  # the cut's, without the interpreter's start
    if child.wait():
        raise SystemExit(f"cut {mode} failed")
    sampler.done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    shards = sorted(p.name for p in out_dir.glob("train-*"))
    digest = subprocess.run(["sha256sum", *shards], cwd=out_dir, capture_output=True, text=True, check=True).stdout
    manifest = (out_dir / "manifest.json").read_bytes()
    shutil.rmtree(out_dir)
    return dict(
        wall=wall, cpu=cpu, start=start_rss, launcher=sampler.launcher, worker=sampler.worker, shards=len(shards), output=(digest, manifest)
    )


def median_run(runs: list[dict]) -> dict:
    """Median wall and CPU, largest RSS, of one mode's runs."""
    return dict(
        runs[0],
        wall=float(np.median([r["wall"] for r in runs])),
        cpu=float(np.median([r["cpu"] for r in runs])),
        **{key: max(r[key] for r in runs) for key in ("start", "launcher", "worker")},
        output=runs[0]["output"] if all(r["output"] == runs[0]["output"] for r in runs) else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=600, help="spilled examples, MB")
    parser.add_argument("--producers", type=int, default=60, help="bundles that spill examples")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of every mode (the machine is shared)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shard-cut-") as work:
        spill_dir = Path(work) / "spill"
        began = time.perf_counter()
        buckets = spill(spill_dir, args.mb, args.producers)
        files = len(list(spill_dir.rglob("*.arrow")))
        print(
            f"spilled {spilled_rows(spill_dir)} examples ({args.mb} MB) into {buckets} buckets, {files} files, {time.perf_counter() - began:.0f} s"
        )
        modes = ["stream", *map(str, args.workers)]
        runs = [{mode: measure(spill_dir, Path(work) / f"out-{mode}", mode) for mode in modes} for _ in range(args.repeat)]
    results = {mode: median_run([run[mode] for run in runs]) for mode in modes}
    print(f"median of {args.repeat} interleaved runs (RSS: the largest)")
    print(f"{'mode':<10}{'shards':>7}{'wall s':>9}{'cpu s':>8}{'launcher start/peak MB':>24}{'worker peak MB':>16}")
    for mode, r in results.items():
        name = mode if mode == "stream" else f"workers={mode}"
        worker = f"{r['worker'] / 2**20:.0f}" if r["worker"] else "-"
        print(
            f"{name:<10}{r['shards']:>7}{r['wall']:>9.1f}{r['cpu']:>8.1f}{r['start'] / 2**20:>13.0f} /{r['launcher'] / 2**20:>6.0f}{worker:>16}"
        )
    one = results[str(args.workers[0])]
    for mode, r in results.items():
        if mode not in ("stream", str(args.workers[0])):
            print(f"workers={mode} vs workers={args.workers[0]}: {one['wall'] / r['wall']:.2f}x wall, {r['cpu'] / one['cpu']:.2f}x cpu")
    same = all(r["output"] == results["stream"]["output"] for r in results.values())
    print(f"shards and manifest byte-identical across modes: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cut"]:
        cut(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
    else:
        main()
