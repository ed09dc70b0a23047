"""WARC capture and replay: every fetch (page or failure) is kept, so a re-run never refetches.

Responses are stored as standard ``response`` records with the raw, still content-encoded body;
failures as ``metadata`` records whose JSON payload carries the reject reason. The URL that was
asked for travels in ``WARC-Corpusforge-Request-URI`` (the target URI is the final hop), so a
replay finds a capture by the URL it would have fetched. Foreign WARCs (wget, Common Crawl) replay
by their target URI. The index can key captures canonically, so that a page captured under another
spelling (parameter order, an empty parameter, a ``#fragment``) is still found. A file appears only
once complete (``corpusforge.core.storage.writing``), at a local path or a URI.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import quote

from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import ChunkedDataReader
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from corpusforge.core import storage
from corpusforge.corpora.document import count_input

log = logging.getLogger(__name__)

REQUEST_URI = "WARC-Corpusforge-Request-URI"
FAILURE_TYPE = "application/vnd.corpusforge.failure+json"
HOP_HEADERS = {"transfer-encoding", "content-length"}  # describe the wire, not the stored body
_PRINTABLE_ASCII = "".join(map(chr, range(0x20, 0x7F)))


@dataclass(frozen=True, slots=True)
class Capture:
    """One fetch outcome. ``reason`` is empty for a response; else the reject reason."""

    url: str  # the URL asked for
    final_url: str = ""
    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""  # raw payload, still Content-Encoded
    reason: str = ""
    detail: str = ""
    ip: str = ""
    date: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    record_id: str = ""

    def header(self, name: str) -> str:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), "")


class WarcFile:
    """Append captures to ``path`` (gzip per record) inside a ``with`` block; the file appears only
    when the block ends normally (``corpusforge.core.storage.writing``)."""

    def __init__(self, path: storage.PathLike) -> None:
        self.path = os.fspath(path)
        self._stack = ExitStack()

    def __enter__(self) -> "WarcFile":
        with ExitStack() as stack:
            self.stream = stack.enter_context(storage.writing(self.path, "wb"))
            self._stack = stack.pop_all()
        self.writer = WARCWriter(self.stream, gzip=True)
        return self

    def write(self, capture: Capture) -> Capture:
        """Write one capture; returns it with its WARC-Record-ID filled in."""
        warc_headers = {REQUEST_URI: capture.url, "WARC-Date": capture.date}
        if capture.ip:
            warc_headers["WARC-IP-Address"] = capture.ip
        if capture.reason:
            payload = json.dumps({"reason": capture.reason, "detail": capture.detail, "final_url": capture.final_url})
            record = self.writer.create_warc_record(
                capture.url,
                "metadata",
                payload=io.BytesIO(payload.encode("utf-8")),
                warc_content_type=FAILURE_TYPE,
                warc_headers_dict=warc_headers,
            )
        else:
            headers = [(_ascii(k), _ascii(v)) for k, v in capture.headers if k.lower() not in HOP_HEADERS]
            headers.append(("Content-Length", str(len(capture.body))))
            http_headers = StatusAndHeaders(str(capture.status), headers, protocol="HTTP/1.1")
            record = self.writer.create_warc_record(
                capture.final_url or capture.url,
                "response",
                payload=io.BytesIO(capture.body),
                http_headers=http_headers,
                warc_headers_dict=warc_headers,
            )
        self.writer.write_record(record)
        record_id = record.rec_headers.get_header("WARC-Record-ID")
        return dataclasses.replace(capture, record_id=record_id)

    def __exit__(self, *exc_info: object) -> None:
        self._stack.__exit__(*exc_info)  # type: ignore[arg-type]


def _ascii(text: str) -> str:
    """A header line's text as warcio can write it (ASCII; its own fallback fails on ``;\x80=0``):
    non-ASCII and control characters percent-encoded, as RFC 8187 does, so no value breaks a record."""
    return text if text.isascii() and text.isprintable() else quote(text, safe=_PRINTABLE_ASCII)


def _payload(record, max_bytes: int) -> bytes:  # type: ignore[no-untyped-def]
    """The HTTP body as sent, de-chunked but not decoded; truncated past ``max_bytes``."""
    stream = record.raw_stream
    if record.http_headers and "chunked" in (record.http_headers.get_header("Transfer-Encoding") or "").lower():
        stream = ChunkedDataReader(stream, decomp_type=None)
    return stream.read(max_bytes + 1)


def _is_capture(record) -> bool:  # type: ignore[no-untyped-def]
    """A fetch outcome: a response, or one of our failure records (not requests, warcinfo, ...)."""
    if record.rec_type == "response":
        return True
    return record.rec_type == "metadata" and record.rec_headers.get_header("Content-Type") == FAILURE_TYPE


def _to_capture(record, max_bytes: int) -> Capture | None:  # type: ignore[no-untyped-def]
    headers = record.rec_headers
    target = headers.get_header("WARC-Target-URI") or ""
    requested = headers.get_header(REQUEST_URI) or target
    common = dict(
        url=requested,
        date=headers.get_header("WARC-Date") or "",
        ip=headers.get_header("WARC-IP-Address") or "",
        record_id=headers.get_header("WARC-Record-ID") or "",
    )
    if record.rec_type == "response" and record.http_headers is not None:
        http = record.http_headers
        return Capture(
            final_url=target,
            status=int(http.get_statuscode() or 0),
            headers=tuple(http.headers),
            body=_payload(record, max_bytes),
            **common,
        )
    if record.rec_type == "metadata" and headers.get_header("Content-Type") == FAILURE_TYPE:
        info = json.loads(record.content_stream().read().decode("utf-8"))
        return Capture(final_url=info.get("final_url", ""), reason=info["reason"], detail=info.get("detail", ""), **common)
    return None


def iter_captures(path: storage.PathLike, max_bytes: int = 20_000_000, counts: Counter[str] | None = None) -> Iterator[Capture]:
    """Every response or failure record of one WARC, in file order, each counted into
    ``counts["inputs"]`` as it is read. A record that cannot be read is a capture with reason
    ``malformed_record``; damage that ends the file (a cut, bad gzip) one ``corrupt_input`` capture
    after the records before it, so a damaged WARC never stops a build."""
    path = os.fspath(path)
    with storage.open_file(path, "rb") as stream:
        records = ArchiveIterator(stream)
        while True:
            try:
                record = next(records, None)
            except Exception as error:  # noqa: BLE001 - warcio raises many types on damaged input
                count_input(counts)
                yield Capture(url=path, reason="corrupt_input", detail=_describe(error))
                return
            if record is None:
                return
            if not _is_capture(record):
                continue
            count_input(counts)
            try:
                capture = _to_capture(record, max_bytes)
            except Exception as error:  # noqa: BLE001 - one bad record must not end the file
                capture = None
                detail = _describe(error)
            else:
                detail = "" if capture is not None else "response record without HTTP headers"
            url = record.rec_headers.get_header(REQUEST_URI) or record.rec_headers.get_header("WARC-Target-URI")
            yield capture or Capture(url=url or path, reason="malformed_record", detail=detail)


def _describe(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


def warc_files(warc_dir: storage.PathLike) -> list[str]:
    """Completed WARCs only (temporary files of an interrupted run are ignored), in name order."""
    return [p for p in storage.listdir(warc_dir) if storage.name(p).endswith((".warc.gz", ".warc")) and storage.is_file(p)]


def index_warcs(warc_dir: storage.PathLike, key: Callable[[str], str] = str) -> dict[str, tuple[str, int]]:
    """``key(requested URL)`` -> (file, record offset). A response beats a failure; else the later file wins.
    A damaged file is indexed up to its damage (what is not found is fetched again)."""
    index: dict[str, tuple[str, int]] = {}
    succeeded: set[str] = set()
    for path in warc_files(warc_dir):
        with storage.open_file(path, "rb") as stream:
            records = ArchiveIterator(stream)
            try:
                for record in records:
                    if not _is_capture(record):
                        continue
                    is_response = record.rec_type == "response"
                    headers = record.rec_headers
                    url = key(headers.get_header(REQUEST_URI) or headers.get_header("WARC-Target-URI") or "")
                    if url in succeeded and not is_response:
                        continue
                    index[url] = (path, records.get_record_offset())
                    if is_response:
                        succeeded.add(url)
            except Exception as error:  # noqa: BLE001 - warcio raises many types on damaged input
                log.warning("%s: indexed up to damage (%s)", path, _describe(error))
    return index


def read_capture(path: storage.PathLike, offset: int, max_bytes: int = 20_000_000) -> Capture:
    """The capture stored at ``offset`` (from ``index_warcs``)."""
    with storage.open_file(path, "rb") as stream:
        stream.seek(offset)
        record = next(iter(ArchiveIterator(stream)))
        capture = _to_capture(record, max_bytes)
    if capture is None:
        raise ValueError(f"no capture at {path}:{offset}")
    return capture
