"""Books source: a directory of plain-text and EPUB books, one ``Document`` per book.

BERT pre-training takes its next-sentence pairs from long contiguous documents, so a book is
never split into smaller documents. Hard-wrapped lines are joined into paragraphs and paragraphs
are separated by one blank line, the project-wide text convention. A file that cannot be read
or parsed becomes a ``Reject`` (``read_error``, ``decode_error``, ``parse_error``, ``empty``)
so the pipeline can account for every input file; nothing here raises on bad content.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence

from tqdm import tqdm

from corpusforge.core import storage
from corpusforge.corpora.clean import collapse_spaces
from corpusforge.corpora.decode import BinaryContentError, decode_bytes
from corpusforge.corpora.document import Document, Reject, count_input, make_id
from corpusforge.corpora.gutenberg import gutenberg_title, strip_gutenberg

SOURCE = "books"
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\f\v]*\n")
# Leaf block elements of XHTML: each one is a paragraph of the book.
_BLOCK_TAGS = ("p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "blockquote", "pre", "dd", "dt", "td", "th", "figcaption")


def list_book_files(root: storage.PathLike, extensions: Sequence[str] = (".txt", ".epub"), counts: Counter[str] | None = None) -> list[str]:
    """Every book file under ``root`` (or ``root`` itself if it is a file), sorted by relative path and
    spelled from ``root`` as given (``read_book`` keys a book by its path below it); each file listed
    counts one into ``counts["inputs"]`` (a book is one input)."""
    return [path for path, _ in list_book_sizes(root, extensions, counts)]


def list_book_sizes(
    root: storage.PathLike, extensions: Sequence[str] = (".txt", ".epub"), counts: Counter[str] | None = None
) -> list[tuple[str, int]]:
    """``list_book_files`` with each file's size in bytes (what groups small books into one read task)."""
    root = os.fspath(root)
    wanted = tuple(ext.lower() for ext in extensions)
    if not storage.exists(root):
        raise FileNotFoundError(f"books path does not exist: {root}")
    if storage.is_file(root):
        files = [(root, storage.size(root))] if storage.name(root).lower().endswith(wanted) else []
    else:
        top = storage.resolve(root)
        files = [
            (storage.join(root, storage.relative(p, top)), size)
            for p, size in storage.sized_files_under(top)
            if storage.name(p).lower().endswith(wanted)
        ]
    if not files:
        raise ValueError(f"no book files with extensions {', '.join(wanted)} under {root}")
    count_input(counts, len(files))
    return files


def read_books(
    root: storage.PathLike,
    extensions: Sequence[str] = (".txt", ".epub"),
    progress: bool = False,
    counts: Counter[str] | None = None,
) -> Iterator[Document | Reject]:
    """One Document (or Reject) per book file under ``root``, in sorted path order; the files listed
    are counted into ``counts["inputs"]``."""
    for path in tqdm(list_book_files(root, extensions, counts), desc="books", unit="file", disable=not progress):
        yield read_book(path, root)


def read_book(path: storage.PathLike, root: storage.PathLike) -> Document | Reject:
    """Read one ``.txt`` or ``.epub`` book; bad files become a Reject, never an exception."""
    path, root = os.fspath(path), os.fspath(root)
    key = storage.name(path) if root == path or storage.is_file(root) else storage.relative(path, root)
    doc_id = make_id(SOURCE, key)
    try:
        data = storage.read_bytes(path)
    except OSError as error:
        return Reject(doc_id, SOURCE, "read_error", f"{type(error).__name__}: {error}", key)
    stem, suffix = os.path.splitext(storage.name(path))
    if suffix.lower() == ".epub":
        try:
            title, text = _epub_text(data)
        except Exception as error:  # noqa: BLE001 - any malformed EPUB (zip, XML, OPF) is a parse error
            return Reject(doc_id, SOURCE, "parse_error", f"{type(error).__name__}: {error}", key)
    else:
        try:
            raw = decode_bytes(data)
        except BinaryContentError as error:
            return Reject(doc_id, SOURCE, "decode_error", str(error), key)
        title, text = gutenberg_title(raw), unwrap_paragraphs(strip_gutenberg(raw))
    if not text:
        return Reject(doc_id, SOURCE, "empty", "no text after removing boilerplate", key)
    return Document(id=doc_id, source=SOURCE, title=title or stem, text=text, meta={"file": key})


def unwrap_paragraphs(text: str) -> str:
    """Join hard-wrapped lines into paragraphs; paragraphs separated by exactly one blank line."""
    paragraphs = (collapse_spaces(block) for block in _PARAGRAPH_BREAK.split(text))
    return "\n\n".join(p for p in paragraphs if p)


def _epub_text(data: bytes) -> tuple[str | None, str]:
    """Title and paragraphs of an EPUB, documents in spine (reading) order."""
    from ebooklib import ITEM_DOCUMENT, epub  # here: with BeautifulSoup, 0.2-0.3 s of every process that reads books

    with warnings.catch_warnings():  # ebooklib warns about its own future defaults on every read
        warnings.simplefilter("ignore")
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    titles = book.get_metadata("DC", "title")
    paragraphs: list[str] = []
    for item_id, _linear in book.spine:
        item = book.get_item_with_id(item_id)
        if item is not None and item.get_type() == ITEM_DOCUMENT:
            paragraphs.extend(_html_paragraphs(item.get_content()))
    return (titles[0][0].strip() if titles else None), "\n\n".join(paragraphs)


def _html_paragraphs(content: bytes) -> Iterator[str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(content, "lxml")
    for br in soup.find_all("br"):
        br.replace_with(" ")
    body = soup.body or soup
    for block in body.find_all(_BLOCK_TAGS):
        if block.find(_BLOCK_TAGS) is None:  # leaf blocks only, so nested text is not repeated
            text = " ".join(block.get_text().split())
            if text:
                yield text
