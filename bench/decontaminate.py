"""Decontamination speed: ``corpora.decontaminate`` against the plain Python way (a set of 13-word tuples).

Table: every text of the GLUE dev/test files in ../shared/data/glue (SST-2 dev and test, CoLA dev, MRPC
dev). Corpus: ``--mb`` of the shared English books, whole. Both find the same contaminated documents
(checked); printed: MB of text per second each, the ratio, and what share of the clean stage's own time
(language identification and Unicode repair on the same text) the check adds.

    .venv/bin/python bench/decontaminate.py --mb 50
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from corpus_factory import make_books  # noqa: E402

from corpusforge.core.config import CleanConfig  # noqa: E402
from corpusforge.corpora.clean import Cleaner  # noqa: E402
from corpusforge.corpora.decontaminate import Decontaminator, comparable, evaluation_texts  # noqa: E402
from corpusforge.corpora.document import Document  # noqa: E402
from corpusforge.corpora.minhash import normalized_bytes  # noqa: E402

GLUE = ROOT.parent / "shared" / "data" / "glue"
FILES = [GLUE / "SST-2" / "dev.tsv", GLUE / "SST-2" / "test_labeled_from_sst.tsv", GLUE / "CoLA" / "dev.tsv", GLUE / "MRPC" / "dev.tsv"]
NGRAM, MIN_WORDS = 13, 8


class PythonSets:
    """The reference: word tuples in a Python set, every window of a document looked up."""

    def __init__(self, paths: list[str]) -> None:
        self.grams: dict[int, set[tuple[str, ...]]] = {}
        for path in paths:
            for _, text in evaluation_texts(path, MIN_WORDS):
                words = tuple(comparable(text).decode().split())
                if len(words) >= MIN_WORDS:
                    n = min(len(words), NGRAM)
                    self.grams.setdefault(n, set()).update(words[i : i + n] for i in range(len(words) - n + 1))

    def match(self, text: str) -> bool:
        words = tuple(normalized_bytes(text).decode().split())  # documents as ``Decontaminator.match`` sees them
        return any(words[i : i + n] in grams for n, grams in self.grams.items() for i in range(len(words) - n + 1))


def timed(fn, texts: list[str]) -> tuple[float, list[bool]]:
    start = time.process_time()
    verdicts = [bool(fn(text)) for text in texts]
    return time.process_time() - start, verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--work", type=Path, default=Path("/tmp/corpusforge-decontaminate"))
    args = parser.parse_args()
    books = args.work / f"books-{args.mb}mb"
    if not books.is_dir():
        make_books(ROOT.parent / "shared" / "data" / "books", books, args.mb << 20, seed=args.mb)
    texts = [path.read_text(encoding="utf-8") for path in sorted(books.glob("*.txt"))]
    sst2 = [text for _, text in evaluation_texts(str(FILES[0]), 20)][:3]
    texts[1] = texts[1][:1000] + "\n\n" + sst2[0].capitalize() + "\n\n" + texts[1][1000:]  # one planted sentence
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    paths = [str(path) for path in FILES]
    ours, reference = Decontaminator.from_files(paths, NGRAM, MIN_WORDS), PythonSets(paths)
    ours_s, ours_found = timed(ours.match, texts)
    ref_s, ref_found = timed(reference.match, texts)
    if ours_found != ref_found:
        raise SystemExit("the two checks disagree")
    cleaner = Cleaner(CleanConfig(language="en"))
    clean_s, _ = timed(lambda text: cleaner(Document(id="x", source="books", title="x", text=text)), texts)
    print(f"table: {ours.texts:,} evaluation texts of {len(paths)} files; corpus: {len(texts)} books, {megabytes:.0f} MB")
    print(f"contaminated documents: {sum(ours_found)} (both)")
    print(f"{'check':34s} {'CPU s':>7s} {'MB/s':>7s}")
    print(f"{'corpora.decontaminate':34s} {ours_s:7.2f} {megabytes / ours_s:7.1f}")
    print(f"{'Python set of 13-word tuples':34s} {ref_s:7.2f} {megabytes / ref_s:7.1f}")
    print(f"{'clean stage (repair + language)':34s} {clean_s:7.2f} {megabytes / clean_s:7.1f}")
    print(f"decontaminate: {ref_s / ours_s:.1f}x the Python sets; adds {ours_s / clean_s:.0%} to the clean stage's CPU")


if __name__ == "__main__":
    main()
