"""Distinct ~1 MB books made from paragraphs of the shared Gutenberg books, for tests and benchmarks at scale.

Paragraphs come from the books' bodies only (Project Gutenberg header, footer and licence stripped,
or the reader would rightly cut the synthetic book there); each book draws its own paragraphs with a
seeded generator, so a corpus of any size is deterministic and its books are not near-duplicates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from corpusforge.corpora.decode import decode_bytes
from corpusforge.corpora.gutenberg import strip_gutenberg


def paragraphs(books_dir: Path) -> list[str]:
    """Body paragraphs (at least 20 words) of every English book under ``books_dir``."""
    found = []
    for path in sorted(Path(books_dir).glob("en/*.txt")):
        body = strip_gutenberg(decode_bytes(path.read_bytes()))
        for block in body.split("\n\n"):
            text = " ".join(block.split())
            if len(text.split()) >= 20:
                found.append(text)
    return found


def make_books(books_dir: Path, out_dir: Path, total_bytes: int, book_bytes: int = 1 << 20, seed: int = 0) -> int:
    """Write ``out_dir/book-NNNNN.txt`` until ``total_bytes`` are written; returns the book count."""
    pool = paragraphs(books_dir)
    lengths = np.array([len(p.encode("utf-8")) + 2 for p in pool])
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = count = 0
    while written < total_bytes:
        target = min(book_bytes, total_bytes - written)
        picks = rng.integers(0, len(pool), size=int(target / lengths.mean()) + 1)
        picks = picks[np.cumsum(lengths[picks]) <= max(target, lengths[picks[0]])]
        text = f"Book {count}\n\n" + "\n\n".join(pool[i] for i in picks) + "\n"
        (out_dir / f"book-{count:05d}.txt").write_text(text, encoding="utf-8")
        written += len(text.encode("utf-8"))
        count += 1
    return count
