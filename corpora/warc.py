"""WARC capture and replay: every fetch (page or failure) is kept, so a re-run never refetches.

Responses are stored as standard ``response`` records with the raw, still content-encoded body;
failures as ``metadata`` records whose JSON payload carries the reject reason. The URL that was
asked for travels in ``WARC-Corpusforge-Request-URI`` (the target URI is the final hop), so a
replay finds a capture by the URL it would have fetched. Foreign WARCs (wget, Common Crawl) replay
by their target URI. The index can key captures canonically, so that a page captured under another
spelling (parameter order, an empty parameter, a ``#fragment``) is still found. Files are written under a temporary name and renamed when complete.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import ChunkedDataReader
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

REQUEST_URI = "WARC-Corpusforge-Request-URI"
FAILURE_TYPE = "application/vnd.corpusforge.failure+json"
HOP_HEADERS = {"transfer-encoding", "content-length"}  # describe the wire, not the stored body


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
    """Append captures to ``path`` (gzip per record); visible only after ``close`` renames it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f"{self.path.name}.tmp-{uuid.uuid4().hex}")
        self.stream = self.tmp.open("wb")
        self.writer = WARCWriter(self.stream, gzip=True)

    def write(self, capture: Capture) -> Capture:
        """Write one capture; returns it with its WARC-Record-ID filled in."""
        warc_headers = {REQUEST_URI: capture.url, "WARC-Date": capture.date}
        if capture.ip:
            warc_headers["WARC-IP-Address"] = capture.ip
        if capture.reason:
            payload = json.dumps({"reason": capture.reason, "detail": capture.detail, "final_url": capture.final_url})
            record = self.writer.create_warc_record(
                capture.url, "metadata", payload=io.BytesIO(payload.encode("utf-8")),
                warc_content_type=FAILURE_TYPE, warc_headers_dict=warc_headers,
            )
        else:
            headers = [(k, v) for k, v in capture.headers if k.lower() not in HOP_HEADERS]
            headers.append(("Content-Length", str(len(capture.body))))
            http_headers = StatusAndHeaders(str(capture.status), headers, protocol="HTTP/1.1")
            record = self.writer.create_warc_record(
                capture.final_url or capture.url, "response", payload=io.BytesIO(capture.body),
                http_headers=http_headers, warc_headers_dict=warc_headers,
            )
        self.writer.write_record(record)
        record_id = record.rec_headers.get_header("WARC-Record-ID")
        return dataclasses.replace(capture, record_id=record_id)

    def close(self) -> None:
        self.stream.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.stream.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> "WarcFile":
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.abort() if kind else self.close()


def _payload(record, max_bytes: int) -> bytes:  # type: ignore[no-untyped-def]
    """The HTTP body as sent, de-chunked but not decoded; truncated past ``max_bytes``."""
    stream = record.raw_stream
    if record.http_headers and "chunked" in (record.http_headers.get_header("Transfer-Encoding") or "").lower():
        stream = ChunkedDataReader(stream, decomp_type=None)
    return stream.read(max_bytes + 1)


def _to_capture(record, max_bytes: int) -> Capture | None:  # type: ignore[no-untyped-def]
    headers = record.rec_headers
    target = headers.get_header("WARC-Target-URI") or ""
    requested = headers.get_header(REQUEST_URI) or target
    common = dict(url=requested, date=headers.get_header("WARC-Date") or "", ip=headers.get_header("WARC-IP-Address") or "",
                  record_id=headers.get_header("WARC-Record-ID") or "")
    if record.rec_type == "response" and record.http_headers is not None:
        http = record.http_headers
        return Capture(final_url=target, status=int(http.get_statuscode() or 0), headers=tuple(http.headers),
                       body=_payload(record, max_bytes), **common)
    if record.rec_type == "metadata" and headers.get_header("Content-Type") == FAILURE_TYPE:
        info = json.loads(record.content_stream().read().decode("utf-8"))
        return Capture(final_url=info.get("final_url", ""), reason=info["reason"], detail=info.get("detail", ""), **common)
    return None


def iter_captures(path: Path, max_bytes: int = 20_000_000) -> Iterator[Capture]:
    """Every response or failure record of one WARC, in file order."""
    with Path(path).open("rb") as stream:
        for record in ArchiveIterator(stream):
            capture = _to_capture(record, max_bytes)
            if capture is not None:
                yield capture


def warc_files(warc_dir: Path) -> list[Path]:
    """Completed WARCs only (temporary files of an interrupted run are ignored), in name order."""
    if not Path(warc_dir).is_dir():
        return []
    return sorted(p for p in Path(warc_dir).iterdir() if p.name.endswith((".warc.gz", ".warc")) and p.is_file())


def index_warcs(warc_dir: Path, key: Callable[[str], str] = str) -> dict[str, tuple[Path, int]]:
    """``key(requested URL)`` -> (file, record offset). A response beats a failure; else the later file wins."""
    index: dict[str, tuple[Path, int]] = {}
    succeeded: set[str] = set()
    for path in warc_files(warc_dir):
        with path.open("rb") as stream:
            records = ArchiveIterator(stream)
            for record in records:
                headers = record.rec_headers
                is_response = record.rec_type == "response"
                is_failure = record.rec_type == "metadata" and headers.get_header("Content-Type") == FAILURE_TYPE
                if not (is_response or is_failure):
                    continue
                url = key(headers.get_header(REQUEST_URI) or headers.get_header("WARC-Target-URI") or "")
                if url in succeeded and not is_response:
                    continue
                index[url] = (path, records.get_record_offset())
                if is_response:
                    succeeded.add(url)
    return index


def read_capture(path: Path, offset: int, max_bytes: int = 20_000_000) -> Capture:
    """The capture stored at ``offset`` (from ``index_warcs``)."""
    with Path(path).open("rb") as stream:
        stream.seek(offset)
        record = next(iter(ArchiveIterator(stream)))
        capture = _to_capture(record, max_bytes)
    if capture is None:
        raise ValueError(f"no capture at {path}:{offset}")
    return capture
