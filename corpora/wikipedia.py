"""Read MediaWiki XML dumps (plain, bz2, or bz2 multistream) into Documents and Rejects.

A multistream dump is many bz2 streams concatenated, with an index of the byte offset of
every stream; ``plan_ranges`` cuts it at stream boundaries so that Beam reads one dump on
many workers, and ``read_range`` streams one range with bounded memory. Every ``<page>`` read
becomes exactly one Document or Reject, and a corrupt or truncated file ends in one
``corrupt_input`` Reject after the pages read before the damage, never an exception. (A
plain XML file cut exactly between two pages loses nothing read and reads as complete.)

Ids are ``make_id("wikipedia", f"{dbname}:{page_id}")`` with the ``<dbname>`` of the dump's
siteinfo (e.g. ``enwiki``), so they survive renaming the file; a dump without siteinfo falls
back to the file name without its suffixes.
"""

from __future__ import annotations

import bz2
import html
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import BinaryIO, Literal

from corpusforge.core import storage
from corpusforge.corpora.document import Document, Reject, count_input, make_id
from corpusforge.corpora.wikitext import MarkupTimeout, wikitext_to_text

SOURCE = "wikipedia"
READ_BYTES = 1 << 20
PAGE_BUDGET_S = 10.0  # one page's markup conversion; the converter is linear, this bounds the rest
DAMAGED_HEAD_BYTES = 64 * 1024  # of a broken page, read for its id and title
MAX_PROLOGUE_BYTES = 16 << 20  # a dump's header (siteinfo) is a few KB

