"""Text normalisation, duplicate keys and language identification."""

from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from pathlib import Path

import ftfy
import ftfy.badness
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from corpusforge.corpora import clean
from corpusforge.corpora.books import read_books
from corpusforge.corpora.clean import _FTFY, dedup_key, fix_text, laid_out_word_count, normalize_text, word_count
from corpusforge.corpora.document import Document
from corpusforge.corpora.language import detect_language, sample_text


def test_normalize_repairs_mojibake_and_keeps_the_authors_punctuation() -> None:
    broken = "The cafÃ© was â€œopenâ€\x9d."  # UTF-8 read as Windows-1252
    assert normalize_text(broken) == "The café was “open”."
    assert normalize_text(broken, fix_unicode=False) == "The cafÃ© was â€œopenâ€."  # C1 control dropped
    assert normalize_text("“Well—yes,” he said…") == "“Well—yes,” he said…"


def test_normalize_whitespace_and_control_characters() -> None:
    text = "  First\tline\r\nstill   first.\x00\x07\n\n\n \n Second\u00a0para\u200bgraph with soft\u00adhyphen.\ufeff\n\n\n"
    assert normalize_text(text) == "First line still first.\n\nSecond paragraph with softhyphen."


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
@example("Â\n0")  # ftfy repairs it only once the line break is a space
@example("Â ÂÂœ")  # one repair exposes another
def test_normalize_is_idempotent_and_well_formed(text: str) -> None:
    once = normalize_text(text)
    assert normalize_text(once) == once
    assert once == once.strip()
    assert "\n\n\n" not in once and "\r" not in once and "  " not in once
    assert all(p.strip() == p and p for p in once.split("\n\n")) if once else True
    assert laid_out_word_count(once) == word_count(once)
    assert laid_out_word_count(normalize_text(text, fix_unicode=False)) == word_count(normalize_text(text, fix_unicode=False))


def test_word_count() -> None:
    assert word_count("") == 0
    assert word_count("One two\n\nthree  four-five.") == 4
    assert laid_out_word_count(normalize_text(" One two\n\n\nthree \x1c four-five.\n")) == 4
    assert laid_out_word_count("") == 0


def test_dedup_key_ignores_case_spacing_punctuation_and_compatibility_forms() -> None:
    a = "It was the best of times, it was the worst of times.\n\nChapter II"
    b = "IT WAS THE BEST OF TIMES -- it was the worst of times!\nchapter   ii"
    c = "It was the best of times; it was the ﬁrst of times."  # ligature fi, different word
    assert dedup_key(a) == dedup_key(b)
    assert dedup_key(a) != dedup_key(c)
    assert dedup_key("ﬁne") == dedup_key("fine")
    assert len(dedup_key(a)) == 40 and int(dedup_key(a), 16) >= 0


