"""BERT pre-training examples with google-research/bert ``create_pretraining_data.py`` semantics.

Each example is ``[CLS] A [SEP] B [SEP]``: A packs 1..n-1 whole sentences toward a target length
(``max_seq_length - 3``, or with ``short_seq_prob`` a random length in [2, max]); B is the actual
continuation, or with ``random_next_prob`` a run of sentences from a random *other* document;
``truncate_seq_pair`` then trims the longer side one token at a time from the front or back at
random, and ``masked_lm_prob`` of the tokens (at least 1, at most ``max_predictions_per_seq``) are
predicted: 80% become [MASK], 10% a random token, 10% stay unchanged.

Fixes to the reference, all deliberate:

* The random B always comes from a different document, drawn uniformly from the whole corpus
  rather than from one worker's partition. With Beam this is done by bucketing: for dupe index
  ``d`` every document goes to bucket ``stable_hash(seed, d, doc_id) % num_buckets`` with
  ``num_buckets = max(1, n_docs // partner_bucket_size, text_bytes // partner_bucket_bytes)``. A bucket is then a uniform random sample
  of the corpus, different for every ``d``, and each document draws its random-next partners among
  the other documents of its bucket. A bucket with a single document (a one-document corpus) has no
  partner: its chunks become actual-next pairs, and single-sentence chunks are counted in
  ``no_partner`` and skipped.
* The short target length is drawn again for every example (the reference draws it once per
  document, so whole books were either all short or never short).
* Whole-word masking picks words, and makes the 80/10/10 choice once per word, never splitting a
  word across [SEP].
* The random replacement token is never a special or ``[unused]`` token.
* Empty sentences are dropped at tokenization, so A and B always hold at least one real token.

Every random choice of a (dupe, bucket) comes from the bucket's ``BucketRandoms``: a generator per
kind of choice, ``rng_for(seed, "bucket", dupe, first document id, kind)``, each drawn from in the
order of the bucket's sorted documents and examples. A bucket's documents are fixed by the stable
hash above, so the output does not depend on runner, worker count or bundle order; and as each
kind reads its own stream row after row, nor on how many examples are built at a time
(``BUILD_ROWS``). (It was a generator per document and dupe until stop 45: seeding one and a few
calls into it per document were half of the examples' CPU on 4 KB articles. The draws are the same
distributions; which numbers are drawn changed, so the shards did too.) The work is numpy over
whole buckets: one Python step per example for the packing decisions, then building, truncating
and masking a batch of examples at once.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from corpusforge.core.config import BertConfig
from corpusforge.core.hashing import rng_for
from corpusforge.encoding.sentence_tokens import SentenceEncoder, batch_counters

# Examples built together: numpy over many short documents at once, while the [rows, max_seq_length]
# temporaries of a bucket of long books stay a few MB. The examples do not depend on it (``BucketRandoms``).
BUILD_ROWS = 4096
# An example's spans, as ``_pack_document`` lays them out: A in document a_doc, B in b_doc (offsets into the bucket's tokens).
SPANS = ("a_doc", "a_start", "a_len", "b_doc", "b_start", "b_len", "random_next")


@dataclass(frozen=True, slots=True)
class TokenizedDocument:
    """A document's non-empty sentences as one token array: sentence i is tokens[offsets[i]:offsets[i+1]]."""

    id: str
    tokens: np.ndarray
    offsets: np.ndarray  # int64, n_sentences + 1

    def __reduce__(self) -> tuple:
        """Pickled as raw bytes: the shuffles carry each document once per dupe, and a dataclass's state with
        two numpy arrays cost ~3x the round trip of their bytes (arrays read back are read-only views)."""
        arrays = (self.tokens.dtype.str, self.tokens.tobytes(), self.offsets.dtype.str, self.offsets.tobytes())
        return _tokenized_document, (self.id, *arrays)


