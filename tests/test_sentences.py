"""Sentence splitting: tricky English cases, paragraph boundaries, real books, and coverage properties."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import blingfire
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpusforge.corpora.books import read_book
from corpusforge.corpora.document import Document
from corpusforge.corpora.sentences import (
    _ABBREVIATIONS,
    _INITIAL_OR_TITLE_PERIOD,
    _LOOKBEHIND,
    _MISSED_END,
    _MONTHS,
    _TITLES,
    _after_abbreviation,
    _blingfire_cuts,
    _word_before_period,
    split_sentences,
)

TRICKY = [
    # blingfire alone joins these: a sentence that starts with a title or initials
    ("He came in at last. Dr. Seward followed him.", ["He came in at last.", "Dr. Seward followed him."]),
    ("It was fine. J. R. R. Tolkien wrote it in 1937.", ["It was fine.", "J. R. R. Tolkien wrote it in 1937."]),
    ("“Stop!” Mr. Darcy cried.", ["“Stop!”", "Mr. Darcy cried."]),
    # blingfire alone splits these: an abbreviation before a capital
    (
        "Dr. Seward and St. John shut the door. Capt. Hardy said nothing.",
        ["Dr. Seward and St. John shut the door.", "Capt. Hardy said nothing."],
    ),
    (
        "The Rev. Mr. Collins arrived on Monday. He stayed until Saturday.",
        ["The Rev. Mr. Collins arrived on Monday.", "He stayed until Saturday."],
    ),
    ("Version 2.0 was released in Oct. 2004. Version 3.0 followed.", ["Version 2.0 was released in Oct. 2004.", "Version 3.0 followed."]),
    ("Mrs. P. used to come up and say so.", ["Mrs. P. used to come up and say so."]),
    ('"Who took it?" asked Dr. Van Helsing. "Nobody."', ['"Who took it?" asked Dr. Van Helsing.', '"Nobody."']),
    # things no splitter should break
    ("The price was 3.5 dollars, e.g. cheap, i.e. fine. It sold.", ["The price was 3.5 dollars, e.g. cheap, i.e. fine.", "It sold."]),
    (
        "The U.S. Navy commissioned her in 1943. She served until 1946.",
        ["The U.S. Navy commissioned her in 1943.", "She served until 1946."],
    ),
    ("I heard his very last words.... I stopped in a fright.", ["I heard his very last words....", "I stopped in a fright."]),
    ("“What do you mean?” said Mr. Darcy. “Nothing!” she cried.", ["“What do you mean?” said Mr. Darcy.", "“Nothing!” she cried."]),
    ("Washington, D.C. is the capital. It lies on the Potomac.", ["Washington, D.C. is the capital.", "It lies on the Potomac."]),
    ("See Fig. 3 and No. 7 for details. Then stop.", ["See Fig. 3 and No. 7 for details.", "Then stop."]),
]


@pytest.mark.parametrize(("text", "expected"), TRICKY)
def test_tricky_cases(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_paragraph_boundary_is_always_a_sentence_boundary() -> None:
    text = "The first paragraph has no final stop\n\nand this lowercase one continues it. Two.\n\n\n\nMr.\n\nSmith"
    assert split_sentences(text) == [
        "The first paragraph has no final stop",
        "and this lowercase one continues it.",
        "Two.",
        "Mr.",
        "Smith",
    ]


def test_empty_and_blank_inputs() -> None:
    assert split_sentences("") == []
    assert split_sentences(" \n\n \t \n") == []
    assert split_sentences("One") == ["One"]


def test_real_book_has_no_sentence_ending_in_a_title(shared_data: Path) -> None:
    root = shared_data / "books" / "en"
    doc = read_book(root / "Pride_and_Prejudice_JaneAusten.txt", root)
    assert isinstance(doc, Document)
    sentences = split_sentences(doc.text)
    assert 4000 < len(sentences) < 8000  # about one sentence per 20 words in Austen
    titles = re.compile(r"(?:^|\s)(?:Mr|Mrs|Dr|St|Col)\.$")
    assert not [s for s in sentences if titles.search(s)]
    assert (
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife." in sentences
    )


def _non_space(text: str) -> str:
    return "".join(text.split())


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=400))
def test_sentences_cover_the_input_in_order_and_are_never_empty(text: str) -> None:
    sentences = split_sentences(text)
    assert all(s and s == s.strip() for s in sentences)
    assert _non_space("".join(sentences)) == _non_space(text)


SENTENCE = st.builds(
    lambda words, end: " ".join(words).capitalize() + end,
    st.lists(
        st.sampled_from(["mr.", "dr.", "st.", "the", "ship", "3.5", "e.g.", "j.", "u.s.", "“yes,”", "said", "she"]), min_size=1, max_size=12
    ),
    st.sampled_from([".", "!", "?", "...", ".”", ""]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(SENTENCE, min_size=1, max_size=5).map(" ".join), min_size=1, max_size=5))
def test_abbreviation_heavy_paragraphs_keep_paragraph_boundaries(paragraphs: list[str]) -> None:
    text = "\n\n".join(paragraphs)
    sentences = split_sentences(text)
    assert _non_space("".join(sentences)) == _non_space(text)
    # no sentence straddles a paragraph break: the document splits exactly as its paragraphs do
    assert sentences == [s for paragraph in paragraphs for s in split_sentences(paragraph)]


def _python_api_cuts(paragraph: str) -> list[int]:
    """Reference for ``_blingfire_cuts``: the same rule through blingfire's own Python functions."""
    cuts, cursor = [], 0
    for sentence in blingfire.text_to_sentences(paragraph).split("\n"):
        start = paragraph.find(sentence, cursor)
        if start < 0:
            return [begin for begin, _end in blingfire.text_to_sentences_and_offsets(paragraph)[1][1:]]
        cuts.append(start)
        cursor = start + len(sentence)
    return cuts[1:]


