"""Vocabulary training: files load in transformers' BERT/GPT-2 tokenizers and behave like ours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from transformers import BertTokenizerFast, GPT2TokenizerFast

from corpusforge.core.config import VocabConfig
from corpusforge.corpora.document import Document
from corpusforge.corpora.gutenberg import strip_gutenberg
from corpusforge.encoding import vocab as vocab_module
from corpusforge.encoding.vocab import (
    WORDPIECE_ALPHABET,
    _CharTable,
    _fixed_alphabet,
    _wordpiece_tokenizer,
    _wordpiece_trainer,
    load_tokenizer,
    paragraph_pieces,
    sample_documents,
    train_bpe,
    train_vocab_from_documents,
    train_wordpiece,
    vocab_manifest,
    vocab_sha256,
)
from corpusforge.encoding.word_counts import Sample
from corpusforge.pipeline.documents_io import documents_table, write_table_atomic

TRAIN_BOOKS = ["11-0.txt", "35-0.txt", "43-0.txt"]
HELD_OUT_BOOK = "46-0.txt"


def book_text(shared: Path, name: str) -> str:
    return strip_gutenberg((shared / "books" / "en" / name).read_text(encoding="utf-8-sig").replace("\r\n", "\n"))


@pytest.fixture(scope="module")
def train_texts(shared_data) -> list[str]:
    return [book_text(shared_data, name) for name in TRAIN_BOOKS]


@pytest.fixture(scope="module")
def held_out(shared_data) -> list[str]:
    paragraphs = [p for p in book_text(shared_data, HELD_OUT_BOOK).split("\n\n") if p.strip()]
    return paragraphs[:400] + ["Café naïve résumé — Ünïcödé façade", "日本語のテキスト and 中文", "emoji 🙂 tabs\tand  spaces"]


@pytest.fixture(scope="module")
def wordpiece_dir(train_texts, tmp_path_factory) -> Path:
    return Path(train_wordpiece(train_texts, tmp_path_factory.mktemp("wordpiece"), vocab_size=6000))


@pytest.fixture(scope="module")
def bpe_dir(train_texts, tmp_path_factory) -> Path:
    return Path(train_bpe(train_texts, tmp_path_factory.mktemp("bpe"), vocab_size=6000))


def test_wordpiece_layout_matches_bert_base_uncased(wordpiece_dir, shared_data):
    ours = (wordpiece_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    reference = (shared_data / "vocab" / "bert-base-uncased" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert ours[:104] == reference[:104]  # [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK]
    assert len(ours) == len(set(ours)) == 6000
    assert any(token.startswith("##") for token in ours)
    info = vocab_manifest(wordpiece_dir)
    assert info["kind"] == "wordpiece" and info["size"] == 6000
    assert info["special_ids"] == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}


@pytest.mark.parametrize("lowercase", [True, False])
def test_bert_tokenizer_fast_tokenizes_like_our_tokenizer_json(train_texts, held_out, tmp_path, lowercase):
    directory = train_wordpiece([t[:150_000] for t in train_texts], tmp_path, vocab_size=3000, lowercase=lowercase)
    ours = load_tokenizer(directory)
    theirs = BertTokenizerFast(os.path.join(directory, "vocab.txt"), do_lower_case=lowercase)  # positional: v4 vocab_file, v5 vocab
    for text in held_out:
        assert theirs(text)["input_ids"] == ours.encode(text).ids
    pair = ours.encode("First part.", "Second part.")
    assert pair.ids == theirs("First part.", "Second part.")["input_ids"]
    assert pair.type_ids == theirs("First part.", "Second part.")["token_type_ids"]
    assert ours.normalizer.normalize_str("Éclair") == ("eclair" if lowercase else "Éclair")


def test_bpe_files_match_the_gpt2_layout(bpe_dir):
    vocab = json.loads((bpe_dir / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["<|endoftext|>"] == max(vocab.values()) == len(vocab) - 1 == 5999
    merges = (bpe_dir / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[0].startswith("#version") and len(merges) - 1 == len(vocab) - 1 - 256
    assert vocab_manifest(bpe_dir)["special_ids"] == {"eot": 5999}


@pytest.fixture(scope="module")
def gpt2_pair(bpe_dir):
    return GPT2TokenizerFast(str(bpe_dir / "vocab.json"), str(bpe_dir / "merges.txt")), load_tokenizer(bpe_dir)


@given(st.text(max_size=200))
@settings(max_examples=150, deadline=None)
def test_gpt2_tokenizer_fast_round_trips_any_text_byte_exactly(gpt2_pair, text):
    theirs, ours = gpt2_pair
    ids = theirs(text)["input_ids"]
    assert ids == ours.encode(text).ids
    assert theirs.decode(ids, clean_up_tokenization_spaces=False).encode("utf-8", "surrogatepass") == text.encode("utf-8", "surrogatepass")


def test_small_corpus_stops_early_and_reports_the_actual_size(tmp_path):
    texts = ["the cat sat on the mat. the dog sat on the log."] * 5
    wordpiece = vocab_manifest(train_wordpiece(texts, tmp_path / "wp"))
    bpe = vocab_manifest(train_bpe(texts, tmp_path / "bpe"))
    assert 104 < wordpiece["size"] < 30522
    assert 257 < bpe["size"] < 50257 and bpe["special_ids"]["eot"] == bpe["size"] - 1


@given(
    st.lists(st.text("abc", min_size=1, max_size=5), unique=True, max_size=40), st.floats(0.0, 1.0), st.integers(1, 60), st.integers(0, 5)
)
@settings(max_examples=200, deadline=None)
def test_sample_is_deterministic_and_bounded(ids, rate, max_bytes, seed):
    docs = [(doc_id, doc_id * 3) for doc_id in ids]
    sample = list(sample_documents(docs, rate, max_bytes, seed))
    assert sample == list(sample_documents(iter(docs), rate, max_bytes, seed))
    assert sum(map(len, sample[:-1])) < max_bytes
    everything = list(sample_documents(docs, rate, 10**9, seed))
    assert sample == everything[: len(sample)]
    if rate == 1.0:
        assert everything == [text for _, text in docs]


def test_train_vocab_from_documents_samples_the_parquet_files(shared_data, tmp_path):
    docs = [Document(id=name, source="books", title=name, text=book_text(shared_data, name)[:200_000]) for name in TRAIN_BOOKS]
    paths = [
        Path(write_table_atomic(documents_table(docs[:2]), str(tmp_path / "a.parquet"))),
        Path(write_table_atomic(documents_table(docs[2:]), str(tmp_path / "b.parquet"))),
    ]
    cfg = VocabConfig(wordpiece_vocab_size=2000, bpe_vocab_size=2000, sample_bytes=350_000)
    dirs = train_vocab_from_documents(paths, tmp_path / "vocab", cfg)
    assert set(dirs) == {"wordpiece", "bpe"}
    assert vocab_manifest(dirs["wordpiece"])["size"] == 2000 and vocab_manifest(dirs["bpe"])["size"] == 2000
    first = vocab_sha256(dirs["bpe"])
    again = train_vocab_from_documents(paths, tmp_path / "again", cfg.model_copy(update={"kinds": ["bpe"]}))
    assert vocab_sha256(again["bpe"]) == first  # same sample, same vocabulary, whether trained beside WordPiece or alone
    alone = train_vocab_from_documents(paths, tmp_path / "alone", cfg.model_copy(update={"kinds": ["wordpiece"]}))
    assert vocab_sha256(alone["wordpiece"]) == vocab_sha256(dirs["wordpiece"])
    Path(again["bpe"], "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    assert vocab_sha256(again["bpe"]) != first


def test_tokens_per_word_count_each_paragraph_as_encode_does(shared_data, wordpiece_dir, bpe_dir, tmp_path):
    """The figure comes from the shards' encoder; it must count what the tokenizer's own ``encode`` gives."""
    text = book_text(shared_data, HELD_OUT_BOOK)[:60_000] + "\n\nCafé naïve — 日本語 [SEP] <|endoftext|> \x00 tabs\tand  spaces"
    docs = [Document(id="a", source="books", title="a", text=text)]
    path = Path(write_table_atomic(documents_table(docs), str(tmp_path / "a.parquet")))
    figures = vocab_module.vocab_figures({"wordpiece": str(wordpiece_dir), "bpe": str(bpe_dir)}, [path])
    paragraphs = text.split("\n\n")
    words = sum(len(paragraph.split()) for paragraph in paragraphs)
    for kind, directory in (("wordpiece", wordpiece_dir), ("bpe", bpe_dir)):
        tokenizer = load_tokenizer(directory)
        tokens = sum(len(tokenizer.encode(paragraph, add_special_tokens=False).ids) for paragraph in paragraphs)
        assert figures[kind]["tokens_per_word"] == tokens / words


TRAIN_IN_A_PROCESS = """
import sys
from collections import Counter
from pathlib import Path
from corpusforge.encoding.vocab import train_bpe, train_wordpiece
texts = Path(sys.argv[1]).read_text(encoding="utf-8").split("\\n\\n")
train_wordpiece(texts, Path(sys.argv[2]) / "wordpiece", vocab_size=3000)
train_bpe(texts, Path(sys.argv[2]) / "bpe", vocab_size=800)
"""


def test_two_trainings_in_fresh_processes_give_byte_identical_vocabularies(shared_data, tmp_path):
    """HF's trainer numbers "##" characters in the hash-map order of each process, and 1,165 Yi syllables seen
    twice each tie at the 1,000-character alphabet limit: without a fixed alphabet the files differ run to run."""
    rare = [chr(0xA000 + i) for i in range(1165)]
    texts = [book_text(shared_data, HELD_OUT_BOOK)[:300_000], " ".join(f"x{char}y" for char in rare) * 2]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(texts), encoding="utf-8")
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", TRAIN_IN_A_PROCESS, str(corpus), str(tmp_path / seed)], check=True, env=env)
    files = sorted(path.relative_to(tmp_path / "1") for path in (tmp_path / "1").rglob("*") if path.is_file())
    assert [str(f) for f in files] == [
        "bpe/merges.txt",
        "bpe/tokenizer.json",
        "bpe/vocab.json",
        "wordpiece/tokenizer.json",
        "wordpiece/vocab.txt",
    ]
    for name in files:
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name
    vocab = (tmp_path / "1" / "wordpiece" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 3000 and sum(len(token) == 1 and token in rare for token in vocab) < len(rare)  # the limit bit
    ours = load_tokenizer(tmp_path / "1" / "wordpiece")
    theirs = BertTokenizerFast(str(tmp_path / "1" / "wordpiece" / "vocab.txt"))
    for text in [texts[1][:2000], *texts[0].split("\n\n")[:200]]:
        assert theirs(text)["input_ids"] == ours.encode(text).ids


def exact_alphabet(texts: list[str], tokenizer, limit: int) -> tuple[list[str], list[str]]:
    """The trainer's alphabet from the words it sees (whole texts normalized and pre-tokenized), ties by code point."""
    counts: Counter[str] = Counter()
    inside: set[str] = set()
    for text in texts:
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text)):
            counts.update(word)
            inside.update(word[1:])
    kept = sorted(sorted(counts, key=lambda char: (-counts[char], ord(char)))[:limit], key=ord)
    return kept, [f"##{char}" for char in kept if char in inside]


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("limit", [40, 1000])
@pytest.mark.parametrize("chunk", [None, 64])  # 64: hundreds of chunks, most with only a few characters not yet seen inside a word
def test_alphabet_from_per_character_normalization_equals_the_whole_text_one(shared_data, lowercase, limit, chunk, monkeypatch):
    """Counted from the distinct units (the texts without \\xa0 and \\u2028) and the texts taken whole."""
    if chunk:
        monkeypatch.setattr(vocab_module, "ALPHABET_CHUNK_CHARS", chunk)
        monkeypatch.setattr(vocab_module, "ALPHABET_CHUNK_UNITS", chunk)
    tricky = (
        "Ünïcödé façade e\u0301te\u0301 İstanbul ΣΟΦΟΣ σοφος 日本語のテキスト 中文字 한국어 텍스트 emoji🙂inside "
        "tab\tand\u00a0nbsp zero\u200bwidth ctrl\x01char a\u0301\u0323b ﬁne ǅemal Straße ÅNGSTRÖM x\u2028y"
    )
    texts = [book_text(shared_data, HELD_OUT_BOOK)[:50_000], tricky, tricky.upper(), " ".join(f"q{chr(0xA000 + i)}" for i in range(60))]
    texts += [text.replace("\u00a0", " ").replace("\u2028", "\n") for text in (tricky, tricky.upper())]
    tokenizer = _wordpiece_tokenizer({}, lowercase)
    assert _fixed_alphabet(Sample.of(texts), _CharTable(tokenizer), limit) == exact_alphabet(texts, tokenizer, limit)