def _tokenized_document(doc_id: str, token_type: str, tokens: bytes, offset_type: str, offsets: bytes) -> TokenizedDocument:
    return TokenizedDocument(doc_id, np.frombuffer(tokens, dtype=token_type), np.frombuffer(offsets, dtype=offset_type))


@dataclass(frozen=True)
class MaskingVocab:
    """What masking needs to know about the vocabulary, as arrays indexed by token id."""

    size: int
    pad: int
    cls: int
    sep: int
    mask: int
    random_ids: np.ndarray  # ids a masked token may be replaced with: no special or [unused] token
    is_continuation: np.ndarray  # bool per id: a "##" piece continuing the previous word

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> MaskingVocab:
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        size = max(vocab.values()) + 1
        specials = {token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special}
        unused = re.compile(r"^\[unused\d+\]$")
        tokens = [""] * size
        for token, index in vocab.items():
            tokens[index] = token
        random_ids = [i for i, t in enumerate(tokens) if t and t not in specials and not unused.match(t)]
        return cls(
            size=size,
            pad=vocab["[PAD]"],
            cls=vocab["[CLS]"],
            sep=vocab["[SEP]"],
            mask=vocab["[MASK]"],
            random_ids=np.asarray(random_ids, dtype=np.int64),
            is_continuation=np.fromiter((t.startswith("##") for t in tokens), dtype=bool, count=size),
        )

    @property
    def id_dtype(self) -> np.dtype:
        return np.dtype(np.uint16) if self.size <= 65535 else np.dtype(np.int32)


def tokenize_documents(encoder: SentenceEncoder, docs: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[TokenizedDocument], Counter]:
    """Token ids of every sentence of ``docs`` (``SentenceEncoder``: few tokenizer calls); empty sentences are dropped."""
    encoded = encoder.encode([sentences for _, sentences in docs])
    out = [
        TokenizedDocument(doc_id, tokens, np.concatenate([[0], np.cumsum(lengths[lengths > 0])]).astype(np.int64))
        for (doc_id, _), (tokens, lengths) in zip(docs, encoded)
        if len(tokens)
    ]
    return out, batch_counters(len(docs), encoded)


@dataclass
class BertExamples:
    """Examples as columns named like ``shards.format.bert_schema``, plus where A and B came from."""

    input_ids: np.ndarray  # [n, max_seq_length]
    length: np.ndarray
    a_length: np.ndarray
    masked_lm_positions: np.ndarray  # [n, max_predictions_per_seq]
    masked_lm_ids: np.ndarray
    masked_lm_weights: np.ndarray
    next_sentence_label: np.ndarray
    # Provenance, not written to shards: indices into the bucket's documents and token offsets in them.
    a_doc: np.ndarray
    a_start: np.ndarray
    b_doc: np.ndarray
    b_start: np.ndarray

    COLUMNS = ("input_ids", "length", "a_length", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "next_sentence_label")

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.COLUMNS}

    def __len__(self) -> int:
        return len(self.length)

    @classmethod
    def concatenate(cls, parts: Sequence[BertExamples]) -> BertExamples:
        names = list(cls.__dataclass_fields__)
        return cls(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in names})


@dataclass(frozen=True)
class BucketRandoms:
    """A (dupe, bucket)'s generators, one per kind of choice, so that each is read row after row whatever the batches."""

    pack: np.random.Generator  # chunk targets, A lengths, random next and partners (``_pack_document``)
    trim_a: np.random.Generator  # front or back of each token trimmed from A
    trim_b: np.random.Generator  # ... and from B
    order: np.random.Generator  # the order masked positions (or whole words) are picked in
    kind: np.random.Generator  # [MASK], kept or random
    token: np.random.Generator  # the random replacement token

    @classmethod
    def of(cls, seed: int, dupe: int, bucket: str) -> BucketRandoms:
        """The generators of the bucket named ``bucket`` (its first document's id) for this dupe."""
        return cls(**{name: rng_for(seed, "bucket", dupe, bucket, name) for name in cls.__dataclass_fields__})