def _regex_dedup_key(text: str) -> str:
    """The key as a regex substitution defines it: the reference ``dedup_key`` must equal."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return hashlib.sha1(re.sub(r"[\W_]+", " ", folded).strip().encode("utf-8")).hexdigest()


def test_dedup_key_word_table_is_the_regex_word_class_at_every_code_point() -> None:
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    words = np.zeros(sys.maxunicode + 1, dtype=bool)
    words[[m.start() for m in re.finditer(r"[^\W_]", every)]] = True
    assert np.array_equal(clean._word_characters(), words)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec=None), max_size=300))
@example("")
@example("  ,;  ")
@example("a\ud800b c\udfff")  # lone surrogates: not letters, erased like punctuation
@example("Straße ﬁne Ⅻ ½ x²_y\u00a0z\u3000中文 ١٢٣")
@example("e\n\u0301 \u1100\n\u1161 a\u0328\n\u0301…\n")  # marks and jamo after a line break: NFKC line by line
def test_dedup_key_equals_the_regex_definition(text: str) -> None:
    assert dedup_key(text) == _regex_dedup_key(text)


def test_bundled_duplicate_shares_a_key(samples: Path) -> None:
    docs = [d for d in read_books(samples / "books") if isinstance(d, Document)]
    keys = [dedup_key(normalize_text(d.text)) for d in docs]
    assert len(set(keys)) == len(keys) - 1


@pytest.fixture(scope="module")
def shared_docs(shared_data: Path) -> list[Document]:
    return [d for d in read_books(shared_data / "books") if isinstance(d, Document)]


def test_shared_books_language(shared_docs: list[Document]) -> None:
    for doc in shared_docs:
        lang, probability = detect_language(doc.text)
        expected = "fr" if doc.meta["file"].startswith("fr/") else "en"
        assert lang == expected, (doc.meta["file"], lang, probability)
        assert 0.9 <= probability <= 1.0


def test_language_of_short_texts_and_bundled_french(samples: Path) -> None:
    assert detect_language("Le chat dort sur le canapé pendant que la pluie tombe.")[0] == "fr"
    assert detect_language("Der Hund schläft im Garten, weil die Sonne scheint.")[0] == "de"
    lang, probability = detect_language("The cat sleeps on the sofa while the rain falls outside.")
    assert lang == "en" and 0.0 <= probability <= 1.0
    docs = {d.meta["file"]: d for d in read_books(samples / "books") if isinstance(d, Document)}
    assert detect_language(docs["fr/le_jardin_du_meunier.txt"].text)[0] == "fr"
    assert detect_language(docs["a_winter_in_montreuil.txt"].text)[0] == "en"  # French names, English prose


def test_documents_cleaned_together_as_one_at_a_time(shared_docs: list[Document], samples: Path) -> None:
    """``Cleaner.clean_many`` (languages identified together) gives each document what cleaning it alone gives."""
    from corpusforge.core.config import CleanConfig
    from corpusforge.corpora.clean import Cleaner

    pages = [
        doc.replace(id=f"{doc.id}-{i}", text=doc.text[i * 3000 : i * 3000 + size])
        for doc in shared_docs
        for i, size in enumerate((150, 900, 2500))
    ]
    pages += list(read_books(samples / "books")) + [Document("empty", "books", "", "")]
    cleaner = Cleaner(CleanConfig(min_words=20, language="en"))
    together = cleaner.clean_many(pages)
    assert together == [cleaner(page) for page in pages]
    assert {type(r).__name__ for r in together} == {"Document", "Reject"}
    assert {r.reason for r in together if not isinstance(r, Document)} >= {"too_short", "language"}


def test_sample_text_is_bounded_and_spread_over_the_text() -> None:
    text = " ".join(f"w{i}" for i in range(100_000))
    sample = sample_text(text, windows=5, window_chars=1000)
    assert len(sample) <= 5 * 1000 + 4
    assert sample.startswith("w0 ") and sample.endswith(" w99999")
    words = set(text.split())
    assert all(word in words for word in sample.split())  # whole words only, never a cut one
    assert sample_text("short text") == "short text"


def test_the_default_sample_judges_articles_and_books_as_their_whole_text_does(shared_data: Path) -> None:
    """The sample is a recipe choice (bench/language_sample.py counts its disagreements on every shared corpus):
    on English articles and English and French books it must give the whole text's verdict, and a 4 KB
    article must be judged on half of itself or less (what makes the choice worth having)."""
    from corpusforge.corpora.language import _identifier
    from corpusforge.corpora.wikipedia import plan_ranges, read_range

    dump = shared_data / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    texts = [d.text for r in plan_ranges(dump) for d in read_range(r) if isinstance(d, Document)]
    texts += [d.text for d in read_books(shared_data / "books") if isinstance(d, Document)]
    texts = [normalize_text(t) for t in texts]
    whole = [code for code, _ in _identifier().classify_many(texts)]
    assert {"en", "fr"} <= set(whole)
    assert [detect_language(t)[0] for t in texts] == whole
    article = " ".join(texts[0].split()[:700])[:4000]
    assert len(article) == 4000 and len(sample_text(article)) <= 2000


def test_entities_exposed_by_a_repair_are_repaired_but_ampersands_alone_need_no_second_pass(monkeypatch) -> None:
    assert normalize_text("Fish &amp;amp; chips") == "Fish & chips"  # the second layer shows only after the first
    calls = []
    real = clean.fix_text
    monkeypatch.setattr(clean, "fix_text", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    assert normalize_text("Wine, &c.\nand   more") == "Wine, &c. and more"
    assert len(calls) == 1


MOJIBAKE_PIECES = list("abXY \n.,'09") + ["Ã©", "â€œ", "â€\x9d", "Â ", "Ã", "€", "œ", "Œ", "°", "×²", "√±", "вЂ", "à²", "ØÙ", "é", "É"]
MOJIBAKE_PIECES += ["“", "”", "’", "—", "中", "\x85", "\x9d", "ü", "µ", "¼", "¡"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(MOJIBAKE_PIECES), max_size=40).map("".join))
def test_is_bad_near_non_ascii_equals_ftfys_full_search(text) -> None:
    from corpusforge.corpora.clean import _BADNESS_WIDTH, is_bad

    assert _BADNESS_WIDTH is not None  # the installed ftfy's pattern allows the windowed search
    assert is_bad(text) == ftfy.badness.is_bad(text)
    padded = "plain ascii " * 5 + text + " more ascii" * 5  # windows away from the text's ends
    assert is_bad(padded) == ftfy.badness.is_bad(padded)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(MOJIBAKE_PIECES), max_size=60).map("".join))
def test_ftfy_repairs_the_same_with_the_windowed_check(text) -> None:
    """ftfy's repairs call the windowed ``is_bad`` (installed at import): the same text as with its own."""
    from corpusforge.corpora.clean import _FTFY, is_bad

    assert ftfy.is_bad is is_bad
    ours = ftfy.fix_text(text, _FTFY)
    ftfy.is_bad = ftfy.badness.is_bad
    try:
        assert ours == ftfy.fix_text(text, _FTFY)
    finally:
        ftfy.is_bad = is_bad


