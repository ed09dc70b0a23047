"""The clean stage's two costly steps against the libraries' own calls, on the same texts.

1. Language identification: ``corpora.language`` (py3langid's model, its DFA walk vectorised) vs
   py3langid's ``classify``, on the texts as ``detect_language`` receives them (normalised, then
   ``sample_text``'s windows: a short article whole).
2. Unicode repair: ``corpora.clean.fix_text`` (ftfy's line loop passing over the lines no fixer changes)
   vs ``ftfy.fix_text`` with the same configuration, on the raw texts.

Texts: the articles of the shared English Wikipedia excerpt (markup to text by ``corpora.wikipedia``),
the shared books in English and French, and the shared Common Crawl pages. Prints per corpus the
documents, MB, results that differ (compared exactly) and MB per CPU-second of each, then the ratio.

    .venv/bin/python bench/clean.py
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path

import ftfy
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from corpusforge.corpora.books import read_books
from corpusforge.corpora.clean import _FTFY, fix_text, normalize_text
from corpusforge.corpora.document import Document
from corpusforge.corpora.language import _identifier, sample_text
from corpusforge.corpora.wikipedia import plan_ranges, read_range

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
WIKI = SHARED / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def corpora() -> dict[str, list[str]]:
    """The raw texts of each corpus."""
    wiki = [d.text for r in plan_ranges(WIKI) for d in read_range(r) if isinstance(d, Document)]
    books = [d.text for d in read_books(SHARED / "books") if isinstance(d, Document)]
    web = []
    for path in sorted((SHARED / "web_text_cc").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            web += [json.loads(line)["text"] for line in lines if line.strip()]
    return {"wikipedia": wiki, "books": books, "web": web}


def cpu(step: Callable[[str], object], texts: list[str], repeat: int) -> tuple[float, list[object]]:
    """Least CPU seconds of ``repeat`` passes, and the verdicts."""
    best, verdicts = float("inf"), []
    for _ in range(repeat):
        started = time.process_time()
        verdicts = [step(t) for t in texts]
        best = min(best, time.process_time() - started)
    return best, verdicts


def compare(title: str, reference: Callable[[str], object], ours: Callable[[str], object], texts: dict[str, list[str]]) -> None:
    print(f"{title:<10} {'docs':>6} {'MB':>6} {'differ':>7} {'reference MB/s':>15} {'ours MB/s':>10} {'ratio':>6}")
    for name, corpus in texts.items():
        megabytes = sum(len(t.encode()) for t in corpus) / 2**20
        base, expected = cpu(reference, corpus, 3)
        fast, results = cpu(ours, corpus, 3)
        differ = sum(a != b for a, b in zip(expected, results))
        print(
            f"{name:<10} {len(corpus):>6} {megabytes:>6.1f} {differ:>7} {megabytes / base:>15.2f} {megabytes / fast:>10.2f} {base / fast:>5.2f}x"
        )


def main() -> None:
    raw = corpora()
    sampled = {name: [sample_text(normalize_text(t)) for t in texts] for name, texts in raw.items()}
    reference = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    compare("language", reference.classify, _identifier().classify, sampled)
    compare("unicode", lambda t: ftfy.fix_text(t, _FTFY), fix_text, raw)


if __name__ == "__main__":
    main()
