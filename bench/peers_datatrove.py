"""The documents job as a datatrove user writes it; run by ``bench/peers.py`` with datatrove's own Python
(its pins differ from ours), never imported by corpusforge.

Plain-text books (one file = one document; datatrove has no plain-text reader, so a small reader step)
-> exact dedup (signature, find, filter) -> MinHash near-dedup (signature, buckets, cluster, filter)
-> Parquet. Each stage is a ``LocalPipelineExecutor`` with ``--workers`` processes; removed documents
go to exclusion writers (JSONL) so ``peers.py`` can compare the removal sets.

    python bench/peers_datatrove.py BOOKS_DIR WORK_DIR --workers 2 --bands 14 --rows 9 --ngram 5 --seed 1

With ``--tokens TOKENIZER_JSON``, instead: GPT token files as datatrove makes them for training, from the
Parquet documents in BOOKS_DIR (corpusforge's documents output): ``ParquetReader -> DocumentTokenizer``
(the same ``tokenizer.json``, "<|endoftext|>" after each document, ``--seq-len`` chunks shuffled within
each task), then ``DocumentTokenizerMerger`` (one file, chunks shuffled across tasks).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.dedup.exact_dedup import ExactDedupConfig, ExactDedupFilter, ExactDedupSignature, ExactFindDedups
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.writers import JsonlWriter, ParquetWriter


class TextFiles(PipelineStep):
    """Every ``*.txt`` under a folder as one document (id: the file name), files split across ranks."""

    name = "plain-text books"

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        files = sorted(Path(self.folder).rglob("*.txt"))
        for path in files[rank::world_size]:
            with self.track_time():
                text = path.read_text(encoding="utf-8", errors="replace")
            self.stat_update("documents")
            yield Document(text=text, id=path.name)


def text_of(doc: Document) -> str:
    return doc.text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("books")
    parser.add_argument("work", type=Path)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--bands", type=int, default=14)
    parser.add_argument("--rows", type=int, default=9)
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tokens", help="a tokenizer.json: tokenize the Parquet documents in BOOKS_DIR instead")
    parser.add_argument("--seq-len", type=int, default=1024)
    args = parser.parse_args()
    if args.tokens:
        tokenize(args)
        return
    work, tasks = args.work, args.workers
    exact = ExactDedupConfig(content_getter=text_of)
    minhash = MinhashConfig(n_grams=args.ngram, num_buckets=args.bands, hashes_per_bucket=args.rows, seed=args.seed)

    def run(name: str, pipeline: list, stage_tasks: int = tasks) -> None:
        LocalPipelineExecutor(
            pipeline=pipeline, tasks=stage_tasks, workers=min(stage_tasks, args.workers), logging_dir=str(work / "logs" / name)
        ).run()

    run("exact-1", [TextFiles(args.books), ExactDedupSignature(str(work / "exact-sigs"), config=exact)])
    run("exact-2", [ExactFindDedups(str(work / "exact-sigs"), str(work / "exact-dups"), config=exact)], 1)
    run(
        "exact-3+minhash-1",
        [
            TextFiles(args.books),
            ExactDedupFilter(str(work / "exact-dups"), config=exact, exclusion_writer=JsonlWriter(str(work / "removed-exact"))),
            JsonlWriter(str(work / "after-exact")),
            MinhashDedupSignature(str(work / "minhash-sigs"), config=minhash),
        ],
    )
    run("minhash-2", [MinhashDedupBuckets(str(work / "minhash-sigs"), str(work / "minhash-buckets"), config=minhash)], args.bands)
    run("minhash-3", [MinhashDedupCluster(str(work / "minhash-buckets"), str(work / "minhash-ids"), config=minhash)], 1)
    from datatrove.pipeline.readers import JsonlReader

    run(
        "minhash-4",
        [
            JsonlReader(str(work / "after-exact")),
            MinhashDedupFilter(str(work / "minhash-ids"), exclusion_writer=JsonlWriter(str(work / "removed-near"))),
            ParquetWriter(str(work / "documents")),
        ],
    )


def tokenize(args: argparse.Namespace) -> None:
    """The GPT token files: tokenize per task with chunks shuffled, then merge with chunks shuffled across tasks."""
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer, DocumentTokenizerMerger

    work = args.work
    tasks = max(1, min(args.workers, len(list(Path(args.books).glob("*.parquet")))))  # a task with no file writes an empty one
    LocalPipelineExecutor(
        pipeline=[
            ParquetReader(args.books, text_key="text", id_key="id"),
            DocumentTokenizer(
                str(work / "tokenized"),
                tokenizer_name_or_path=args.tokens,
                eos_token="<|endoftext|>",
                shuffle_chunk_size=args.seq_len,
                seed=args.seed,
            ),
        ],
        tasks=tasks,
        workers=tasks,
        logging_dir=str(work / "logs" / "tokenize"),
    ).run()
    LocalPipelineExecutor(
        pipeline=[DocumentTokenizerMerger(str(work / "tokenized"), str(work / "merged"), "tokens", shuffle_chunk_size=args.seq_len)],
        tasks=1,
        logging_dir=str(work / "logs" / "merge"),
    ).run()


if __name__ == "__main__":
    main()
