"""Books source: decoding, Gutenberg stripping, paragraph unwrapping, EPUB, rejects, the bundled sample."""

from __future__ import annotations

import codecs
import os
import re
from pathlib import Path

import pytest
from ebooklib import epub
from hypothesis import given, settings
from hypothesis import strategies as st

from corpusforge.corpora.books import list_book_files, read_book, read_books, unwrap_paragraphs
from corpusforge.corpora.decode import BinaryContentError, decode_bytes
from corpusforge.corpora.document import Document, Reject, make_id
from corpusforge.corpora.gutenberg import gutenberg_title, strip_gutenberg

BOILERPLATE = re.compile(r"project gutenberg|gutenberg-tm|gutenberg™|www\.gutenberg", re.IGNORECASE)


@pytest.fixture(scope="module")
def shared_books(shared_data: Path) -> dict[str, Document | Reject]:
    root = shared_data / "books"
    return {record.key if isinstance(record, Reject) else record.meta["file"]: record for record in read_books(root)}


def test_every_shared_book_is_one_clean_document(shared_books: dict[str, Document | Reject]) -> None:
    assert len(shared_books) == 27
    for name, doc in shared_books.items():
        assert isinstance(doc, Document), (name, doc)
        assert doc.id == make_id("books", name) and doc.meta == {"file": name}
        head, tail = doc.text[:5000], doc.text[-5000:]
        assert not BOILERPLATE.search(head), (name, BOILERPLATE.search(head))
        assert not BOILERPLATE.search(tail), (name, BOILERPLATE.search(tail))
        assert not re.search(r"(START|END) OF TH(E|IS) PROJECT", doc.text, re.IGNORECASE)
        assert "\n\n\n" not in doc.text and "\r" not in doc.text
        assert len(doc.text.split()) > 3000  # a whole book (A Modest Proposal is the shortest), not a fragment


@pytest.mark.parametrize(
    ("name", "title", "opening", "ending"),
    [
        (
            "en/Pride_and_Prejudice_JaneAusten.txt",
            "Pride and Prejudice",
            "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
            "had been the means of uniting them.",
        ),
        ("en/2701-0.txt", "Moby Dick; or The Whale", "Call me Ishmael.", "only found another orphan."),
        (
            "en/11-0.txt",
            "Alice’s Adventures in Wonderland",
            "Alice was beginning to get very tired of sitting by her sister on the bank,",
            "and the happy summer days.\n\nTHE END",
        ),
        (
            "en/98-0.txt",
            "A Tale of Two Cities A Story of the French Revolution",
            "It was the best of times, it was the worst of times,",
            "than I have ever known.”",
        ),
        (
            "en/43-0.txt",
            "The Strange Case Of Dr. Jekyll And Mr. Hyde",  # start marker wrapped over two lines
            "Mr. Utterson the lawyer was a man of a rugged countenance",
            "unhappy Henry Jekyll to an end.",
        ),
        (
            "en/308-0.txt",
            "Three Men in a Boat (to say nothing of the dog)",  # ***START OF THE ...*** variant
            "There were four of us—George, and William Samuel Harris, and myself,",
            "not going to be idiot enough to advertise.",
        ),
        ("fr/Candide.txt", "Candide", "Il y avait en Vestphalie", "FIN DE CANDIDE."),
    ],
)
def test_known_books_keep_their_real_text(shared_books, name: str, title: str, opening: str, ending: str) -> None:
    doc = shared_books[name]
    assert doc.title == title
    assert opening in doc.text
    assert doc.text.endswith(ending)


def test_credits_after_the_start_marker_are_dropped(shared_books) -> None:
    assert "Produced by" not in shared_books["en/120-0.txt"].text[:2000]
    assert "Transcribed from" not in shared_books["en/829-0.txt"].text[:2000]
    assert "gallica" not in shared_books["fr/Candide.txt"].text[:5000]


def test_book_without_markers_is_kept_whole() -> None:
    text = "A plain book.\n\nIt has no Gutenberg header at all.\n\nThe end."
    assert strip_gutenberg(text) == text
    assert gutenberg_title(text) is None


