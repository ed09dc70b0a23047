"""Train WordPiece (BERT) and byte-level BPE (GPT-2) vocabularies with HF tokenizers.

The files come out in the original layouts, so ``BertTokenizerFast(vocab_file=...)`` and
``GPT2TokenizerFast(vocab_file, merges_file)`` load them unchanged:

* WordPiece: [PAD]=0, [unused0..98]=1..99, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103 exactly as in
  bert-base-uncased, "##" continuation prefix, BertNormalizer (lowercase + strip accents when uncased).
* BPE: GPT-2's byte-level pre-tokenizer (no prefix space), all 256 bytes in the initial alphabet so
  any text round-trips, and ``<|endoftext|>`` as the last id (50256 for a 50,257 vocabulary).

Training reads a deterministic sample of the documents (a document is kept iff
``stable_hash(seed, id)`` falls below the rate that yields ``sample_bytes``, stopping at the cap) so
memory stays bounded whatever the corpus size. A corpus too small to reach the requested size
gives a smaller vocabulary: the trainer stops when no pair reaches ``min_frequency``; the actual
size is what ``vocab_manifest`` reports. The same texts give byte-identical files in every process
(see ``train_wordpiece`` for the trainer's hash-map order this works around).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from corpusforge.core import storage
from corpusforge.core.config import VocabConfig
from corpusforge.core.hashing import stable_hash
from corpusforge.corpora.document_files import iter_rows, text_bytes
from corpusforge.encoding.sentence_tokens import SentenceEncoder
from corpusforge.encoding.word_counts import FEED_PRE_TOKENIZER, Sample, repeated_words

log = logging.getLogger(__name__)

BERT_SPECIALS = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EOT = "<|endoftext|>"
WORDPIECE_ALPHABET = 1000  # as HF's BertWordPieceTokenizer: rarer characters stay [UNK]
ALPHABET_CHUNK_CHARS = 4_000_000  # text counted at a time when fixing the alphabet
ALPHABET_CHUNK_UNITS = 65_536  # distinct units counted at a time when fixing the alphabet
CODE_POINTS = 0x110000
PIECE_CHARS = 65_536  # text counted for the trainers at a time (paragraph_pieces)
FERTILITY_SAMPLE_BYTES = 2_000_000  # text tokenized per vocabulary for its tokens per word
FERTILITY_BATCH = 256  # paragraphs encoded at once
SAMPLE_ROWS = 16  # documents decoded into Python at a time for that sample


def train_wordpiece(
    texts: Iterable[str] | Sample, out_dir: storage.PathLike, vocab_size: int = 30522, lowercase: bool = True, min_frequency: int = 2
) -> str:
    """Train a BERT WordPiece vocabulary; writes vocab.txt and tokenizer.json into ``out_dir``.

    HF's trainer numbers the "##" continuation characters in hash-map order, which differs per
    process, and merges of equally frequent pairs are ordered by those ids, so the same texts gave
    different vocabularies (ids and even tokens). Fixing the alphabet and the "##" ids before training
    (``_fixed_alphabet``) makes the files byte-identical every run.

    The words are counted by ``word_counts``, each distinct unit of text normalized and pre-tokenized
    once: BertNormalizer builds an alignment per byte, over 40% of the trainer's time, for offsets that
    training never reads; the trainer then gets the counted words.
    """
    sample = Sample.of(texts)
    tokenizer = _wordpiece_tokenizer({}, lowercase)
    alphabet, continuations = _fixed_alphabet(sample, _CharTable(tokenizer), WORDPIECE_ALPHABET)
    counts = sample.words(tokenizer.pre_tokenizer, tokenizer.normalizer.normalize_str)
    tokenizer.normalizer = None  # the files get it back below
    tokenizer.pre_tokenizer = FEED_PRE_TOKENIZER
    tokenizer.train_from_iterator(repeated_words(counts), _wordpiece_trainer(vocab_size, min_frequency, alphabet, continuations))
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    tokenizer = _wordpiece_tokenizer(vocab, lowercase)  # the "##" entries must not stay added special tokens
    out_dir = os.fspath(out_dir)
    tokens = sorted(vocab, key=vocab.__getitem__)
    storage.write_bytes(storage.join(out_dir, "vocab.txt"), "".join(f"{token}\n" for token in tokens).encode("utf-8"))
    storage.write_bytes(storage.join(out_dir, "tokenizer.json"), tokenizer.to_str().encode("utf-8"))
    log.info("wordpiece vocabulary: %d tokens (asked %d) in %s", len(tokens), vocab_size, out_dir)
    return out_dir


def _wordpiece_tokenizer(vocab: dict[str, int], lowercase: bool) -> Tokenizer:
    """BERT's tokenizer around a WordPiece vocabulary (empty to train one)."""
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.add_special_tokens(BERT_SPECIALS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", BERT_SPECIALS.index("[CLS]")), ("[SEP]", BERT_SPECIALS.index("[SEP]"))],
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _wordpiece_trainer(vocab_size: int, min_frequency: int, alphabet: list[str], continuations: list[str]) -> trainers.WordPieceTrainer:
    """The trainer with the alphabet and "##" tokens of ``_fixed_alphabet``."""
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=BERT_SPECIALS + continuations,  # registered first: ids in our order, not the hash map's
        limit_alphabet=len(alphabet),  # the initial alphabet counts as most frequent: exactly the other characters go
        initial_alphabet=alphabet,
        continuing_subword_prefix="##",
        show_progress=False,  # the build shows its own progress; the trainer's bar would garble it
    )