LINE_CHARACTERS = "abcXYZ 09.,;:!?'\"-()\t" + "éèçñüßØÆœ“”‘’—–…«»·°€£¥中文日本語Привет" + "\u0301\u0308"  # + combining marks


def _passed_over(line: str) -> bool:
    return clean._TOUCHED.search(line) is None and (line.isascii() or unicodedata.is_normalized("NFC", line) and not clean.is_bad(line))


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=LINE_CHARACTERS, max_size=120))
def test_lines_passed_over_are_lines_ftfy_leaves_alone(line: str) -> None:
    if _passed_over(line):
        assert ftfy.fix_text(line, _FTFY) == line


def test_each_kind_of_line_kept_for_ftfy_is_one_it_changes() -> None:
    """Why each is excluded: an entity, a carriage return, a terminal escape, a control character, a
    ligature, a wide form, a line separator, a decomposed accent, mojibake."""
    for line in [
        "Fish &amp; chips",
        "one\r\ntwo",
        "\x1b[31mred\x1b[0m",
        "nul\x00byte",
        "de\ufb01ne",
        "\uff21BC",
        "a\u2028b",
        "cafe\u0301",
        "cafÃ©",
    ]:
        assert not _passed_over(line), repr(line)
        assert ftfy.fix_text(line, _FTFY) != line, repr(line)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "plain words",
                "&amp;",
                "<b>",
                "\r",
                "\n",
                "\x1b[1m",
                "\x00",
                "Ã©",
                "â€œ",
                "é",
                "“quoted”",
                "\u2028",
                "\x85",
                " ",
                "\ufb01",
                "\uff21",
                "e\u0301",
                "中文",
                "’s —",
                "½",
                "Â ",
            ]
        ),
        max_size=40,
    )
)
def test_fix_text_is_ftfys_on_any_mix_of_lines(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert fix_text(text) == ftfy.fix_text(text, _FTFY)


def test_fix_text_is_ftfys_on_the_shared_books(shared_docs: list[Document]) -> None:
    for doc in shared_docs:
        assert fix_text(doc.text) == ftfy.fix_text(doc.text, _FTFY), doc.meta["file"]
