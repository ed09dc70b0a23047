"""GPT training windows: documents joined by ``<|endoftext|>`` and cut into fixed windows.

As in nanoGPT's data preparation every document is followed by ``<|endoftext|>``, so documents are
separated by it (and the stream ends with it). The stream is cut into non-overlapping windows of
``seq_len + 1`` tokens (inputs are a window's first ``seq_len`` tokens, targets the last
``seq_len``). At scale each hash bucket of documents is its own stream, so buckets run in parallel
and every bucket has its own tail: with ``keep_tail`` the tail becomes one window padded with
``<|endoftext|>`` whose ``length`` is below ``seq_len + 1``, otherwise its tokens are counted in
``dropped_tokens``. Either way ``stream tokens == sum(length) + dropped_tokens``.

Document order inside a bucket is ``stable_hash(seed, doc_id)``: deterministic, and unrelated to
the source's order so neighbouring windows do not all come from one source.

Documents travel to their bucket as ``DocumentTokens``, one element per (tokenized batch, bucket)
rather than one per document: per document, Beam's steps, a pickle each way and the offsets BERT
needs had cost about as much as everything but the tokenizer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from corpusforge.core.hashing import stable_hash
from corpusforge.encoding.sentence_tokens import SentenceEncoder, batch_counters


@dataclass
class DocumentTokens:
    """Documents' token ids one after another: document ``ids[i]`` has the next ``lengths[i]`` tokens."""

    ids: list[str]
    tokens: np.ndarray
    lengths: np.ndarray  # int64, one per document

    def documents(self) -> Iterator[tuple[str, np.ndarray]]:
        """(doc id, tokens) of each document, the tokens a view."""
        ends = np.cumsum(self.lengths).tolist()
        for doc_id, start, end in zip(self.ids, [0, *ends], ends):
            yield doc_id, self.tokens[start:end]

    def take(self, rows: np.ndarray) -> DocumentTokens:
        """The documents at ``rows``, in that order."""
        lengths = self.lengths[rows]
        ends = np.cumsum(lengths)
        starts = (np.cumsum(self.lengths) - self.lengths)[rows]
        index = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
        return DocumentTokens([self.ids[row] for row in rows.tolist()], self.tokens[index], lengths)


def tokenize_texts(encoder: SentenceEncoder, docs: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[DocumentTokens], Counter]:
    """A batch's documents with tokens as one ``DocumentTokens`` (no per-document offsets: windows ignore sentences), and
    the counters ``tokenize_documents`` gives."""
    encoded = encoder.encode([sentences for _, sentences in docs])
    kept = [(doc_id, tokens) for (doc_id, _), (tokens, _) in zip(docs, encoded) if len(tokens)]
    counters = batch_counters(len(docs), encoded)
    if not kept:
        return [], counters
    lengths = np.fromiter((len(tokens) for _, tokens in kept), dtype=np.int64, count=len(kept))
    return [DocumentTokens([doc_id for doc_id, _ in kept], np.concatenate([tokens for _, tokens in kept]), lengths)], counters


def stream_buckets(docs: DocumentTokens, buckets: int, seed: int) -> Iterator[tuple[int, DocumentTokens]]:
    """The documents split by stream bucket (``stable_hash(seed, "gpt", doc id) % buckets``): each bucket's windows
    are cut from one token stream of its documents."""
    owner = np.fromiter((stable_hash(seed, "gpt", doc_id) % buckets for doc_id in docs.ids), dtype=np.int64, count=len(docs.ids))
    order = np.argsort(owner, kind="stable")
    for rows in np.split(order, np.flatnonzero(np.diff(owner[order])) + 1):
        yield int(owner[rows[0]]), docs if len(rows) == len(owner) else docs.take(rows)


@dataclass
class GptWindows:
    input_ids: np.ndarray  # [n, seq_len + 1]
    length: np.ndarray  # uint32; seq_len + 1 except a kept tail

    def columns(self) -> dict[str, np.ndarray]:
        return {"input_ids": self.input_ids, "length": self.length}

    def __len__(self) -> int:
        return len(self.length)


def cut_windows(docs: Sequence[tuple[str, np.ndarray]], eot: int, seq_len: int, keep_tail: bool, seed: int) -> tuple[GptWindows, Counter]:
    """Windows of ``seq_len + 1`` tokens from one bucket of tokenized documents."""
    width = seq_len + 1
    ordered = sorted(docs, key=lambda doc: (stable_hash(seed, doc[0]), doc[0]))
    dtype = ordered[0][1].dtype if ordered else np.dtype(np.uint16)
    separator = np.asarray([eot], dtype=dtype)
    stream = np.concatenate([part for _, tokens in ordered for part in (tokens, separator)]) if ordered else np.zeros(0, dtype=dtype)
    full = len(stream) // width
    windows = stream[: full * width].reshape(full, width)
    lengths = np.full(full, width, dtype=np.uint32)
    tail = stream[full * width :]
    counters = Counter(stream_tokens=len(stream), full_windows=full, dropped_tokens=0)
    if len(tail) and keep_tail:
        padded = np.full((1, width), eot, dtype=dtype)
        padded[0, : len(tail)] = tail
        windows = np.concatenate([windows, padded])
        lengths = np.append(lengths, np.uint32(len(tail)))
        counters["tail_windows"] += 1
    elif len(tail):
        counters["dropped_tokens"] += len(tail)
    return GptWindows(windows, lengths), counters
