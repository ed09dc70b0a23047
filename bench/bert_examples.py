"""BERT examples end to end (sentences -> Beam stage -> written shards) against the tokenizer alone.

    .venv/bin/python bench/bert_examples.py [--books 25] [--dupe-factor 5]

Prints input MB/s and examples/s per core (CPU seconds of this process, all threads: the machine
is shared, so wall time mostly measures the neighbours) for ``write_bert_shards_from_sentences`` (DirectRunner,
in_memory, one core, tokenizers single-threaded) next to the time HF tokenizers alone needs to
tokenize the same sentences with ``encode_batch_fast`` (the limit of tokenizing sentence by
sentence), as a ratio; then the peak resident memory of the stage, each run in a fresh process, at
two corpus sizes, side by side, as a ratio. Peak memory is bounded by the sort bucket and shard
sizes (``ShardsConfig``), not by the corpus; the defaults (64 MB, 256 MB) exceed what 25 books
make (~54 MB of examples), so the memory runs scale both down (``--bound-mb``) to be in the regime
of a real corpus, where every bucket and shard is full. Books are split into sentences once, into
a Parquet file, and streamed from there to the stage and the reference, so no run holds the corpus. The ratio can exceed 1: ``encoding.sentence_tokens`` gets the same ids while
skipping the normalizer for plain text and tokenizing each distinct word once. The reference
``create_pretraining_data.py`` does about 0.22 MB/s on this machine class (quoted, needs TensorFlow).
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # per-core figures: our stage and the reference both single-threaded

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from shard_factory import write_bert_shards_from_sentences  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizers.implementations import BertWordPieceTokenizer  # noqa: E402

from corpusforge.core.config import BertConfig, ShardsConfig  # noqa: E402
from corpusforge.corpora.gutenberg import strip_gutenberg  # noqa: E402
from corpusforge.corpora.sentences import split_sentences  # noqa: E402
from corpusforge.pipeline.examples_stage import TOKENIZE_BATCH_CHARS  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


def write_sentences(books: int, path: Path) -> tuple[int, float]:
    """Split the first ``books`` books into sentences, one Parquet row each; returns (books, MB of sentences)."""
    paths = sorted((SHARED / "books" / "en").glob("*.txt"))[:books]
    schema = pa.schema([("id", pa.string()), ("sentences", pa.list_(pa.string()))])
    megabytes = 0.0
    with pq.ParquetWriter(path, schema) as writer:
        for book in paths:
            sentences = split_sentences(strip_gutenberg(book.read_text(encoding="utf-8-sig").replace("\r\n", "\n")))
            megabytes += sum(len(s.encode("utf-8")) for s in sentences) / 1e6
            writer.write_table(pa.table({"id": [book.name], "sentences": [sentences]}, schema=schema))
    return len(paths), megabytes


def iter_sentences(path: Path) -> Iterator[tuple[str, list[str]]]:
    for row in pq.ParquetFile(path).iter_batches(batch_size=1):
        yield row.column("id")[0].as_py(), row.column("sentences")[0].as_py()


def bert_vocab(directory: Path) -> Path:
    vocab_txt = SHARED / "vocab" / "bert-base-uncased" / "vocab.txt"
    (directory / "vocab.txt").write_bytes(vocab_txt.read_bytes())
    BertWordPieceTokenizer(str(vocab_txt), lowercase=True).save(str(directory / "tokenizer.json"))
    return directory


def tokenizer_only(docs: Iterator[tuple[str, list[str]]], vocab_dir: Path) -> float:
    """CPU seconds of encode_batch_fast over the same sentences, in batches of the same size as ours."""
    tokenizer = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))

    def encode(batch: list[str]) -> float:
        start = time.process_time()
        tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        return time.process_time() - start

    seconds, batch, chars = 0.0, [], 0
    for _, sentences in docs:
        batch.extend(sentences)
        chars += sum(map(len, sentences))
        if chars >= TOKENIZE_BATCH_CHARS:
            seconds, batch, chars = seconds + encode(batch), [], 0
    return seconds + encode(batch)


def peak_resident_mb() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a
    child started by a parent holding 700 MB would report at least that."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_stage(books: int, dupe_factor: int, shards: ShardsConfig) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        sentences = Path(tmp) / "sentences.parquet"
        books, megabytes = write_sentences(books, sentences)
        vocab_dir = bert_vocab(Path(tmp))
        options = PipelineOptions([], runner="DirectRunner", direct_running_mode="in_memory")
        start, wall = time.process_time(), time.perf_counter()
        manifest = write_bert_shards_from_sentences(
            options, iter_sentences(sentences), vocab_dir, Path(tmp) / "shards", BertConfig(dupe_factor=dupe_factor), shards, seed=12345
        )
        seconds, wall = time.process_time() - start, time.perf_counter() - wall
        reference = tokenizer_only(iter_sentences(sentences), vocab_dir)
    return {
        "books": books,
        "mb": megabytes,
        "seconds": seconds,
        "examples": manifest["totals"]["examples"],
        "shards": len(manifest["shards"]),
        "tokenizer_seconds": reference,
        "wall": wall,
        "peak_mb": peak_resident_mb(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--books", type=int, default=25)
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--bound-mb", type=int, default=8, help="sort bucket and shard size of the memory runs (MB)")
    parser.add_argument("--json", action="store_true", help="one run, printed as JSON (used for the memory runs)")
    args = parser.parse_args()
    if args.json:
        bound = args.bound_mb * 1024 * 1024
        print(json.dumps(run_stage(args.books, args.dupe_factor, ShardsConfig(sort_bucket_bytes=bound, target_bytes=bound))))
        return

    result = run_stage(args.books, args.dupe_factor, ShardsConfig())
    ours, limit = result["mb"] / result["seconds"], result["mb"] / result["tokenizer_seconds"]
    print(f"input: {result['books']} books, {result['mb']:.2f} MB of sentences, dupe_factor {args.dupe_factor}")
    print(f"{'':34}{'CPU s':>9}{'MB/s':>9}{'examples/s':>12}")
    print(
        f"{'ours: sentences -> shards':34}{result['seconds']:9.2f}{ours:9.2f}{result['examples'] / result['seconds']:12.0f}   (wall {result['wall']:.1f} s)"
    )
    print(f"{'HF encode_batch_fast alone':34}{result['tokenizer_seconds']:9.2f}{limit:9.2f}{'':>12}")
    print(
        f"ratio ours / tokenizer-only limit: {ours / limit:.2f}   (reference create_pretraining_data: ~0.22 MB/s, ours x{ours / 0.22:.1f})"
    )

    print(f"peak resident memory (fresh process each; sort buckets and shards of {args.bound_mb} MB):")
    runs = []
    for books in sorted({max(1, args.books // 3), args.books}):
        command = [
            sys.executable,
            __file__,
            "--json",
            "--books",
            str(books),
            "--dupe-factor",
            str(args.dupe_factor),
            "--bound-mb",
            str(args.bound_mb),
        ]
        runs.append(json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]))
    print(f"  {'':22}" + "".join(f"{run['books']:>12d} books" for run in runs))
    print(f"  {'MB of sentences':22}" + "".join(f"{run['mb']:18.2f}" for run in runs))
    print(f"  {'examples (shards)':22}" + "".join(f"{run['examples']:>12d} ({run['shards']:2d})" for run in runs))
    print(f"  {'peak resident MB':22}" + "".join(f"{run['peak_mb']:18.0f}" for run in runs))
    if len(runs) == 2:
        small, large = runs
        print(f"  peak ratio large / small: {large['peak_mb'] / small['peak_mb']:.2f} for {large['mb'] / small['mb']:.1f}x the input")
        # The difference between the two runs removes Beam's fixed per-pipeline cost (graph, workers, tokenizer loads).
        marginal = (large["mb"] - small["mb"]) / (large["seconds"] - small["seconds"])
        limit = (large["mb"] - small["mb"]) / (large["tokenizer_seconds"] - small["tokenizer_seconds"])
        print(
            f"marginal rate (large - small run): ours {marginal:.2f} MB/s, tokenizer alone {limit:.2f} MB/s, ratio {marginal / limit:.2f}"
        )


if __name__ == "__main__":
    main()
