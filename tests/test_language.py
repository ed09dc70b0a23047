"""The vectorised language identifier gives py3langid's own verdicts, bit for bit."""

from __future__ import annotations

import bz2
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from corpusforge.corpora.language import CONTEXT, _identifier, context_bytes


@pytest.fixture(scope="module")
def reference() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def test_the_dfa_forgets_all_but_its_last_context_bytes(reference: LanguageIdentifier) -> None:
    """A proof over the installed model's whole transition table, which the vectorised walk relies on;
    one byte fewer is not enough (the proof can fail)."""
    assert context_bytes(reference) == CONTEXT
    assert context_bytes(reference, most=CONTEXT - 1) is None


def test_states_are_those_of_the_byte_by_byte_walk() -> None:
    identifier = _identifier()
    data = "Überraschung: naïve café, 東京 and Ελληνικά, SHOUTING ".encode() * 20
    walked, state = [], 0
    for byte in data:
        state = identifier.tk_nextmove[(identifier.tk_row[state] << 8) + byte]
        walked.append(state)
    assert np.array_equal(identifier.states(data), walked)


def _shared_texts(shared_data: Path) -> list[str]:
    """4 KB slices of the shared books (English and French), the Wikipedia excerpt's markup and web pages."""
    texts = []
    for path in sorted((shared_data / "books").glob("*/*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts += [text[i : i + 4000] for i in range(0, len(text), 97_000)]
    wiki = shared_data / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    markup = bz2.open(wiki, "rt", encoding="utf-8").read(2_000_000)
    texts += [markup[i : i + 4000] for i in range(0, len(markup), 4000)]
    return texts


def test_same_verdicts_and_scores_as_py3langid_on_shared_text(shared_data: Path, reference: LanguageIdentifier) -> None:
    fast = _identifier()
    texts = _shared_texts(shared_data)
    assert len(texts) > 400
    for text in texts:
        assert fast.classify(text) == reference.classify(text)
    for text in texts[::25]:
        assert fast.rank(text) == reference.rank(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_same_verdicts_on_any_text(reference: LanguageIdentifier, text: str) -> None:
    assert _identifier().classify(text) == reference.classify(text)


def test_texts_classified_together_as_one_at_a_time(shared_data: Path, reference: LanguageIdentifier) -> None:
    """``classify_many`` (features of the short texts counted in one walk and one sort) decides as py3langid does
    text by text: shared text cut into pages of every length up to past the batching limit, and edge cases."""
    rng = random.Random(3)
    pages = []
    for text in _shared_texts(shared_data)[::3]:
        at = rng.randrange(len(text))
        pages.append(text[at : at + rng.choice([0, 1, 5, 60, 400, 1500, 2100, 4000])])
    pages += ["", "\x00\x01", "  ", "SHOUTING", "日本語のテキストです"]
    rng.shuffle(pages)
    assert _identifier().classify_many(pages) == [reference.classify(page) for page in pages]
    assert _identifier().classify_many([]) == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")), max_size=8))
def test_any_texts_classified_together_as_one_at_a_time(reference: LanguageIdentifier, texts: list[str]) -> None:
    assert _identifier().classify_many(texts) == [reference.classify(text) for text in texts]


def test_edge_cases(reference: LanguageIdentifier) -> None:
    rng = random.Random(7)
    noise = "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(2000))
    for text in ["", "a", "ab", "SHOUTING IN CAPITALS", "\x00\x00\x00", "  ", noise, "é" * 3]:
        assert _identifier().classify(text) == reference.classify(text), repr(text[:20])
