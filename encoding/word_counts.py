"""The words a vocabulary trainer counts, counted once per distinct piece of text between spaces.

HF's trainers count words by running the normalizer and pre-tokenizer over every occurrence of every
word, each split a string with its own per-byte alignments: on 100 MB of articles that was the
vocabulary stage (WordPiece 26 and BPE 38 CPU-seconds). Text is mostly the same few hundred thousand
whitespace-delimited units over and over, so here the units are cut and counted by Arrow, once for
every vocabulary trained on the same texts (``Sample``); each distinct unit is normalized and
pre-tokenized once per vocabulary (``Sample.words``), and the trainer is then fed each word repeated
as often as it occurs, one per line (``FEED_PRE_TOKENIZER``): a split at a character that never occurs in
a word costs it half of its own pre-tokenizer. The counts, and so the vocabularies, are the same.

A unit is a run of whitespace and the run of other characters after it (or a text's first run of
other characters). Neither pre-tokenizer's words cross from one unit into the next: BERT's split at
every whitespace, and GPT-2's pattern, which looks one character ahead, never takes a word from
the end of a run of non-space characters into the whitespace after it. Nor does BERT's normalizer
map one unit otherwise than the text around it does: it maps each character on its own, but for
accents (NFD reorders combining marks, never across the whitespace a unit starts with) and for the
\\v and \\f it deletes, which would join two units. So a text holding \\v, \\f or a whitespace character
other than ASCII's (which these units do not cut at, but GPT-2's pattern does) is taken whole
(``TAKEN_WHOLE``), as the trainer would have: none of the documents job's texts, whose whitespace the
cleaner collapses to single spaces and paragraph breaks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import pre_tokenizers

from corpusforge.encoding.sentence_tokens import ARROW_SPACES

Normalize = Callable[[str], str]  # a vocabulary's normalizer, text to text

BATCH_CHARS = 4_000_000  # text cut into units at a time: its numpy temporaries ~30 MB; 1 M cost 15% more in sums of its counts
COMPACT_ROWS = 500_000  # (unit or word, count) rows held before they are summed up again
STRING_BYTES = 2**31 - 1  # most bytes of strings with 32-bit offsets
WORDS_PER_CALL = 4_096  # distinct units pre-tokenized between two additions of their words
FEED_CHARS = 1_024  # characters of repeated words per sequence handed to the trainer: a few hundred words, whose small strings glibc's cache (``processes.MALLOC_TUNABLES``) then recycles
SEPARATOR = "\n"
FEED_PRE_TOKENIZER = pre_tokenizers.CharDelimiterSplit(SEPARATOR)

_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[list(ARROW_SPACES.encode("ascii"))] = True  # the bytes that are whitespace to every pre-tokenizer
# The texts whose words may cross units (see the module's note): \v and \f, which BertNormalizer deletes, and Unicode
# White_Space beyond ASCII, which GPT-2's pattern cuts at (not \x1c-\x1f, which ``str.split`` cuts at too).
TAKEN_WHOLE = re.compile("[\x0b\x0c\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


class Sample(NamedTuple):
    """Texts to train on: their distinct units, counted once for every vocabulary; the texts themselves are read
    again only for those taken whole, if any."""

    texts: Iterable[str]
    units: pa.Table  # unit, count
    whole: int  # texts left out of the units

    @classmethod
    def of(cls, texts: Iterable[str] | Sample) -> Sample:
        """Count the units of ``texts`` (a one-shot iterator is listed: it may be read again); a sample is itself."""
        if isinstance(texts, Sample):
            return texts
        texts = list(texts) if isinstance(texts, Iterator) else texts
        return cls(texts, *_count_units(texts))

    def taken_whole(self) -> Iterable[str]:
        return (text for text in self.texts if TAKEN_WHOLE.search(text)) if self.whole else ()

    def words(self, pre_tokenizer: pre_tokenizers.PreTokenizer, normalize: Normalize | None = None) -> pa.Table:
        """(word, count) of every word ``pre_tokenizer`` finds in the texts, each text normalized and pre-tokenized
        on its own: each distinct unit once, counted as often as it occurs, and the texts taken whole."""
        words = _Sums("word")
        for text in self.taken_whole():
            words.add(*_words_of([text], [1], pre_tokenizer, normalize))
        for start in range(0, len(self.units), WORDS_PER_CALL):
            part = self.units.slice(start, WORDS_PER_CALL)
            words.add(*_words_of(part.column("unit").to_pylist(), part.column("count").to_pylist(), pre_tokenizer, normalize))
        counts = words.table()
        del words
        pa.default_memory_pool().release_unused()  # the trainer's own counting comes next: not on top of this
        return counts


def _count_units(texts: Iterable[str]) -> tuple[pa.Table, int]:
    """(unit, count) of every distinct unit of ``texts``, and how many texts were left out to be taken whole."""
    units = _Sums("unit")
    whole = 0
    batch: list[str] = []
    size = 0
    for text in texts:
        if TAKEN_WHOLE.search(text):
            whole += 1
            continue
        batch.append(text)
        size += len(text)
        if size >= BATCH_CHARS:
            units.add(*_unit_counts(batch))
            batch, size = [], 0
    if batch:
        units.add(*_unit_counts(batch))
    return units.table(), whole


def repeated_words(counts: pa.Table) -> Iterator[str]:
    """Each word of ``counts`` as often as it occurs, one per line, in pieces of at most ``FEED_CHARS`` (or one line)."""
    parts: list[str] = []
    size = 0
    for word, count in zip(counts.column("word").to_pylist(), counts.column("count").to_pylist()):
        line = word + SEPARATOR
        while count:
            take = min(count, max(1, (FEED_CHARS - size) // len(line)))
            parts.append(line * take)
            size += len(line) * take
            count -= take
            if size + len(line) > FEED_CHARS:
                yield "".join(parts)
                parts, size = [], 0
    if parts:
        yield "".join(parts)


def _unit_counts(texts: list[str]) -> tuple[pa.Array, pa.Array]:
    """Distinct units of ``texts`` (none spans two texts) and how often each occurs, cut on the UTF-8 bytes."""
    encoded = [text.encode("utf-8") for text in texts]
    data = b"".join(encoded)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    starts = np.cumsum(lengths) - lengths
    space = _ASCII_SPACE[np.frombuffer(data, dtype=np.uint8)]
    first = np.zeros(len(data), dtype=bool)
    first[starts[lengths > 0]] = True
    after_space = np.concatenate(([False], space[:-1])) & ~first
    cuts = np.flatnonzero(first | (space & ~after_space))
    large = len(data) > STRING_BYTES
    offsets = np.append(cuts, len(data)).astype(np.int64 if large else np.int32)
    units = (pa.LargeStringArray if large else pa.StringArray).from_buffers(len(cuts), pa.py_buffer(offsets), pa.py_buffer(data))
    counted = pc.value_counts(units)
    return counted.field("values"), counted.field("counts")


def _words_of(
    units: list[str], counts: list[int], pre_tokenizer: pre_tokenizers.PreTokenizer, normalize: Normalize | None
) -> tuple[pa.Array, pa.Array]:
    """The words of each unit, each with its unit's count (a word repeated in a unit appears once per time)."""
    words: list[str] = []
    weights: list[int] = []
    for unit, count in zip(units, counts):
        found = [word for word, _ in pre_tokenizer.pre_tokenize_str(normalize(unit) if normalize else unit)]
        words += found
        weights += repeat(count, len(found))
    return pa.array(words), pa.array(weights, type=pa.int64())


