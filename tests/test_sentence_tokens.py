"""SentenceEncoder gives exactly the ids of one ``encode`` per sentence, on real books and random text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shard_factory import bert_tokenizer_json, gpt_tokenizer_json
from tokenizers import Tokenizer

from corpusforge.corpora.gutenberg import strip_gutenberg
from corpusforge.corpora.sentences import split_sentences
from corpusforge.encoding import sentence_tokens
from corpusforge.encoding.sentence_tokens import SentenceEncoder

# Characters that take every path: ASCII, whitespace the normalizer rewrites, curly quotes, accents
# (stripped), CJK (padded), control characters (removed), capital sigma, dotted I, added-token text.
ALPHABET = list("aZ09 .,'-!") + [
    "\n",
    "\t",
    "\xa0",
    "\u2028",
    "’",
    "“",
    "é",
    "Ê",
    "ß",
    "中",
    "\x07",
    "\u200b",
    "Σ",
    "İ",
    "\u0301",
    "[",
    "]",
    "[SEP]",
    "[MASK]",
    "[sep]",
    "SEP",
    "\x00",
]
sentence = st.lists(st.sampled_from(ALPHABET), max_size=14).map("".join)
documents = st.lists(st.lists(sentence, max_size=6), min_size=1, max_size=5)


def per_sentence(tokenizer: Tokenizer, docs: list[list[str]]) -> list[tuple[list[int], list[int]]]:
    out = []
    for sentences in docs:
        ids = [tokenizer.encode(s, add_special_tokens=False).ids for s in sentences]
        out.append(([i for sentence_ids in ids for i in sentence_ids], [len(sentence_ids) for sentence_ids in ids]))
    return out


def assert_same(encoder: SentenceEncoder, tokenizer: Tokenizer, docs: list[list[str]]) -> None:
    got = encoder.encode(docs)
    assert len(got) == len(docs)
    for (tokens, lengths), (want_tokens, want_lengths) in zip(got, per_sentence(tokenizer, docs)):
        assert tokens.tolist() == want_tokens
        assert lengths.tolist() == want_lengths


@pytest.fixture(scope="module")
def bert_tokenizer(shared_data, tmp_path_factory) -> Tokenizer:
    path = bert_tokenizer_json(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", tmp_path_factory.mktemp("bert"))
    return Tokenizer.from_file(str(path))


@pytest.fixture(scope="module")
def bert_encoder(bert_tokenizer) -> SentenceEncoder:
    return SentenceEncoder(bert_tokenizer, np.dtype(np.uint16))


@given(documents)
@settings(max_examples=300, deadline=None)
def test_random_text_matches_one_encode_per_sentence(bert_encoder, bert_tokenizer, docs):
    assert_same(bert_encoder, bert_tokenizer, docs)


def test_real_books_match_and_mostly_skip_the_normalizer(bert_tokenizer, shared_data):
    docs = []
    for name in ("11-0.txt", "41-0.txt", "pg1080.txt"):
        text = strip_gutenberg((shared_data / "books" / "en" / name).read_text(encoding="utf-8-sig").replace("\r\n", "\n"))
        docs.append(split_sentences(text)[:1500])
    encoder = SentenceEncoder(bert_tokenizer, np.dtype(np.uint16))
    assert_same(encoder, bert_tokenizer, docs)
    fast = sum(int(encoder._plan(sentences)[0].sum()) for sentences in docs)
    assert fast > 0.9 * sum(map(len, docs))  # the shortcut is what runs on English prose


@pytest.fixture(scope="module")
def gpt2_tokenizer(shared_data, tmp_path_factory) -> Tokenizer:
    vocab = shared_data / "vocab" / "gpt2"
    tokenizer = Tokenizer.from_file(str(gpt_tokenizer_json(vocab / "vocab.json", vocab / "merges.txt", tmp_path_factory.mktemp("gpt2"))))
    tokenizer.add_special_tokens(["<|endoftext|>"])  # as the build's BPE vocabularies have it
    return tokenizer


# Byte-level BPE: GPT-2's pre-tokenizer classes (letters, numbers, other, contractions, whitespace runs)
# and characters where regex engines may disagree (separators Python counts as space, NEL, emoji).
GPT_ALPHABET = list("aZ09 .,'-!sdtm") + ["'s", "'ll", "  ", "\n", "\t", "\xa0", "\x1c", "\x85", "\u2028", "’", "é", "中", "\u0301", "😀"]
GPT_ALPHABET += ["<|endoftext|>", "\x00", "٣", "Ⅻ"]
gpt_documents = st.lists(st.lists(st.lists(st.sampled_from(GPT_ALPHABET), max_size=20).map("".join), max_size=5), min_size=1, max_size=4)


@pytest.fixture(scope="module")
def gpt2_encoder(gpt2_tokenizer) -> SentenceEncoder:
    return SentenceEncoder(gpt2_tokenizer, np.dtype(np.uint16))


@pytest.mark.slow
@given(gpt_documents)
@settings(max_examples=300, deadline=None)
def test_gpt2_random_text_matches_one_encode_per_sentence(gpt2_encoder, gpt2_tokenizer, docs):
    assert gpt2_encoder._ranked is not None  # tiktoken's path
    assert_same(gpt2_encoder, gpt2_tokenizer, docs)


@pytest.fixture(scope="module")
def gpt2_regex_encoder(gpt2_tokenizer) -> SentenceEncoder:
    """The word-cache path, as for a vocabulary whose ids do not follow its merges."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sentence_tokens, "ranked_bpe", lambda *_: None)
        return SentenceEncoder(gpt2_tokenizer, np.dtype(np.uint16))