def _fixed_alphabet(sample: Sample, chars: _CharTable, limit: int) -> tuple[list[str], list[str]]:
    """(alphabet, "##" tokens) as the trainer would pick them, but in code point order.

    The alphabet is the ``limit`` most frequent characters of the normalized words, ties broken by
    code point (the trainer breaks them in hash-map order); a "##c" token exists for each of them
    that follows another character inside a word. BERT's normalizer maps each character on its own
    (clean, space out CJK, strip accents, lowercase), so the raw characters are counted (of each
    distinct unit, times its count, and of the texts taken whole) and each distinct character is
    normalized and classified once, by the normalizer and pre-tokenizer themselves. ``chars`` is left
    knowing every character of the texts.
    """
    raw_counts = np.zeros(CODE_POINTS, dtype=np.int64)
    whole = ((_code_points(chunk), None) for chunk in _chunks(sample.taken_whole(), ALPHABET_CHUNK_CHARS))
    for points, weights in chain(_unit_points(sample.units), whole):
        counts = np.bincount(points, weights, minlength=CODE_POINTS).astype(np.int64)  # integral sums below 2^53: exact
        present = np.flatnonzero(counts)
        chars.learn(present)
        raw_counts += counts
        _mark_inside(points, present, chars)
    counts = np.zeros(CODE_POINTS, dtype=np.int64)
    for point in np.flatnonzero(raw_counts):
        for char in chars.forms[int(point)]:
            counts[ord(char)] += raw_counts[point]
    seen = np.flatnonzero((counts > 0) & ~chars.space)  # whitespace never reaches the trainer
    kept = np.sort(seen[np.argsort(-counts[seen], kind="stable")][:limit])
    return [chr(point) for point in kept], [f"##{chr(point)}" for point in kept if chars.inside[point]]


