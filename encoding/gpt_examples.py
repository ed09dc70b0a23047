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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from corpusforge.core.hashing import stable_hash


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
