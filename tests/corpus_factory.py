"""Distinct ~1 MB books made from paragraphs of the shared Gutenberg books, for tests and benchmarks at scale.

Paragraphs come from the books' bodies only (Project Gutenberg header, footer and licence stripped,
or the reader would rightly cut the synthetic book there); each book draws its own paragraphs with a
seeded generator, so a corpus of any size is deterministic and its books are not near-duplicates.
"""

from __future__ import annotations

import bz2
import io
import re
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Literal

import numpy as np

from corpusforge.core import storage
from corpusforge.corpora.decode import decode_bytes
from corpusforge.corpora.gutenberg import strip_gutenberg
from corpusforge.corpora.wikipedia import _is_bz2, _page_id_and_title, _sniff_encoding

_XML_DECLARATION = re.compile(rb"<\?xml[^>]*\?>\s*")


def paragraphs(books_dir: Path) -> list[str]:
    """Body paragraphs (at least 20 words) of every English book under ``books_dir``."""
    found = []
    for path in sorted(Path(books_dir).glob("en/*.txt")):
        body = strip_gutenberg(decode_bytes(path.read_bytes()))
        for block in body.split("\n\n"):
            text = " ".join(block.split())
            if len(text.split()) >= 20:
                found.append(text)
    return found


def make_books(books_dir: Path, out_dir: Path, total_bytes: int, book_bytes: int = 1 << 20, seed: int = 0) -> int:
    """Write ``out_dir/book-NNNNN.txt`` until ``total_bytes`` are written; returns the book count."""
    pool = paragraphs(books_dir)
    lengths = np.array([len(p.encode("utf-8")) + 2 for p in pool])
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = count = 0
    while written < total_bytes:
        target = min(book_bytes, total_bytes - written)
        picks = rng.integers(0, len(pool), size=int(target / lengths.mean()) + 1)
        picks = picks[np.cumsum(lengths[picks]) <= max(target, lengths[picks[0]])]
        text = f"Book {count}\n\n" + "\n\n".join(pool[i] for i in picks) + "\n"
        (out_dir / f"book-{count:05d}.txt").write_text(text, encoding="utf-8")
        written += len(text.encode("utf-8"))
        count += 1
    return count


WIKI_HEADER = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""


def make_wikipedia(books_dir: Path, out_dir: Path, total_bytes: int, page_bytes: int = 4000, seed: int = 0) -> tuple[Path, int]:
    """A bz2 multistream ``pages-articles`` dump (and its index) of distinct article pages of about
    ``page_bytes`` of wikitext each, made of book paragraphs with headings, links, bold and a category:
    many small documents, as Wikipedia has (about 6 M articles of ~3.5 KB of text), rather than a
    few large books. Returns the dump's path and the bytes of wikitext written (at least ``total_bytes``)."""
    from xml.sax.saxutils import escape

    pool = paragraphs(books_dir)
    lengths = np.array([len(p.encode("utf-8")) + 2 for p in pool])
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    xml = out_dir / "pages.xml"
    written = page_id = 0
    with open(xml, "w", encoding="utf-8") as f:
        f.write(WIKI_HEADER)
        while written < total_bytes:
            page_id += 1
            picks = rng.integers(0, len(pool), size=int(page_bytes / lengths.mean()) + 2)
            picks = picks[np.cumsum(lengths[picks]) <= max(page_bytes, lengths[picks[0]])]
            body = [f"'''Article {page_id}''' is a [[test page|page]] made for scale runs."]
            for i, pick in enumerate(picks):
                if i and i % 3 == 0:
                    body.append(f"== Section {i // 3} ==")
                body.append(pool[pick])
            body.append("[[Category:Scale runs]]")
            text = "\n\n".join(body)
            written += len(text.encode("utf-8"))
            f.write(
                f"  <page>\n    <title>Article {page_id}</title>\n    <ns>0</ns>\n    <id>{page_id}</id>\n"
                f"    <revision>\n      <id>{page_id}</id>\n      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
                f'      <text xml:space="preserve">{escape(text)}</text>\n    </revision>\n  </page>\n'
            )
        f.write("</mediawiki>\n")
    dump = out_dir / "enwiki-multistream.xml.bz2"
    build_multistream(xml, dump, out_dir / "enwiki-multistream-index.txt.bz2")
    xml.unlink()
    return dump, written


def build_multistream(src: Path, dst: Path, index: Path, pages_per_stream: int = 100) -> None:
    """Rewrite any dump as a real bz2 multistream dump (UTF-8) plus its bz2 ``offset:id:title``
    index, as Wikimedia publishes them: the header in stream one, ``pages_per_stream`` pages per
    stream, the footer last."""
    if pages_per_stream < 1:
        raise ValueError(f"pages_per_stream must be >= 1, got {pages_per_stream}")
    with storage.writing(dst) as out, storage.writing(index) as index_file, bz2.BZ2File(index_file, "wb") as index_out:
        pages: list[bytes] = []

        def flush_pages() -> None:
            offset = out.tell()
            out.write(bz2.compress(b"".join(pages)))
            for page in pages:
                page_id, title = _page_id_and_title(page)
                index_out.write(f"{offset}:{page_id}:{title}\n".encode("utf-8"))
            pages.clear()

        for part, data in _dump_parts(src):
            if part == "page":
                pages.append(data)
                if len(pages) == pages_per_stream:
                    flush_pages()
                continue
            if pages:
                flush_pages()
            out.write(bz2.compress(data))  # header or footer: a stream of its own


def _dump_parts(src: Path) -> Iterator[tuple[Literal["header", "page", "footer"], bytes]]:
    """Split a dump (any encoding, one tag per line as MediaWiki writes them) into its header,
    its ``<page>`` elements and its footer, re-encoded as UTF-8 without an XML declaration."""
    compressed = _is_bz2(src)
    with storage.open_file(src, "rb") as raw, bz2.BZ2File(raw) if compressed else nullcontext(raw) as f:
        encoding = _sniff_encoding(f.read(512))
    part: Literal["header", "page", "footer"] = "header"
    lines: list[str] = []
    with (
        storage.open_file(src, "rb") as raw,
        bz2.BZ2File(raw) if compressed else nullcontext(raw) as f,
        io.TextIOWrapper(f, encoding=encoding, newline="") as text,
    ):
        for line in text:
            stripped = line.lstrip()
            if stripped.startswith("<page>") or stripped.startswith("<page "):
                if lines and part != "page":
                    yield part, _XML_DECLARATION.sub(b"", "".join(lines).encode("utf-8"), count=1)
                    lines = []
                part = "page"
            lines.append(line)
            if part == "page" and stripped.startswith("</page>"):
                yield "page", "".join(lines).encode("utf-8")
                lines = []
                part = "footer"
    if lines:
        yield part, "".join(lines).encode("utf-8")
