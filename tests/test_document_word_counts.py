"""``document_files.word_counts``: the recount's and the report's words per document, exactly ``len(text.split())``."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from corpusforge.corpora.document_files import _WIDE_LEAD, _WIDE_SPACES, word_counts

SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
NEAR_SPACES = [
    "\u00a1",
    "\u00bf",
    "\u00e0",
    "\u200b",
    "\u180e",
    "\ufeff",
    "\u2060",
    "\u00ad",
    "\u2010",
    "\u3001",
    "\u0080",
    "\u00c2",
    "é",
    "日",
    "😀",
]


def expected(texts: list[str | None]) -> list[int | None]:
    return [None if text is None else len(text.split()) for text in texts]


def test_every_python_space_is_counted_as_one() -> None:
    """Each of Python's whitespace characters (the 29 of 3.11) separates words, alone, doubled, or at either end;
    and characters that look like spaces or share their first UTF-8 byte do not."""
    texts = [f"a{space}b" for space in SPACES] + [f"{space}a{space}{space}b{space}" for space in SPACES]
    texts += [f"a{other}b" for other in NEAR_SPACES] + [f"{other}" for other in NEAR_SPACES]
    assert word_counts(pa.chunked_array([pa.array(texts)])).to_pylist() == expected(texts)
    assert [space.decode() for space in _WIDE_SPACES] == [space for space in SPACES if not space.isascii()]  # the module's list is Python's
    assert {len(space) for space in _WIDE_SPACES} == {2, 3} and all(space[0] >= _WIDE_LEAD for space in _WIDE_SPACES)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.text(alphabet=st.sampled_from([*SPACES, *NEAR_SPACES, "a", "b", "."]), max_size=30)), max_size=12),
    st.integers(0, 4),
    st.booleans(),
)
def test_counts_are_python_split_over_chunks_slices_and_nulls(texts: list[str | None], cut: int, large: bool) -> None:
    array = pa.array(texts, type=pa.large_string() if large else pa.string())
    chunks = pa.chunked_array([array[min(cut, len(texts)) :], array[: min(cut, len(texts))], array[1:-1]], type=array.type)
    want = expected(texts[min(cut, len(texts)) :]) + expected(texts[: min(cut, len(texts))]) + expected(texts[1:-1])
    assert word_counts(chunks).to_pylist() == want
    assert word_counts(chunks).type == pa.int32()


def test_counts_are_python_split_on_the_shared_books(shared_data: Path) -> None:
    """Real text in English and French (curly quotes, dashes and accents all start with the wide spaces' bytes)."""
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in sorted((shared_data / "books").glob("*/*.txt"))[:6]]
    texts += [paragraph for text in texts for paragraph in text.split("\n\n")[:200]]
    assert sum(expected(texts)) > 100_000
    assert word_counts(pa.chunked_array([pa.array(texts)])).to_pylist() == expected(texts)