class _Sums:
    """(key, count) rows summed by key with Arrow, summed again once ``COMPACT_ROWS`` are held and twice what the last
    sum left: with more distinct keys than that, each sum would otherwise re-group them all at every addition.

    Keys are strings with 32-bit offsets while their bytes fit (``STRING_BYTES``): Arrow groups those with its
    hashed row grouper, large strings with a map of ``std::string`` keys, which took 7x the CPU."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._parts: list[pa.Table] = []
        self._rows = 0
        self._summed = 0  # rows the last sum left

    def add(self, keys: pa.Array, counts: pa.Array) -> None:
        self._parts.append(pa.table({self._key: keys, "count": counts.cast(pa.int64())}))
        self._rows += len(keys)
        if self._rows >= max(COMPACT_ROWS, 2 * self._summed):
            self._parts = [self.table()]
            self._rows = self._summed = len(self._parts[0])

    def table(self) -> pa.Table:
        """One row per key, its counts summed."""
        if not self._parts:
            return pa.table({self._key: pa.array([], type=pa.string()), "count": pa.array([], type=pa.int64())})
        key = pa.string() if sum(part.column(self._key).nbytes for part in self._parts) <= STRING_BYTES else pa.large_string()
        parts = [part.cast(pa.schema([(self._key, key), ("count", pa.int64())])) for part in self._parts]
        summed = pa.concat_tables(parts).group_by(self._key, use_threads=False).aggregate([("count", "sum")])
        return summed.select([self._key, "count_sum"]).rename_columns([self._key, "count"])
