"""Pushshift Reddit submission dumps -> link candidates for WebText, every submission accounted for.

A dump is NDJSON, compressed as .zst (Pushshift uses a 2 GiB window), .xz, .bz2, .gz or plain.
Schemas drift over the years (float ``created_utc``, ``crosspost_parent_list``, ``_meta``, nulls),
so parsing reads only the fields WebText needs and treats anything else as noise. Selection follows
OpenWebText2 (karma summed over every submission of a canonical URL) or OpenWebText (any single
submission reaching the threshold).
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import zstandard

from corpusforge.corpora.document import Reject, make_id
from corpusforge.corpora.urls import Blocklist, clean_url

SOURCE = "webtext"
ZSTD_MAX_WINDOW = 2**31


@dataclass(frozen=True, slots=True)
class Submission:
    id: str
    url: str
    score: int
    subreddit: str
    title: str
    is_self: bool
    over_18: bool
    created_utc: int


@dataclass(frozen=True, slots=True)
class Link:
    """One canonical URL chosen for fetching, with the karma that selected it."""

    key: str  # canonical URL (grouping key, document id source)
    url: str  # spelling to fetch
    score: int
    subreddit: str
    title: str
    submission_ids: tuple[str, ...]


def open_dump(path: Path) -> IO[bytes]:
    """A binary stream of the decompressed dump, chosen by file suffix, never read whole."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".zst":
        raw = path.open("rb")
        return zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(raw, closefd=True)
    if suffix == ".xz":
        return lzma.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def submission_reject(reason: str, key: str, detail: str = "") -> Reject:
    return Reject(id=make_id(SOURCE, f"submission:{key}"), source=SOURCE, reason=reason, detail=detail, key=key)


def _as_int(value: object) -> int:
    try:
        return int(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0


def _crosspost_url(row: dict) -> str | None:
    """A crosspost's own url points back to Reddit; the link is the parent's."""
    parents = row.get("crosspost_parent_list") or []
    for parent in parents:
        if isinstance(parent, dict) and not parent.get("is_self") and parent.get("url"):
            return str(parent["url"])
    return None


def parse_submission(line: bytes | str, where: str) -> Submission | Reject:
    """One NDJSON line -> Submission, or a ``malformed_json`` reject keyed by file and line."""
    try:
        row = json.loads(line)
    except (ValueError, UnicodeDecodeError) as error:
        return submission_reject("malformed_json", where, str(error)[:200])
    if not isinstance(row, dict) or not row.get("id"):
        return submission_reject("malformed_json", where, "not a submission object")
    url = str(row.get("url") or "")
    if row.get("crosspost_parent_list") and (not url or clean_url(url) is None or "reddit.com" in url):
        url = _crosspost_url(row) or url
    return Submission(
        id=str(row["id"]),
        url=url,
        score=_as_int(row.get("score")),
        subreddit=str(row.get("subreddit") or ""),
        title=str(row.get("title") or ""),
        is_self=bool(row.get("is_self")),
        over_18=bool(row.get("over_18")),
        created_utc=_as_int(row.get("created_utc")),
    )


def read_submissions(path: Path) -> Iterator[Submission | Reject]:
    """Stream one dump; blank lines are skipped, everything else yields one record."""
    with open_dump(path) as stream:
        for number, line in enumerate(io.BufferedReader(stream, buffer_size=1 << 20), start=1):
            if line.strip():
                yield parse_submission(line, f"{Path(path).name}:{number}")


def screen(submission: Submission, blocklist: Blocklist, exclude_over_18: bool) -> tuple[str, Submission] | Reject:
    """Per-submission filters that need no grouping; passes (canonical key, submission)."""
    key = f"{submission.id}"
    if submission.is_self:
        return submission_reject("self_post", key, submission.url)
    if exclude_over_18 and submission.over_18:
        return submission_reject("over_18", key, submission.url)
    cleaned = clean_url(submission.url)
    if cleaned is None:
        return submission_reject("bad_url", key, submission.url)
    domain = blocklist.blocked_domain(cleaned.host)
    if domain:
        return submission_reject("blocked_domain", key, domain)
    extension = blocklist.blocked_extension(cleaned.fetch)
    if extension:
        return submission_reject("blocked_extension", key, extension)
    return cleaned.key, submission


def select_link(
    key: str,
    submissions: Iterable[Submission],
    *,
    karma_mode: Literal["sum", "single"],
    min_karma: int,
) -> Iterator[Link | Reject]:
    """Karma filter for one canonical URL: one Link plus a ``duplicate_url`` reject per extra
    submission, or a ``low_karma`` reject for each. Order-independent (sorted by id)."""
    group = sorted(submissions, key=lambda s: (s.id, s.url))
    total = sum(s.score for s in group)
    best = max(s.score for s in group)
    passes = total >= min_karma if karma_mode == "sum" else best >= min_karma
    if not passes:
        for s in group:
            yield submission_reject("low_karma", s.id, f"{karma_mode} karma {total if karma_mode == 'sum' else best}")
        return
    top = max(group, key=lambda s: (s.score, -s.created_utc, s.id))
    spellings = Counter(clean_url(s.url).fetch for s in group)  # type: ignore[union-attr]
    url = min(spellings, key=lambda u: (-spellings[u], u))  # most submitted spelling, ties by text
    yield Link(
        key=key,
        url=url,
        score=total if karma_mode == "sum" else best,
        subreddit=top.subreddit,
        title=top.title,
        submission_ids=tuple(s.id for s in group),
    )
    for s in group:
        if s is not top:
            yield submission_reject("duplicate_url", s.id, f"same canonical URL as submission {top.id}")
