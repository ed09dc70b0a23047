"""Language identification with py3langid on a bounded sample of the text.

Whole books are hundreds of kilobytes; a few evenly spaced windows identify the language as well
as the full text at a fraction of the cost, and the windows skip past a front matter (title page,
contents) that is short and often in another script or language.

py3langid counts its byte n-gram features by walking a DFA one byte at a time in Python, which was a
third of the documents job on Wikipedia-shaped input. Its DFA forgets everything older than
``CONTEXT`` bytes (``context_bytes`` proves it from the model's transition table), so the state at
every position is that of its last ``CONTEXT`` bytes read from the start state: ``CONTEXT``
vectorised table look-ups over the whole text give the same states, the same feature counts in the
same order, hence bit-identical scores.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from py3langid.langid import MODEL_FILE, LanguageIdentifier

WINDOWS = 5
# 2,000 characters judged: a 4 KB article on half of itself (it was whole at 1,000 a window, the largest cost of
# the documents job there). bench/language_sample.py: 2 of 1,081 shared documents (two multilingual web pages)
# get another verdict than on their whole text; none of the articles or books.
WINDOW_CHARS = 400
_POSITION_BITS = 24  # visits numbered in a key: texts up to 16 MB; longer ones take py3langid's own walk
_POSITION_MASK = (1 << _POSITION_BITS) - 1
_FEATURE_MASK = (1 << 17) - 1  # feature ids: the model has 100,053 (``visits_many`` packs them in 17 bits)
_TEXT_SHIFT = _POSITION_BITS + 17  # (text, feature, visit) in one int64 key: up to 2^22 texts at once
_SHORT_BYTES = 2048  # texts ``classify_many`` counts together: longer ones gain nothing from it (4 KB articles: none)
_TEXTS_TOGETHER = (1 << _POSITION_BITS) // _SHORT_BYTES  # their visits numbered in a key's low bits
CONTEXT = 6  # bytes after which the DFA's state no longer depends on what came before (see context_bytes)


class VectorIdentifier(LanguageIdentifier):
    """py3langid's identifier with its per-byte DFA walk replaced by ``CONTEXT`` numpy gathers."""

    __slots__ = ("_moves", "_rowbases", "_outputs", "_visited")

    def __init__(self, nb_ptc: np.ndarray, *args: object, **kwargs: object) -> None:
        # float16 rows cast to float32 once (exact) rather than per text: the product is the same, bit for bit
        super().__init__(nb_ptc.astype(np.float32), *args, **kwargs)
        self._moves = np.frombuffer(self.tk_nextmove, dtype=np.uint32)  # a view of py3langid's table, no copy
        self._rowbases = np.asarray(self.tk_row, dtype=np.intp) << 8
        self._outputs = np.asarray(self.tk_output, dtype=np.intp)
        self._visited: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}  # ``visits_many``'s results, for ``classify_many``

    def states(self, data: bytes) -> np.ndarray:
        """The DFA state after each byte: each position reads its last ``CONTEXT`` bytes from state 0."""
        text = np.frombuffer(data, dtype=np.uint8).astype(np.intp)
        states = np.zeros(len(text), dtype=np.intp)
        for back in range(min(CONTEXT, len(text)) - 1, -1, -1):  # position i reads text[i - back]
            states[back:] = self._moves[self._rowbases[states[back:]] + text[: len(text) - back]]
        return states

    def visits(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(features, counts) in order of first occurrence, as py3langid's ``visit_counts`` counts them (under 16 MB)."""
        return self.visits_many([data])[0]

    def visits_many(self, datas: list[bytes]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``visits`` of each text (together under 16 MB), all at once: the ``CONTEXT`` gathers run over the texts joined
        (a position reads only bytes of its own text, as ``states`` does at a text's start), one sort of (text,
        feature, visit) keys groups the visits and puts each group's first visit first, and marking those in visiting
        order puts the groups in order of first occurrence (a few numpy calls per text cost more than the walk of a
        400-byte page; a second sort, of the groups by first visit, cost as much as the first)."""
        lengths = np.fromiter(map(len, datas), dtype=np.intp, count=len(datas))
        starts = np.cumsum(lengths) - lengths
        text = np.frombuffer(b"".join(datas), dtype=np.uint8).astype(np.intp)
        states = np.zeros(len(text), dtype=np.intp)
        for back in range(min(CONTEXT, len(text)) - 1, -1, -1):
            heads = _heads(starts, lengths, back)  # a text's first ``back`` bytes: the byte ``back`` before is another text's
            kept = states[heads]
            rows = self._rowbases[states[back:]]
            rows += text[: len(text) - back]
            states[back:] = self._moves[rows]
            states[heads] = kept
        features = self._outputs[states]
        found = features >= 0
        texts, features = np.repeat(np.arange(len(datas)), lengths)[found], features[found]
        if not len(features):  # no features in any text (or no text)
            return [(features, features)] * len(datas)
        # grouped by (text, feature), each group's first key is its first visit: (text, feature, index of the visit)
        keys = np.sort((texts << _TEXT_SHIFT) | (features << _POSITION_BITS) | np.arange(len(features)))
        groups = keys >> _POSITION_BITS
        firsts = np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1])))
        visits = keys[firsts] & _POSITION_MASK
        first = np.zeros(len(features), dtype=bool)
        first[visits] = True  # first visits, read back in visiting order: by text, then position
        counts = np.empty(len(features), dtype=np.intp)
        counts[visits] = np.diff(np.append(firsts, len(keys)))
        texts, features, counts = texts[first], features[first], counts[first]
        bounds = np.searchsorted(texts, np.arange(len(datas) + 1)).tolist()
        return [(features[a:b], counts[a:b]) for a, b in zip(bounds, bounds[1:])]

    def classify_many(self, texts: list[str]) -> list[tuple[str, float]]:
        """``classify`` of each text (py3langid's own decision), the features of the short ones counted by ``visits_many``."""
        datas = [self._encode(text) for text in texts]
        short = list({data for data in datas if len(data) <= _SHORT_BYTES})
        if len(self.nb_ptc) > _FEATURE_MASK + 1:  # a model with more features than the keys hold: one text at a time
            short = []
        # keyed by a text's bytes: entries a concurrent call left are as right as this call's own
        self._visited = {}
        for start in range(0, len(short), _TEXTS_TOGETHER):
            together = short[start : start + _TEXTS_TOGETHER]
            self._visited.update(zip(together, self.visits_many(together)))
        try:
            return [self.classify(text) for text in texts]
        finally:
            self._visited = {}

    def _raw_score(self, text: bytes) -> np.ndarray:
        """py3langid's ``_sparse_score`` on the same features and counts, in the same order."""
        if len(text) >= 1 << _POSITION_BITS:
            return super()._raw_score(text)
        features, counts = self._visited.get(text) or self.visits(text)
        if not len(features):
            return super()._raw_score(text)  # no features: py3langid's own fill
        return np.log1p(counts.astype(np.float32)) @ self.nb_ptc[features] + self.nb_pc


def _heads(starts: np.ndarray, lengths: np.ndarray, count: int) -> np.ndarray:
    """Positions of the first ``count`` bytes of each text (those it has)."""
    firsts = starts[:, None] + np.arange(count)
    return firsts[np.arange(count) < lengths[:, None]]


@cache
def _identifier() -> VectorIdentifier:
    """Loaded once per process (under a second); norm_probs gives a probability in [0, 1]."""
    return VectorIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect_language(text: str, windows: int = WINDOWS, window_chars: int = WINDOW_CHARS) -> tuple[str, float]:
    """ISO 639-1 code and its probability, judged on ``windows`` evenly spaced slices of the text."""
    lang, probability = _identifier().classify(sample_text(text, windows, window_chars))
    return str(lang), float(probability)


def detect_languages(texts: list[str], windows: int = WINDOWS, window_chars: int = WINDOW_CHARS) -> list[tuple[str, float]]:
    """``detect_language`` of each text, the samples' features counted together (``VectorIdentifier.visits_many``)."""
    verdicts = _identifier().classify_many([sample_text(text, windows, window_chars) for text in texts])
    return [(str(lang), float(probability)) for lang, probability in verdicts]


def sample_text(text: str, windows: int = WINDOWS, window_chars: int = WINDOW_CHARS) -> str:
    """Evenly spaced windows of ``text`` (all of it when short), each cut at word boundaries."""
    if len(text) <= windows * window_chars:
        return text
    step = (len(text) - window_chars) / (windows - 1) if windows > 1 else 0
    parts = []
    for i in range(windows):
        start = int(i * step)
        window = text[start : start + window_chars]
        if start > 0:  # drop the partial first word
            window = window.partition(" ")[2]
        if start + window_chars < len(text):  # and the partial last word
            window = window.rpartition(" ")[0] or window
        parts.append(window)
    return "\n".join(parts)


def context_bytes(identifier: LanguageIdentifier, most: int = 16) -> int | None:
    """The fewest bytes after which every state of the DFA goes where the start state goes, or None.

    Pairs (state reached from any state q, state reached from state 0) are followed over every byte;
    once no pair differs, the last ``k`` bytes alone fix the state. A proof over the whole table, not
    a sample of texts: the tests hold ``CONTEXT`` to it for the installed model.
    """
    moves = np.asarray(identifier.tk_nextmove, dtype=np.int64)
    rowbases = np.asarray(identifier.tk_row, dtype=np.int64) << 8
    count = len(rowbases)
    every_byte = np.arange(256)
    ahead, start = np.arange(count), np.zeros(count, dtype=np.int64)
    for k in range(1, most + 1):
        ahead = moves[(rowbases[ahead])[:, None] + every_byte].ravel()
        start = moves[(rowbases[start])[:, None] + every_byte].ravel()
        differ = np.unique((ahead * count + start)[ahead != start])
        if not len(differ):
            return k
        ahead, start = differ // count, differ % count
    return None
