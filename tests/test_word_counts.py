"""Word counts for the vocabulary trainers: the words HF's pre-tokenizers give, counted once per distinct unit."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from corpusforge.encoding import word_counts
from corpusforge.encoding.vocab import EOT, _wordpiece_tokenizer, train_bpe
from corpusforge.encoding.word_counts import FEED_CHARS, SEPARATOR, TAKEN_WHOLE, Sample, repeated_words

PRE_TOKENIZERS = {"gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False), "bert": pre_tokenizers.BertPreTokenizer()}
NORMALIZERS = {"gpt2": None, "bert": _wordpiece_tokenizer({}, lowercase=True).normalizer.normalize_str}
# whitespace of every kind (ASCII, Unicode, and \x1c-\x1f that str.split cuts at but the pre-tokenizers do not),
# GPT-2's contractions and the pieces its pattern gives a leading space to
PIECES = [" ", "  ", "\n", "\n\n", "\t", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2003", "\u3000", "\u2028"]
PIECES += ["word", "Word", "'s", "'ll", "'S", "42", "3.5", ".", ",", "--", "(", "é", "日本", "🙂", "a'b", "''", "\u0301", "\x00", "Σ"]
TEXTS = st.lists(st.lists(st.sampled_from(PIECES), max_size=30).map("".join), max_size=6)


def reference_counts(texts: list[str], pre_tokenizer, normalize=None) -> Counter:
    """What the trainer counts when fed the texts themselves (through its normalizer, if any)."""
    return Counter(word for text in texts for word, _ in pre_tokenizer.pre_tokenize_str(normalize(text) if normalize else text))


def as_counter(table) -> Counter:
    return Counter(dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist())))


@pytest.mark.parametrize("kind", sorted(PRE_TOKENIZERS))
@given(texts=TEXTS)
@example(texts=["x\xa0  y", "a  \n b", "  lead", "trail  ", "", "\n", "ab\x0bcd", "a \u0301b"])
@settings(max_examples=300, deadline=None)
def test_counts_are_those_of_the_pre_tokenizer_over_each_text(kind, texts, monkeypatch_module):
    """Tiny batches and sums held a few rows at a time: units cut across every batch edge, sums compacted often, keys
    grouped as strings or, past a few bytes, as large strings."""
    pre_tokenizer, normalize = PRE_TOKENIZERS[kind], NORMALIZERS[kind]
    assert as_counter(Sample.of(texts).words(pre_tokenizer, normalize)) == reference_counts(texts, pre_tokenizer, normalize)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(word_counts, "BATCH_CHARS", 7)
        patch.setattr(word_counts, "COMPACT_ROWS", 5)
        patch.setattr(word_counts, "WORDS_PER_CALL", 3)
        patch.setattr(word_counts, "STRING_BYTES", 40)
        yield patch


def test_texts_taken_whole_hold_spaces_gpt2s_pattern_takes_beyond_ascii_or_cut_bytes_bert_deletes():
    """Probed over all of Unicode: "a" c c "b" gives 4 words when the pattern's \\s matches c, fewer otherwise;
    BERT's normalizer deletes \\v and \\f and no other byte the units are cut at."""
    byte_level = PRE_TOKENIZERS["gpt2"]
    spaces = {chr(point) for point in range(sys.maxunicode + 1) if not 0xD800 <= point < 0xE000 and point != 0x20}
    spaces = {char for char in spaces if len(byte_level.pre_tokenize_str(f"a{char}{char}b")) == 4}
    taken_whole = {char for char in spaces if TAKEN_WHOLE.match(char)}
    assert {char for char in spaces if ord(char) >= 0x80} == taken_whole - {"\x0b", "\x0c"}
    assert {ord(char) for char in spaces if ord(char) < 0x80} == {0x09, 0x0A, 0x0B, 0x0C, 0x0D}  # the units' cut bytes, less " "
    assert all(word_counts._ASCII_SPACE[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20]]) and word_counts._ASCII_SPACE.sum() == 6
    deleted = {char for char in map(chr, [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20]) if NORMALIZERS["bert"](f"a{char}b") == "ab"}
    assert deleted == {"\x0b", "\x0c"} <= taken_whole


def test_sums_of_many_distinct_keys_are_regrouped_a_logarithmic_number_of_times(monkeypatch):
    """More distinct keys than the threshold: a sum at every addition would re-group all of them each time."""
    groupings = []
    concat = pa.concat_tables
    monkeypatch.setattr(pa, "concat_tables", lambda tables: groupings.append(len(tables)) or concat(tables))
    monkeypatch.setattr(word_counts, "COMPACT_ROWS", 10)
    monkeypatch.setattr(word_counts, "STRING_BYTES", 2**31 - 1)  # its default (the module's fixture may hold it lower)
    sums = word_counts._Sums("word")
    for start in range(0, 3000, 3):
        sums.add(pa.array([f"w{start}", f"w{start + 1}", f"w{start + 2}", "common"]), pa.array([1, 1, 1, 2]))
    table = sums.table()
    assert len(groupings) <= 12
    counts = dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist()))
    assert len(counts) == 3001 and counts["common"] == 2000 and counts["w2999"] == 1
    assert table.schema.field("word").type == pa.string()  # Arrow's hashed grouper: large strings took 7x the CPU


def test_repeated_words_give_every_word_its_count_in_bounded_pieces():
    counts = Sample.of(["the cat and the hat " * 5000, "a\n" * 40_000, "rare"]).words(PRE_TOKENIZERS["gpt2"])
    pieces = list(repeated_words(counts))
    longest = max(len(word) for word in counts.column("word").to_pylist()) + 1
    assert all(len(piece) <= max(FEED_CHARS, longest) for piece in pieces)
    fed = Counter(word for piece in pieces for word in piece.split(SEPARATOR) if word)
    assert fed == as_counter(counts) and fed["Ġthe"] == 9_999 and fed["the"] == 1 and fed["rare"] == 1


def test_bpe_files_equal_those_of_the_trainer_fed_the_texts(shared_data, tmp_path):
    """The vocabulary, merges and tokenizer.json of the counted words are byte for byte the trainer's own on the texts."""
    book = (shared_data / "books" / "en" / "46-0.txt").read_text(encoding="utf-8-sig")
    texts = [book[:60_000], book[60_000:90_000], "x\xa0  y \u3000z It's 3.5 'll\r\n\n", *PIECES * 3]
    directory = Path(train_bpe(texts, tmp_path / "counted", vocab_size=1500))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1499, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.add_special_tokens([EOT])
    assert (directory / "tokenizer.json").read_text(encoding="utf-8") == tokenizer.to_str()
    assert tokenizer.get_vocab_size() == 1500  # merges reached the size asked: a wrong count shows in them