@given(gpt_documents)
@settings(max_examples=150, deadline=None)
def test_gpt2_random_text_matches_through_the_word_cache(gpt2_regex_encoder, gpt2_tokenizer, docs):
    assert_same(gpt2_regex_encoder, gpt2_tokenizer, docs)


def test_ranks_are_refused_where_ids_do_not_follow_the_merges(gpt2_tokenizer):
    byte_chars = sentence_tokens._gpt2_byte_chars()
    assert sentence_tokens.ranked_bpe(json.loads(gpt2_tokenizer.to_str()), byte_chars) is not None
    swapped = json.loads(gpt2_tokenizer.to_str())
    vocab = swapped["model"]["vocab"]
    first, second = ("".join(m.split(" ") if isinstance(m, str) else m) for m in swapped["model"]["merges"][:2])
    vocab[first], vocab[second] = vocab[second], vocab[first]  # two merges' tokens swap ids: ranks would reorder them
    assert sentence_tokens.ranked_bpe(swapped, byte_chars) is None
    no_byte = json.loads(gpt2_tokenizer.to_str())
    del no_byte["model"]["vocab"][byte_chars[0xC3]]  # the first byte of "é" has no token
    assert sentence_tokens.ranked_bpe(no_byte, byte_chars) is None


@pytest.mark.parametrize("path", ["ranked", "word cache"])
def test_gpt2_real_books_match(path, gpt2_encoder, gpt2_regex_encoder, gpt2_tokenizer, shared_data, monkeypatch):
    docs = []
    for name in ("11-0.txt", "41-0.txt", "pg1080.txt"):
        text = strip_gutenberg((shared_data / "books" / "en" / name).read_text(encoding="utf-8-sig").replace("\r\n", "\n"))
        docs.append([text[:200_000]])
    encoder = gpt2_encoder if path == "ranked" else gpt2_regex_encoder
    assert (encoder._ranked is not None) == (path == "ranked")
    assert all(encoder._pretokenizable(sentences) for sentences in docs)  # the fast path is the one taken
    monkeypatch.setattr(encoder, "_per_sentence", None)  # and nothing falls back to whole-text encoding
    got = encoder.encode(docs)
    for (tokens, lengths), sentences in zip(got, docs):
        want = gpt2_tokenizer.encode(sentences[0], add_special_tokens=False).ids
        assert tokens.tolist() == want and lengths.tolist() == [len(want)]


def test_gpt2_added_token_text_is_encoded_whole(gpt2_tokenizer):
    encoder = SentenceEncoder(gpt2_tokenizer, np.dtype(np.uint16))
    docs = [["Hello there.", " Über façades [SEP] 中文", ""], [], ["<|endoftext|> and   spaces\n"]]
    assert not encoder._pretokenizable(docs[2])
    assert_same(encoder, gpt2_tokenizer, docs)
    assert encoder.encode([docs[2]])[0][0][0] == gpt2_tokenizer.token_to_id("<|endoftext|>")


def test_cased_wordpiece_keeps_case(shared_data, tmp_path):
    from tokenizers.implementations import BertWordPieceTokenizer

    path = Path(tmp_path) / "tokenizer.json"
    BertWordPieceTokenizer(str(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt"), lowercase=False).save(str(path))
    tokenizer = Tokenizer.from_file(str(path))
    docs = [["The Quick brown Fox.", "ÉCOLE d’été", "Straße [SEP] x"], ["ALL CAPS HERE", "\n"]]
    assert_same(SentenceEncoder(tokenizer, np.dtype(np.uint16)), tokenizer, docs)


def test_word_cache_starting_over_changes_nothing(bert_tokenizer, monkeypatch):
    import corpusforge.encoding.sentence_tokens as sentence_tokens

    monkeypatch.setattr(sentence_tokens, "WORD_CACHE_SIZE", 3)
    encoder = SentenceEncoder(bert_tokenizer, np.dtype(np.uint16))
    docs = [["The cat sat on the mat.", "Then it left!"], ["A dog’s day", "", "ends, quietly."]]
    for _ in range(3):  # every call after the first finds a full cache and starts over
        assert_same(encoder, bert_tokenizer, docs)


def test_whitespace_arrow_does_not_cut_at_is_split_by_the_tokenizer_in_a_fast_sentence(bert_tokenizer):
    """The fast path cuts at ASCII whitespace only: any other space a fast sentence holds stays inside a chunk, whose
    ids (no normalizer) must still be those the normalizer's output gives, over all of Unicode."""
    import sys

    encoder = SentenceEncoder(bert_tokenizer, np.dtype(np.uint16))
    others = [chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace() and chr(code) not in sentence_tokens.ARROW_SPACES]
    fast = [char for char in others if encoder._is_safe(char)]
    assert {"\xa0", "\u2028", "\u3000"} <= set(fast)  # they reach the fast path, inside chunks
    docs = [[f"a{char}b {char}Cd{char}{char}e{char}", f"{char}x.{char}y"] for char in fast]
    assert all(encoder._plan(sentences)[0].all() for sentences in docs)
    assert_same(encoder, bert_tokenizer, docs)