def create_bucket_examples(
    docs: Sequence[TokenizedDocument], dupe: int, vocab: MaskingVocab, cfg: BertConfig, seed: int
) -> tuple[BertExamples, Counter]:
    """All examples of one (dupe, bucket): each document pairs with random others of the bucket."""
    if cfg.max_seq_length < 5:
        raise ValueError(f"max_seq_length {cfg.max_seq_length} leaves no room for [CLS] A [SEP] B [SEP]")
    docs = sorted(docs, key=lambda d: d.id)  # bucket order never depends on how the runner grouped it
    tokens = np.concatenate([d.tokens for d in docs]) if docs else np.zeros(0, dtype=vocab.id_dtype)
    bases = np.concatenate([[0], np.cumsum([len(d.tokens) for d in docs])]).tolist()
    offsets = [d.offsets.tolist() for d in docs]
    counters: Counter = Counter()
    randoms = BucketRandoms.of(seed, dupe, docs[0].id) if docs else None  # a bucket is named by its first document
    parts: list[BertExamples] = []
    rows: list[tuple[int, ...]] = []
    for index in range(len(docs)):
        _pack_document(index, offsets, bases, cfg, randoms.pack, rows, counters)
        if rows and (len(rows) >= BUILD_ROWS or index == len(docs) - 1):
            parts.append(_build_examples(_spans(rows), tokens, vocab, cfg, randoms))
            rows = []
    examples = BertExamples.concatenate(parts) if parts else _empty_examples(vocab, cfg)
    counters["examples"] += len(examples)
    counters["random_next"] += int(examples.next_sentence_label.sum())
    return examples, counters


def _pack_document(
    index: int,
    offsets: list[list[int]],
    bases: list[int],
    cfg: BertConfig,
    rng: np.random.Generator,
    rows: list[tuple[int, ...]],
    counters: Counter,
) -> None:
    """The reference's sentence-packing loop, appending token spans (``SPANS``) to ``rows`` instead of token lists.

    It is the one per-example Python loop, so it is kept lean: every chunk consumes at least one
    sentence and at most 6 uniforms, so all uniforms are drawn up front as one list.
    """
    max_num_tokens = cfg.max_seq_length - 3
    short_prob, random_prob = cfg.short_seq_prob, cfg.random_next_prob
    cum, base, n = offsets[index], bases[index], len(offsets[index]) - 1
    others = len(offsets) - 1
    u = rng.random(6 * n).tolist()
    k = 0  # next unused uniform
    short = i = 0
    while i < n:
        target = max_num_tokens
        if u[k] < short_prob:
            target = 2 + int(u[k + 1] * (max_num_tokens - 1))  # uniform in [2, max_num_tokens]
            short += 1
        k += 2
        j = bisect_left(cum, cum[i] + target, i + 1, n) - 1  # chunk = sentences i..j, reaching target (j < n)
        a_end = i + 1 if j == i else i + 1 + int(u[k] * (j - i))  # A = sentences i..a_end-1, 1..chunk-1 of them
        random_next = j == i or u[k + 1] < random_prob
        k += 2
        if random_next and others == 0:
            if j == i:
                counters["no_partner"] += 1
                i = j + 1
                continue
            random_next = False
            counters["forced_actual_next"] += 1
        a_start, a_len = base + cum[i], cum[a_end] - cum[i]
        if random_next:
            partner = int(u[k] * others)
            partner += partner >= index  # uniform over the other documents
            pcum = offsets[partner]
            last = len(pcum) - 1
            start = int(u[k + 1] * last)
            end = bisect_left(pcum, pcum[start] + max(1, target - a_len), start + 1, last)
            rows.append((index, a_start, a_len, partner, bases[partner] + pcum[start], pcum[end] - pcum[start], 1))
            i = a_end  # the reference puts the unused sentences of the chunk back
        else:
            rows.append((index, a_start, a_len, index, base + cum[a_end], cum[j + 1] - cum[a_end], 0))
            i = j + 1
        k += 2
    counters["short_targets"] += short


