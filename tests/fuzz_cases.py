"""Adversarial inputs for every reader, shared by the fuzz tests (a fixed budget in CI) and bench/fuzz.py.

Each target takes one drawn case, runs the reader on it and returns the input's size in bytes; the
properties checked on it are: no exception escapes (the designed ``InputFormatError`` aside, which is
the one-line error for a file in the wrong format), counted inputs equal the records produced, and no
case takes longer than ``time_bound(size)``.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import zstandard
from hypothesis import strategies as st

from corpusforge.corpora.books import read_book
from corpusforge.corpora.decode import BinaryContentError, decode_bytes
from corpusforge.corpora.document import InputFormatError, check_accounted
from corpusforge.corpora.fetch import decode_body, decode_page
from corpusforge.corpora.gutenberg import gutenberg_title, strip_gutenberg
from corpusforge.corpora.reddit import parse_submission, read_submissions
from corpusforge.corpora.urls import Blocklist, clean_url
from corpusforge.corpora.warc import Capture, WarcFile, iter_captures
from corpusforge.corpora.wikipedia import plan_ranges, read_range
from corpusforge.corpora.wikitext import wikitext_to_text

SAMPLE_XML = Path(__file__).resolve().parents[1] / "corpusforge" / "samples" / "wikipedia" / "sample-pages-articles.xml"
CODECS: dict[str, Callable[[bytes], bytes]] = {
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
    ".xz": lzma.compress,
    ".bz2": lambda data: bz2.compress(data, compresslevel=1),
    ".gz": gzip.compress,
    ".ndjson": lambda data: data,
}
BLOCKLIST = Blocklist()


def time_bound(size: int) -> float:
    """1 s per 100 kB, plus 1 s of slack for a loaded 2-core machine."""
    return 1.0 + size / 100_000


# --- building blocks -----------------------------------------------------------------------------------------


def repeated(tokens: list[str], max_repeat: int) -> st.SearchStrategy[str]:
    """A token run long enough to expose rescanning (``'<ref>' * 4000``), or a mix of tokens."""
    return st.one_of(
        st.builds(lambda token, n: token * n, st.sampled_from(tokens), st.integers(1, max_repeat)),
        st.lists(st.sampled_from(tokens), max_size=400).map("".join),
    )


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["inf", "-inf", "nan", "1e999", "false", "true", "0", "", "https://example.com/a"]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12
)
SUBMISSION_KEYS = ["id", "url", "score", "is_self", "over_18", "title", "subreddit", "created_utc", "crosspost_parent_list"]
SUBMISSIONS = st.dictionaries(st.sampled_from(SUBMISSION_KEYS), JSON_VALUES, max_size=9)


def _json_line(value: object) -> bytes:
    return json.dumps(value, allow_nan=True, default=str).encode()


REDDIT_LINES = st.one_of(
    SUBMISSIONS.map(_json_line),
    JSON_VALUES.map(_json_line),
    st.binary(max_size=300),
    st.builds(lambda n, opener: opener * n, st.integers(1, 200_000), st.sampled_from([b"[", b'{"a":', b'{"id": "x", "url": ['])),
)

MARKUP_TOKENS = [
    "<ref>",
    "</ref>",
    "<ref name=x/>",
    '<ref name="a">',
    "</ref name=a>",
    "<math>",
    "</math>",
    "<!--",
    "-->",
    "{{",
    "}}",
    "{{{",
    "}}}",
    "{|",
    "|}",
    "|-",
    "[[",
    "]]",
    "[",
    "]",
    "[http://x.org ",
    "[[File:a.png|",
    "|",
    "\n",
    "\n=",
    "==",
    "=",
    "'''",
    "''",
    "<br/>",
    "<div ",
    ">",
    "&amp;",
    "&#x1F600;",
    "*",
    "#",
    ":",
    ";",
    " ",
    "\t",
    "a",
    "word ",
    "(",
    ")",
    ",",
    "__TOC__",
    "----",
    "[[Category:X]]",
    "[[en:X]]",
    "<gallery>",
    "</table>",
]
MARKUP = st.one_of(repeated(MARKUP_TOKENS, 20_000), st.text(max_size=2000))

GUTENBERG_LINES = [
    "*** START OF THE PROJECT GUTENBERG EBOOK X ***",
    "***START OF THIS PROJECT GUTENBERG EBOOK",
    "*** END OF THE PROJECT GUTENBERG EBOOK X ***",
    "End of Project Gutenberg's X",
    "*END*THE SMALL PRINT!",
    "Title: A Book",
    "www.gutenberg.orgTitle: Glued",
    "   continued title",
    "Produced by Someone",
    "Transcriber's Notes",
    "",
    "Chapter 1",
    "It was a dark and stormy night.",
    "***",
    "*" * 50,
]
GUTENBERG = st.one_of(
    repeated(GUTENBERG_LINES, 3000).map(lambda text: text.replace("***", "\n***")),
    st.lists(st.sampled_from(GUTENBERG_LINES), max_size=300).map("\n".join),
    st.text(max_size=2000),
)

BOOK_BYTES = st.one_of(
    st.binary(max_size=5000),
    st.builds(
        lambda text, codec: text.encode(codec, errors="replace"),
        st.text(max_size=2000),
        st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "cp1251", "shift_jis"]),
    ),
    st.builds(lambda data, n: data * n, st.binary(min_size=1, max_size=8), st.integers(1, 20_000)),
)

URL_PARTS = st.tuples(
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "//", "", "javascript:", "http:/", "www."]),
    st.one_of(
        st.sampled_from(
            [
                "example.com",
                "www.Example.COM.",
                "[::1]",
                "[::1",
                "127.0.0.1",
                "xn--nxasmq6b.com",
                "ex ample.com",
                "user:pw@host.org",
                "a" * 300 + ".com",
                "münchen.de",
                "",
                "%41.com",
            ]
        ),
        st.text(max_size=30),
    ),
    st.one_of(st.just(""), st.sampled_from([":80", ":443", ":99999", ":abc", ":-1", ":", ":0"]), st.integers().map(lambda p: f":{p}")),
    st.one_of(st.sampled_from(["/", "/a/../b/./c", "/%2F%7E", "/index.html", "/a b", "/\u00e9"]), st.text(max_size=40)),
    st.one_of(st.just(""), st.sampled_from(["?utm_source=x&b=2&a=1", "?a=%zz", "?&&=&", "?" + "a=1&" * 500]), st.text(max_size=30)),
    st.one_of(st.just(""), st.text(max_size=10).map(lambda f: "#" + f)),
)
URLS = st.one_of(URL_PARTS.map("".join), st.text(max_size=200))

CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            "text/html",
            "text/html; charset=utf-8",
            "text/html; charset=x-unknown",
            "text/html; charset=",
            'text/html;charset="latin1"',
            "application/xhtml+xml",
            "image/png",
            "",
            "text/html; charset=utf-16",
            "TEXT/HTML; CHARSET=UTF-8",
        ]
    ),
    st.text(max_size=40),
)
ENCODINGS = st.sampled_from(["", "identity", "gzip", "deflate", "br", "x-gzip", "gzip, gzip", "garbage"])
BODIES = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=2000).map(
        lambda t: f'<html><head><meta charset="{t[:10]}"></head><body><p>{t}</p></body></html>'.encode("utf-8", "replace")
    ),
    st.builds(lambda data, n: data * n, st.binary(min_size=1, max_size=8), st.integers(1, 20_000)),
)


def _encode_body(body: bytes, encoding: str, mangle: bool) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        body = gzip.compress(body)
    elif encoding == "deflate":
        body = zlib.compress(body)
    return body[: len(body) // 2] if mangle else body


CAPTURES = st.builds(
    lambda status, content_type, encoding, body, mangle, reason, url: Capture(
        url=url,
        final_url=url,
        status=status,
        reason=reason,
        body=_encode_body(body, encoding, mangle),
        headers=(("Content-Type", content_type), ("Content-Encoding", encoding)),
    ),
    st.sampled_from([200, 200, 200, 301, 404, 500, 0, 999]),
    CONTENT_TYPES,
    ENCODINGS,
    BODIES,
    st.booleans(),
    st.sampled_from(["", "", "timeout"]),
    st.sampled_from(["https://example.com/", "https://例え.jp/ページ?q=é", "http://x.org/a b\r\nX-Injected: y", ""]),
)


def _mutate(data: bytes, kind: str, where: float, payload: bytes) -> bytes:
    """Damage a file: cut it, insert or overwrite bytes, or drop a stretch, at a relative position."""
    at = int(len(data) * where)
    if kind == "cut":
        return data[:at]
    if kind == "insert":
        return data[:at] + payload + data[at:]
    if kind == "overwrite":
        return data[:at] + payload + data[at + len(payload) :]
    return data[:at] + data[at + 1 + len(payload) * 20 :]


DAMAGE = st.tuples(
    st.sampled_from(["cut", "insert", "overwrite", "drop"]),
    st.floats(0, 1),
    st.one_of(
        st.binary(min_size=1, max_size=40),
        st.sampled_from([b"\x00", b"\x01", b"<page>", b"</page>", b"</mediawiki>", b"<", b"&", b"]]>", b"<text>"]),
    ),
)


# --- targets --------------------------------------------------------------------------------------------------


def reddit_line(line: bytes) -> int:
    parse_submission(line, "RS_fuzz.zst:1")
    return len(line)


def _scratch(name: str, data: bytes) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    path = folder / name
    path.write_bytes(data)
    return path


def reddit_dump(case: tuple[list[bytes], str, float]) -> int:
    """A dump of drawn lines in one codec, cut at a drawn fraction of its compressed bytes."""
    lines, suffix, cut = case
    raw = b"\n".join(lines)
    data = CODECS[suffix](raw)
    path = _scratch(f"RS_fuzz{suffix}", data[: max(1, int(len(data) * cut))] if cut < 1 else data)
    counts: Counter[str] = Counter()
    records = []
    try:
        records.extend(read_submissions(path, counts))
    except InputFormatError:
        return len(raw)  # the designed one-line error: no line is a submission
    finally:
        path.unlink()
        path.parent.rmdir()
    check_accounted("webtext", counts, len(records))
    return len(raw)  # the time bound is on the bytes read, not their compressed size


def wikipedia_dump(case: tuple[tuple[str, float, bytes], bool]) -> int:
    """The bundled sample dump, damaged once, plain or bz2."""
    (kind, where, payload), compress = case
    data = _mutate(SAMPLE_XML.read_bytes(), kind, where, payload)
    path = _scratch("fuzz.xml.bz2" if compress else "fuzz.xml", bz2.compress(data) if compress else data)
    counts: Counter[str] = Counter()
    try:
        records = [x for r in plan_ranges(path) for x in read_range(r, counts=counts)]
    except ValueError as error:  # plan_ranges: an empty file is a clear error before reading
        assert "empty" in str(error)
        return 0
    finally:
        path.unlink()
        path.parent.rmdir()
    check_accounted("wikipedia", counts, len(records))
    return len(data)


def wikitext(markup: str) -> int:
    wikitext_to_text(markup)
    return len(markup.encode("utf-8", "replace"))


def gutenberg(text: str) -> int:
    strip_gutenberg(text)
    gutenberg_title(text)
    return len(text.encode("utf-8", "replace"))


def book_bytes(data: bytes) -> int:
    try:
        decode_bytes(data)
    except BinaryContentError:
        pass
    path = _scratch("book.txt", data)
    try:
        record = read_book(path, path.parent)
    finally:
        path.unlink()
        path.parent.rmdir()
    assert record.id
    return len(data)


def url(raw: str) -> int:
    cleaned = clean_url(raw)
    if cleaned is not None:
        BLOCKLIST.blocked_domain(cleaned.host)
        BLOCKLIST.blocked_extension(cleaned.fetch)
        assert clean_url(cleaned.fetch) is not None
    return len(raw.encode("utf-8", "replace"))


def warc(case: tuple[list[Capture], tuple[str, float, bytes]]) -> int:
    """A WARC of drawn captures, damaged once."""
    captures, (kind, where, payload) = case
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    path = folder / "fuzz.warc.gz"
    try:
        with WarcFile(path) as out:
            for capture in captures:
                out.write(capture)
        path.write_bytes(_mutate(path.read_bytes(), kind, where, payload))
        counts: Counter[str] = Counter()
        records = list(iter_captures(path, counts=counts))
        check_accounted("webtext", counts, len(records))
        return path.stat().st_size
    finally:
        path.unlink(missing_ok=True)
        folder.rmdir()


def page(capture: Capture) -> int:
    text, reason = decode_page(capture, max_decoded=200_000)
    assert (text is None) == bool(reason)
    decoded, _ = decode_body(capture, 200_000)
    return max(len(capture.body), len(decoded or b""))


TARGETS: dict[str, tuple[st.SearchStrategy, Callable]] = {
    "reddit line": (REDDIT_LINES, reddit_line),
    "reddit dump": (st.tuples(st.lists(REDDIT_LINES, max_size=12), st.sampled_from(sorted(CODECS)), st.floats(0, 1)), reddit_dump),
    "wikipedia xml": (st.tuples(DAMAGE, st.booleans()), wikipedia_dump),
    "wikitext": (MARKUP, wikitext),
    "gutenberg": (GUTENBERG, gutenberg),
    "book decode": (BOOK_BYTES, book_bytes),
    "url": (URLS, url),
    "warc": (st.tuples(st.lists(CAPTURES, min_size=1, max_size=4), DAMAGE), warc),
    "decode_page": (CAPTURES, page),
}