def _unit_points(units: pa.Table) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The code points of the distinct units, each ended by a newline (whitespace: no word runs on into the next
    unit, as none does in the text), weighted by the unit's count; ``ALPHABET_CHUNK_UNITS`` units at a time."""
    for start in range(0, len(units), ALPHABET_CHUNK_UNITS):
        part = units.slice(start, ALPHABET_CHUNK_UNITS)
        lengths = pc.add(pc.utf8_length(part.column("unit")), 1).to_numpy()
        points = _code_points("".join(unit + "\n" for unit in part.column("unit").to_pylist()))
        yield points, np.repeat(part.column("count").to_numpy().astype(np.float64), lengths)


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def _mark_inside(points: np.ndarray, present: np.ndarray, chars: _CharTable) -> None:
    """Mark the word characters of ``points`` that follow another word character (after the normalizer).

    Only characters not marked yet are looked for, at their own positions: after the first chunks those
    are a few rare ones (a "£" never inside a word stays pending), so this is one gather over the chunk
    instead of eight."""
    first = chars.first[present]
    pending = present[chars.word[first] & ~chars.inside[first]]
    if not len(pending):
        return
    if chars.dropped[present].any():  # what the normalizer deletes separates nothing: compare across it
        points = points[~chars.dropped[points]]
    wanted = np.zeros(CODE_POINTS, dtype=bool)
    wanted[pending] = True
    at = np.flatnonzero(wanted[points[1:]]) + 1
    follows = chars.word[chars.last[points[at - 1]]]
    chars.inside[chars.first[points[at[follows]]]] = True


class _CharTable:
    """Per code point: its normalized form (first and last character, or dropped); per normalized
    character: whether the pre-tokenizer drops it as space or keeps it inside a word, and whether
    it was seen following another character of a word."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self.forms: dict[int, str] = {}
        self.first = np.zeros(CODE_POINTS, dtype=np.uint32)
        self.last = np.zeros(CODE_POINTS, dtype=np.uint32)
        self.dropped = np.zeros(CODE_POINTS, dtype=bool)
        self.word = np.zeros(CODE_POINTS, dtype=bool)
        self.space = np.zeros(CODE_POINTS, dtype=bool)
        self.inside = np.zeros(CODE_POINTS, dtype=bool)

    def learn(self, points: np.ndarray) -> None:
        """Normalize and classify the code points not seen before."""
        for point in map(int, points):
            if point in self.forms:
                continue
            form = self.forms[point] = self._tokenizer.normalizer.normalize_str(chr(point))
            for char in form:
                pieces = len(self._tokenizer.pre_tokenizer.pre_tokenize_str(f"a{char}a"))  # 1: in a word, 2: space, 3: punctuation
                self.word[ord(char)], self.space[ord(char)] = pieces == 1, pieces == 2
            for before, char in zip(form, form[1:]):
                self.inside[ord(char)] |= self.word[ord(before)] and self.word[ord(char)]
            if form:
                self.first[point], self.last[point] = ord(form[0]), ord(form[-1])
            else:
                self.dropped[point] = True


def _chunks(texts: Iterable[str], size: int) -> Iterator[str]:
    """The texts joined by newlines (a word boundary) into pieces of about ``size`` characters."""
    batch: list[str] = []
    length = 0
    for text in texts:
        batch.append(text)
        length += len(text)
        if length >= size:
            yield "\n".join(batch)
            batch, length = [], 0
    if batch:
        yield "\n".join(batch)


def train_bpe(texts: Iterable[str] | Sample, out_dir: storage.PathLike, vocab_size: int = 50257, min_frequency: int = 2) -> str:
    """Train a GPT-2 byte-level BPE; writes vocab.json, merges.txt and tokenizer.json into ``out_dir``."""
    sample = Sample.of(texts)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = FEED_PRE_TOKENIZER  # fed the counted words (``word_counts``); GPT-2's below
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,  # <|endoftext|> is added after training so that it gets the last id
        min_frequency=min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # the build shows its own progress; the trainer's bar would garble it
    )
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(repeated_words(sample.words(gpt2)), trainer)
    tokenizer.pre_tokenizer = gpt2
    tokenizer.add_special_tokens([EOT])
    out_dir = os.fspath(out_dir)
    vocab = dict(sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1]))
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
    storage.write_bytes(storage.join(out_dir, "vocab.json"), json.dumps(vocab, ensure_ascii=False).encode("utf-8"))
    storage.write_bytes(storage.join(out_dir, "merges.txt"), ("#version: 0.2\n" + "".join(f"{line}\n" for line in lines)).encode("utf-8"))
    storage.write_bytes(storage.join(out_dir, "tokenizer.json"), tokenizer.to_str().encode("utf-8"))
    log.info("bpe vocabulary: %d tokens (asked %d) in %s", len(vocab), vocab_size, out_dir)
    return out_dir


def load_tokenizer(vocab_dir: storage.PathLike) -> Tokenizer:
    return Tokenizer.from_str(storage.read_text(storage.join(vocab_dir, "tokenizer.json")))


def vocab_kind(vocab_dir: storage.PathLike) -> str:
    return "wordpiece" if storage.is_file(storage.join(vocab_dir, "vocab.txt")) else "bpe"


def vocab_sha256(vocab_dir: storage.PathLike) -> str:
    """One checksum over the vocabulary files (names and bytes), recorded in every shard manifest."""
    digest = hashlib.sha256()
    for name in ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt"):
        path = storage.join(vocab_dir, name)
        if storage.is_file(path):
            digest.update(name.encode() + b"\0" + storage.read_bytes(path) + b"\0")
    return digest.hexdigest()


def vocab_manifest(vocab_dir: storage.PathLike) -> dict:
    """The manifest's "vocab" entry: kind, path, sha256, actual size and special token ids."""
    tokenizer = load_tokenizer(vocab_dir)
    kind = vocab_kind(vocab_dir)
    if kind == "wordpiece":
        names = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    else:
        names = {"eot": EOT}
    return {
        "kind": kind,
        "path": storage.resolve(vocab_dir),
        "sha256": vocab_sha256(vocab_dir),
        "size": tokenizer.get_vocab_size(with_added_tokens=True),
        "special_ids": {key: tokenizer.token_to_id(token) for key, token in names.items()},
    }