# Newlines and NULs, which blingfire turns into spaces (so its offsets are used), and multi-byte characters.
PARAGRAPH = st.lists(st.sampled_from([*"aZ .!?\n\t\x00\u00a0\u200bé日😀”", "Mr.", "J.", "said"]), min_size=1, max_size=150).map("".join)


@settings(max_examples=300, deadline=None)
@given(PARAGRAPH)
def test_blingfire_cuts_match_blingfire_python_api(paragraph: str) -> None:
    assert _blingfire_cuts(paragraph) == _python_api_cuts(paragraph)


def test_paragraph_longer_than_the_reused_buffer() -> None:
    paragraph = "He wrote “é” on the\nwall. Then 😀 she left. " * 1500  # ~70 KB of UTF-8; the newline brings in blingfire's offsets
    assert _blingfire_cuts(paragraph) == _python_api_cuts(paragraph)
    assert split_sentences(paragraph) == ["He wrote “é” on the\nwall.", "Then 😀 she left."] * 1500


def test_threads_split_as_one_thread_does(shared_data: Path) -> None:
    root = shared_data / "books" / "en"
    texts = [
        d.text for name in ("pg345.txt", "Pride_and_Prejudice_JaneAusten.txt") if isinstance(d := read_book(root / name, root), Document)
    ]
    with ThreadPoolExecutor(4) as pool:  # blingfire's C call releases the GIL, so the threads' calls overlap
        assert list(pool.map(split_sentences, texts * 2)) == [split_sentences(text) for text in texts * 2]


# The plain form of _MISSED_END: re tries it at every position, so the module's form starts with a literal.
_PLAIN_MISSED_END = re.compile(
    r"(?P<end>[.!?]+[\"'”’)\]]*)\s+(?=(?:" + "|".join(t.capitalize() for t in _TITLES) + r")\.\s|[A-Z]\.\s?[A-Z])"
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["Mr.", "Mrs.", "Messrs.", "Capt.", "J.", "U.S.", "a.", "!", "?", ".", "”", ")", " ", "  ", "\n", "he", "The"])
    ).map("".join)
)
def test_missed_end_finds_what_the_plain_pattern_finds_and_the_precheck_never_hides_it(text: str) -> None:
    plain = [(m.end("end"), m.end()) for m in _PLAIN_MISSED_END.finditer(text)]
    assert [(m.end("end"), m.end()) for m in _MISSED_END.finditer(text)] == plain
    assert _INITIAL_OR_TITLE_PERIOD.search(text) or not plain


def _after_abbreviation_by_word(paragraph: str, cut: int) -> bool:
    """Reference for ``_after_abbreviation``: its rule with the word always found (no shortcut from the characters around the cut)."""
    after = paragraph[cut : cut + _LOOKBEHIND].lstrip()[:1]
    if after.islower():
        return True
    word = _word_before_period(paragraph[max(0, cut - _LOOKBEHIND) : cut].rstrip())
    if word is None or not (after.isupper() or after.isdigit()):
        return False
    if after.isdigit() and word.lower() in _MONTHS:
        return True
    return word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isupper())


# Abbreviations and months in any case (and letters whose lowercase is longer or ASCII), ordinary words and numbers, spaces.
ABBREVIATION_TEXT = st.lists(
    st.sampled_from(
        ["Mr.", "MRS.", "mRs.", "Col.", "xCol.", "Sept.", "SEPT.", "Oct.", "No.", "e.g.", "J.", "É.", "İnc.", "\u212aol.", "ship.", "1943."]
        + ["depart.", "ART.", "3", "The", "he", "“", "(", "?", "!", " ", " ", "  ", "\n", "\xa0", " " * 41]
    ),
    min_size=1,
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(ABBREVIATION_TEXT)
def test_after_abbreviation_decides_every_cut_as_finding_the_word_does(paragraph: str) -> None:
    cuts = range(len(paragraph))  # every position a blingfire cut can take
    assert [_after_abbreviation(paragraph, cut) for cut in cuts] == [_after_abbreviation_by_word(paragraph, cut) for cut in cuts]
