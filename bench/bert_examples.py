"""BERT examples end to end (sentences -> Beam stage -> written shards) against the tokenizer alone.

    .venv/bin/python bench/bert_examples.py [--books 25] [--dupe-factor 5]

Prints input MB/s and examples/s per core (CPU seconds of this process, all threads: the machine
is shared, so wall time mostly measures the neighbours) for ``write_bert_shards_from_sentences`` (DirectRunner,
in_memory, one core, tokenizers single-threaded) next to the time HF tokenizers alone needs to
tokenize the same sentences with ``encode_batch_fast`` (the limit of tokenizing sentence by
sentence), as a ratio; then the peak resident memory of the stage, each run in a fresh process, at
two corpus sizes. The ratio can exceed 1: ``pipeline.sentence_tokens`` gets the same ids while
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizers.implementations import BertWordPieceTokenizer  # noqa: E402

from corpora.gutenberg import strip_gutenberg  # noqa: E402
from corpora.sentences import split_sentences  # noqa: E402
from corpusforge.config import BertConfig, ShardsConfig  # noqa: E402
from pipeline.examples_stage import TOKENIZE_BATCH_CHARS, write_bert_shards_from_sentences  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load_documents(books: int) -> list[tuple[str, list[str]]]:
    paths = sorted((SHARED / "books" / "en").glob("*.txt"))[:books]
    return [(p.name, split_sentences(strip_gutenberg(p.read_text(encoding="utf-8-sig").replace("\r\n", "\n")))) for p in paths]


def bert_vocab(directory: Path) -> Path:
    vocab_txt = SHARED / "vocab" / "bert-base-uncased" / "vocab.txt"
    (directory / "vocab.txt").write_bytes(vocab_txt.read_bytes())
    BertWordPieceTokenizer(str(vocab_txt), lowercase=True).save(str(directory / "tokenizer.json"))
    return directory


def tokenizer_only(docs: list[tuple[str, list[str]]], vocab_dir: Path) -> float:
    """Seconds for encode_batch_fast over the same sentences, in batches of the same size as ours."""
    tokenizer = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    batches, batch, chars = [], [], 0
    for _, sentences in docs:
        batch.extend(sentences)
        chars += sum(map(len, sentences))
        if chars >= TOKENIZE_BATCH_CHARS:
            batches.append(batch)
            batch, chars = [], 0
    batches.append(batch)
    start = time.process_time()
    for sentences in batches:
        tokenizer.encode_batch_fast(sentences, add_special_tokens=False)
    return time.process_time() - start


def peak_resident_mb() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a
    child started by a parent holding 700 MB would report at least that."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_stage(books: int, dupe_factor: int) -> dict:
    docs = load_documents(books)
    megabytes = sum(len(s.encode("utf-8")) for _, sentences in docs for s in sentences) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        vocab_dir = bert_vocab(Path(tmp))
        options = PipelineOptions([], runner="DirectRunner", direct_running_mode="in_memory")
        start, wall = time.process_time(), time.perf_counter()
        manifest = write_bert_shards_from_sentences(
            options, docs, vocab_dir, Path(tmp) / "shards", BertConfig(dupe_factor=dupe_factor), ShardsConfig(), seed=12345
        )
        seconds, wall = time.process_time() - start, time.perf_counter() - wall
        reference = tokenizer_only(docs, vocab_dir)
    return {"books": len(docs), "mb": megabytes, "seconds": seconds, "examples": manifest["totals"]["examples"], "tokenizer_seconds": reference, "wall": wall, "peak_mb": peak_resident_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--books", type=int, default=25)
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one run, printed as JSON (used for the memory runs)")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(run_stage(args.books, args.dupe_factor)))
        return

    result = run_stage(args.books, args.dupe_factor)
    ours, limit = result["mb"] / result["seconds"], result["mb"] / result["tokenizer_seconds"]
    print(f"input: {result['books']} books, {result['mb']:.2f} MB of sentences, dupe_factor {args.dupe_factor}")
    print(f"{'':34}{'CPU s':>9}{'MB/s':>9}{'examples/s':>12}")
    print(f"{'ours: sentences -> shards':34}{result['seconds']:9.2f}{ours:9.2f}{result['examples'] / result['seconds']:12.0f}   (wall {result['wall']:.1f} s)")
    print(f"{'HF encode_batch_fast alone':34}{result['tokenizer_seconds']:9.2f}{limit:9.2f}{'':>12}")
    print(f"ratio ours / tokenizer-only limit: {ours / limit:.2f}   (reference create_pretraining_data: ~0.22 MB/s, ours x{ours / 0.22:.1f})")

    print("peak resident memory (fresh process each):")
    runs = []
    for books in sorted({max(1, args.books // 3), args.books}):
        out = subprocess.run([sys.executable, __file__, "--json", "--books", str(books), "--dupe-factor", str(args.dupe_factor)], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        run = runs[-1]
        print(f"  {run['books']:3d} books  {run['mb']:6.2f} MB input  {run['examples']:8d} examples  peak {run['peak_mb']:7.0f} MB  ({run['mb'] / run['seconds']:.2f} MB/s)")
    if len(runs) == 2:
        # The difference between the two runs removes Beam's fixed per-pipeline cost (graph, workers, tokenizer loads).
        small, large = runs
        marginal = (large["mb"] - small["mb"]) / (large["seconds"] - small["seconds"])
        limit = (large["mb"] - small["mb"]) / (large["tokenizer_seconds"] - small["tokenizer_seconds"])
        print(f"marginal rate (large - small run): ours {marginal:.2f} MB/s, tokenizer alone {limit:.2f} MB/s, ratio {marginal / limit:.2f}")


if __name__ == "__main__":
    main()