def sample_documents(docs: Iterable[tuple[str, str]], rate: float, max_bytes: int, seed: int) -> Iterator[str]:
    """Texts of the documents whose ``stable_hash(seed, id)`` falls below ``rate``, up to ``max_bytes``."""
    threshold = rate * 2**64
    taken = 0
    for doc_id, text in docs:
        if stable_hash(seed, doc_id) >= threshold:
            continue
        yield text
        taken += len(text.encode("utf-8"))
        if taken >= max_bytes:
            return


def train_vocab_from_documents(doc_paths: list[storage.PathLike], out_dir: storage.PathLike, cfg: VocabConfig) -> dict[str, str]:
    """Train every vocabulary kind in ``cfg.kinds`` on one deterministic sample of the documents, the kinds side
    by side: HF's trainers spend most of their time in Rust without the GIL, each on part of the cores, so two
    at once finish sooner and write the same files as one at a time (``corpusforge build`` of the vocab stage alone
    on 100 MB of 4 KB articles: 13.1 -> 12.0 s wall, its largest process 414 -> 469 MB; this function alone on 1 GB
    of books, its sample capped: 20.4 -> 19.8 s).

    Returns kind -> vocabulary directory (``out_dir/wordpiece``, ``out_dir/bpe``).
    """
    total = text_bytes(doc_paths)
    rate = min(1.0, cfg.sample_bytes / total) if total else 1.0

    sample = Sample.of(
        _Reread(
            lambda: chain.from_iterable(
                map(paragraph_pieces, sample_documents(iter_rows(doc_paths, ("id", "text")), rate, cfg.sample_bytes, cfg.sample_seed))
            )
        )
    )  # its units counted once for every kind
    trainers = {
        "wordpiece": lambda: train_wordpiece(
            sample, storage.join(out_dir, "wordpiece"), cfg.wordpiece_vocab_size, cfg.lowercase, cfg.min_frequency
        ),
        "bpe": lambda: train_bpe(sample, storage.join(out_dir, "bpe"), cfg.bpe_vocab_size, cfg.min_frequency),
    }
    kinds = list(dict.fromkeys(cfg.kinds))  # each once: two trainers of one kind would write one folder at once
    with ThreadPoolExecutor(max(1, len(kinds))) as pool:
        training = {kind: pool.submit(trainers[kind]) for kind in kinds}
    return {kind: done.result() for kind, done in training.items()}


