"""Language identification speed: ``corpora.language`` (py3langid's model, its DFA walk vectorised)
against py3langid's own ``classify``, on the same texts the clean stage gives it.

Texts: the articles of the shared English Wikipedia excerpt (markup to text by ``corpora.wikipedia``,
each whole, as the clean stage judges a short article), the shared books in English and French
(``sample_text``'s five 1,000-character windows), and the shared Common Crawl pages. Prints per
corpus the documents, MB, verdicts that differ (language or probability, compared exactly) and MB
per CPU-second of each, then the ratio.

    .venv/bin/python bench/language.py
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path

from py3langid.langid import MODEL_FILE, LanguageIdentifier

from corpusforge.corpora.books import read_books
from corpusforge.corpora.clean import normalize_text
from corpusforge.corpora.document import Document
from corpusforge.corpora.language import _identifier, sample_text
from corpusforge.corpora.wikipedia import plan_ranges, read_range

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
WIKI = SHARED / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def corpora() -> dict[str, list[str]]:
    """The texts as ``detect_language`` receives them (normalised, then sampled)."""
    wiki = [d.text for r in plan_ranges(WIKI) for d in read_range(r) if isinstance(d, Document)]
    books = [d.text for d in read_books(SHARED / "books") if isinstance(d, Document)]
    web = []
    for path in sorted((SHARED / "web_text_cc").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            web += [json.loads(line)["text"] for line in lines if line.strip()]
    return {
        name: [sample_text(normalize_text(t)) for t in texts] for name, texts in {"wikipedia": wiki, "books": books, "web": web}.items()
    }


def cpu(classify: Callable[[str], tuple[str, float]], texts: list[str], repeat: int) -> tuple[float, list[tuple[str, float]]]:
    """Least CPU seconds of ``repeat`` passes, and the verdicts."""
    best, verdicts = float("inf"), []
    for _ in range(repeat):
        started = time.process_time()
        verdicts = [classify(t) for t in texts]
        best = min(best, time.process_time() - started)
    return best, verdicts


def main() -> None:
    reference = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ours = _identifier()
    print(f"{'texts':<10} {'docs':>6} {'MB':>6} {'differ':>7} {'py3langid MB/s':>15} {'ours MB/s':>10} {'ratio':>6}")
    for name, texts in corpora().items():
        megabytes = sum(len(t.encode()) for t in texts) / 2**20
        base, expected = cpu(reference.classify, texts, 3)
        fast, verdicts = cpu(ours.classify, texts, 3)
        differ = sum(a != b for a, b in zip(expected, verdicts))
        print(
            f"{name:<10} {len(texts):>6} {megabytes:>6.1f} {differ:>7} {megabytes / base:>15.2f} {megabytes / fast:>10.2f} {base / fast:>5.2f}x"
        )


if __name__ == "__main__":
    main()