# Traps for normalizing each unit of a text on its own. Mapped per character: accents, İ (two characters in
# str.lower), Σ (str.lower's final ς), CJK (spaced out), control and format characters (dropped), whitespace
# turned into " " or dropped (\v and \f, which the units cut at). Combining marks, which NFD reorders across
# characters (spacing ones survive the accent strip), U+0F73 (a starter decomposing into combining marks) and
# unassigned U+0378, also after a space.
PER_CHARACTER = "ÉéÜüÅÀİıΣσςßẞǅﬁΩ\u2126日本中한\x00\x01\x7f\x85\u200b\u200d\ufffd\ue000\t\n\r\x0b\x0c\xa0\u3000\u2028 aZ.'"
REORDERING = ["a\u0301\u0323", "\u0345", "\U0001d16d\U0001d165", "\u302f\u0301\u302e", "\u0f40\u0f73\u0f71", "\u0378", " \u0323\u0301"]
TRAPS = [*PER_CHARACTER, "ΟΣ", *REORDERING]
MIXED_LINES = [  # a text each
    "ΣΟΦΟΣ ΛΟΓΟΣ σοφος Ünïcödé FAÇADE İstanbul Straße ǅemal ﬁne Ω\u2126 ÅNGSTRÖM",
    "日本語のテキスト 中文字 한국어 텍스트 emoji🙂inside",
    "ctrl\x01char zero\u200bwidth tab\tand\u00a0nbsp x\u2028y\x85z \u3000wide\ufffd\x7fdel",
    "e\u0301te\u0301 a\u0301\u0323b \u0323\u0301x",
    "\U0001d16d\U0001d165 x\u302f\u0301\u302e",
    "\u0f40\u0f73\u0f71\u0f72",
    "Ab\u0378cd",
    "ab\x0bcd ef\x0cgh",
]