def train_and_measure(
    doc_paths: list[storage.PathLike], out_dir: storage.PathLike, cfg: VocabConfig
) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """``train_vocab_from_documents``, then ``vocab_figures`` of what it made, in the same (fresh) process: the
    report then reads figures, and no tokenizer is loaded in the launcher for them."""
    dirs = train_vocab_from_documents(doc_paths, out_dir, cfg)
    return dirs, vocab_figures(dirs, doc_paths)


def vocab_figures(dirs: dict[str, str], doc_paths: list[storage.PathLike]) -> dict[str, dict[str, float]]:
    """Per vocabulary kind: its size (added tokens included) and tokens per whitespace word on the first
    ``FERTILITY_SAMPLE_BYTES`` of the documents (in id order, which is hash order), each paragraph counted as
    ``encode`` counts it, by the shards' own encoder (``SentenceEncoder``: with BPE, a third of HF's CPU)."""
    paragraphs = _paragraph_sample(doc_paths, FERTILITY_SAMPLE_BYTES)
    words = sum(len(paragraph.split()) for paragraph in paragraphs)
    figures = {}
    for kind, directory in dirs.items():
        tokenizer = load_tokenizer(directory)
        encoder = SentenceEncoder(tokenizer, np.dtype(np.int64))
        tokens = 0
        for first in range(0, len(paragraphs), FERTILITY_BATCH):  # an ``Encoding`` of a whole 1 MB book held ~150 MB
            tokens += sum(len(ids) for ids, _ in encoder.encode([paragraphs[first : first + FERTILITY_BATCH]]))
        figures[kind] = {"size": tokenizer.get_vocab_size(with_added_tokens=True), "tokens_per_word": tokens / words if words else 0.0}
    return figures


def _paragraph_sample(doc_paths: list[storage.PathLike], budget: int) -> list[str]:
    """The paragraphs of the first ``budget`` characters of documents, decoded a few rows at a time."""
    paragraphs: list[str] = []
    for (text,) in iter_rows(doc_paths, ["text"], batch_rows=SAMPLE_ROWS):
        paragraphs += text[:budget].split("\n\n")
        budget -= len(text)
        if budget <= 0:
            break
    return paragraphs


def paragraph_pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` in pieces of at least ``size`` characters, cut between the two newlines of a paragraph break.

    What is counted at a time stays small: the word counting batches texts by their size, but one that
    must be pre-tokenized whole (``word_counts``) would be a whole book's word list. A cut between
    "\\n" and "\\n" with a non-space on either side leaves every pre-token as it was (WordPiece drops
    whitespace; GPT-2's pattern then yields "\\n", "\\n" either way), so the counts, and the
    vocabularies, are those of the whole texts.
    """
    start = 0
    while len(text) - start > size:
        cut = text.find("\n\n", start + size)
        while cut != -1 and (text[cut - 1].isspace() or cut + 2 >= len(text) or text[cut + 2].isspace()):
            cut = text.find("\n\n", cut + 1)
        if cut == -1:
            break
        yield text[start : cut + 1]
        start = cut + 1
    yield text[start:]


class _Reread:
    """The sample as an iterable that streams it afresh each time, rather than holding it in memory."""

    def __init__(self, stream: Callable[[], Iterator[str]]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[str]:
        return self._stream()
