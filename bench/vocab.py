"""Our vocabularies against the originals, and our training speed against HF tokenizers called directly.

    .venv/bin/python bench/vocab.py [--train-books 20] [--wordpiece-size 30522] [--bpe-size 50257]

Trains WordPiece and BPE on the first ``--train-books`` shared books, then prints, side by side with
bert-base-uncased and GPT-2 (``shared/data/vocab``): vocabulary size, overlap with the original,
and fertility (tokens per whitespace word) on held-out text: the remaining books and Wikipedia
articles. Training MB/s (CPU seconds, tokenizers single-threaded) is printed for ``train_wordpiece``
/ ``train_bpe`` and for HF's ``BertWordPieceTokenizer`` / ``ByteLevelBPETokenizer`` trained on the
same text in the same command, with our overhead as a ratio.
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenizers import Tokenizer  # noqa: E402
from tokenizers.implementations import BertWordPieceTokenizer, ByteLevelBPETokenizer  # noqa: E402

from corpusforge.corpora.document import Document  # noqa: E402
from corpusforge.corpora.gutenberg import strip_gutenberg  # noqa: E402
from corpusforge.corpora.wikipedia import plan_ranges, read_range  # noqa: E402
from corpusforge.encoding.vocab import BERT_SPECIALS, train_bpe, train_wordpiece  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WIKI = SHARED / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def books() -> list[str]:
    return [
        strip_gutenberg(p.read_text(encoding="utf-8-sig").replace("\r\n", "\n")) for p in sorted((SHARED / "books" / "en").glob("*.txt"))
    ]


def wikipedia(count: int) -> list[str]:
    pages = (item for r in plan_ranges(WIKI) for item in read_range(r))
    return [d.text for d in itertools.islice((d for d in pages if isinstance(d, Document)), count)]


def timed(fn, *args, **kwargs) -> tuple[object, float]:
    start = time.process_time()
    value = fn(*args, **kwargs)
    return value, time.process_time() - start


def fertility(tokenizer: Tokenizer, texts: list[str]) -> float:
    words = sum(len(t.split()) for t in texts)
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False))
    return tokens / words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-books", type=int, default=20)
    parser.add_argument("--wordpiece-size", type=int, default=30522)
    parser.add_argument("--bpe-size", type=int, default=50257)
    parser.add_argument("--wiki-articles", type=int, default=100)
    args = parser.parse_args()

    texts = books()
    train, held_books = texts[: args.train_books], texts[args.train_books :]
    held = {"books (held out)": held_books, "wikipedia": wikipedia(args.wiki_articles)}
    megabytes = sum(len(t.encode("utf-8")) for t in train) / 1e6
    print(
        f"training text: {len(train)} books, {megabytes:.2f} MB; held out: {len(held_books)} books, {len(held['wikipedia'])} Wikipedia articles"
    )

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wp_dir, wp_ours = timed(train_wordpiece, train, tmp / "wp", args.wordpiece_size)
        hf_wp = BertWordPieceTokenizer(lowercase=True)
        _, wp_hf = timed(
            hf_wp.train_from_iterator, train, vocab_size=args.wordpiece_size, special_tokens=BERT_SPECIALS, show_progress=False
        )
        bpe_dir, bpe_ours = timed(train_bpe, train, tmp / "bpe", args.bpe_size)
        hf_bpe = ByteLevelBPETokenizer()
        _, bpe_hf = timed(
            hf_bpe.train_from_iterator, train, vocab_size=args.bpe_size, special_tokens=["<|endoftext|>"], show_progress=False
        )

        print(f"\ntraining speed (CPU s)         {'ours':>10}{'HF direct':>12}{'ours MB/s':>11}{'HF MB/s':>9}{'overhead':>10}")
        for name, ours, hf in (("wordpiece", wp_ours, wp_hf), ("bpe", bpe_ours, bpe_hf)):
            print(f"{name:30}{ours:10.2f}{hf:12.2f}{megabytes / ours:11.2f}{megabytes / hf:9.2f}{ours / hf - 1:+10.1%}")

        references = {
            "wordpiece": (
                Tokenizer.from_file(str(Path(wp_dir) / "tokenizer.json")),
                BertWordPieceTokenizer(str(SHARED / "vocab" / "bert-base-uncased" / "vocab.txt"), lowercase=True),
            ),
            "bpe": (
                Tokenizer.from_file(str(Path(bpe_dir) / "tokenizer.json")),
                ByteLevelBPETokenizer(str(SHARED / "vocab" / "gpt2" / "vocab.json"), str(SHARED / "vocab" / "gpt2" / "merges.txt")),
            ),
        }
        ours_vocab = {
            "wordpiece": set((Path(wp_dir) / "vocab.txt").read_text(encoding="utf-8").splitlines()),
            "bpe": set(json.loads((Path(bpe_dir) / "vocab.json").read_text(encoding="utf-8"))),
        }
        print(f"\n{'vocabulary':12}{'size':>8}{'original':>10}{'overlap':>9}{'of ours':>9}   fertility (tokens/word) ours vs original")
        for kind, (ours, original) in references.items():
            theirs = set(original.get_vocab())
            shared = len(ours_vocab[kind] & theirs)
            line = f"{kind:12}{len(ours_vocab[kind]):8d}{len(theirs):10d}{shared:9d}{shared / len(ours_vocab[kind]):9.1%}  "
            for name, sample in held.items():
                line += f" {name}: {fertility(ours, sample):.3f} vs {fertility(original._tokenizer, sample):.3f};"
            print(line)


if __name__ == "__main__":
    main()
