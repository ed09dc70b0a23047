"""Token ids of many documents' sentences, exactly as ``tokenizer.encode`` per sentence, but faster.

A plain ``encode_batch_fast`` over sentences pays for one ``Encoding`` per sentence (and a merge to
get the ids out) and, for BERT, for the ``BertNormalizer`` (an alignment per byte, about 40% of the
time) and the pre-tokenizer and WordPiece on every word, though prose repeats a few tens of
thousands of distinct words. So, for a BertNormalizer + BertPreTokenizer vocabulary:

* Fast path. Sentences whose every character the normalizer maps exactly as ``str.lower`` does
  (nearly all English prose: ASCII, curly quotes, dashes; whitespace the pre-tokenizer drops
  anyway) are lowered in Python and cut at ASCII whitespace (by Arrow). The pre-tokenizer splits only
  inside such a chunk (at punctuation, and at the other whitespace a fast sentence may hold, which is
  whitespace it drops: ``_splits_alike``), and WordPiece works word by word, so a chunk's ids depend on
  the chunk alone: each distinct chunk goes through the tokenizer once (cached), and a sentence's ids
  are a numpy gather of its chunks' ids. (A character ``str.split`` cuts at but the pre-tokenizer does
  not, such as ``\x1c``, sends its sentence down the other path; none was seen to be safe anyway.)
  Accented letters, CJK, control characters, ``Σ`` (whose ``str.lower`` depends on context) and
  the first characters of added tokens send their sentence down the other path.
* Other sentences of a document are joined by `` [SEP] `` (a special token, split off before
  anything else, so it never merges with a neighbour) and encoded as one input through the real
  normalizer; the separator ids give the sentence boundaries back. A document whose text holds
  "[SEP]" itself is encoded one input per sentence, as is everything for other vocabularies.

For a GPT-2 byte-level BPE vocabulary (no normalizer, ``ByteLevel`` pre-tokenizer with its regex) whose
ids follow its merge order, as every vocabulary HF's trainer writes and GPT-2's own do, tiktoken (OpenAI's
byte-level BPE in Rust, GPT-2's pattern and the vocabulary's merges as ranks) encodes each document: less
than half the CPU of the word cache below (19.5 M characters of 4 KB articles: 2.3 against 5.0-5.7 CPU-s, the
same ids). Ranks are merge priorities here because the id of a merge's token is its place in the merge list.
That the two also join the same pieces is checked, not proved (``ranked_bpe``): tiktoken and HF gave the same
ids on every text of the shared books, web pages, Wikipedia dumps and HTML and on 200,000 random strings of
awkward characters, with GPT-2's vocabulary and two of ours (the tests keep checking it). Otherwise the model
encodes every pre-token on its own, so the same word cache applies: a document is split by GPT-2's own
pattern (the ``regex`` module, as the pre-tokenizer's) and each distinct pre-token goes through the
tokenizer once. Either way, documents holding an added token's text (``<|endoftext|>``) or a character on
which the two implementations were not seen to agree (checked per character, once, on probes against the
tokenizer itself) are encoded whole by the tokenizer.

Both paths are checked against per-sentence ``encode`` on real books and random text (tests).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from itertools import chain, compress, repeat
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import regex
import tiktoken
from tokenizers import Encoding, Tokenizer
from tokenizers.pre_tokenizers import PreTokenizer

SEPARATOR = "[SEP]"
MARK = "\x00"  # ends a sentence inside the fast path's text: a control character, so never in a fast sentence
SPACED_MARK = f" {MARK} "  # the mark as a chunk of its own (the pre-tokenizer drops the spaces)
ARROW_SPACES = " \t\n\v\f\r"  # what ``pyarrow.compute.ascii_split_whitespace`` cuts at
WORD_CACHE_SIZE = 200_000  # distinct words (fast path: chunks, words with their punctuation) remembered before the cache starts over
CONTEXT_DEPENDENT_LOWER = {"\u03a3"}  # str.lower maps a word-final capital sigma to ς, the normalizer never
# GPT-2's pre-tokenizer pattern, as HF's ByteLevel pre-tokenizer applies it
GPT2_PRETOKENS = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PROBES = ("a{}a", "1{}1", " {} ", "{}{}", " {}", "'{}", "{}'s", "{}\n", "\n{}a", "{}  a")  # contexts a character is checked in


class SentenceEncoder:
    """``encode(docs)`` -> per document (token ids, tokens per sentence); empty sentences have 0 tokens."""

    def __init__(self, tokenizer: Tokenizer, dtype: np.dtype) -> None:
        self._tokenizer, self._dtype = tokenizer, np.dtype(dtype)
        added = list(tokenizer.get_added_tokens_decoder().values())
        separator = next((t for t in added if t.content == SEPARATOR and t.special), None)
        self._sep_id = tokenizer.token_to_id(SEPARATOR) if separator else None
        self._joiner = f" {SEPARATOR} "
        config = json.loads(tokenizer.to_str())
        normalizer, pre_tokenizer = config.get("normalizer") or {}, config.get("pre_tokenizer") or {}
        self._raw: Tokenizer | None = None  # the tokenizer without normalizer, for the fast path
        self._lowercase = False
        self._mark = MARK  # the word list's sentence end
        self._pretokens: regex.Pattern | None = None  # byte-level BPE: the pre-tokenizer's pattern
        if self._sep_id is not None and normalizer.get("type") == "BertNormalizer" and pre_tokenizer.get("type") == "BertPreTokenizer":
            self._raw = Tokenizer.from_str(tokenizer.to_str())
            self._raw.normalizer = None
            self._lowercase = bool(normalizer.get("lowercase"))
        elif not normalizer and _is_gpt2_byte_level(pre_tokenizer):
            self._pretokens = regex.compile(GPT2_PRETOKENS)
            self._raw, self._mark = tokenizer, ""  # every pre-token is encoded alone anyway; "" is never a pre-token
            self._added_texts = [t.content for t in added]
            self._byte_chars = _gpt2_byte_chars()
            self._ranked = ranked_bpe(config, self._byte_chars)
        self._reserved = {c for t in added for c in (t.content[:1], t.content[:1].lower(), t.content[:1].upper()) if c}
        self._safe: dict[str, bool] = {}
        self._clear_words()
        # the ASCII characters checked safe once here, so that a text's are deleted from its bytes before any set is made
        self._safe_ascii = bytes(code for code in range(128) if self._is_safe(chr(code))) if self._raw is not None else b""

    def encode(self, docs: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        if self._pretokens is not None:
            return self._encode_pretokenized(docs)
        if self._sep_id is None:
            return self._per_sentence(docs)
        plans = [self._plan(sentences) for sentences in docs]
        joined = [plan for plan in plans if plan is not None]
        fast = iter(self._encode_words([plan[1] for plan in joined], [int(plan[0].sum()) for plan in joined]))
        slow_ids = iter(self._ids(self._tokenizer, [plan[2] for plan in joined]))
        alone = iter(self._per_sentence([sentences for sentences, plan in zip(docs, plans) if plan is None]))
        out = []
        for plan in plans:
            if plan is None:
                out.append(next(alone))
                continue
            mask = plan[0]
            out.append(self._interleave(mask, next(fast), self._split(next(slow_ids), int(len(mask) - mask.sum()))))
        return out

    def _plan(self, sentences: Sequence[str]) -> tuple[np.ndarray, str, str] | None:
        """(fast sentences, their lowered text joined by MARK, the others' text joined by the separator).

        None: one input per sentence (the text holds the separator or MARK itself).
        """
        text = MARK.join(sentences)
        if not sentences or SEPARATOR in text or text.count(MARK) != len(sentences) - 1:
            return None
        mask = self._fast_mask(text, sentences)
        if mask.all():
            return mask, text.lower() if self._lowercase else text, ""
        if not mask.any():
            return mask, "", text.replace(MARK, self._joiner)
        keep = mask.tolist()
        lowered = text.lower().split(MARK) if self._lowercase else sentences
        return mask, MARK.join(compress(lowered, keep)), self._joiner.join(compress(sentences, [not k for k in keep]))

    def _fast_mask(self, text: str, sentences: Sequence[str]) -> np.ndarray:
        """Which sentences may skip the normalizer: none of their characters is unsafe."""
        if self._raw is None:
            return np.zeros(len(sentences), dtype=bool)
        unsafe = [c for c in self._unchecked(text) if c != MARK and not self._is_safe(c)]
        mask = np.ones(len(sentences), dtype=bool)
        if unsafe:
            pattern = re.compile("[" + "".join(re.escape(c) for c in unsafe) + "]")
            positions = np.fromiter((match.start() for match in pattern.finditer(text)), dtype=np.int64)
            widths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences)) + 1
            mask[np.searchsorted(np.cumsum(widths), positions, side="right")] = False
        return mask

    def _unchecked(self, text: str) -> set[str]:
        """The distinct characters of ``text`` less the safe ASCII ones: a sixth of ``set(text)``'s CPU on prose.

        ASCII bytes never occur inside another character's UTF-8, so deleting them leaves valid UTF-8
        (lone surrogates pass through both ways)."""
        return set(text.encode("utf-8", "surrogatepass").translate(None, self._safe_ascii).decode("utf-8", "surrogatepass"))

    def _is_safe(self, char: str) -> bool:
        known = self._safe.get(char)
        if known is None:
            known = self._safe[char] = self._check(char)
        return known

    def _check(self, char: str) -> bool:
        """The normalizer maps ``char`` as ``str.lower`` (or identity) would, whatever surrounds it."""
        if self._pretokens is not None:
            return self._agrees(char)
        if char in self._reserved or unicodedata.combining(char) or not self._splits_alike(char):
            return False
        return _lowers_alike(char, self._tokenizer.normalizer.normalize_str(char), self._raw.pre_tokenizer, self._lowercase)

    def _clear_words(self) -> None:
        self._word_index: dict[str, int] = {self._mark: 0}  # word -> row in the arrays below; the mark ends a sentence
        self._word_lengths = np.zeros(1, dtype=np.int64)
        self._word_starts = np.zeros(1, dtype=np.int64)
        self._word_ids = np.zeros(0, dtype=self._dtype)

    def _encode_words(self, texts: list[str], counts: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Fast-path texts (sentences joined by MARK): cut at whitespace, the mark a chunk of its own, then
        each chunk's ids looked up, asking the model only about chunks not seen yet.

        Arrow cuts the texts and finds their distinct chunks (``ascii_split_whitespace``, then
        ``dictionary_encode``), so Python sees each distinct chunk of a batch once: 22 ms per MB of books
        where a regex of the pre-tokenizer's classes and a dict look-up per word took ~106. Other whitespace stays
        inside a chunk, for the tokenizer to split at (making it a space first cost a regex pass over every text
        for chunks that cleaned text never holds); empty chunks (a text's leading space) have no tokens."""
        if not any(counts):
            return [(np.zeros(0, dtype=self._dtype), np.zeros(0, dtype=np.int64)) for _ in texts]
        spaced = pa.array([text.replace(MARK, SPACED_MARK) for text in texts], type=pa.large_string())
        chunks = pc.ascii_split_whitespace(spaced)
        encoded = pc.list_flatten(chunks).dictionary_encode()
        (rows,) = self._rows([encoded.dictionary.to_pylist()])
        codes = rows[encoded.indices.to_numpy()]
        return self._gather(codes, chunks.offsets.to_numpy(), counts)

    def _lookup(self, words: list[list[str]], counts: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Ids of word lists (sentences ended by the mark): each distinct word through the model once, then a gather."""
        codes = self._rows(words)
        bounds = np.cumsum([0, *map(len, codes)])
        return self._gather(np.concatenate([np.zeros(0, dtype=np.int64), *codes]), bounds, counts)

    def _rows(self, words: list[list[str]]) -> list[np.ndarray]:
        """Each word's row in the cache arrays, the words not seen yet encoded (at once) and added."""
        if len(self._word_index) > WORD_CACHE_SIZE:
            self._clear_words()
        known = self._word_index.get  # one pass over the words: their rows, -1 for a word not seen yet
        codes = [np.fromiter(map(known, text_words, repeat(-1)), dtype=np.int64, count=len(text_words)) for text_words in words]
        unseen = [(i, np.flatnonzero(c < 0)) for i, c in enumerate(codes) if len(c) and c.min() < 0]
        new = sorted({words[i][j] for i, positions in unseen for j in positions.tolist()})
        if new:
            encodings = self._raw.encode_batch_fast(new, add_special_tokens=False)
            lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(new))
            ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=self._dtype, count=int(lengths.sum()))
            self._word_index.update(zip(new, range(len(self._word_lengths), len(self._word_lengths) + len(new))))
            self._word_starts = np.concatenate([self._word_starts, len(self._word_ids) + np.cumsum(lengths) - lengths])
            self._word_lengths = np.concatenate([self._word_lengths, lengths])
            self._word_ids = np.concatenate([self._word_ids, ids])
        for i, positions in unseen:
            codes[i][positions] = [self._word_index[words[i][j]] for j in positions.tolist()]
        return codes

    def _gather(self, codes: np.ndarray, bounds: np.ndarray, counts: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each text's ids (its words' ids one after another) and tokens per sentence, texts' words being
        ``codes[bounds[i]:bounds[i + 1]]`` (the mark, row 0, ends a sentence), gathered for all texts at once.

        A sentence ends at a mark, or at its text's end; a text starts a sentence unless it has none."""
        lengths = self._word_lengths[codes]
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        ids = self._word_ids[np.repeat(self._word_starts[codes] - (ends - lengths), lengths) + np.arange(total)]
        firsts = np.concatenate([[0], ends])[bounds]  # each text's first token, and the end of all
        marks = np.flatnonzero(codes == 0)
        sentences = np.asarray(counts, dtype=np.int64)
        found = np.diff(np.searchsorted(marks, bounds))
        wrong = np.flatnonzero(found != np.maximum(sentences - 1, 0))
        if len(wrong):
            raise AssertionError(f"{found[wrong[0]]} sentence marks for {counts[wrong[0]]} sentences")
        starts = np.sort(np.concatenate([firsts[:-1][sentences > 0], ends[marks], [total]]), kind="stable")
        per_sentence = np.diff(starts)
        splits = np.cumsum(sentences).tolist()
        text_starts = firsts.tolist()
        return [
            (ids[text_starts[i] : text_starts[i + 1]], per_sentence[end - count : end])
            for i, (count, end) in enumerate(zip(counts, splits))
        ]

    def _encode_pretokenized(self, docs: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Byte-level BPE: documents encoded by tiktoken, or split into pre-tokens here and looked up; the others encoded whole."""
        fast = [self._pretokenizable(sentences) for sentences in docs]
        simple = list(compress(docs, fast))
        encoded = iter(
            [self._encode_ranked(sentences) for sentences in simple] if self._ranked is not None else self._encode_pieces(simple)
        )
        whole = [sentences for sentences, ok in zip(docs, fast) if not ok]
        alone = iter(self._per_sentence(whole) if whole else [])
        return [next(encoded) if ok else next(alone) for ok in fast]

    def _encode_ranked(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """A document's ids and tokens per sentence from tiktoken, as arrays straight from its buffer: the ids of
        ``encode_ordinary`` (no added token is allowed, so none is one here), without a Python int per token
        (13% of tiktoken's time on Wikipedia-shaped articles)."""
        ids = [self._ranked.encode_to_numpy(sentence, disallowed_special=()) for sentence in sentences]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.concatenate([np.zeros(0, dtype=np.uint32), *ids], dtype=self._dtype, casting="same_kind"), lengths

    def _encode_pieces(self, docs: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Documents split by GPT-2's pattern here, each distinct pre-token through the word cache."""
        words = []
        for sentences in docs:
            doc_words: list[str] = []
            for index, sentence in enumerate(sentences):
                if index:
                    doc_words.append(self._mark)
                doc_words.extend(self._pretokens.findall(sentence))
            words.append(doc_words)
        return self._lookup(words, [len(sentences) for sentences in docs]) if words else []

    def _pretokenizable(self, sentences: Sequence[str]) -> bool:
        """No added token's text in the document, and every character checked (``_agrees``)."""
        for sentence in sentences:
            if any(token in sentence for token in self._added_texts):
                return False
            if not all(map(self._is_safe, self._unchecked(sentence))):
                return False
        return True

    def _agrees(self, char: str) -> bool:
        """The fast path and the tokenizer treat ``char`` alike in every probe context: tiktoken's ids are the
        tokenizer's, or the pattern here splits as the tokenizer's pre-tokenizer does."""
        for probe in (template.format(char, char) for template in PROBES):
            if self._ranked is not None:
                if self._ranked.encode_ordinary(probe) != self._tokenizer.encode(probe, add_special_tokens=False).ids:
                    return False
                continue
            ours = ["".join(self._byte_chars[b] for b in piece.encode("utf-8")) for piece in self._pretokens.findall(probe)]
            if ours != [piece for piece, _ in self._tokenizer.pre_tokenizer.pre_tokenize_str(probe)]:
                return False
        return True

    def _splits_alike(self, char: str) -> bool:
        """``str.split`` cuts at ``char`` only where the pre-tokenizer drops it as whitespace."""
        return not char.isspace() or [word for word, _ in self._raw.pre_tokenizer.pre_tokenize_str(f"a{char}b")] == ["a", "b"]

    def _ids(self, tokenizer: Tokenizer | None, texts: list[str]) -> list[np.ndarray]:
        """Ids of every text; empty texts (a document with no sentence on this path) skip the tokenizer."""
        filled = [text for text in texts if text]
        encodings = iter(tokenizer.encode_batch_fast(filled, add_special_tokens=False) if filled else [])
        return [np.asarray(next(encodings).ids, dtype=np.int64) if text else np.zeros(0, dtype=np.int64) for text in texts]

    def _split(self, ids: np.ndarray, sentences: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokens without separators, and tokens per sentence."""
        if sentences == 0:
            return np.zeros(0, dtype=self._dtype), np.zeros(0, dtype=np.int64)
        is_sep = ids == self._sep_id
        cuts = np.flatnonzero(is_sep)
        if len(cuts) != sentences - 1:
            raise AssertionError(f"{len(cuts)} separators for {sentences} sentences")
        lengths = np.diff(np.concatenate([[-1], cuts, [len(ids)]])) - 1
        return ids[~is_sep].astype(self._dtype), lengths

    def _interleave(
        self, mask: np.ndarray, fast: tuple[np.ndarray, np.ndarray], slow: tuple[np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fast and slow sentences back in document order."""
        if mask.all():
            return fast
        if not mask.any():
            return slow
        lengths = np.zeros(len(mask), dtype=np.int64)
        lengths[mask], lengths[~mask] = fast[1], slow[1]
        source = np.concatenate([fast[0], slow[0]])
        source_start = np.zeros(len(mask), dtype=np.int64)
        source_start[mask] = np.cumsum(fast[1]) - fast[1]
        source_start[~mask] = len(fast[0]) + np.cumsum(slow[1]) - slow[1]
        target_start = np.cumsum(lengths) - lengths
        index = np.repeat(source_start - target_start, lengths) + np.arange(int(lengths.sum()))
        return source[index], lengths

    def _per_sentence(self, docs: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """One input per sentence (no separator token, or the text holds it); one merged id list."""
        sentences = [s for doc in docs for s in doc]
        encodings = self._tokenizer.encode_batch_fast(sentences, add_special_tokens=False) if sentences else []
        lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
        flat = np.asarray(Encoding.merge(encodings, growing_offsets=False).ids if encodings else [], dtype=self._dtype)
        bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        out, first = [], 0
        for doc in docs:
            last = first + len(doc)
            out.append((flat[bounds[first] : bounds[last]], lengths[first:last]))
            first = last
        return out


def _lowers_alike(char: str, form: str, pre_tokenizer: PreTokenizer, lowercase: bool) -> bool:
    """``str.lower`` (or nothing, cased) gives the normalizer's ``form`` of ``char`` wherever it stands.

    Whitespace the normalizer turns into " " counts too: the pre-tokenizer drops either alike.
    """
    if char in CONTEXT_DEPENDENT_LOWER:
        return False
    if form == (char.lower() if lowercase else char):
        return True
    return form == " " and [word for word, _ in pre_tokenizer.pre_tokenize_str(f"a{char}b")] == ["a", "b"]


def _is_gpt2_byte_level(pre_tokenizer: dict) -> bool:
    """GPT-2's pre-tokenizer: ByteLevel with its regex and no prefix space (alone, or as a sequence of one)."""
    if pre_tokenizer.get("type") == "Sequence" and len(pre_tokenizer.get("pretokenizers", [])) == 1:
        pre_tokenizer = pre_tokenizer["pretokenizers"][0]
    return pre_tokenizer.get("type") == "ByteLevel" and pre_tokenizer.get("use_regex", True) and not pre_tokenizer.get("add_prefix_space")


def ranked_bpe(config: dict, byte_chars: list[str]) -> tiktoken.Encoding | None:
    """The vocabulary as a tiktoken encoding (bytes -> rank = id), or None where ranks cannot be merge priorities.

    tiktoken joins the adjacent pair whose joined bytes have the lowest rank; HF's BPE the listed pair earliest
    in its merge list. Taking ids as ranks makes the two orders one where a merge's token id grows with its place
    in the list, every byte is a token, and the model has no dropout, affixes, byte fallback or merge skipping.
    Only the bytes and the merges' tokens are ranked: a token no merge makes is one HF never produces either.
    tiktoken could still join two pieces that spell a token other than by its listed merge, which HF would
    not; a trained vocabulary was not seen to meet that case (see the module's docstring), and it is not ruled out.
    """
    model = config.get("model") or {}
    if model.get("type") != "BPE" or model.get("dropout") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    if model.get("byte_fallback") or model.get("ignore_merges"):
        return None
    vocab: dict[str, int] = model["vocab"]
    if not all(char in vocab for char in byte_chars):
        return None
    to_bytes = str.maketrans({char: chr(byte) for byte, char in enumerate(byte_chars)})  # then latin-1 gives the bytes
    ranks = {bytes([byte]): vocab[char] for byte, char in enumerate(byte_chars)}
    last = max(ranks.values())
    for merge in model["merges"]:
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        rank = vocab.get(left + right)
        if rank is None or rank <= last:
            return None
        try:
            ranks[(left + right).translate(to_bytes).encode("latin-1")] = last = rank
        except UnicodeEncodeError:  # a character outside the byte alphabet
            return None
    # The added tokens as special tokens only for ``encode_to_numpy``'s search for them, never allowed: with none, tiktoken
    # tries an empty pattern at every character (40% slower).
    specials = {token["content"]: token["id"] for token in config.get("added_tokens", [])}
    return tiktoken.Encoding("corpusforge-bpe", pat_str=GPT2_PRETOKENS, mergeable_ranks=ranks, special_tokens=specials)


def _gpt2_byte_chars() -> list[str]:
    """The printable character ByteLevel maps each byte to, by byte: GPT-2's ``bytes_to_unicode``."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def batch_counters(documents: int, encoded: Sequence[tuple[np.ndarray, np.ndarray]]) -> Counter:
    """Counters of one batch of ``SentenceEncoder.encode``: documents, non-empty and empty sentences, tokens, documents left empty."""
    per_sentence = np.concatenate([np.zeros(0, dtype=np.int64), *(lengths for _, lengths in encoded)])
    sentences = int(np.count_nonzero(per_sentence))
    counters = Counter(
        documents=documents, empty_sentences=len(per_sentence) - sentences, sentences=sentences, input_tokens=int(per_sentence.sum())
    )
    empty = sum(1 for tokens, _ in encoded if not len(tokens))
    if empty:
        counters["empty_documents"] = empty
    return counters