# Templates that mark a disambiguation page (English and a few localized names).
_DISAMBIGUATION = re.compile(
    r"\{\{\s*(?:disambig\w*|dab|disamb|hndis|geodis|numberdis|mil-unit-dis|[\w -]*disambiguation"
    r"|trang định hướng|định hướng|пояснителна страница|неоднозначность|многозначность"
    r"|begriffsklärung|homonymie|desambiguación|desambiguação|disambigua)\s*[|}]",
    re.I,
)
_PAGE_ID = re.compile(rb"<id>\s*(\d+)\s*</id>")
_TITLE = re.compile(rb"<title>([^<]*)")  # no "</title>" needed: a broken page is named too
_ENCODING = re.compile(rb"""encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


@dataclass(frozen=True, slots=True)
class DumpRange:
    """A slice of one dump that one worker reads: a whole file, or whole bz2 streams."""

    path: str
    start: int = 0
    end: int | None = None  # exclusive byte offset; None = end of file
    kind: Literal["plain", "bz2", "multistream"] = "plain"


@dataclass(slots=True)
class _SiteInfo:
    key: str  # id namespace: siteinfo dbname, else the file stem
    url_base: str  # "https://en.wikipedia.org/wiki/"
    media_prefixes: set[str] = field(default_factory=set)  # localized File: / Category: names


MIN_RANGES = 32  # byte ranges a multistream dump is read in at least (when it has that many streams)


def plan_ranges(
    path: storage.PathLike, index_path: storage.PathLike | None = None, streams_per_range: int = 100, min_ranges: int = MIN_RANGES
) -> list[DumpRange]:
    """Byte ranges that together cover a dump; many only for a multistream dump with its index.

    A range is ``streams_per_range`` streams, or fewer when that would give under ``min_ranges``
    ranges: a dump of a few hundred streams is still read by every worker, not by three of them.
    """
    path = os.fspath(path)
    if not storage.is_file(path):
        raise FileNotFoundError(f"Wikipedia dump not found: {path}")
    if storage.size(path) == 0:
        raise ValueError(f"Wikipedia dump is empty: {path}")
    if streams_per_range < 1:
        raise ValueError(f"streams_per_range must be >= 1, got {streams_per_range}")
    if not _is_bz2(path):
        return [DumpRange(path, 0, None, "plain")]
    index_path = os.fspath(index_path) if index_path is not None else _find_index(path)
    if index_path is None:
        return [DumpRange(path, 0, None, "bz2")]
    if not storage.is_file(index_path):
        raise FileNotFoundError(f"multistream index not found: {index_path}")
    offsets = read_stream_offsets(index_path)
    if not offsets:
        raise ValueError(f"multistream index has no entries: {index_path}")
    starts = offsets[:: min(streams_per_range, max(1, len(offsets) // min_ranges))]
    ends: list[int | None] = [*starts[1:], None]
    return [DumpRange(path, start, end, "multistream") for start, end in zip(starts, ends)]


def read_stream_offsets(index_path: storage.PathLike) -> list[int]:
    """Sorted distinct stream offsets of a ``offset:page_id:title`` index (bz2 or plain)."""
    compressed = _is_bz2(index_path)
    with storage.open_file(index_path, "rb") as raw, bz2.BZ2File(raw) if compressed else nullcontext(raw) as f:
        return sorted({int(line.split(b":", 1)[0]) for line in f if line.strip()})


def read_range(
    r: DumpRange,
    *,
    keep_headings: bool = True,
    drop_disambiguation: bool = True,
    page_budget_s: float | None = PAGE_BUDGET_S,
    counts: Counter[str] | None = None,
) -> Iterator[Document | Reject]:
    """Documents (namespace 0 articles) and Rejects for every page in the range, in file order.

    Each ``</page>`` read, each page the XML breaks in (``malformed_xml``, reading resumes at the
    next ``<page>``) and a damaged or cut end (``corrupt_input``) counts one into ``counts["inputs"]``.
    """
    reader = _RangeReader(
        r, partial(_page, keep_headings=keep_headings, drop_disambiguation=drop_disambiguation, budget_s=page_budget_s), counts
    )
    try:
        yield from reader.records()
    except (OSError, EOFError, ET.ParseError, ValueError, LookupError) as error:
        count_input(counts)
        key = f"{r.path}@{r.start}"
        yield Reject(make_id(SOURCE, f"{key}:corrupt"), SOURCE, "corrupt_input", _describe(error), r.path)


class _RangeReader:
    """One pass of an XML pull parser over a range. The raw bytes of the page being parsed are kept
    (with the offsets of the ``<page>`` tags seen), so that when the XML breaks inside a page, that
    page becomes one reject and a fresh parser resumes at the next ``<page>``, primed with the
    dump's own prologue (declaration, root element, siteinfo) for its encoding and namespaces."""

    def __init__(self, r: DumpRange, convert: Callable[[ET.Element, _SiteInfo], Document | Reject], counts: Counter[str] | None) -> None:
        self.r, self.convert, self.counts = r, convert, counts
        self.site: _SiteInfo | None = None
        self.head = b""  # the document's first bytes: its BOM or XML declaration
        self.codec = "utf-8"
        self.marker = b"<page>"
        self.buffer = bytearray()  # raw bytes from ``base`` on: the page in progress and what follows
        self.base = 0
        self.fed = 0  # offset up to which the current parser was fed
        self.starts: deque[int] = deque()  # offsets of <page> tags whose page has not ended yet
        self.prologue: bytes | None = None  # the bytes before the first <page>, once seen
        self.damaged: tuple[int, bytes, ET.ParseError] | None = None  # a broken page: offset, head, error
        self._new_parser()

    def _new_parser(self) -> None:
        self.parser = ET.XMLPullParser(events=("start", "end"))
        self.root: ET.Element | None = None
        self.depth = 0
        self.closed = False

    def records(self) -> Iterator[Document | Reject]:
        for chunk in _xml_chunks(self.r):
            if not self.head:
                self.head = chunk[:512]
                self.codec = _byte_codec(self.head)
                self.marker = "<page>".encode(self.codec)
            self._take(chunk)
            yield from self._advance()
        if self.damaged is not None:  # the broken page runs to the end of the data
            yield self._damaged_reject(len(self.buffer) + self.base)
            return
        if self.depth > 1:
            raise EOFError("the XML ends inside a page (truncated dump)")
        if not self.closed:  # a multistream range (or a dump) that ends between two pages
            self.parser.feed(_closing_tag(self.root, self.head))
        self.parser.close()
        yield from self._events()

    def _take(self, chunk: bytes) -> None:
        """Append raw bytes, noting every <page> tag (also one split across two chunks)."""
        search = max(self.base + len(self.buffer) - len(self.marker) + 1, self.base)
        self.buffer += chunk
        while (found := self.buffer.find(self.marker, search - self.base)) >= 0:
            self.starts.append(self.base + found)
            if self.prologue is None:
                self.prologue = bytes(self.buffer[:found]) if self.base == 0 else b""
            search = self.base + found + len(self.marker)

    def _advance(self) -> Iterator[Document | Reject]:
        while True:
            if self.damaged is not None:
                resume = next((start for start in self.starts if start > self.damaged[0]), None)
                if resume is None:  # skip on: the next <page> is further on
                    self.fed = self.base + len(self.buffer)
                    self._trim(self.fed - len(self.marker))
                    return
                yield self._damaged_reject(resume)
                self._restart(resume)
            data = self.buffer[self.fed - self.base :]
            self.fed = self.base + len(self.buffer)
            try:
                self.parser.feed(bytes(data))
                yield from self._events()
            except ET.ParseError as error:
                if not self.prologue:  # broken before the first page: nothing to resume with
                    raise
                start = self.starts[0] if self.starts else self.fed
                head = bytes(self.buffer[start - self.base :][:DAMAGED_HEAD_BYTES])
                self.damaged = (start, head, error)
                continue
            self._trim(self.starts[0] if self.starts else self.fed - len(self.marker))
            return

    def _events(self) -> Iterator[Document | Reject]:
        for event, elem in self.parser.read_events():
            if event == "start":
                self.depth += 1
                if self.depth == 1:
                    self.root = elem
                continue
            self.depth -= 1
            name = _local(elem.tag)
            if self.depth == 0:
                self.closed = True
            elif self.depth == 1 and name == "siteinfo":
                self.site = _site_info(elem, self.root, self.r.path)
            elif self.depth == 1 and name == "page":
                if self.starts:
                    self.starts.popleft()
                count_input(self.counts)
                if self.site is None:
                    self.site = _site_info(None, self.root, self.r.path)
                yield self.convert(elem, self.site)
                self.root.clear()  # type: ignore[union-attr]  # bounded memory: drop the finished page

    def _damaged_reject(self, end: int) -> Reject:
        """One reject for the page the XML broke in, named by its id and title where readable."""
        start, head, error = self.damaged  # type: ignore[misc]
        raw = head[: end - start]
        page_id, title = _page_id_and_title(raw.decode(self.codec, errors="replace").encode("utf-8"))
        site_key = self.site.key if self.site else storage.name(self.r.path)
        count_input(self.counts)
        self.damaged = None
        return Reject(
            make_id(SOURCE, f"{site_key}:{page_id}" if page_id else f"{self.r.path}@{start}:damaged"),
            SOURCE,
            "malformed_xml",
            f"byte {start}: {_describe(error)}",
            title or f"{self.r.path}@{start}",
        )

    def _restart(self, resume: int) -> None:
        """A fresh parser primed with the prologue, fed on from the <page> at ``resume``."""
        self._new_parser()
        while self.starts and self.starts[0] < resume:
            self.starts.popleft()
        self.parser.feed(self.prologue or b"")
        for _ in self._events():  # siteinfo again; the prologue holds no page
            pass
        self._trim(resume)
        self.fed = resume

    def _trim(self, keep_from: int) -> None:
        """Drop buffered bytes before ``keep_from`` (never the ones not yet fed, nor the prologue)."""
        if self.prologue is None and len(self.buffer) < MAX_PROLOGUE_BYTES:
            return
        if self.prologue is None:
            self.prologue = b""  # no <page> in sight: too far in to resume with this prologue
        cut = min(keep_from, self.fed) - self.base
        if cut > 0:
            del self.buffer[:cut]
            self.base += cut


def _sniff_encoding(head: bytes) -> str:
    """Encoding of an XML document from its first bytes: BOM, then declaration, else UTF-8."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if head.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    if head.startswith(b"<\x00"):
        return "utf-16-le"
    if head.startswith(b"\x00<"):
        return "utf-16-be"
    match = _ENCODING.search(head.split(b"?>", 1)[0]) if head.startswith(b"<?xml") else None
    return match.group(1).decode("ascii") if match else "utf-8"


def _xml_chunks(r: DumpRange) -> Iterator[bytes]:
    """Raw XML bytes of the range; a multistream range is prefixed by the dump's first stream
    (XML declaration, ``<mediawiki>`` root with its namespace, and siteinfo)."""
    with storage.open_file(r.path, "rb") as f:
        if r.kind == "plain":
            yield from iter(lambda: f.read(READ_BYTES), b"")
        elif r.kind == "bz2":
            # not bz2.open: its read() discards what it decompressed when the data is cut
            yield from _decompress_streams(f, None)
        else:
            header, header_size = _first_stream(f)
            yield header
            start = max(r.start, header_size)  # a range at 0 would repeat the header stream
            f.seek(start)
            yield from _decompress_streams(f, None if r.end is None else r.end - start)


def _first_stream(f: BinaryIO) -> tuple[bytes, int]:
    """The dump's first bz2 stream, decompressed, and its compressed size."""
    f.seek(0)
    decompressor = bz2.BZ2Decompressor()
    parts: list[bytes] = []
    consumed = 0
    while not decompressor.eof:
        data = f.read(READ_BYTES)
        if not data:
            raise EOFError("first bz2 stream of the dump is truncated")
        consumed += len(data)
        parts.append(decompressor.decompress(data))
    return b"".join(parts), consumed - len(decompressor.unused_data)


def _decompress_streams(f: BinaryIO, limit: int | None) -> Iterator[bytes]:
    """Decompress consecutive bz2 streams from the file position, reading at most ``limit``
    bytes; a stream cut off by the end of the data raises EOFError."""
    decompressor = bz2.BZ2Decompressor()
    start = f.tell()
    fed = False  # whether the current stream has started
    remaining = limit
    pending = b""
    while True:
        if not pending:
            size = READ_BYTES if remaining is None else min(READ_BYTES, remaining)
            pending = f.read(size) if size > 0 else b""
            if remaining is not None:
                remaining -= len(pending)
            if not pending:
                break
        data, pending = pending, b""
        fed = True
        out = decompressor.decompress(data)
        if out:
            yield out
        if decompressor.eof:
            pending = decompressor.unused_data
            decompressor = bz2.BZ2Decompressor()
            fed = False
    if fed:
        raise EOFError("compressed data ended before the end of a bz2 stream")
    if remaining or f.tell() == start:
        raise EOFError(f"the dump ends before the range does at byte {f.tell()} (truncated dump)")


def _closing_tag(root: ET.Element | None, head: bytes) -> bytes:
    """The root end tag in the document's encoding (no BOM), for a multistream range that
    stops before the dump's footer."""
    name = _local(root.tag) if root is not None else "mediawiki"
    if head.startswith(b"\xfe\xff"):
        codec = "utf-16-be"
    elif head.startswith(b"\xff\xfe"):
        codec = "utf-16-le"
    else:
        codec = {"utf-8-sig": "utf-8"}.get(_sniff_encoding(head), _sniff_encoding(head))
    return f"</{name}>".encode(codec)


def _site_info(siteinfo: ET.Element | None, root: ET.Element | None, path: str) -> _SiteInfo:
    dbname = base = ""
    media: set[str] = set()
    if siteinfo is not None:
        for child in siteinfo.iter():
            name = _local(child.tag)
            if name == "dbname":
                dbname = (child.text or "").strip()
            elif name == "base":
                base = (child.text or "").strip()
            elif name == "namespace" and child.get("key") in ("6", "14") and child.text:
                media.add(child.text.strip().lower())
    if "/wiki/" in base:
        url_base = base[: base.index("/wiki/") + len("/wiki/")]
    else:
        lang = root.get("{http://www.w3.org/XML/1998/namespace}lang", "en") if root is not None else "en"
        url_base = f"https://{lang}.wikipedia.org/wiki/"
    key = dbname or storage.name(path).split(".", 1)[0]
    return _SiteInfo(key, url_base, media)


def _page(
    page: ET.Element, site: _SiteInfo, *, keep_headings: bool, drop_disambiguation: bool, budget_s: float | None
) -> Document | Reject:
    """One ``<page>`` element as a Document, or the Reject saying why it is not an article."""
    fields = {"title": "", "ns": "", "id": "", "redirect": None}
    revision: ET.Element | None = None
    for child in page:
        name = _local(child.tag)
        if name == "redirect":
            fields["redirect"] = child.get("title", "")
        elif name == "revision":
            revision = child  # pages-meta-history has many: the last is the current one
        elif name in fields:
            fields[name] = (child.text or "").strip()
    title, page_id = fields["title"], fields["id"]
    doc_id = make_id(SOURCE, f"{site.key}:{page_id}")
    wikitext, meta = _revision(revision)
    meta["page_id"] = page_id
    if fields["ns"] != "0":
        return Reject(doc_id, SOURCE, "namespace", f"ns={fields['ns']}", title)
    if fields["redirect"] is not None or wikitext.lstrip()[:9].upper() == "#REDIRECT":
        return Reject(doc_id, SOURCE, "redirect", fields["redirect"] or "", title)
    if drop_disambiguation and (_DISAMBIGUATION.search(wikitext) or title.endswith("(disambiguation)")):
        return Reject(doc_id, SOURCE, "disambiguation", "", title)
    try:
        text = wikitext_to_text(wikitext, keep_headings=keep_headings, media_prefixes=site.media_prefixes, budget_s=budget_s)
    except MarkupTimeout as error:
        return Reject(doc_id, SOURCE, "markup_timeout", str(error), title)
    except Exception as error:  # noqa: BLE001 - one bad page must never stop a dump
        return Reject(doc_id, SOURCE, "parse_error", _describe(error), title)
    if not text.strip():
        return Reject(doc_id, SOURCE, "empty", "no text after markup removal", title)
    url = site.url_base + title.replace(" ", "_")
    return Document(doc_id, SOURCE, title, text, url, meta)


def _revision(revision: ET.Element | None) -> tuple[str, dict[str, str]]:
    meta: dict[str, str] = {}
    wikitext = ""
    if revision is not None:
        for child in revision:
            name = _local(child.tag)
            if name == "id":
                meta["revision_id"] = (child.text or "").strip()
            elif name == "timestamp":
                meta["timestamp"] = (child.text or "").strip()
            elif name == "text":
                wikitext = child.text or ""
    return wikitext, meta


def _page_id_and_title(page: bytes) -> tuple[str, str]:
    id_match = _PAGE_ID.search(page)
    title_match = _TITLE.search(page)
    page_id = id_match.group(1).decode() if id_match else ""
    title = html.unescape(title_match.group(1).decode("utf-8")) if title_match else ""
    return page_id, title


def _is_bz2(path: storage.PathLike) -> bool:
    with storage.open_file(path, "rb") as f:
        return f.read(3) == b"BZh"


def _find_index(path: str) -> str | None:
    """The index the dumps publish beside a multistream file: ``X-multistream-index.txt.bz2``
    for ``X-multistream.xml.bz2`` (also ``X.xml.bz2`` -> ``X-index.txt.bz2``)."""
    name = storage.name(path)
    for suffix in (".xml.bz2", ".bz2"):
        if name.endswith(suffix):
            candidate = storage.join(storage.parent(path), name[: -len(suffix)] + "-index.txt.bz2")
            if storage.is_file(candidate):
                return candidate
    return None


def _byte_codec(head: bytes) -> str:
    """The codec the dump's bytes are in (BOM-less), for finding its ``<page>`` tags as bytes."""
    if head.startswith((b"\xfe\xff", b"\x00<")):
        return "utf-16-be"
    if head.startswith((b"\xff\xfe", b"<\x00")):
        return "utf-16-le"
    return "utf-8"  # UTF-8 and the 8-bit encodings spell ASCII tags alike


def _describe(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]