def words(pre_tokenizer, text: str) -> list[str]:
    return [word for word, _ in pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.parametrize("lowercase", [True, False])
@given(texts=st.lists(st.lists(st.sampled_from(TRAPS) | st.characters(exclude_categories=("Cs", "Cn"))).map("".join), max_size=4))
@example(texts=MIXED_LINES)
@settings(max_examples=200, deadline=None)
def test_words_of_units_normalized_alone_are_the_normalizer_words_of_each_text(lowercase, texts):
    """What the trainer counts: the words of the normalizer's output over each whole text."""
    tokenizer = _wordpiece_tokenizer({}, lowercase)
    expected = Counter(word for text in texts for word in words(tokenizer.pre_tokenizer, tokenizer.normalizer.normalize_str(text)))
    counts = Sample.of(texts).words(tokenizer.pre_tokenizer, tokenizer.normalizer.normalize_str)
    assert Counter(dict(zip(counts.column("word").to_pylist(), counts.column("count").to_pylist()))) == expected


def trained_with_the_normalizer(texts: list[str], vocab_size: int, lowercase: bool) -> dict[str, bytes]:
    """vocab.txt and tokenizer.json of the trainer fed the texts themselves (through its normalizer)."""
    tokenizer = _wordpiece_tokenizer({}, lowercase)
    alphabet, continuations = _fixed_alphabet(Sample.of(texts), _CharTable(tokenizer), WORDPIECE_ALPHABET)
    tokenizer.train_from_iterator(texts, _wordpiece_trainer(vocab_size, 2, alphabet, continuations))
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    return {
        "vocab.txt": "".join(f"{token}\n" for token in sorted(vocab, key=vocab.__getitem__)).encode("utf-8"),
        "tokenizer.json": _wordpiece_tokenizer(vocab, lowercase).to_str().encode("utf-8"),
    }


@pytest.mark.parametrize("lowercase", [True, False])
def test_wordpiece_files_equal_those_trained_through_the_normalizer(shared_data, tmp_path, lowercase):
    """Each mixed line a text of its own (a combining mark sends only its text to the normalizer), repeated so
    that every word of it is a token: a character mapped wrongly changes the vocabulary."""
    texts = [book_text(shared_data, HELD_OUT_BOOK)[:20_000], *MIXED_LINES * 3, *map(str.upper, MIXED_LINES), PER_CHARACTER * 3]
    directory = Path(train_wordpiece(texts, tmp_path, vocab_size=4000, lowercase=lowercase))
    assert len((directory / "vocab.txt").read_text(encoding="utf-8").splitlines()) < 4000  # every pair seen twice merged
    for name, expected in trained_with_the_normalizer(texts, 4000, lowercase).items():
        assert (directory / name).read_bytes() == expected, name


def test_sample_keeps_about_the_rate_and_the_seed_decides_which():
    docs = [(f"doc-{i}", f"doc-{i}") for i in range(4000)]  # text = id: the sample shows which documents it took

    def taken(rate: float, seed: int) -> list[str]:
        return list(sample_documents(docs, rate, 10**9, seed))

    assert taken(0.0, 0) == []
    tenth, fifth, other_seed = taken(0.1, 0), taken(0.2, 0), taken(0.1, 1)
    assert 300 < len(tenth) < 500 and 700 < len(fifth) < 900 and 300 < len(other_seed) < 500  # binomial, +-5 sd
    assert set(tenth) < set(fifth)  # a higher rate keeps what a lower one kept
    assert len(set(tenth) & set(other_seed)) < 100  # another seed, another sample (about 40 in common)
    assert tenth == [text for _, text in docs if text in set(tenth)]  # in input order


@given(st.lists(st.sampled_from(["word", " ", "\n", "\n\n", "\n\n\n", ".", "é", "'s", "\t", "  ", "42"]), max_size=80).map("".join))
@settings(max_examples=400, deadline=None)
def test_paragraph_pieces_leave_every_pre_token_as_it_was(text):
    """The trainers count pre-tokens; pieces cut between a paragraph break's newlines must count the same."""
    from tokenizers import pre_tokenizers

    pieces = list(paragraph_pieces(text, size=4))
    assert "".join(pieces) == text and all(pieces[:-1])
    for pre_tokenizer in (pre_tokenizers.ByteLevel(add_prefix_space=False), pre_tokenizers.BertPreTokenizer()):
        whole = [token for token, _ in pre_tokenizer.pre_tokenize_str(text)]
        assert [token for piece in pieces for token, _ in pre_tokenizer.pre_tokenize_str(piece)] == whole


def test_paragraph_pieces_cut_long_books():
    text = "\n\n".join(f"Paragraph {i} of a long book." for i in range(10_000))
    pieces = list(paragraph_pieces(text, size=10_000))
    assert len(pieces) > 10 and "".join(pieces) == text and all(len(p) >= 10_000 for p in pieces[:-1])
