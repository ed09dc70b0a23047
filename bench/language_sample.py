"""Language identification on a bounded sample of each document against the whole text, verdict by verdict.

The clean stage identifies a document's language on ``sample_text``'s evenly spaced windows, not on
the whole text: on 4 KB articles the identification is the largest single cost of the documents job.
This prints, for each shared corpus (English Wikipedia excerpt, Bulgarian and Vietnamese Wikipedia
pages, English and French books, Gutenberg editions, Common Crawl pages, the trafilatura evaluation's
web pages in many languages, text by trafilatura), how many verdicts (the language code, what the
filter and the documents keep) each sample size gives that differ from py3langid's verdict on the
whole normalized text, and the CPU seconds each takes. The default sample is marked ``*``.

    .venv/bin/python bench/language_sample.py
"""

from __future__ import annotations

import gzip
import json
import sys
import tarfile
import time
from pathlib import Path

import trafilatura

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpusforge.corpora.books import read_books  # noqa: E402
from corpusforge.corpora.clean import normalize_text  # noqa: E402
from corpusforge.corpora.document import Document  # noqa: E402
from corpusforge.corpora.language import WINDOW_CHARS, WINDOWS, _identifier, sample_text  # noqa: E402
from corpusforge.corpora.wikipedia import plan_ranges, read_range  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DUMPS = {
    "wikipedia en": SHARED / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
    "wikipedia bg": SHARED / "wikipedia" / "bgwiki-latest-pages-articles-shortened.xml.bz2",
    "wikipedia vi": SHARED / "wikipedia" / "wikiextractor_viwiki_sample" / "viwiki_10pages.xml",
}
SAMPLES = [(WINDOWS, WINDOW_CHARS), (5, 1000), (5, 600), (5, 400), (5, 300), (3, 500), (3, 300)]


def corpora() -> dict[str, list[str]]:
    """The normalized texts of each shared corpus, as the clean stage hands them to the identifier."""
    texts: dict[str, list[str]] = {}
    for name, dump in DUMPS.items():
        texts[name] = [d.text for r in plan_ranges(dump) for d in read_range(r) if isinstance(d, Document)]
    texts["books en+fr"] = [d.text for d in read_books(SHARED / "books") if isinstance(d, Document)]
    editions = sorted((SHARED / "near_duplicates" / "gutenberg_editions").glob("*.txt"))
    texts["gutenberg editions"] = [p.read_text(encoding="utf-8", errors="replace") for p in editions]
    texts["common crawl"] = []
    for path in sorted((SHARED / "web_text_cc").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            texts["common crawl"] += [json.loads(line)["text"] for line in lines if line.strip()]
    texts["web pages (trafilatura eval)"] = web_pages()
    return {name: [normalize_text(t) for t in corpus if t.strip()] for name, corpus in texts.items()}


def web_pages() -> list[str]:
    """Main text of each page of the trafilatura evaluation set (pages in a dozen languages)."""
    archive_path = SHARED / "html" / "trafilatura_eval" / "html_eval_and_cache.tar.xz"
    pages = []
    with tarfile.open(archive_path, "r|xz") as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(".html") and "/eval/" in f"/{member.name}":
                text = trafilatura.extract(archive.extractfile(member).read(), include_comments=False)
                if text:
                    pages.append(text)
    return pages


def verdicts(texts: list[str], windows: int | None, window_chars: int | None) -> tuple[list[str], float]:
    """Language codes of ``texts`` on the given sample (None: the whole text), and the CPU seconds taken."""
    samples = texts if windows is None else [sample_text(t, windows, window_chars) for t in texts]
    started = time.process_time()
    codes = [code for code, _ in _identifier().classify_many(samples)]
    return codes, time.process_time() - started


def main() -> None:
    texts = corpora()
    settings = list(dict.fromkeys(SAMPLES))
    print(
        f"{'corpus':<30} {'docs':>5} {'MB':>6}  "
        + "  ".join(f"{w}x{c}{'*' if (w, c) == SAMPLES[0] else ' '}".rjust(12) for w, c in settings)
    )
    print(f"{'':<30} {'':>5} {'':>6}  " + "  ".join("differ CPU-s".rjust(13) for _ in settings))
    totals = [0] * len(settings)
    for name, corpus in texts.items():
        whole, _ = verdicts(corpus, None, None)
        cells = []
        for k, (windows, window_chars) in enumerate(settings):
            codes, seconds = verdicts(corpus, windows, window_chars)
            differ = sum(a != b for a, b in zip(whole, codes))
            totals[k] += differ
            cells.append(f"{differ:>6} {seconds:>6.2f}")
        megabytes = sum(len(t.encode()) for t in corpus) / 2**20
        print(f"{name:<30} {len(corpus):>5} {megabytes:>6.1f}  " + "  ".join(c.rjust(13) for c in cells))
    documents = sum(len(c) for c in texts.values())
    print(f"{'all':<30} {documents:>5} {'':>6}  " + "  ".join(f"{t:>6}".ljust(13) for t in totals))
    print(f"default sample {WINDOWS}x{WINDOW_CHARS}: {totals[0]} of {documents} verdicts differ from the whole text's")


if __name__ == "__main__":
    main()
