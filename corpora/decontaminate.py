"""Evaluation text kept out of the corpus: a document sharing a long word n-gram with an evaluation set is rejected.

GPT-3 (Brown et al. 2020, appendix C) removed training documents that share a 13-gram with a
benchmark; this is that check. The evaluation texts come from files as they are distributed: a
``.tsv`` (GLUE), a ``.jsonl`` (every string value) or any other text file (a text per line). Every
field of at least ``min_words`` words is a text, so labels, ids and quality marks drop out without
knowing each task's columns. Texts are compared as lower-case words without punctuation
(``corpora.minhash.normalized_bytes``), after rejoining the contractions that GLUE's tokenised
sentences split ("it 's", "does n't"), so that SST-2's ``it 's a charming ...`` matches a book's
"It's a charming ...". Each text contributes every n-gram; a text shorter than n words (but at least
``min_words``) counts whole, matched against the document's word windows of its length.

A document costs one vectorised pass over its words, then per window length a combination and a binary search per window: linear in
the corpus, whatever the number of evaluation texts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from corpusforge.core import storage
from corpusforge.corpora.minhash import normalized_bytes, window_hashes64, word_hashes64, wordmix_hashes64

_CONTRACTION = re.compile(r"\s+(n't|'s|'re|'ve|'ll|'d|'m)\b", re.IGNORECASE)
_PTB_BRACKETS = re.compile(r"-[lr][rcs]b-", re.IGNORECASE)  # -lrb- / -rrb- for ( ), as the Penn Treebank writes them


def comparable(text: str) -> bytes:
    """An evaluation text as lower-case words without punctuation, its tokenised contractions rejoined (only
    evaluation sets are tokenised that way: a document goes straight to ``normalized_bytes``)."""
    return normalized_bytes(_CONTRACTION.sub(r"\1", _PTB_BRACKETS.sub(" ", text)))


def evaluation_texts(path: str, min_words: int) -> Iterator[tuple[int, str]]:
    """(line number, text) of every field of at least ``min_words`` words in one evaluation file."""
    lines = storage.read_bytes(path).decode("utf-8-sig", errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        if path.endswith(".jsonl"):
            try:
                fields = list(_strings(json.loads(line))) if line.strip() else []
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{number}: not a JSON line") from None
        elif path.endswith(".tsv"):
            fields = line.split("\t")
        else:
            fields = [line]
        for field in fields:
            if len(field.split()) >= min_words:
                yield number, field


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@dataclass
class Decontaminator:
    """The n-gram table of some evaluation files, and the check of a document against it."""

    ngram: int
    hashes: dict[int, np.ndarray]  # window length -> sorted hashes of the evaluation texts' windows of that length
    sources: dict[int, np.ndarray]  # window length -> the text each hash came from (index into ``where``)
    where: list[str]  # "file:line" of each evaluation text

    @classmethod
    def from_files(cls, paths: Sequence[str], ngram: int = 13, min_words: int = 8) -> Decontaminator:
        by_length: dict[int, list[tuple[np.ndarray, int]]] = {}
        where: list[str] = []
        for path in paths:
            label = f"{storage.name(storage.parent(path))}/{storage.name(path)}"  # e.g. SST-2/dev.tsv
            for number, text in evaluation_texts(path, min_words):
                data = comparable(text)
                words = data.count(b" ") + 1 if data else 0
                if words < min_words:  # punctuation-only fields shrink on normalisation
                    continue
                length = min(words, ngram)
                by_length.setdefault(length, []).append((wordmix_hashes64(data, length), len(where)))
                where.append(f"{label}:{number}")
        hashes, sources = {}, {}
        for length, parts in by_length.items():
            values = np.concatenate([h for h, _ in parts])
            owners = np.concatenate([np.full(len(h), index, dtype=np.int64) for h, index in parts])
            order = np.argsort(values, kind="stable")
            hashes[length], sources[length] = values[order], owners[order]
        if not where:
            raise ValueError(f"no evaluation text of at least {min_words} words in {', '.join(paths)}")
        return cls(ngram, hashes, sources, where)

    @property
    def texts(self) -> int:
        return len(self.where)

    def match(self, text: str) -> str | None:
        """Where the first evaluation text found in ``text`` comes from ("file:line"), or None."""
        data = normalized_bytes(text)
        if not data:
            return None
        words = word_hashes64(data)
        for length, table in self.hashes.items():
            if len(words) < length:
                continue
            windows = window_hashes64(words, length)
            at = np.minimum(np.searchsorted(table, windows), len(table) - 1)
            found = np.flatnonzero(table[at] == windows)
            if len(found):
                return self.where[int(self.sources[length][at[found[0]]])]
        return None
