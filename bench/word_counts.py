"""Words per document as the documents job recounts them: ``document_files.word_counts`` against Arrow's
``utf8_split_whitespace`` + ``list_value_length`` (what it replaced), on the same row groups, side by side.

    .venv/bin/python bench/word_counts.py [--mb 120] [--repeats 3]

Documents are made from the shared English books' body paragraphs (their curly quotes and dashes share a first
UTF-8 byte with the wide spaces, so the slow path is exercised as on real books): ~1 MB books and ~400 B pages,
in 8 MB row groups as the documents job writes them. CPU seconds are process time, best of ``--repeats``. Both
counts must agree (the texts have no leading or trailing space, where Arrow counted an empty word), and a sample
must equal ``len(text.split())``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from corpus_factory import paragraphs  # noqa: E402

from corpusforge.corpora.document_files import word_counts  # noqa: E402

ROW_GROUP_BYTES = 8 << 20


def documents(pool: list[str], total: int, size: int, seed: int = 0) -> pa.ChunkedArray:
    """Texts of about ``size`` bytes (paragraphs joined by blank lines) up to ``total`` bytes, in 8 MB chunks."""
    rng = np.random.default_rng(seed)
    chunks, texts, held, written = [], [], 0, 0
    while written < total:
        text, length = [], 0
        while length < size:
            paragraph = pool[int(rng.integers(len(pool)))]
            text.append(paragraph if length + len(paragraph) <= size or not text else paragraph[: max(1, size - length)].rstrip())
            length += len(text[-1]) + 2
        texts.append("\n\n".join(text))
        held += length
        written += length
        if held >= ROW_GROUP_BYTES:
            chunks.append(pa.array(texts))
            texts, held = [], 0
    return pa.chunked_array(chunks + ([pa.array(texts)] if texts else []), type=pa.string())


def arrow_split(texts: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.list_value_length(pc.utf8_split_whitespace(texts))


def best_cpu(count: Callable[[pa.ChunkedArray], pa.ChunkedArray], texts: pa.ChunkedArray, repeats: int) -> tuple[float, pa.ChunkedArray]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        result = count(texts)
        best = min(best, time.process_time() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=120, help="MB of text per document shape")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pool = paragraphs(ROOT.parent / "shared" / "data" / "books")
    print(f"{'documents':22} {'MB':>6} {'arrow CPU s':>12} {'ours CPU s':>11} {'ours MB/s':>10} {'arrow / ours':>13}")
    for label, size in (("~1 MB books", 1 << 20), ("~400 B pages", 400)):
        texts = documents(pool, args.mb << 20, size)
        megabytes = pc.sum(pc.binary_length(texts)).as_py() / 2**20
        arrow_cpu, arrow = best_cpu(arrow_split, texts, args.repeats)
        ours_cpu, ours = best_cpu(word_counts, texts, args.repeats)
        if not ours.equals(arrow.cast(pa.int32())):
            raise SystemExit(f"{label}: the two word counts differ")
        sample = texts.chunk(0).to_pylist()[:2000]
        if ours.chunk(0).to_pylist()[: len(sample)] != [len(text.split()) for text in sample]:
            raise SystemExit(f"{label}: the word counts are not len(text.split())")
        print(
            f"{label:22} {megabytes:6.0f} {arrow_cpu:12.3f} {ours_cpu:11.3f} {megabytes / ours_cpu:10.0f} {arrow_cpu / ours_cpu:12.2f}x",
            flush=True,
        )
    print(f"word counts: arrow CPU / ours CPU = {arrow_cpu / ours_cpu:.2f}x (the last row)")


if __name__ == "__main__":
    main()