def _spans(rows: list[tuple[int, ...]]) -> dict[str, np.ndarray]:
    """``_pack_document``'s rows as one int64 column per name of ``SPANS``."""
    table = np.asarray(rows, dtype=np.int64)
    return {name: table[:, column] for column, name in enumerate(SPANS)}


def truncate_seq_pairs(a_len: np.ndarray, b_len: np.ndarray, max_num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens the reference's ``truncate_seq_pair`` removes from A and from B, in closed form.

    It trims the longer side (B on a tie) until the pair fits: first the longer down to the
    shorter, then alternately, B first.
    """
    excess = np.maximum(a_len + b_len - max_num_tokens, 0)
    a_longer = a_len > b_len
    first = np.minimum(excess, np.abs(a_len - b_len))
    rest = excess - first
    cut_a = np.where(a_longer, first, 0) + rest // 2
    cut_b = np.where(a_longer, 0, first) + rest - rest // 2
    return cut_a, cut_b


def _build_examples(
    spans: dict[str, np.ndarray], tokens: np.ndarray, vocab: MaskingVocab, cfg: BertConfig, randoms: BucketRandoms
) -> BertExamples:
    """Truncate, lay out ``[CLS] A [SEP] B [SEP]`` and mask every example of a bucket at once."""
    cut_a, cut_b = truncate_seq_pairs(spans["a_len"], spans["b_len"], cfg.max_seq_length - 3)
    a_start = spans["a_start"] + randoms.trim_a.binomial(cut_a, 0.5)  # each trimmed token from the front or the back: fair coins
    b_start = spans["b_start"] + randoms.trim_b.binomial(cut_b, 0.5)
    a_len, b_len = spans["a_len"] - cut_a, spans["b_len"] - cut_b

    n, width = len(a_len), cfg.max_seq_length
    index = np.int32 if len(tokens) < 2**31 - width else np.int64  # halves the [n, width] temporaries
    pos = np.arange(width, dtype=index)[None, :]
    la, lb = a_len.astype(index)[:, None], b_len.astype(index)[:, None]
    in_a = (pos >= 1) & (pos <= la)
    in_b = (pos >= la + 2) & (pos < la + 2 + lb)
    real = in_a | in_b
    source = np.where(in_a, a_start.astype(index)[:, None] + (pos - 1), b_start.astype(index)[:, None] + (pos - 2) - la)
    input_ids = tokens[np.where(real, source, 0)].astype(vocab.id_dtype)
    input_ids[~real] = vocab.pad
    rows = np.arange(n)
    input_ids[:, 0] = vocab.cls
    input_ids[rows, a_len + 1] = vocab.sep
    input_ids[rows, a_len + b_len + 2] = vocab.sep
    length = a_len + b_len + 3

    num_to_predict = np.minimum(cfg.max_predictions_per_seq, np.maximum(1, np.round(length * cfg.masked_lm_prob).astype(np.int64)))
    if cfg.whole_word_mask:
        positions, replaced = _choose_whole_words(input_ids, real, num_to_predict, vocab, cfg, randoms)
    else:
        positions, replaced = _choose_tokens(real, num_to_predict, cfg, randoms)
    valid = positions < width
    safe = np.where(valid, positions, 0)
    original = np.take_along_axis(input_ids, safe, axis=1)
    draws = randoms.token.integers(0, len(vocab.random_ids), positions.shape)
    new_ids = np.where(replaced == 0, vocab.mask, np.where(replaced == 1, original, vocab.random_ids[draws]))
    masked_rows = np.broadcast_to(rows[:, None], positions.shape)
    input_ids[masked_rows[valid], positions[valid]] = new_ids[valid]
    return BertExamples(
        input_ids=input_ids,
        length=length.astype(np.uint16),
        a_length=(a_len + 2).astype(np.uint16),
        masked_lm_positions=np.where(valid, positions, 0).astype(np.uint16),
        masked_lm_ids=np.where(valid, original, 0).astype(vocab.id_dtype),
        masked_lm_weights=valid.astype(np.float32),
        next_sentence_label=spans["random_next"].astype(np.int8),
        a_doc=spans["a_doc"],
        a_start=a_start,
        b_doc=spans["b_doc"],
        b_start=b_start,
    )


def _replacement_kind(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """0 = [MASK] (80%), 1 = keep (10%), 2 = random token (10%); both uniforms of a position drawn together."""
    uniforms = rng.random((*shape, 2))
    first, second = uniforms[..., 0], uniforms[..., 1]
    return np.where(first < 0.8, 0, np.where(second < 0.5, 1, 2))


def _choose_tokens(real: np.ndarray, num_to_predict: np.ndarray, cfg: BertConfig, randoms: BucketRandoms) -> tuple[np.ndarray, np.ndarray]:
    """The first ``num_to_predict`` candidates of a random order per row, as sorted positions (width = none)."""
    width, p = real.shape[1], cfg.max_predictions_per_seq
    keys = np.where(real, randoms.order.random(real.shape, dtype=np.float32), np.float32(2.0))
    k = min(p, width)
    smallest = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < width else np.argsort(keys, axis=1)
    order = np.take_along_axis(smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), axis=1)
    chosen = np.arange(k)[None, :] < np.minimum(num_to_predict, real.sum(axis=1))[:, None]
    positions = np.sort(np.where(chosen, order, width), axis=1)
    if k < p:
        positions = np.pad(positions, ((0, 0), (0, p - k)), constant_values=width)
    return positions, _replacement_kind(randoms.kind, (len(real), p))


def _choose_whole_words(
    input_ids: np.ndarray, real: np.ndarray, num_to_predict: np.ndarray, vocab: MaskingVocab, cfg: BertConfig, randoms: BucketRandoms
) -> tuple[np.ndarray, np.ndarray]:
    """Whole words in random order, skipping a word that would overshoot, 80/10/10 decided per word.

    A word starts at a non-"##" piece or right after [CLS]/[SEP], so no word spans two segments.
    """
    n, width = real.shape
    previous_real = np.pad(real[:, :-1], ((0, 0), (1, 0)))
    starts = real & (~vocab.is_continuation[input_ids] | ~previous_real)
    word_of = np.cumsum(starts, axis=1) - 1
    positions = np.full((n, cfg.max_predictions_per_seq), width, dtype=np.int64)
    replaced = np.zeros(positions.shape, dtype=np.int64)
    for row in range(n):
        candidates = np.flatnonzero(real[row])
        words = word_of[row, candidates]
        sizes = np.bincount(words)
        chosen, total = [], 0
        for word in randoms.order.permutation(len(sizes)).tolist():
            if total >= num_to_predict[row]:
                break
            if total + sizes[word] > num_to_predict[row]:
                continue
            chosen.append(word)
            total += int(sizes[word])
        picked = np.isin(words, chosen)
        kind = _replacement_kind(randoms.kind, (len(sizes),))
        positions[row, :total] = candidates[picked]
        replaced[row, :total] = kind[words[picked]]
    return positions, replaced


def _empty_examples(vocab: MaskingVocab, cfg: BertConfig) -> BertExamples:
    L, P = cfg.max_seq_length, cfg.max_predictions_per_seq
    empty = np.zeros(0, dtype=np.int64)
    return BertExamples(
        input_ids=np.zeros((0, L), dtype=vocab.id_dtype),
        length=np.zeros(0, dtype=np.uint16),
        a_length=np.zeros(0, dtype=np.uint16),
        masked_lm_positions=np.zeros((0, P), dtype=np.uint16),
        masked_lm_ids=np.zeros((0, P), dtype=vocab.id_dtype),
        masked_lm_weights=np.zeros((0, P), dtype=np.float32),
        next_sentence_label=np.zeros(0, dtype=np.int8),
        a_doc=empty,
        a_start=empty,
        b_doc=empty,
        b_start=empty,
    )
