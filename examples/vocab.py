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
size is what ``vocab_manifest`` reports.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from corpusforge.config import VocabConfig
from corpusforge.hashing import stable_hash
from corpusforge.files import atomic_write_bytes

log = logging.getLogger(__name__)

BERT_SPECIALS = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EOT = "<|endoftext|>"


def train_wordpiece(texts: Iterable[str], out_dir: Path, vocab_size: int = 30522, lowercase: bool = True, min_frequency: int = 2) -> Path:
    """Train a BERT WordPiece vocabulary; writes vocab.txt and tokenizer.json into ``out_dir``."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=BERT_SPECIALS,
        limit_alphabet=1000,  # as HF's BertWordPieceTokenizer: rare characters stay [UNK]
        continuing_subword_prefix="##",
        show_progress=False,  # the build shows its own progress; the trainer's bar would garble it
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))],
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1])
    atomic_write_bytes(out_dir / "vocab.txt", "".join(f"{token}\n" for token, _ in vocab).encode("utf-8"))
    atomic_write_bytes(out_dir / "tokenizer.json", tokenizer.to_str().encode("utf-8"))
    log.info("wordpiece vocabulary: %d tokens (asked %d) in %s", len(vocab), vocab_size, out_dir)
    return out_dir


def train_bpe(texts: Iterable[str], out_dir: Path, vocab_size: int = 50257, min_frequency: int = 2) -> Path:
    """Train a GPT-2 byte-level BPE; writes vocab.json, merges.txt and tokenizer.json into ``out_dir``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,  # <|endoftext|> is added after training so that it gets the last id
        min_frequency=min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # the build shows its own progress; the trainer's bar would garble it
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.add_special_tokens([EOT])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = dict(sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1]))
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
    atomic_write_bytes(out_dir / "vocab.json", json.dumps(vocab, ensure_ascii=False).encode("utf-8"))
    atomic_write_bytes(out_dir / "merges.txt", ("#version: 0.2\n" + "".join(f"{line}\n" for line in lines)).encode("utf-8"))
    atomic_write_bytes(out_dir / "tokenizer.json", tokenizer.to_str().encode("utf-8"))
    log.info("bpe vocabulary: %d tokens (asked %d) in %s", len(vocab), vocab_size, out_dir)
    return out_dir


def load_tokenizer(vocab_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(Path(vocab_dir) / "tokenizer.json"))


def vocab_kind(vocab_dir: Path) -> str:
    return "wordpiece" if (Path(vocab_dir) / "vocab.txt").is_file() else "bpe"


def vocab_sha256(vocab_dir: Path) -> str:
    """One checksum over the vocabulary files (names and bytes), recorded in every shard manifest."""
    digest = hashlib.sha256()
    for name in ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt"):
        path = Path(vocab_dir) / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def vocab_manifest(vocab_dir: Path) -> dict:
    """The manifest's "vocab" entry: kind, path, sha256, actual size and special token ids."""
    tokenizer = load_tokenizer(vocab_dir)
    kind = vocab_kind(vocab_dir)
    if kind == "wordpiece":
        names = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    else:
        names = {"eot": EOT}
    return {
        "kind": kind,
        "path": str(Path(vocab_dir).resolve()),
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


def _parquet_documents(doc_paths: Sequence[Path]) -> Iterator[tuple[str, str]]:
    for path in sorted(doc_paths):
        for batch in pq.ParquetFile(path).iter_batches(columns=["id", "text"], batch_size=1024):
            yield from zip(batch.column("id").to_pylist(), batch.column("text").to_pylist())


def _parquet_text_bytes(doc_paths: Sequence[Path]) -> int:
    total = 0
    for path in doc_paths:
        for batch in pq.ParquetFile(path).iter_batches(columns=["text"], batch_size=4096):
            total += pc.sum(pc.binary_length(batch.column("text").cast("binary"))).as_py() or 0
    return total


def train_vocab_from_documents(doc_paths: list[Path], out_dir: Path, cfg: VocabConfig) -> dict[str, Path]:
    """Train every vocabulary kind in ``cfg.kinds`` on one deterministic sample of the documents.

    Returns kind -> vocabulary directory (``out_dir/wordpiece``, ``out_dir/bpe``).
    """
    total = _parquet_text_bytes(doc_paths)
    rate = min(1.0, cfg.sample_bytes / total) if total else 1.0

    def sample() -> Iterator[str]:
        return sample_documents(_parquet_documents(doc_paths), rate, cfg.sample_bytes, cfg.sample_seed)

    out: dict[str, Path] = {}
    for kind in cfg.kinds:
        if kind == "wordpiece":
            out[kind] = train_wordpiece(sample(), Path(out_dir) / kind, cfg.wordpiece_vocab_size, cfg.lowercase, cfg.min_frequency)
        else:
            out[kind] = train_bpe(sample(), Path(out_dir) / kind, cfg.bpe_vocab_size, cfg.min_frequency)
    return out