def test_old_small_print_header_and_footer_variants() -> None:
    text = (
        "The Project Gutenberg Etext of Old Book\n\nLegal small print here.\n"
        "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n"
        "Produced by A Volunteer\n\nThe real first line.\n\nThe real last line.\n\n"
        "End of The Project Gutenberg Etext of Old Book\n\nMore license text.\n"
    )
    assert strip_gutenberg(text) == "The real first line.\n\nThe real last line."


def test_title_header_joins_continuation_lines() -> None:
    text = "Title: The Long Title\n       Of A Book\n\nAuthor: Someone\n\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\nBody.\n"
    assert gutenberg_title(text) == "The Long Title Of A Book"
    assert strip_gutenberg(text) == "Body."


def test_unwrapping_joins_lines_and_keeps_paragraphs() -> None:
    wrapped = "The first paragraph is\nwrapped over   three\nlines.\n\n\n\n  The second one\n  is indented.\n \nThird.\n"
    assert unwrap_paragraphs(wrapped) == "The first paragraph is wrapped over three lines.\n\nThe second one is indented.\n\nThird."


# Every kind of character the shortcut's proof turns on: spaces, line breaks, the other whitespace str.split
# cuts at (tab, NBSP, separators, \x1c), non-printable non-space characters, and plain letters.
BLOCK_CHARS = list("ab .,") + [
    "\n",
    "\t",
    "\r",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\xa0",
    "\u2003",
    "\u2028",
    "\u3000",
    "\x00",
    "\u200b",
    "é",
]


@given(st.lists(st.sampled_from(BLOCK_CHARS), max_size=40).map("".join))
@settings(max_examples=500, deadline=None)
def test_unwrapping_collapses_whitespace_exactly_as_split_and_join(text: str) -> None:
    from corpusforge.corpora.books import _PARAGRAPH_BREAK

    want = "\n\n".join(p for p in (" ".join(block.split()) for block in _PARAGRAPH_BREAK.split(text)) if p)
    assert unwrap_paragraphs(text) == want


def test_no_whitespace_but_the_space_is_printable() -> None:
    """What the unwrapping shortcut's proof rests on, over all of Unicode."""
    import sys

    assert [c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace() and c.isprintable()] == [" "]


@pytest.mark.parametrize(
    "encode",
    [
        lambda t: t.encode("utf-8"),
        lambda t: codecs.BOM_UTF8 + t.replace("\n", "\r\n").encode("utf-8"),
        lambda t: t.encode("latin-1"),
        lambda t: t.encode("cp1252"),
        lambda t: t.encode("utf-16"),  # with BOM
        lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"),
        lambda t: t.replace("\n", "\r").encode("utf-8"),  # old Mac line endings
        lambda t: t.encode("utf-32"),
        lambda t: t.encode("utf-16-le"),  # no BOM: recognised by its NUL pattern
    ],
)
def test_decode_bytes_handles_encodings_and_line_endings(encode) -> None:
    text = "Hélène and François met Zoë at the café.\nNaïve señor Núñez paid.\n\nÀ bientôt, Jérôme!\n" * 3
    assert decode_bytes(encode(text)) == text


@pytest.mark.parametrize("junk", [os.urandom(4096), b"PK\x03\x04" + bytes(range(256)) * 8, b"text\x00\x00\x01\x02 more"])
def test_binary_junk_is_rejected(tmp_path: Path, junk: bytes) -> None:
    with pytest.raises(BinaryContentError):
        decode_bytes(junk)
    (tmp_path / "junk.txt").write_bytes(junk)
    record = read_book(tmp_path / "junk.txt", tmp_path)
    assert isinstance(record, Reject) and record.reason == "decode_error" and record.key == "junk.txt"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_decode_bytes_never_raises_anything_else(data: bytes) -> None:
    try:
        text = decode_bytes(data)
    except BinaryContentError:
        return
    assert "\r" not in text


@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=300))
def test_decode_bytes_round_trips_utf8_and_utf16(text: str) -> None:
    assert decode_bytes(text.encode("utf-8")) == text
    assert decode_bytes(text.encode("utf-16")) == text


def test_unreadable_and_broken_files_become_rejects(tmp_path: Path) -> None:
    (tmp_path / "gone.txt").symlink_to(tmp_path / "missing-target.txt")
    record = read_book(tmp_path / "gone.txt", tmp_path)
    assert isinstance(record, Reject) and record.reason == "read_error"
    (tmp_path / "broken.epub").write_bytes(b"PK\x03\x04 not really a zip")
    record = read_book(tmp_path / "broken.epub", tmp_path)
    assert isinstance(record, Reject) and record.reason == "parse_error"
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    record = read_book(tmp_path / "blank.txt", tmp_path)
    assert isinstance(record, Reject) and record.reason == "empty"


def test_empty_or_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no book files"):
        list_book_files(tmp_path)
    (tmp_path / "notes.md").write_text("not a book")
    with pytest.raises(ValueError, match="no book files"):
        list(read_books(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list_book_files(tmp_path / "nowhere")


def test_listing_is_recursive_sorted_and_case_insensitive(tmp_path: Path) -> None:
    for name in ["b/z.txt", "a.TXT", "b/a.epub", "c.md", "b/y.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    files = list_book_files(tmp_path)
    assert [os.path.relpath(p, tmp_path) for p in files] == ["a.TXT", "b/a.epub", "b/y.txt", "b/z.txt"]
    assert list_book_files(tmp_path, [".txt"]) == [str(tmp_path / "a.TXT"), str(tmp_path / "b/y.txt"), str(tmp_path / "b/z.txt")]


def _write_epub(path: Path) -> None:
    book = epub.EpubBook()
    book.set_identifier("corpusforge-test")
    book.set_title("The Test Voyage")
    book.set_language("en")
    one = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    one.content = (
        "<html><body><h1>Chapter One</h1><p>The ship left <i>at</i> dawn.<br/>Nobody waved.</p>"
        "<div><p>A nested paragraph.</p><blockquote>A quoted line.</blockquote></div></body></html>"
    )
    two = epub.EpubHtml(title="Two", file_name="two.xhtml", lang="en")
    two.content = "<html><body><h2>Chapter Two</h2><ul><li>First item.</li><li>Second item.</li></ul></body></html>"
    book.add_item(one)
    book.add_item(two)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = [two, one]  # reading order differs from file order on purpose
    epub.write_epub(str(path), book)


def test_epub_round_trip_in_spine_order(tmp_path: Path) -> None:
    _write_epub(tmp_path / "voyage.epub")
    doc = read_book(tmp_path / "voyage.epub", tmp_path)
    assert isinstance(doc, Document)
    assert doc.title == "The Test Voyage" and doc.meta == {"file": "voyage.epub"}
    assert doc.text.split("\n\n") == [
        "Chapter Two",
        "First item.",
        "Second item.",
        "Chapter One",
        "The ship left at dawn. Nobody waved.",
        "A nested paragraph.",
        "A quoted line.",
    ]


def test_bundled_sample_books(samples: Path) -> None:
    records = list(read_books(samples / "books"))
    docs = {r.meta["file"]: r for r in records if isinstance(r, Document)}
    assert len(docs) == len(records) == len(list_book_files(samples / "books"))
    assert sum(p.stat().st_size for p in (samples / "books").rglob("*") if p.is_file()) < 150_000
    for name, doc in docs.items():
        assert "\r" not in doc.text and "\ufeff" not in doc.text and not BOILERPLATE.search(doc.text), name
    texts = [doc.text for doc in docs.values()]
    assert len(set(texts)) == len(texts) - 1  # exactly one duplicate copy
    raw = {p.name: p.read_bytes() for p in (samples / "books").rglob("*.txt")}
    assert any(data.startswith(codecs.BOM_UTF8) and b"\r\n" in data for data in raw.values())
    latin1 = [name for name, data in raw.items() if "é".encode("latin-1") in data and b"\xc3" not in data]
    assert latin1 and "é" in next(d.text for d in docs.values() if d.meta["file"].endswith(latin1[0]))
    assert sum(b"*** START OF THE PROJECT GUTENBERG EBOOK" in data for data in raw.values()) >= 2
